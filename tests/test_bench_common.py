"""bench/harness's run modes and timers: where an experiment runs, how inputs rotate past L2,
the quantile rule shared with triton.testing.do_bench, and the CPU stand-ins of the GPU timers."""
import argparse

import pytest
import torch

from bench.harness import mode, timers


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
