"""bench/report/fused_add_sweep.py: the per-width table, the pages' values and the plot say what the data says; the
counts, the true lowest ratios, the misses and their reasons follow the numbers, the configs and the run's tie rule
and targets; a width where ours raised is told apart; the plot's text is readable on the site."""
from __future__ import annotations

import copy
import json
import re

import pytest

from bench.harness.op_timing import min_bytes
from bench.report import fused_add_sweep as report
from bench.report import plots
from bench_fixtures import check_artifacts
from test_browser import MIN_FIGURE_TEXT_PX, svg_text_sizes

SITE_PLOT_PX = 688  # the width the site shows a plot at (the content column)


def test_renders_from_the_quick_run(quick_fused_add_sweep):
    rendered = report.render(quick_fused_add_sweep)
    assert set(rendered) == {"fused_add_sweep.md", "fused_add_sweep.svg"}
    check_artifacts(rendered)
    assert rendered == report.render(json.loads(json.dumps(quick_fused_add_sweep)))  # deterministic
    assert rendered["fused_add_sweep.md"].startswith("| ")  # read by hand on the methods page (values())
    widths = len(quick_fused_add_sweep["results"]["shapes"])
    assert rendered["fused_add_sweep.md"].count("\n| H=") == widths  # one row per width
    assert report.values(quick_fused_add_sweep)["widths"] == str(widths)


def test_the_plot_is_readable_at_the_sites_width(quick_fused_add_sweep):
    """About 7.2 in wide, at most 3.6 in high, every string >= 10.5 pt and >= MIN_FIGURE_TEXT_PX when shown
    at the site's plot width."""
    svg = report.render(quick_fused_add_sweep)["fused_add_sweep.svg"]
    width_pt, height_pt = (float(v) for v in re.search(r'width="([\d.]+)pt" height="([\d.]+)pt"', svg).groups())
    assert 6.5 * 72 <= width_pt <= 7.6 * 72 and height_pt <= 3.6 * 72
    view_width, texts = svg_text_sizes(svg)
    assert texts and len(texts) == len(plots.svg_texts(svg))
    assert min(size for _, size in texts) >= 10.5
    assert min(size for _, size in texts) * SITE_PLOT_PX / view_width >= MIN_FIGURE_TEXT_PX
    assert "用时 ÷ 融合版用时（µs 之比）" in plots.svg_texts(svg)


def _shape(base, width, ours_us, unfused, peer, share=None, align=16, chunked=(), peer_name="quack"):
    """One width of the quick record with set times: ours (µs), unfused ÷ ours, peer ÷ ours (None: absent)."""
    s = copy.deepcopy(base)
    nbytes = min_bytes(16384, width, fwd_io=4, bwd_io=4)
    s.update(width=width, label=f"H={width}", rows=16384, bytes_fwd=nbytes["fwd"], bytes_fwd_bwd=nbytes["fwd_bwd"],
             align=align, errors={})
    for direction in ("forward", "backward"):
        s["ours_configs"][direction]["chunked"] = direction in chunked
    for phase in ("fwd", "fwd_bwd"):
        us = ours_us if phase == "fwd_bwd" else ours_us / 2
        times = {"triton_fused_add": us, "unfused": us * unfused}
        if peer is not None:
            times[peer_name] = us * peer
        s[phase] = {n: {"median_us": t, "gbps": s[f"bytes_{phase}"] / (t * 1e3)} for n, t in times.items()}
    return s


