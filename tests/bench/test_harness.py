"""bench/harness/: where an experiment runs, how inputs rotate past L2, the quantile rule shared with
triton.testing.do_bench, the CPU stand-ins of the GPU timers, the benchmark shapes, the fewest bytes,
the contenders and the loss gate's noise floor: what every experiment shares."""
import argparse

import pytest
import torch

from bench.harness import mode, shapes, timers
from bench.harness.contenders import FUSED_ADD, RMSNORM, fused_add_contenders, rmsnorm_contenders
from bench.harness.loss_gate import gate_with_control
from bench.harness.op_timing import min_bytes, shape_entry


def test_quantiles_follow_do_bench():
    """Linear interpolation between ranks, as triton.testing.do_bench(quantiles=...) reports them."""
    from triton.testing import _quantile as triton_quantile

    samples_ms = [0.9, 0.1, 0.5, 0.3, 0.7, 0.2]
    stats = timers.sample_stats(samples_ms)
    expected = triton_quantile(samples_ms, [0.5, 0.2, 0.8])
    assert [stats["median_us"], stats["p20_us"], stats["p80_us"]] == pytest.approx([1e3 * q for q in expected])
    assert stats["min_us"] == pytest.approx(100.0) and stats["n"] == 6


def test_cpu_timers_warm_up_then_sample_and_reset_grads():
    calls = []
    leaf = torch.ones(2, requires_grad=True)

    def fn():
        assert leaf.grad is None  # reset before every timed call
        calls.append(1)
        leaf.sum().backward()

    stats = timers.eager_time_us(fn, grad_to_none=[leaf], on_gpu=False)
    assert len(calls) == 1 + stats["n"] == 4
    assert 0 < stats["min_us"] <= stats["p20_us"] <= stats["median_us"] <= stats["p80_us"]
    graph = timers.cuda_graph_time_us([lambda: calls.append(2)], on_gpu=False)
    assert "calls_per_graph" not in graph  # never mistaken for a graph-timed number
    assert timers.call_times_ms([lambda: calls.append(3), lambda: calls.append(4)], 5, on_gpu=False) \
        and calls[-5:] == [3, 4, 3, 4, 3]


def test_copy_bandwidth_counts_read_and_write():
    stats = timers.copy_bandwidth(2**20, "cpu", "eager")
    assert stats["gbps"] == pytest.approx(2**20 / (stats["median_us"] * 1e3))


def test_in_ms_renames_and_scales():
    assert timers.in_ms({"median_us": 1500.0, "n": 3}) == {"median_ms": 1.5, "n": 3}


