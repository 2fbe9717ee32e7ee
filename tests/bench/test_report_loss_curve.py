"""bench/report/loss_curve.py: the gate table, its detail and the plot, from the committed fixture and from
the quick run; the verdict column names each precision setting's verdict (the sentence is the page's own)."""
from __future__ import annotations

import copy

import pytest

from bench.report import loss_curve, plots
from bench_fixtures import check_artifacts, fixture


def test_renders_from_the_fixture_and_the_quick_run(quick_loss_curve):
    for data in (fixture("loss_curve"), quick_loss_curve):
        rendered = loss_curve.render(data)
        assert set(rendered) == {"loss_curve.md", "loss_curve_detail.md", "loss_curve.svg"}
        check_artifacts(rendered)
        assert rendered["loss_curve.md"].startswith("| 精度设置 |")  # the table only: the sentence is on the page
        assert "本站 RMSNorm − HF" in plots.svg_texts(rendered["loss_curve.svg"])


def test_the_table_names_a_failed_gate():
    data = copy.deepcopy(fixture("loss_curve"))
    data["results"]["bf16"]["gate"]["passed"] = False
    row = next(line for line in loss_curve.render(data)["loss_curve.md"].splitlines() if line.startswith("| bf16 权重"))
    assert row.rstrip(" |").endswith("未通过")


def test_the_difference_axis_spans_the_limit_its_title_names():
    """The lower panels' title names the gate's per-step limit (config gate.step_rtol) and their axis reaches it,
    whatever the differences are: ±5 % with ticks at ±5, and ±2 % for a run that recorded a 2 % limit."""
    data = fixture("loss_curve")
    for rtol in (data["config"]["gate"]["step_rtol"], 0.02):
        run = copy.deepcopy(data)
        run["config"]["gate"]["step_rtol"] = rtol
        texts = plots.svg_texts(loss_curve.render(run)["loss_curve.svg"])
        limit = f"{100 * rtol:g}"
        assert f"(x − HF) / HF，逐步门限 ±{limit}%" in texts
        assert limit in texts and f"−{limit}" in texts  # the axis' end ticks


def test_the_step_gates_margin_is_read_from_the_data():
    """The methods page's margin of the per-step gate on the H200: the control's and ours' largest per-step
    differences over both settings, and the threshold as a multiple of ours (a CPU calibration gave five)."""
    from bench import store

    if not store.data_path("loss_curve").exists():
        pytest.skip("loss_curve.json not committed")
    data = store.load("loss_curve")
    res, variants = data["results"], data["config"]["variants"]
    ours = max(res[v]["gate"]["max_rel_diff"] for v in variants)
    control = max(res[v]["control_gate"]["max_rel_diff"] for v in variants)
    values = loss_curve.values(data)
    assert values["control_step_max"] == f"{100 * control:.2f}%" and values["step_max"] == f"{100 * ours:.2f}%"
    assert values["step_margin"] == f"{data['config']['gate']['step_rtol'] / ours:.2f}"
