"""bench/report/p1_roofline.py from the committed --quick CPU fixture (and the same with the fields only a
GPU run fills in), and from a fresh quick run: deterministic, labelled, and saying what 篇1 relies on."""
from __future__ import annotations

import pytest

from bench.report import p1_roofline, plots
from bench.report.names import FUSION_POINT_ZH
from bench.report.tables import fmt
from bench_fixtures import as_if_on_a_gpu, check_p1_render, fixture


@pytest.mark.parametrize("gpu", [False, True])
def test_render_is_deterministic_and_labelled(gpu):
    data = fixture("p1_roofline")
    check_p1_render(p1_roofline, as_if_on_a_gpu(data) if gpu else data)


def test_roofline_tables_follow_the_counts():
    data = fixture("p1_roofline")
    out = p1_roofline.render(data)
    counts = out["p1_roofline_counts.md"]
    for point in data["results"]["points"]:
        name = FUSION_POINT_ZH[point["name"]]
        assert f"| {name} | {point['eager']['kernels']} → {point['fused']['kernels']} |" in counts
    ridge = p1_roofline.ridge_flop_per_byte(data)
    assert ridge == pytest.approx(data["results"]["ridge_flop_per_byte"])
    assert f"| 屋脊点（矩阵乘吞吐 ÷ 拷贝带宽） | {fmt(ridge)} FLOP/字节 |" in out["p1_roofline_ceilings.md"]
    labels = plots.svg_texts(out["p1_roofline.svg"])
    assert any(t.startswith("算术强度（FLOP/字节") for t in labels) and any("（TFLOP/s" in t for t in labels)


def test_renders_from_the_quick_run(quick_p1_roofline):
    check_p1_render(p1_roofline, quick_p1_roofline)
