"""bench/report/step.py: the training-step tables and plot from the committed fixture and from the quick
run; the fused residual add's words follow the data and the run's tie rule (the step-time and RMSNorm-share
tables' readings are the methods page's: tests/test_readings_methods.py)."""
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


@pytest.mark.parametrize("ratio, spread, words, absent", [
    (0.97, 0.001, "比本站 RMSNorm 快 3.0%", "波动区间"),
    (0.97, 0.05, "比本站 RMSNorm 快 3.0%", "波动区间"),  # a ratio rule (older files) reads the ratio only
    (1.05, 0.001, "比本站 RMSNorm 慢 5.0%", "波动区间"),
    (0.995, 0.05, "与本站 RMSNorm 持平（相差不到 1%）", "比本站 RMSNorm"),
])
def test_fused_add_words_follow_the_data(ratio, spread, words, absent):
    data = _set_fused(_step_fixture(), ratio, spread)
    text = report.render(data)["step_fused_add.md"]
    takeaway = text.split("\n\n")[0]
    assert words in takeaway and takeaway.endswith("。") and not takeaway.startswith("|")
    assert absent is None or absent not in takeaway
    header = next(line for line in text.splitlines() if line.startswith("|"))
    cells = [c.strip() for c in header.strip("|").split("|")]
    assert len(cells) <= 6 and cells[0] == "档位" and "相对本站 RMSNorm" in cells
    body = [line for line in text.splitlines() if line.startswith("| ") and "档位" not in line and ":--" not in line]
    assert [line.split("|")[1].strip() for line in body] == [
        report.label(t) for t in ("eager", "triton", report.FUSED_ADD)]
    fused_row = body[-1].split("|")
    assert fused_row[5].strip() == prose.times(1 / ratio)


def test_fused_add_share_clause_follows_the_data():
    data = _set_fused(_step_fixture(), 0.97, 0.001)
    profile = data["results"]["triton"]["profile"]
    step = data["results"]["triton"]["median_ms"]
    profile["rmsnorm_ms"] = 0.02 * step  # RMSNorm 2 % of the step: not much left to save
    small = report.fused_add_takeaway(data, report.contender_rows(data))
    assert "本站 RMSNorm 这一档的一步里，RMSNorm 只占 2.0%" in small and "step 层面能省的本来就不多" in small
    profile["rmsnorm_ms"] = 0.2 * step
    large = report.fused_add_takeaway(data, report.contender_rows(data))
    assert "占 20.0%" in large and "本来就不多" not in large


def test_fused_add_without_the_tier_says_so():
    data = _step_fixture()
    data["results"][report.FUSED_ADD] = {"contender": report.FUSED_ADD, "status": "skipped", "reason": "budget"}
    text = report.render(data)["step_fused_add.md"]
    assert "没有跑成" in text.split("\n\n")[0]
    assert report.label(report.FUSED_ADD) not in text.split("\n\n")[1]  # not a row of the table
    del data["results"][report.FUSED_ADD]  # a run from before the tier existed
    assert report.fused_add_takeaway(data, report.contender_rows(data)).endswith("本站 RMSNorm + 融合残差加法这一档还没有测。")


def test_a_tie_is_what_the_run_s_rule_says():
    """Within the recorded tie rule the fused add is level with ours; a run with a 2 % rule says so at 1.5 %."""
    data = _set_fused(_step_fixture(), 0.985, 0.001)
    assert "比本站 RMSNorm 快 1.5%" in report.fused_add_takeaway(data, report.contender_rows(data))
    data["config"]["tie_rule"] = "within_2pct"
    assert "与本站 RMSNorm 持平（相差不到 2%）" in report.fused_add_takeaway(data, report.contender_rows(data))


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
    text = report.fused_add_takeaway(data, report.contender_rows(data))
    assert "与本站 RMSNorm 持平（95% 区间" in text and "快 3.0%" not in text
    data = _set_fused(_step_fixture(), 0.995, 0.001)
    data["config"]["tie_rule"] = "ci95_disjoint"
    ours, fused = data["results"]["triton"], data["results"][report.FUSED_ADD]
    ours["ci95_ms"] = [ours["median_ms"] * 0.999, ours["median_ms"] * 1.001]
    fused["ci95_ms"] = [fused["median_ms"] * 0.999, fused["median_ms"] * 1.001]
    assert "比本站 RMSNorm 快 0.5%" in report.fused_add_takeaway(data, report.contender_rows(data))
    table = report.render(data)["step_time.md"]
    assert "95% 区间（ms）" in table and "GPU 时间（ms / step）" in table
