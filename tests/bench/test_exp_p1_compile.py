"""bench/exp_p1_compile.py as its --quick run: one tiny Qwen3 decoder layer eager and compiled (and captured as
a CUDA graph on a GPU), the launches of each, the config the report reads, and Inductor's RMSNorm code."""
from __future__ import annotations

from bench import exp_p1_compile
from bench.harness import mode


def test_quick_run_times_each_contender_and_keeps_inductors_code(quick_p1_compile):
    cfg, res = quick_p1_compile["config"], quick_p1_compile["results"]
    assert cfg["contenders"] == list(exp_p1_compile.CONTENDERS) and cfg["baseline"] == exp_p1_compile.BASELINE
    for entry in res["shapes"]:
        timed = ["eager", "cuda_graph", "compile"] if mode.gpu_available() else ["eager", "compile"]
        assert list(entry["contenders"]) == timed  # make_graphed_callables needs CUDA
        for result in entry["contenders"].values():
            assert result["fwd"]["median_us"] > 0 and result["fwd_bwd"]["median_us"] > 0
            assert {"kernels", "launch_calls"} <= set(result["launches_fwd_bwd"])
    assert set(res["rmsnorm"]["graphs"]) == {"forward", "backward"}
    assert all(k["body"] for kernels in res["rmsnorm"]["graphs"].values() for k in kernels)
    assert set(res["layer_kernels"]) >= {"forward", "backward"}
