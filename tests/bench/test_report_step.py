"""bench/report/step.py: the training-step tables and plot from the committed fixture and from the quick
run; every table is a table and a caption (their readings are hand-written: 番外 §六 in tests/test_readings_fused_add.py,
the methods page's in tests/test_readings_methods.py)."""
from __future__ import annotations

import pytest

from bench.report import prose
from bench.report import step as report
from bench_fixtures import check_artifacts, fixture


def _step_fixture():
    return fixture("step")


def _set_fused(data, ratio, spread):
    """The fused-add contender at ``ratio`` × the triton one's step, each with a min–max range of ±spread."""
    results = data["results"]
    ours = results["triton"]["median_ms"]
    for contender, ms in (("triton", ours), (report.FUSED_ADD, ours * ratio)):
        results[contender].update(median_ms=ms, min_ms=ms * (1 - spread), max_ms=ms * (1 + spread))
    return data


def _relation(data):
    """The fused-add contender's step against the triton one's, in the words of report.relation."""
    ok = {r["contender"]: r for r in report.contender_rows(data) if r["status"] == "ok"}
    return report.relation(ok[report.FUSED_ADD], ok["triton"], report.config(data), "本站 RMSNorm")


@pytest.mark.parametrize("ratio, spread, words", [
    (0.97, 0.001, "比本站 RMSNorm 快 3.0%"),
    (0.97, 0.05, "比本站 RMSNorm 快 3.0%"),  # a ratio rule (older files) reads the ratio only
    (1.05, 0.001, "比本站 RMSNorm 慢 5.0%"),
    (0.995, 0.05, "与本站 RMSNorm 持平（相差不到 1%）"),
])
def test_fused_add_table_and_relation_follow_the_data(ratio, spread, words):
    data = _set_fused(_step_fixture(), ratio, spread)
    text = report.render(data)["step_fused_add.md"]
    assert text.startswith("| 档位 |"), "the table alone, with its caption: no generated sentence"
    assert words in _relation(data)
    header = next(line for line in text.splitlines() if line.startswith("|"))
    cells = [c.strip() for c in header.strip("|").split("|")]
    assert len(cells) <= 6 and cells[0] == "档位" and "相对本站 RMSNorm" in cells
    body = [line for line in text.splitlines() if line.startswith("| ") and "档位" not in line and ":--" not in line]
    assert [line.split("|")[1].strip() for line in body] == [
        report.label(t) for t in ("eager", "triton", report.FUSED_ADD)]
    fused_row = body[-1].split("|")
    assert fused_row[5].strip() == prose.times(1 / ratio)


def test_fused_add_without_the_tier_is_no_row():
    data = _step_fixture()
    data["results"][report.FUSED_ADD] = {"contender": report.FUSED_ADD, "status": "skipped", "reason": "budget"}
    text = report.render(data)["step_fused_add.md"]
    assert report.label(report.FUSED_ADD) not in text.split("\n\n")[0]  # not a row of the table


def test_a_tie_is_what_the_run_s_rule_says():
    """Within the recorded tie rule the fused add is level with ours; a run with a 2 % rule says so at 1.5 %."""
    data = _set_fused(_step_fixture(), 0.985, 0.001)
    assert "比本站 RMSNorm 快 1.5%" in _relation(data)
    data["config"]["tie_rule"] = "within_2pct"
    assert "与本站 RMSNorm 持平（相差不到 2%）" in _relation(data)


def test_renders_from_the_quick_run(quick_step):
    rendered = report.render(quick_step)
    assert set(rendered) == {"step_time.md", "step_detail.md", "step_rmsnorm_share.md", "step_fused_add.md",
                             "step_time.svg"}
    check_artifacts(rendered)
    assert report.label("triton_fused_add") in rendered["step_fused_add.md"]


def test_with_intervals_level_means_overlapping_intervals():
    """ci95_disjoint: 3 % apart with overlapping 95 % intervals is level; a 0.5 % gap with disjoint ones is not."""
    data = _set_fused(_step_fixture(), 0.97, 0.001)
    data["config"]["tie_rule"] = "ci95_disjoint"
    ours, fused = data["results"]["triton"], data["results"][report.FUSED_ADD]
    ours["ci95_ms"] = [ours["median_ms"] * 0.96, ours["median_ms"] * 1.01]
    fused["ci95_ms"] = [fused["median_ms"] * 0.99, fused["median_ms"] * 1.02]
    text = _relation(data)
    assert "与本站 RMSNorm 持平（95% 区间" in text and "快 3.0%" not in text
    data = _set_fused(_step_fixture(), 0.995, 0.001)
    data["config"]["tie_rule"] = "ci95_disjoint"
    ours, fused = data["results"]["triton"], data["results"][report.FUSED_ADD]
    ours["ci95_ms"] = [ours["median_ms"] * 0.999, ours["median_ms"] * 1.001]
    fused["ci95_ms"] = [fused["median_ms"] * 0.999, fused["median_ms"] * 1.001]
    assert "比本站 RMSNorm 快 0.5%" in _relation(data)
    table = report.render(data)["step_time.md"]
    assert "95% 区间（ms）" in table and "GPU 时间（ms / step）" in table
