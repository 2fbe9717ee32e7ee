"""bench/report/fused_add.py: the fused residual add's tables and plot from the data, the words that follow
the numbers, a run without ours says why, and a file from before the fused kernel had its own id."""
from __future__ import annotations

import copy

import json

import pytest

from artifacts import takeaway
from bench import store
from bench.report import fused_add, prose
from bench_fixtures import check_artifacts, fused_times


def test_renders_from_the_quick_run(quick_fused_add):
    rendered = fused_add.render(quick_fused_add)
    assert set(rendered) == {"fused_add_fwd.md", "fused_add_fwdbwd.md", "fused_add_ratios.md",
                             "fused_add_bandwidth.svg"}
    check_artifacts(rendered)
    for name in ("fused_add_fwd.md", "fused_add_fwdbwd.md"):
        takeaway(rendered[name])
    # without ours (the fused kernel not importable) the tables still render and say why
    data = copy.deepcopy(quick_fused_add)
    for s in data["results"]["shapes"]:
        for phase in ("fwd", "fwd_bwd"):
            s[phase].pop("triton_fused_add", None)
    data["results"]["skipped"]["triton_fused_add"] = "ModuleNotFoundError('rmsnorm_fused_add')"
    text = fused_add.render(data)["fused_add_fwd.md"]
    assert takeaway(text).startswith("forward：融合版未测（ModuleNotFoundError")


@pytest.mark.parametrize("ratio, words", [
    (1.2, "实测在全部 2 个形状上快于不融合，不融合用时是融合版的 1.20 倍"),
    (1.0, "与不融合持平（相差不到 1%）"),
    (1 / 1.1, "比不融合慢 10%"),
])
def test_the_gain_follows_the_data(quick_fused_add, ratio, words):
    fwd, both, peers = fused_add.gain_parts(fused_times(quick_fused_add, ratio))
    assert both.startswith(f"forward + backward 按字节最多快到 {prose.times(11 / 8)}，") and words in both
    assert fwd.startswith(f"forward 按字节最多快到 {prose.times(5 / 4)}，")
    assert peers.startswith("与最快的对手相比，forward + backward ")
    assert "（不融合）" not in both  # no peer name to repeat when the other side is one contender


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
    """番外 §七's caveat: where Liger's fused add + RMSNorm is slower than no fusion, from the times."""
    data = store.load("fused_add")
    text = fused_add.render(data)["fused_add_fwdbwd.md"]
    ratios = {s["label"]: s["fwd_bwd"]["liger"]["median_us"] / s["fwd_bwd"]["unfused"]["median_us"]
              for s in data["results"]["shapes"]}
    slower = [label for label, v in ratios.items() if v >= 1.02]
    assert f"Liger 的融合实现在 {'、'.join(slower)} 上慢于不融合" in text
    assert f"{min(ratios[label] for label in slower):.2f}–{max(ratios[label] for label in slower):.2f} 倍" in text
