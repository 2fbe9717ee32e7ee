"""bench/exp_p1_profile.py as its --quick CPU run: the static reading of Qwen3-8B (on the meta device), the
profiled step of a tiny Qwen3, its sweep, and the Perfetto trace saved next to the record."""
from __future__ import annotations

from bench import exp_p1_profile
from bench_fixtures import machine_folder


def test_quick_run_reads_the_model_and_profiles_a_step(quick_p1_profile, quick_p1_profile_dir):
    cfg, res = quick_p1_profile["config"], quick_p1_profile["results"]
    static = res["static"]
    assert static["num_hidden_layers"] == 36 and static["modules"]["Qwen3RMSNorm"] == static["expected_rmsnorm"] == 145
    assert {e["module"] for e in static["graph"]["fx"]} and static["graph"]["export_model_patterns"]["RMSNorm"] == 145
    main = res["main"]
    assert main["layer"]["name"] == cfg["profiled_layer"] == exp_p1_profile.LAYER and main["kernels"]
    trace = quick_p1_profile_dir / machine_folder() / main["trace_file"]
    assert trace.stat().st_size == main["trace_bytes"]  # the report checks that it draws this run's trace
    assert [e["seq_len"] for e in res["sweep"]] == exp_p1_profile.QUICK_SETUP["sweep"]
