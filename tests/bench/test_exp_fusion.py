"""bench/exp_fusion.py: the declared shapes and bytes, and the quick run on CPU (every contender that runs
here, through the same timing code as on the GPU)."""
from bench import exp_fusion
from qwen3_configs import QWEN3_SIZES


def test_shapes_cover_every_qwen3_size():
    qk = exp_fusion.KERNELS["qk_rope"]["shapes"]
    assert sorted(s["q_heads"] for s in qk) == sorted({fields[3] for fields in QWEN3_SIZES.values()})
    assert {s["width"] for s in exp_fusion.KERNELS["swiglu"]["shapes"]} == {f[1] for f in QWEN3_SIZES.values()}
    assert all(s["batch"] * s["seq"] == 16384 and s["kv_heads"] == 8 and s["head_dim"] == 128 for s in qk)
    models = "、".join(s["models"] for s in qk).split("、")
    assert sorted(models) == sorted(QWEN3_SIZES)


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
    assert set(results["kernels"]) == {"qk_rope", "swiglu"}
    ran = {"qk_rope": {"hf", "compile_hf", "triton_rmsnorm", "triton_qk_rope"} | ({"liger"} if on_gpu else set()),
           "swiglu": {"hf", "compile_hf", "triton_swiglu"} | ({"liger"} if on_gpu else set())}
    for kernel, entries in results["kernels"].items():
        (entry,) = entries
        assert not entry["errors"], entry["errors"]
        for phase in ("fwd", "fwd_bwd"):
            assert set(entry[phase]) == ran[kernel], (kernel, phase)
            assert all(stats["gbps"] > 0 for stats in entry[phase].values())
        assert ("liger" in results["skipped"][kernel]) is not on_gpu  # Liger's kernels need CUDA
    assert payload["config"]["kernels"]["swiglu"]["ours"] == "triton_swiglu"
