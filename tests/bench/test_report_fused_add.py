"""bench/report/fused_add.py: the fused residual add's tables and plot from the data, the words that follow
the numbers, a run without ours says why, and a file from before the fused kernel had its own id."""
from __future__ import annotations

import copy

import json

import pytest

from bench import store
from bench.report import fused_add, prose
from bench.report.names import tie
from bench_fixtures import check_artifacts, fused_times


def test_renders_from_the_quick_run(quick_fused_add):
    rendered = fused_add.render(quick_fused_add)
    assert set(rendered) == {"fused_add_fwd.md", "fused_add_fwdbwd.md", "fused_add_ratios.md",
                             "fused_add_bandwidth.svg"}
    check_artifacts(rendered)
    for name in ("fused_add_fwd.md", "fused_add_fwdbwd.md"):  # read by hand: the methods page and 番外 §六 (values)
        assert rendered[name].startswith("| 形状 |"), name
    # without ours (the fused kernel not importable) the tables still render and say why
    data = copy.deepcopy(quick_fused_add)
    for s in data["results"]["shapes"]:
        for phase in ("fwd", "fwd_bwd"):
            s[phase].pop("triton_fused_add", None)
    data["results"]["skipped"]["triton_fused_add"] = "ModuleNotFoundError('rmsnorm_fused_add')"
    text = fused_add.render(data)["fused_add_fwdbwd.md"]
    assert text.rstrip().splitlines()[-1].startswith("*融合版未测（ModuleNotFoundError")  # the caption says why


@pytest.mark.parametrize("ratio, words", [
    (1.2, "实测在全部 2 个形状上快于不融合，不融合用时是融合版的 1.20 倍"),
    (1.0, "与不融合持平（相差不到 1%）"),
    (1 / 1.1, "比不融合慢 10%"),
])
def test_the_gain_follows_the_data(quick_fused_add, ratio, words):
    fwd, both, peers = fused_add.gain_parts(fused_times(quick_fused_add, ratio))
    assert both.startswith(f"forward + backward 按字节算（两边带宽相同）能快 {prose.times(11 / 8)}，") and words in both
    assert fwd.startswith(f"forward 按字节算（两边带宽相同）能快 {prose.times(5 / 4)}，")
    assert peers.startswith("与最快的对比方案相比，forward + backward ")
    assert "（不融合）" not in both  # no peer name to repeat when the other side is one contender


def _with_times(data, label, phase, fused, unfused):
    """``data`` with one shape's fused and unfused times set: (median, p20, p80) in µs each."""
    data = copy.deepcopy(data)
    shape = next(s for s in data["results"]["shapes"] if s["label"] == label)
    for name, (median, p20, p80) in (("triton_fused_add", fused), ("unfused", unfused)):
        shape[phase][name].update(median_us=median, p20_us=p20, p80_us=p80)
    return data


def test_a_ratio_above_the_byte_bound_says_why_from_the_data():
    """A shape whose unfused ÷ fused prints above unfused ÷ fused passes: outside its p20–p80 range it is each
    side's bandwidth over its own bytes; inside, the noise; one that prints at the bound is not named."""
    data = store.load("fused_add")
    label = data["results"]["shapes"][0]["label"]
    moved = data["results"]["shapes"][0]["bytes_fwd"]
    beyond = _with_times(data, label, "fwd", (100.0, 99.9, 100.1), (130.0, 129.9, 130.1))
    words = fused_add.gain_parts(beyond)[0]
    assert f"；{label} 的 1.30 倍高于 1.25×，不是测量波动（用时比的 p20–p80 区间 1.298–1.302 整个在它之上）" in words
    assert f"不融合按它实际搬的字节只跑到 {moved * 1.25 / 130e3:,.0f} GB/s，融合版 {moved / 100e3:,.0f} GB/s" in words
    noise = _with_times(data, label, "fwd", (100.0, 96.0, 104.0), (127.0, 126.0, 128.0))
    assert f"；{label} 的 1.27 倍高于 1.25×，在用时比的 p20–p80 区间 1.212–1.333 之内，是测量波动" in \
        fused_add.gain_parts(noise)[0]
    at_bound = _with_times(data, label, "fwd", (100.0, 99.9, 100.1), (125.2, 125.1, 125.3))
    assert label + " 的" not in fused_add.gain_parts(at_bound)[0]


