"""bench/report/step_fusion.py: the fusion-set step table follows the data; a pair is ranked (``wins``) only when
its 95 % intervals are disjoint. (The page's hand-written words: tests/test_readings_extras.py.)"""
from __future__ import annotations

import pytest

from bench.report import step_fusion as report
from bench.report.step import label

CONTENDERS = ["triton", "triton_qk_rope", "triton_liger_rope", "triton_swiglu", "triton_liger_swiglu",
              "fusion_set", "liger_no_loss"]


def payload(medians: dict, half_width: float = 1.0) -> dict:
    cfg = {"model": {"size": "8B"}, "geometry": {"num_hidden_layers": 8}, "batch": 4, "seq_len": 4096,
           "dtype": "bfloat16", "warmup": 2, "timed_steps": 10, "rounds": 3, "activation_checkpointing": False,
           "baseline": "triton", "ours": "fusion_set", "tie_rule": "ci95_disjoint", "resolution": 0.01,
           "pairs": [["triton_qk_rope", "triton_liger_rope"], ["triton_swiglu", "triton_liger_swiglu"],
                     ["fusion_set", "liger_no_loss"]]}
    results = {}
    for contender in CONTENDERS:
        ms = medians.get(contender, 400.0)
        results[contender] = {"status": "ok", "label": contender, "median_ms": ms, "min_ms": ms - 3,
                              "max_ms": ms + 3, "ci95_ms": [ms - half_width, ms + half_width], "peak_gib": 50.0,
                              "processes": 3, "tokens_per_s": 1.0, "loss": 12.0, "profile": None}
    return {"config": cfg, "results": results}


def test_disjoint_intervals_rank_and_overlapping_ones_are_level():
    data = payload({"triton_qk_rope": 390.0, "triton_liger_rope": 400.0, "triton_swiglu": 400.5,
                    "triton_liger_swiglu": 400.0, "fusion_set": 420.0, "liger_no_loss": 400.0})
    assert report.wins(data) == {"triton_qk_rope": True, "triton_swiglu": None, "fusion_set": False}


def test_the_table_has_every_contender_and_the_ratio_to_the_baseline():
    data = payload({"triton": 400.0, "fusion_set": 320.0})
    table = report.render(data)["step_fusion_table.md"]
    rows = [line for line in table.splitlines()
            if line.startswith("| ") and "档位" not in line and ":--" not in line]
    assert [r.split("|")[1].strip() for r in rows] == [label(c) for c in CONTENDERS]
    fusion_row = rows[CONTENDERS.index("fusion_set")].split("|")
    assert fusion_row[5].strip() == "1.250×"


@pytest.mark.parametrize("missing", ["triton_liger_rope", "fusion_set"])
def test_a_contender_that_did_not_run_is_said_not_ranked(missing):
    data = payload({})
    data["results"][missing] = {"status": "skipped", "reason": "budget", "label": missing}
    out = report.render(data)
    assert set(out) == {"step_fusion_table.md"} and out["step_fusion_table.md"].startswith("| 档位")
    pair = next(ours for ours, theirs in data["config"]["pairs"] if missing in (ours, theirs))
    assert report.wins(data)[pair] is None  # not run: not ranked
    assert "未运行：skipped" in out["step_fusion_table.md"]