@pytest.fixture
def five_widths(quick_fused_add_sweep):
    """Five widths with set ratios, alignments and configs; the copy ceiling set so that shares are exact."""
    data = copy.deepcopy(quick_fused_add_sweep)
    base = data["results"]["shapes"][0]
    data["results"]["copy"] = {"gbps": 4000.0, "bytes": 4 * 2**30, "calls_per_graph": 12, "median_us": 1.0,
                               "eager": {"gbps": 4000.0, "median_us": 1.0}}

    def us_at(width, share):  # ours' fwd_bwd time at this share of the 4000 GB/s ceiling
        return min_bytes(16384, width, fwd_io=4, bwd_io=4)["fwd_bwd"] / (share * 4000e3)

    data["results"]["shapes"] = [
        _shape(base, 512, 60.0, 1.30, 0.95),  # a short call, 5 % behind the peer
        _shape(base, 1024, us_at(1024, 0.80), 1.20, 1.10, peer_name="liger"),  # 84 µs, under 85 % of copy
        _shape(base, 4096, us_at(4096, 0.90), 1.25, 0.985),  # level: 1.5 % behind
        _shape(base, 16383, us_at(16383, 0.55), 0.97, 0.80, align=1, chunked=("forward", "backward")),
        _shape(base, 24576, us_at(24576, 0.79), 1.10, 1.05, chunked=("forward", "backward")),
    ]
    data["config"].update(rows=16384, widths=[512, 1024, 4096, 16383, 24576])
    return data


def test_the_facts_follow_the_data(five_widths):
    f = report.facts(five_widths)
    assert f["baseline_compared"] == f["peer_compared"] == 5
    assert f["no_slower_than_baseline"] == 4 and f["level_or_ahead"] == 3  # 4096 within 2 % counts as level
    assert f["misses"] == {"of_copy": [1024, 16383, 24576], "baseline": [16383], "peer": [512, 16383]}
    assert f["lowest_peer"] == {"width": 16383, "ratio": pytest.approx(0.80), "peer": "quack"}
    assert f["lowest_baseline"] == {"width": 16383, "ratio": pytest.approx(0.97)}
    assert f["reasons"][512] == ["short_call"]
    assert f["reasons"][16383] == ["chunked_fwd", "chunked_bwd", "no_16_byte_loads", "peers_below_target"]
    assert f["reasons"][1024] == ["short_call", "peers_below_target"] and f["reasons"][4096] == []
    assert report.facts(five_widths, "fwd")["reasons"][24576] == ["chunked_fwd"]  # forward: its own path only


def test_the_values_name_the_counts_the_extremes_and_the_reasons(five_widths):
    rendered = report.render(five_widths)
    values = report.values(five_widths)
    fwd_of_copy = values.pop("fwd_of_copy")
    assert values == {
        "widths": "5", "min_width": "512", "max_width": "24576", "tie": "2%", "level_or_ahead": "3", "behind": "2",
        "lowest_peer_width": "H=16383", "lowest_peer_ratio": "0.80×", "lowest_peer": "quack",
        "lowest_baseline_width": "H=16383", "lowest_baseline_ratio": "0.97×",
        "chunked_from": "H=16383", "chunked_widths": "2", "chunked_fwd": "2", "chunked_bwd": "2",
        "chunked_bwd_at": "H=16383、H=24576",
        # the methods page's reading: widths no slower than no fusion, behind the fastest peer, the share's misses
        # from H=1024 on and the reasons the record gives for them
        "no_slower": "4", "short_call": "100 µs", "behind_widths": "H=512、H=16383", "target_from": "1024",
        "target": "85%", "from_widths": "4", "reached": "1", "misses": "H=1024、H=16383、H=24576",
        "misses_short_call": "H=1024", "misses_unaligned": "H=16383", "misses_chunked": "H=16383、H=24576"}
    assert fwd_of_copy == report.prose.pct_span(report.facts(five_widths, "fwd")["of_copy"])
    assert "| H=1024 | " in rendered["fused_add_sweep.md"] and "| 80% | 1.20× | Liger | 1.10× |" in rendered["fused_add_sweep.md"]


