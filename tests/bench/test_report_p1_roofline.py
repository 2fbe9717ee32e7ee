"""bench/report/p1_roofline.py from the committed --quick CPU fixture (and the same with the fields only a
GPU run fills in), and from a fresh quick run: deterministic, labelled, and saying what 篇1 relies on."""
from __future__ import annotations

import pytest

from bench import store
from bench.report import p1_roofline, plots
from bench.report.names import FUSION_LABELS, FUSION_POINT_ZH, SERIES_COLOURS
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
    assert f"| 屋脊点（本次的矩阵乘吞吐 ÷ 拷贝带宽） | {fmt(ridge)} FLOP/字节 |" in out["p1_roofline_ceilings.md"]
    labels = plots.svg_texts(out["p1_roofline.svg"])
    assert any(t.startswith("算术强度（FLOP/字节") for t in labels) and any("（TFLOP/s" in t for t in labels)


def test_the_whole_attention_is_labelled_not_compared():
    """sdpa is the whole attention (both GEMMs and the softmax) with GEMM FLOPs, next to a softmax-only eager:
    its row shows "—" for 相对 eager and says which FLOPs it counts; the roofline draws it as its own grey
    point, never in the softmax series' colour, and calls the ridge 屋脊点 as the prose does."""
    data = store.load("p1_roofline")
    out = p1_roofline.render(data)
    point = next(p for p in data["results"]["points"] if "flash" in p.get("measured", {}))
    flash = point["measured"]["flash"]
    row = next(line for line in out["p1_roofline_measured.md"].splitlines() if line.startswith("|  | sdpa"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == FUSION_LABELS["flash"] and "整个注意力" in cells[1]
    assert cells[3] == "—" and cells[4] == f"{fmt(flash['tflops'])}（矩阵乘加 softmax 的 FLOP）"
    ratio = fmt(point["measured"]["eager"]["median_us"] / flash["median_us"])
    assert f"{ratio}×" not in out["p1_roofline_measured.md"]
    assert "两种口径不能相除" in out["p1_roofline_measured.md"].splitlines()[-1]
    svg = out["p1_roofline.svg"]
    labels = plots.svg_texts(svg)
    assert any(t.startswith("屋脊点 ") for t in labels) and not any("拐点" in t for t in labels)
    assert f"{FUSION_LABELS['flash']}，FLOP 另算" in labels
    grey = p1_roofline.WHOLE_ATTENTION_COLOUR
    assert grey not in SERIES_COLOURS and f"fill: {grey.lower()}" in svg  # no fusion point's colour


def test_renders_from_the_quick_run(quick_p1_roofline):
    check_p1_render(p1_roofline, quick_p1_roofline)