def test_rotating_input_sets_cover_four_times_l2():
    assert mode.l2_cache_bytes("cpu") == mode.CPU_L2_BYTES
    l2 = mode.CPU_L2_BYTES
    assert mode.rotating_input_sets(l2, "cpu") == 4
    assert mode.rotating_input_sets(10 * l2, "cpu") == 2  # never fewer than two
    assert mode.rotating_input_sets(l2 // 100, "cpu") == 8  # never more than eight


def test_gpu_or_quick(monkeypatch):
    monkeypatch.setattr(mode, "gpu_available", lambda: False)
    with pytest.raises(RuntimeError, match="--quick"):
        mode.gpu_or_quick(argparse.Namespace(quick=False), "demo", "small", "large")
    where = mode.gpu_or_quick(argparse.Namespace(quick=True), "demo", "small", "large")
    assert where == (True, False, "small", "cpu", torch.float32) and where.setup == "small"
    monkeypatch.setattr(mode, "gpu_available", lambda: True)
    quick, on_gpu, setup, device, dtype = mode.gpu_or_quick(argparse.Namespace(quick=False), "d", "s", "l")
    assert (quick, on_gpu, setup, device, dtype) == (False, True, "l", "cuda", torch.bfloat16)


def test_interpreter_means_no_gpu(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert not mode.gpu_available()


def test_benchmark_shapes():
    """One training batch of B=4 x T=4096 tokens of Qwen3: the hidden-size norms' rows, and q_norm / k_norm's
    one row per token and head (Qwen3-8B: 32 query heads, 8 KV heads)."""
    assert shapes.BENCH_TOKENS == 16384
    assert shapes.Q_NORM_ROWS == 16384 * 32 and shapes.K_NORM_ROWS == 16384 * 8
    assert shapes.RMSNORM_SHAPES["q_norm"] == (shapes.Q_NORM_ROWS, 128)
    assert shapes.RMSNORM_SHAPES["k_norm"] == (shapes.K_NORM_ROWS, 128)
    assert {name for name in shapes.RMSNORM_SHAPES if name.startswith("H=")} == {
        "H=1024", "H=2048", "H=2560", "H=4096", "H=5120"}
    assert all(rows == 16384 for name, (rows, _) in shapes.RMSNORM_SHAPES.items() if name.startswith("H="))


def test_min_bytes_and_a_fresh_shape_entry():
    assert min_bytes(16, 256) == {"fwd": 2 * 16 * 256 * 2 + 512, "fwd_bwd": 5 * 16 * 256 * 2 + 3 * 512}
    assert min_bytes(16, 256, fwd_io=4, bwd_io=4)["fwd_bwd"] == 8 * 16 * 256 * 2 + 3 * 512
    entry = shape_entry("H=256", 16, 256, min_bytes(16, 256), 1, 1024, "cpu", dy_layout="contiguous")
    assert entry["label"] == "H=256" and entry["dy_layout"] == "contiguous" and entry["input_sets"] == 1
    assert entry["fwd"] == entry["fwd_bwd"] == entry["errors"] == {} and "gbps" in entry["copy_same_bytes"]


def test_contenders_that_cannot_run_here_are_recorded_not_raised(on_gpu):
    """On the CPU (or a CPU run on a GPU machine) Liger and quack are skipped with the reason; the rest build."""
    skipped = {}
    built = rmsnorm_contenders(RMSNORM, 64, torch.float32, "cpu", skipped, 1e-6)
    assert set(built) == set(RMSNORM) - {"liger", "quack"} and set(skipped) == {"liger", "quack"}
    assert all("CUDA" in reason for reason in skipped.values())
    x = torch.randn(4, 64)
    fn, weight = built["triton"]
    if on_gpu:  # Triton's CUDA backend refuses CPU tensors, with the reason
        with pytest.raises(ValueError, match="CUDA backend"):
            fn(x)
    else:
        assert torch.allclose(fn(x), built["torch_rms_norm"][0](x), atol=1e-5)
    skipped = {}
    fused = fused_add_contenders(FUSED_ADD, 64, torch.float32, "cpu", skipped, 1e-6)
    assert set(fused) == set(FUSED_ADD) - {"liger", "quack"}
    if on_gpu:
        with pytest.raises(ValueError, match="CUDA backend"):
            fused["triton_fused_add"][0](x, x)
    else:
        y, s = fused["triton_fused_add"][0](x, x)
        assert torch.allclose(s, 2 * x) and torch.allclose(y, fused["unfused"][0](x, x)[0], atol=1e-5)


def test_gate_with_control_widens_by_the_controls_own_distance():
    """The loss-curve rule loss_curve and fsdp2 share: the control's final difference from HF, doubled, is
    the final-loss limit when larger than 0.5 %; the per-step limit stays."""
    hf = [3.0 - 0.01 * i for i in range(100)]
    lines = []
    gate, control = gate_with_control(hf, [x * 1.006 for x in hf], [x * 1.004 for x in hf], {}, "amp/triton",
                                      lines.append)
    assert control["final_rel_diff"] == pytest.approx(0.004) and gate["final_limit"] == pytest.approx(0.008)
    assert gate["passed"] and lines[0].startswith("amp/triton: gate PASSED")
    gate, _ = gate_with_control(hf, [x * 1.006 for x in hf], hf, {}, "bf16/fused", lines.append)
    assert not gate["passed"] and lines[1].startswith("bf16/fused: gate FAILED")


def test_bench_widths_names_any_positive_widths(monkeypatch):
    """BENCH_WIDTHS replaces a sweep's widths (spaces allowed); a width below 1 is an error, never a silent skip."""
    monkeypatch.delenv("BENCH_WIDTHS", raising=False)
    assert shapes.selected_widths((256, 512)) == [256, 512]
    monkeypatch.setenv("BENCH_WIDTHS", "256, 65536")
    assert shapes.selected_widths((256, 512)) == [256, 65536]
    for wrong in ("256,0", "0"):
        monkeypatch.setenv("BENCH_WIDTHS", wrong)
        with pytest.raises(ValueError, match="positive"):
            shapes.selected_widths((256, 512))


def test_compile_only_replaces_the_launched_kernels_and_leaves_the_helpers():
    """The workers' compile-only stand-ins (bench/harness/compile_only.py), on a fresh copy of the kernels'
    module: every launched kernel, among them the ones the sweeps launch, and none of the helpers."""
    import importlib.util

    import triton

    from bench.harness.compile_only import CompileOnly, compile_only

    import rmsnorm_triton

    spec = importlib.util.spec_from_file_location("rmsnorm_triton_copy", rmsnorm_triton.__file__)
    copy = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(copy)
    names = compile_only(copy)
    assert {"rms_norm_fwd_kernel", "rms_norm_fwd_chunked_kernel", "rms_norm_bwd_kernel", "rms_norm_bwd_reread_kernel",
            "rms_norm_bwd_row_stats_kernel", "rms_norm_bwd_chunked_kernel", "dw_reduce_kernel"} <= set(names)
    assert all(isinstance(getattr(copy, n), CompileOnly) for n in names)
    helpers = [n for n, v in vars(copy).items() if isinstance(v, triton.runtime.jit.KernelInterface)]
    assert helpers and all(n.startswith("_") for n in helpers)  # what is left jitted: the helpers only
    assert not isinstance(rmsnorm_triton.rms_norm_fwd_kernel, CompileOnly)  # the real module is untouched


def test_fusion_parts_are_apply_qwen3_fusions_switches():
    import inspect

    from bench.harness.training import FUSION_SET_PARTS, fusion_parts
    from qwen3_fusion_patch import apply_qwen3_fusion

    switches = [n for n, p in inspect.signature(apply_qwen3_fusion).parameters.items()
                if p.kind is p.KEYWORD_ONLY]
    assert list(FUSION_SET_PARTS) == switches
    assert fusion_parts("swiglu") == {n: n == "swiglu" for n in switches}
    with pytest.raises(ValueError, match="unknown fusion parts"):
        fusion_parts("rope")