def test_a_file_that_calls_the_fused_kernel_triton_is_read_under_its_own_id():
    """fused_add.json files measured before the fused kernel had its own id call it "triton": read renamed,
    such a file renders as one that uses the id renders (the same tables, ours called 融合版)."""
    today = store.load("fused_add")
    assert "triton_fused_add" in today["config"]["contenders"] and "triton" not in today["config"]["contenders"]
    old = json.loads(json.dumps(today).replace('"triton_fused_add"', '"triton"'))
    old["config"].pop("ours", None)  # not recorded then
    current = fused_add.current(old)
    assert current["config"]["contenders"][-1] == "triton_fused_add" and old["config"]["contenders"][-1] == "triton"
    assert all("triton_fused_add" in s["fwd"] and "triton" not in s["fwd"] for s in current["results"]["shapes"])
    assert fused_add.current(current) is current  # a file in today's words is read as it is
    assert fused_add.render(old) == fused_add.render(current)
    assert "融合版" in fused_add.render(old)["fused_add_fwd.md"]


def test_liger_against_no_fusion_follows_the_committed_data():
    """番外 §七's caveat: where Liger's fused add + RMSNorm is slower than no fusion (by the run's tie rule), by how
    much, and where faster, from the times."""
    data = store.load("fused_add")
    within = tie(fused_add.config(data))
    ratios = {s["label"]: s["fwd_bwd"]["liger"]["median_us"] / s["fwd_bwd"]["unfused"]["median_us"]
              for s in data["results"]["shapes"]}
    assert dict(fused_add.liger_vs_unfused(data)) == pytest.approx(ratios)
    slower = [label for label, v in ratios.items() if v >= 1 + within]
    faster = [label for label, v in ratios.items() if v <= 1 - within]
    values = fused_add.values(data)
    assert values["liger_slower"] == str(len(slower)) and values["liger_faster_at"] == "、".join(faster)
    assert values["liger_slower_ratio"] == \
        f"{min(ratios[label] for label in slower):.2f}–{max(ratios[label] for label in slower):.2f}"


def test_the_values_name_the_shapes_ahead_of_and_level_with_the_fastest_peer():
    """Forward + backward: the shapes where the fastest peer takes longer than ours by the tie rule or more, and
    those within it, counted from the times."""
    data = store.load("fused_add")
    within = tie(fused_add.config(data))
    best = {s["label"]: min(v["median_us"] for k, v in s["fwd_bwd"].items() if k != "triton_fused_add")
            / s["fwd_bwd"]["triton_fused_add"]["median_us"] for s in data["results"]["shapes"]}
    values = fused_add.values(data)
    assert values["fwd_bwd_shapes"] == str(len(best))
    assert values["fwd_bwd_ahead"] == str(sum(r >= 1 + within for r in best.values()))
    assert values["fwd_bwd_level_at"] == "、".join(label for label, r in best.items() if 1 - within < r < 1 + within)


def test_the_forward_values_split_the_shapes_by_the_tie():
    """The methods page's forward reading: the shapes where the fused kernel is faster than, level with or slower than
    the fastest peer under the run's tie rule, with the peer ÷ ours where faster and how much slower where slower."""
    data = fused_add.current(store.load("fused_add"))
    shapes = data["results"]["shapes"]
    peer_over_ours = [1.005, 0.9] + [1.05] * (len(shapes) - 2)  # level within 1 %, 10 % ahead of ours, behind ours
    for shape, ratio in zip(shapes, peer_over_ours):
        times = shape["fwd"]
        ours = times["triton_fused_add"]["median_us"]
        for name in ("compile_hf", "liger", "quack"):
            if name in times:
                times[name]["median_us"] = ours * (ratio if name == "liger" else 2.0)
    v = fused_add.forward_values(data)
    labels = [s["label"] for s in shapes]
    assert (v["tie"], v["fwd_shapes"], v["fwd_level"], v["fwd_slower"], v["fwd_slower_by"]) == (
        "1%", str(len(shapes)), labels[0], labels[1], "11%")
    assert v["fwd_faster"] == "、".join(labels[2:]) and v["fwd_faster_ratio"] == "1.05"
