"""bench/report/loss_curve.py: the gate table, its detail and the plot, from the committed fixture and from
the quick run; the sentence names each precision setting's verdict."""
from __future__ import annotations

import copy

from artifacts import takeaway
from bench.report import loss_curve, plots
from bench_fixtures import check_artifacts, fixture


def test_renders_from_the_fixture_and_the_quick_run(quick_loss_curve):
    for data in (fixture("loss_curve"), quick_loss_curve):
        rendered = loss_curve.render(data)
        assert set(rendered) == {"loss_curve.md", "loss_curve_detail.md", "loss_curve.svg"}
        check_artifacts(rendered)
        assert takeaway(rendered["loss_curve.md"]).startswith(f"{data['config']['steps']} 步训练，")
        assert "生产版 − HF" in plots.svg_texts(rendered["loss_curve.svg"])


def test_the_sentence_names_a_failed_gate():
    data = copy.deepcopy(fixture("loss_curve"))
    data["results"]["bf16"]["gate"]["passed"] = False
    assert "未通过门限的精度设置：bf16 权重" in loss_curve.gate_sentence(data)
