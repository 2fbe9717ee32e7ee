"""bench/exp_width_sweep.py as its --quick CPU run: every width timed, what cannot run here skipped
with its reason, one static graph per width, and the config the report reads."""
from __future__ import annotations

import rmsnorm_triton
from bench import exp_width_sweep
from bench.harness import mode
from bench.harness.op_timing import min_bytes
from bench.report.names import TIE_RULES
from bench_fixtures import unavailable_peers


def test_quick_run_records_errors_and_skips(quick_width_sweep):
    shapes = quick_width_sweep["results"]["shapes"]
    assert [s["width"] for s in shapes] == exp_width_sweep.QUICK_WIDTHS
    skipped = quick_width_sweep["results"]["skipped"]
    assert set(skipped) == unavailable_peers()  # reasons, not a crash
    why = "No module" if mode.gpu_available() else "CUDA"
    assert all(why in reason for reason in skipped.values())
    assert shapes[-1]["width"] > rmsnorm_triton.MAX_COLS  # the chunked path
    for s in shapes:
        assert "triton" not in s["errors"] and "triton" in s["fwd"] and "triton" in s["fwd_bwd"]
        assert {"torch_rms_norm", "compile_hf"} <= set(s["fwd"]) & set(s["fwd_bwd"])
        assert s["bytes_fwd_bwd"] == min_bytes(s["rows"], s["width"])["fwd_bwd"]
    # one static graph per width and grad mode: no recompile of an earlier width's graph
    # (dynamo's counter is per process: count from where this run started)
    graphs = [s["compiles"]["dynamo_graphs"] for s in shapes]
    assert graphs[0] >= 2 and [b - a for a, b in zip(graphs, graphs[1:])] == [2] * (len(graphs) - 1)


def test_the_config_records_what_the_report_reads(quick_width_sweep):
    cfg = quick_width_sweep["config"]
    assert cfg["ours"] == "triton" and cfg["peers"] == exp_width_sweep.PEERS
    assert cfg["contenders"] == exp_width_sweep.CONTENDERS and cfg["tie_rule"] in TIE_RULES
    assert cfg["targets"] == exp_width_sweep.TARGETS and cfg["target_from_width"] == exp_width_sweep.TARGET_FROM
    assert cfg["chunked_backward_above"] == exp_width_sweep.CHUNKED_BACKWARD_ABOVE


def test_the_chunked_backward_threshold_is_the_kernels():
    """CHUNKED_BACKWARD_ABOVE is the kernels' own threshold: the widest row backward_config keeps in
    registers (rows of 16-byte loads; 16383 has none and is chunked below it)."""
    above = exp_width_sweep.CHUNKED_BACKWARD_ABOVE
    assert not rmsnorm_triton.backward_config(above).chunked
    assert rmsnorm_triton.backward_config(above + 1).chunked and rmsnorm_triton.backward_config(above + 128).chunked


def test_bench_widths_picks_a_subset(monkeypatch):
    monkeypatch.delenv("BENCH_WIDTHS", raising=False)
    assert exp_width_sweep.selected_widths() == exp_width_sweep.SWEEP_WIDTHS
    assert exp_width_sweep.selected_widths(quick=True) == exp_width_sweep.QUICK_WIDTHS
    monkeypatch.setenv("BENCH_WIDTHS", "256, 65536")  # the parsing: tests/bench/test_harness.py
    assert exp_width_sweep.selected_widths() == [256, 65536]
