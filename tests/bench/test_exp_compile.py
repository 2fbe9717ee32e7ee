"""bench/exp_compile.py as its --quick CPU run: both modules eager and compiled, forward and forward+backward;
under the interpreter the fullgraph compile fails and is recorded (never dropped), explain is then skipped
with the reason; with a module dynamo can trace, the compiled path, the ratios and the graph-break count."""
from __future__ import annotations

import pytest
import torch
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

from bench import exp_compile as exp
from bench.harness import mode, timers
from bench.harness.timers import device_activities, profiler_time_us
from bench.report.names import TIE_RULES


def test_quick_run_times_both_modules_and_records_what_failed(quick_compile):
    cases = quick_compile["results"]["cases"]
    assert [(c["kind"], c["rows"], c["width"]) for c in cases] == [tuple(c) for c in exp.QUICK_CASES]
    assert [c["module"] for c in cases] == ["TritonQwen3RMSNorm", "TritonQwen3RMSNorm", "TritonQwen3FusedAddRMSNorm"]
    for case in cases:
        for phase in ("fwd", "fwd_bwd"):
            eager = case["eager"][phase]
            assert eager["gpu"]["median_us"] > 0 and eager["host"]["median_us"] > 0 and eager["gpu"]["gbps"] > 0
        assert set(case["first_call_s"]["eager"]) == {"fwd", "fwd_bwd"}
        if mode.gpu_available():
            assert "compiled" in case and case["graph_breaks"] == 0 and set(case["ratios"]) == {"fwd", "fwd_bwd"}
        else:  # dynamo cannot trace the Triton interpreter: the failure is in the record, the ratios empty
            assert "compiled" not in case and "Unsupported" in case["errors"]["compiled"]
            assert case["ratios"] == {} and "graph_breaks" not in case
            assert "fullgraph compile failed" in case["skipped"]["graph_breaks"]
            assert "aot_eager" in case["skipped"]["eps_types"]
    assert cases[1]["shape"] == "q_norm" and cases[0]["shape"] == "H=256"


def test_the_config_records_what_the_report_reads(quick_compile):
    cfg = quick_compile["config"]
    assert cfg["tie_rule"] in TIE_RULES and cfg["phases"] == ["fwd", "fwd_bwd"] and cfg["modes"] == exp.MODES
    assert cfg["backend"] == ("inductor" if mode.gpu_available() else "aot_eager")
    assert cfg["fullgraph"] is True and cfg["dynamic"] is False and cfg["profiled_calls"] == exp.QUICK_PROFILED_CALLS
    assert cfg["cases"] == [list(c) for c in exp.QUICK_CASES] and set(cfg["timer"]) == {"gpu", "host"}
    assert exp.CASES == [("plain", 16384, 4096), ("plain", 524288, 128), ("fused", 16384, 4096)]


class _TraceableNorm(torch.nn.Module):
    """Qwen3RMSNorm as the plain module's stand-in: pure torch, which dynamo traces on the CPU too."""

    def __init__(self, width, eps=1e-6):
        super().__init__()
        self.inner = Qwen3RMSNorm(width, eps=eps)
        self.weight = self.inner.weight

    def forward(self, x):
        return self.inner(x)


def test_a_module_that_compiles_gets_ratios_and_its_graph_breaks_counted(monkeypatch):
    """The compiled path end to end on the CPU (aot_eager), with a module dynamo can trace."""
    monkeypatch.setattr(exp, "build", lambda kind, width, device: _TraceableNorm(width).to(device, exp.DTYPE))
    entry = exp.run_case("plain", 4, 64, quick=True, on_gpu=False, device="cpu", backend="aot_eager", seed=0)
    assert entry["errors"] == {} and entry["graph_breaks"] == 0
    assert set(entry["first_call_s"]) == {"eager", "compiled"}
    for phase in ("fwd", "fwd_bwd"):
        ratio = entry["ratios"][phase]
        for timer in ("gpu", "host"):
            assert ratio[timer] == pytest.approx(entry["compiled"][phase][timer]["median_us"]
                                                 / entry["eager"][phase][timer]["median_us"])


def test_the_profiler_timer_falls_back_to_wall_time_without_a_gpu():
    calls = []
    stats = profiler_time_us([lambda: calls.append(1)], calls=3, on_gpu=False)
    assert stats["n"] == 3 and len(calls) == 4 and stats["median_us"] >= 0


def test_a_profiled_step_counts_its_kernels_not_the_step_annotation():
    """A profiling schedule records ``ProfilerStep#N`` on the device too, spanning the step's kernels:
    summing it with them doubled compile.json's GPU times (found on the H200: 2 activities, one copy)."""
    from types import SimpleNamespace

    from torch.autograd import DeviceType

    kernel = SimpleNamespace(name="rms_norm_fwd_kernel", device_type=DeviceType.CUDA, is_user_annotation=False)
    step = SimpleNamespace(name="ProfilerStep#3", device_type=DeviceType.CUDA, is_user_annotation=True)
    host = SimpleNamespace(name="aten::copy_", device_type=DeviceType.CPU, is_user_annotation=False)
    assert device_activities([host, step, kernel], DeviceType.CUDA) == [kernel]


@pytest.mark.gpu
def test_the_profiler_timer_sums_one_calls_device_time():
    """One copy kernel per call: one device activity, a positive time, one sample per call."""
    src = torch.randn(2**24, device="cuda")
    dst = torch.empty_like(src)
    stats = profiler_time_us([lambda: dst.copy_(src)], calls=4)
    assert stats["n"] == 4 and stats["median_us"] > 0 and stats["device_activities"] == 1
    graph = timers.cuda_graph_time_us([lambda: dst.copy_(src)], min_calls=8, replays=6)
    assert stats["median_us"] == pytest.approx(graph["median_us"], rel=0.25)  # not twice the copy
