"""bench/exp_loss_curve.py as its --quick CPU run: HF, ours and the control train in lockstep from the same
weights in both precision settings, each gated against HF with the control as the noise floor. Its CPU
counterpart at real length is tests/test_loss_consistency.py (same code, snippets/loss_consistency.py)."""
from __future__ import annotations

import math

from bench import exp_loss_curve


def test_quick_run_trains_every_contender_and_gates_ours(quick_loss_curve):
    cfg, results = quick_loss_curve["config"], quick_loss_curve["results"]
    assert cfg["contenders"] == list(exp_loss_curve.CONTENDERS) == ["hf", "triton", "control"]
    assert cfg["variants"] == ["amp", "bf16"] and cfg["corpus"]["tokens"] > 0
    for variant in cfg["variants"]:
        r = results[variant]
        assert set(r["losses"]) == set(cfg["contenders"])
        assert all(len(curve) == cfg["steps"] and all(math.isfinite(x) for x in curve) for curve in r["losses"].values())
        assert {"passed", "final_rel_diff", "final_limit"} <= set(r["gate"]) and "final_rel_diff" in r["control_gate"]
    assert results["passed"] == all(results[v]["gate"]["passed"] for v in cfg["variants"])
