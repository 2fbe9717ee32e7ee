"""bench/exp_fused_add_sweep.py as its --quick CPU run: every width timed with ours fused, ours unfused and the
peers that run here, the rest skipped with the reason, one static graph per width, what the report needs to say
why a width misses a target, and the config it reads; the precompile workers' failures are recorded."""
from __future__ import annotations

import pytest

import rmsnorm_triton
from bench import exp_fused_add_sweep as exp
from bench.harness import mode
from bench.harness.op_timing import min_bytes
from bench.report.names import TIE_RULES
from bench_fixtures import unavailable_peers


def test_quick_run_times_every_contender_side_by_side(quick_fused_add_sweep):
    res = quick_fused_add_sweep["results"]
    assert [s["width"] for s in res["shapes"]] == exp.QUICK_WIDTHS
    assert set(res["skipped"]) == unavailable_peers()  # reasons, not a crash
    why = "No module" if mode.gpu_available() else "CUDA"
    assert all(why in reason for reason in res["skipped"].values())
    for s in res["shapes"]:
        assert s["errors"] == {}
        for phase in ("fwd", "fwd_bwd"):
            assert {"triton_fused_add", "unfused", "compile_hf"} <= set(s[phase])
            assert "triton" not in s[phase]  # the fused kernel has its own id
            assert all(stats["gbps"] > 0 for stats in s[phase].values())
        assert s["bytes_fwd"] == min_bytes(s["rows"], s["width"], fwd_io=4, bwd_io=4)["fwd"]
        assert s["bytes_fwd_bwd"] == 8 * s["rows"] * s["width"] * 2 + 6 * s["width"]
    # one static graph per width and grad mode (dynamo's counter is per process: count from this run's start)
    graphs = [s["compiles"]["dynamo_graphs"] for s in res["shapes"]]
    assert graphs[0] >= 2 and [b - a for a, b in zip(graphs, graphs[1:])] == [2] * (len(graphs) - 1)


def test_each_width_records_why_it_could_be_slow(quick_fused_add_sweep):
    """The rows' alignment and ours' launch configs: what the report reads a miss's reason from."""
    for s in quick_fused_add_sweep["results"]["shapes"]:
        assert s["align"] == rmsnorm_triton.row_alignment(s["width"], s["width"])
        for direction in ("forward", "backward"):
            assert s["ours_configs"][direction]["chunked"] is False  # the quick widths fit in registers
    by_width = {s["width"]: s for s in quick_fused_add_sweep["results"]["shapes"]}
    assert by_width[300]["align"] * exp.ELEM_BYTES < 16 <= by_width[256]["align"] * exp.ELEM_BYTES
    assert exp.ours_configs(rmsnorm_triton.MAX_COLS + 16, "cpu")["backward"]["chunked"] is True


def test_the_config_records_what_the_report_reads(quick_fused_add_sweep):
    cfg = quick_fused_add_sweep["config"]
    assert cfg["contenders"] == exp.CONTENDERS and cfg["ours"] == "triton_fused_add" and cfg["baseline"] == "unfused"
    assert cfg["peers"] == ["compile_hf", "liger", "quack"] and cfg["tie_rule"] in TIE_RULES
    assert cfg["targets"] == {"fwd_bwd": 0.85} and cfg["target_from_width"] == 1024
    assert cfg["no_slower_than_baseline"] == cfg["level_with_best_peer"] == ["fwd_bwd"]
    assert cfg["widths"] == exp.QUICK_WIDTHS and cfg["rows"] == exp.QUICK_ROWS
    assert cfg["short_call_us"] == exp.SHORT_CALL_US and cfg["elem_bytes"] == 2
    assert cfg["max_cols"] == rmsnorm_triton.MAX_COLS and cfg["replays"] == exp.REPLAYS
    assert cfg["bytes"]["fwd_io"] == cfg["bytes"]["bwd_io"] == 4


def test_the_gpu_run_sweeps_width_sweeps_widths(monkeypatch):
    monkeypatch.delenv("BENCH_WIDTHS", raising=False)
    from bench.harness.shapes import SWEEP_WIDTHS

    assert exp.selected_widths() == SWEEP_WIDTHS and len(SWEEP_WIDTHS) == 43
    assert exp.selected_widths(quick=True) == exp.QUICK_WIDTHS
    monkeypatch.setenv("BENCH_WIDTHS", "1536,14336")  # the parsing: tests/bench/test_harness.py
    assert exp.selected_widths() == [1536, 14336]


def test_the_precompile_worker_refuses_what_it_cannot_do():
    with pytest.raises(SystemExit, match="usage"):
        exp.worker(["precompile", "16"])
    if not mode.gpu_available():
        with pytest.raises(SystemExit, match="CUDA GPU"):
            exp.worker(["precompile", "16", "256"])


@pytest.mark.skipif(mode.gpu_available(), reason="on a GPU the worker compiles: this checks a failing one")
def test_a_failed_precompile_worker_is_recorded_not_fatal(monkeypatch):
    """The workers start through run_all --worker; one that fails (here: no GPU) costs only time."""
    monkeypatch.setattr(exp, "PRECOMPILE_WORKERS", 1)
    out = exp.precompile(4, [256, 300])
    assert out["workers"] == 1 and out["exit_codes"] == [1] and out["wall_s"] > 0
