"""bench/exp_rmsnorm.py as its --quick CPU run: every contender that can run here, quack and Liger skipped
with the reason (also for a CPU run on a GPU machine), the copy candidates, the rstd choice, the config."""
from __future__ import annotations

from bench import exp_rmsnorm
from bench.harness.contenders import rmsnorm_contenders
from bench.report.names import TIE_RULES


def test_quack_and_liger_are_skipped_for_a_cpu_run():
    skipped = {}
    contenders = rmsnorm_contenders(exp_rmsnorm.CONTENDERS, 64, exp_rmsnorm.DTYPE, "cpu", skipped, exp_rmsnorm.EPS)
    assert "quack" not in contenders and "quack" in skipped and "CUDA" in skipped["quack"]
    assert "liger" not in contenders and "CUDA" in skipped["liger"]


def test_quick_run_times_the_contenders_and_records_the_config(quick_rmsnorm):
    res, cfg = quick_rmsnorm["results"], quick_rmsnorm["config"]
    assert [s["label"] for s in res["shapes"]] == [s[0] for s in exp_rmsnorm.QUICK_SHAPES]
    for s in res["shapes"]:
        assert {"hf", "torch_rms_norm", "naive", "triton"} <= set(s["fwd"]) & set(s["fwd_bwd"]) & set(s["fwd_eager"])
        assert all("gbps" in stats for stats in s["fwd"].values())
    assert {"gbps", "eager", "bytes"} <= set(res["copy"])
    assert [r["label"] for r in res["rstd"]] == [r[0] for r in exp_rmsnorm.QUICK_RSTD_SHAPES]
    assert cfg["contenders"] == exp_rmsnorm.CONTENDERS and cfg["ours"] == "triton" and cfg["peers"] == exp_rmsnorm.PEERS
    assert cfg["tie_rule"] in TIE_RULES
