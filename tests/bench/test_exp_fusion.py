"""bench/exp_fusion.py: the declared shapes and bytes, and the quick run on CPU (every contender that runs
here, through the same timing code as on the GPU)."""
import torch

from bench import exp_fusion
from bench.harness.contenders import qkv_contenders
from qwen3_configs import QWEN3_SIZES


def test_shapes_cover_every_qwen3_size():
    qk = exp_fusion.KERNELS["qk_rope"]["shapes"]
    assert sorted(s["q_heads"] for s in qk) == sorted({fields[3] for fields in QWEN3_SIZES.values()})
    assert {s["width"] for s in exp_fusion.KERNELS["swiglu"]["shapes"]} == {f[1] for f in QWEN3_SIZES.values()}
    assert all(s["batch"] * s["seq"] == 16384 and s["kv_heads"] == 8 and s["head_dim"] == 128 for s in qk)
    models = "、".join(s["models"] for s in qk).split("、")
    assert sorted(models) == sorted(QWEN3_SIZES)


def test_qkv_shapes_one_per_hidden_and_query_heads():
    qkv = exp_fusion.KERNELS["qkv"]["shapes"]
    assert sorted((s["width"], s["q_heads"]) for s in qkv) == sorted({(f[0], f[3]) for f in QWEN3_SIZES.values()})
    assert all(s["rows"] == 16384 and s["kv_heads"] == 8 and s["head_dim"] == 128 for s in qkv)
    assert sorted("、".join(s["models"] for s in qkv).split("、")) == sorted(QWEN3_SIZES)
    assert {s["models"]: s["label"] for s in qkv}["8B"] == "6144×4096"  # N = (32 + 2*8) * 128, K = hidden


def test_qkv_flops_bytes_and_launches():
    m, n, k = 16384, 6144, 4096  # Qwen3-8B
    counts = exp_fusion.qkv_counts(exp_fusion.qkv_shape(m, k, 32))
    assert counts["gemm"] == {"m": m, "n": n, "k": k, "n_q": 4096, "n_kv": 1024}
    assert counts["flops_fwd"] == 2 * m * n * k and counts["flops_fwd_bwd"] == 6 * m * n * k
    three_fwd, merged_fwd = 2 * (3 * m * k + n * k + m * n), 2 * (m * k + n * k + m * n)
    assert counts["bytes"] == {  # backward: three dX partials + two adds + three dW; cat + one dX + one dW
        "three_gemms": {"fwd": three_fwd, "fwd_bwd": three_fwd + 2 * ((m * n + n * k + 3 * m * k) + 2 * 3 * m * k
                                                                   + (m * n + 3 * m * k + n * k))},
        "merged_gemm": {"fwd": merged_fwd,
                        "fwd_bwd": merged_fwd + 2 * (2 * m * n + (m * n + n * k + m * k) + (m * n + m * k + n * k))}}
    assert counts["launches"] == {"three_gemms": {"fwd": 3, "fwd_bwd": 11}, "merged_gemm": {"fwd": 1, "fwd_bwd": 4}}
    assert exp_fusion.min_bytes("qkv", exp_fusion.qkv_shape(m, k, 32)) == counts["bytes"]["merged_gemm"]


def test_merged_gemm_computes_what_the_three_do():
    """Same q, k, v, the same dX, and the merged weight's gradient is the three weights' gradients stacked."""
    built = qkv_contenders(("three_gemms", "merged_gemm"), 48, 32, 16, torch.float64, "cpu", {})
    three_w, (merged_w,) = built["three_gemms"][1], built["merged_gemm"][1]
    assert torch.equal(merged_w, torch.cat(three_w))
    x = torch.randn(10, 48, dtype=torch.float64, requires_grad=True)
    grads = (torch.randn(10, 32, dtype=torch.float64), *torch.randn(2, 10, 16, dtype=torch.float64))
    outs = {name: fn(x) for name, (fn, _) in built.items()}
    for a, b in zip(outs["three_gemms"], outs["merged_gemm"]):
        torch.testing.assert_close(a, b)
    dx3, *dw3 = torch.autograd.grad(outs["three_gemms"], (x, *three_w), grads)
    dx1, dw1 = torch.autograd.grad(outs["merged_gemm"], (x, merged_w), grads)
    torch.testing.assert_close(dx1, dx3)
    torch.testing.assert_close(dw1, torch.cat(dw3))