def test_the_chunked_path_is_counted_per_direction_from_the_configs(five_widths):
    """From the first width where either direction chunks: the widths measured from there on and each direction's
    own (the values name the backward ones); no values when no width chunks."""
    data = copy.deepcopy(five_widths)
    base = data["results"]["shapes"][0]
    data["results"]["shapes"] += [_shape(base, 32768, 100.0, 1.1, 1.0, chunked=("forward",)),
                                  _shape(base, 65536, 100.0, 1.1, 1.0, chunked=("forward",))]
    assert report.chunked(data) == {"first": 16383, "wide": [16383, 24576, 32768, 65536],
                                    "forward": [16383, 24576, 32768, 65536], "backward": [16383, 24576]}
    values = report.values(data)
    assert (values["chunked_from"], values["chunked_widths"], values["chunked_fwd"], values["chunked_bwd"],
            values["chunked_bwd_at"]) == ("H=16383", "4", "4", "2", "H=16383、H=24576")
    for s in data["results"]["shapes"]:
        s["ours_configs"]["forward"]["chunked"] = s["ours_configs"]["backward"]["chunked"] = False
    assert report.chunked(data) is None and "chunked_from" not in report.values(data)


def test_the_lowest_ratio_is_named_even_when_ours_leads_everywhere(five_widths):
    data = copy.deepcopy(five_widths)
    for s in data["results"]["shapes"]:
        ours = s["fwd_bwd"]["triton_fused_add"]["median_us"]
        for name in ("quack", "liger"):
            if name in s["fwd_bwd"]:
                s["fwd_bwd"][name]["median_us"] = ours * (1.3 if s["width"] != 4096 else 1.04)
    values = report.values(data)
    assert (values["lowest_peer_width"], values["lowest_peer_ratio"], values["level_or_ahead"]) == ("H=4096", "1.04×", "5")


def test_the_tie_rule_and_the_targets_come_from_the_run(five_widths):
    data = copy.deepcopy(five_widths)
    data["config"].update(tie_rule="within_1pct", targets={"fwd_bwd": 0.75}, target_from_width=2048,
                          short_call_us=50, level_with_best_peer=[])
    f = report.facts(data)
    assert f["level_or_ahead"] == 2  # 4096's peer, 1.5 % behind, no longer counts as level
    assert f["misses"] == {"of_copy": [16383], "baseline": [16383]}
    assert f["reasons"][512] == []  # 60 µs is no short call under a 50 µs rule
    values = report.values(data)
    assert "behind_widths" not in values and values["tie"] == "1%"  # no peer target: no width is behind
    assert (values["target"], values["target_from"], values["misses"]) == ("75%", "2048", "H=16383")


def test_a_width_without_ours_is_named(five_widths):
    data = copy.deepcopy(five_widths)
    wide = data["results"]["shapes"][-1]
    for phase in ("fwd", "fwd_bwd"):
        wide[phase].pop("triton_fused_add")
    wide["errors"]["triton_fused_add"] = "RuntimeError('out of memory')"
    rendered = report.render(data)
    assert report.facts(data)["no_result"] == [24576]
    assert "H=24576" not in report.values(data)["misses"]  # not counted as a miss
    assert "| H=24576 | — | — | — | quack | — |" in rendered["fused_add_sweep.md"]
    check_artifacts(rendered)


def test_a_miss_the_record_gives_no_reason_for_is_in_no_group(five_widths):
    """A width below the share with no reason in the record (not even the fastest peer's own miss) is in no reason's
    group: the methods page's test (every miss named with a reason) then fails rather than explain it wrongly."""
    data = copy.deepcopy(five_widths)
    data["config"]["short_call_us"] = 50  # 1024's 84 µs is no short call any more
    data["results"]["shapes"][1]["fwd_bwd"]["liger"]["median_us"] *= 0.85  # 1024's Liger reaches 85 %
    assert report.facts(data)["reasons"][1024] == []
    values = report.values(data)
    assert "H=1024" in values["misses"] and values["misses_peer_reaches"] == "H=1024"
    assert not any("H=1024" in values.get(f"misses_{name}", "") for name in ("short_call", "unaligned", "chunked",
                                                                            "peer_only"))