def test_minimum_bytes():
    qk = exp_fusion.qk_rope_shape(4, 4096, 32)  # Qwen3-8B
    elements = 16384 * 40 * 128
    tables = 2 * 16384 * 128 * 2
    assert exp_fusion.min_bytes("qk_rope", qk) == {"fwd": 2 * elements * 2 + tables,
                                                    "fwd_bwd": 5 * elements * 2 + 2 * tables}
    sw = exp_fusion.swiglu_shape(16384, 12288)
    assert exp_fusion.min_bytes("swiglu", sw) == {"fwd": 3 * 16384 * 12288 * 2, "fwd_bwd": 8 * 16384 * 12288 * 2}


def test_quick_run(quick_fusion, on_gpu):
    payload = quick_fusion
    results = payload["results"]
    assert set(results["kernels"]) == {"qk_rope", "swiglu", "qkv"}
    ran = {"qk_rope": {"hf", "compile_hf", "triton_rmsnorm", "triton_qk_rope"} | ({"liger"} if on_gpu else set()),
           "swiglu": {"hf", "compile_hf", "triton_swiglu"} | ({"liger"} if on_gpu else set()),
           "qkv": {"three_gemms", "compile_three", "merged_gemm"}}
    rate = {"qk_rope": "gbps", "swiglu": "gbps", "qkv": "tflops"}
    for kernel, entries in results["kernels"].items():
        (entry,) = entries
        assert not entry["errors"], entry["errors"]
        for phase in ("fwd", "fwd_bwd"):
            assert set(entry[phase]) == ran[kernel], (kernel, phase)
            assert all(stats[rate[kernel]] > 0 for stats in entry[phase].values())
        if kernel != "qkv":
            assert ("liger" in results["skipped"][kernel]) is not on_gpu  # Liger's kernels need CUDA
    assert payload["config"]["kernels"]["swiglu"]["ours"] == "triton_swiglu"
    assert payload["config"]["kernels"]["qkv"] == {"contenders": ["three_gemms", "compile_three", "merged_gemm"],
                                                   "baseline": "three_gemms", "merged": "merged_gemm"}


def test_quick_run_qkv_entry(quick_fusion, on_gpu):
    """A GEMM entry: FLOPs and TFLOP/s, bytes and launches per variant, no copy; the profiled kernels on a GPU."""
    (entry,) = quick_fusion["results"]["kernels"]["qkv"]
    assert "copy_same_bytes" not in entry and "gbps" not in entry["fwd"]["merged_gemm"]
    assert entry["gemm"] == {"m": 16, "n": 128, "k": 64, "n_q": 64, "n_kv": 32}
    for phase in ("fwd", "fwd_bwd"):
        for stats in entry[phase].values():
            assert stats["tflops"] == entry[f"flops_{phase}"] / (stats["median_us"] * 1e6)
    assert entry["bytes"]["three_gemms"]["fwd"] - entry["bytes"]["merged_gemm"]["fwd"] == 2 * 2 * 16 * 64  # x twice
    assert ("device_kernels" in entry) is on_gpu and not entry.get("device_kernel_errors")
    if on_gpu:
        kernels = entry["device_kernels"]
        assert len(kernels["fwd"]["merged_gemm"]) < len(kernels["fwd"]["three_gemms"])
        assert len(kernels["fwd_bwd"]["merged_gemm"]) < len(kernels["fwd_bwd"]["three_gemms"])
