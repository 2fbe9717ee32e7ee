"""篇 2's hand-written readings of the data (docs/triton-rmsnorm.md §4.4, §5.4, §6.2, §7.1): each comparison word
on the page is checked against the committed data with the tie rule of its report, and the page (read as the site
builds it, values put in) is checked to say that word.

The relations come from the reports' own rules: rmsnorm.json's tie rule (ops.by_tie) for rstd, step.json's
95 % intervals (step.level / step.faster) for the 8-layer step, the full-size ranking of fullsize.tiers (intervals
disjoint and more than step.json's resolution apart), host.py's timing-spread rule for the host time, and
tuning.TIE for the programs-per-SM sweep.
"""
from __future__ import annotations

import re

import pytest

import docs_tools
from bench import store
from bench.report import fullsize, host, rmsnorm, step, summary_p2, tuning
from bench.report.names import tie
from bench.report.ops import by_tie

PAGE = "docs/triton-rmsnorm.md"


@pytest.fixture(scope="module")
def page() -> list[str]:
    """The page's lines as the reader gets them: includes expanded, values put in, runs of spaces as one."""
    text = docs_tools.expand((docs_tools.ROOT / PAGE).read_text(encoding="utf-8"))
    return [re.sub(r"\s+", " ", line) for line in text.splitlines()]


def paragraph(lines: list[str], anchor: str) -> str:
    """The one line (a paragraph) of the page that holds ``anchor``."""
    found = [line for line in lines if anchor in line]
    assert len(found) == 1, f"{anchor!r} is on {len(found)} lines of {PAGE}"
    return found[0]


def _step_rows() -> dict[str, dict]:
    return {r["contender"]: r for r in step.contender_rows(store.load("step")) if r["status"] == "ok"}


def test_ridge_point_words(page):
    """§4.4: the ridge point is a range (篇 1's GEMM and fullsize.json's faster one), and RMSNorm's intensity sits
    far (over ten times) left of its low end."""
    roofline = store.load("p1_roofline")
    low, high = summary_p2.ridge_span(roofline, store.load("fullsize"))
    intensity = summary_p2.rmsnorm_intensity(roofline)
    assert round(high) > round(low)  # "随矩阵乘吞吐而变": the two runs' rates give two ridge points
    assert intensity * 10 < low  # "远在屋脊点左边"
    text = paragraph(page, "测得屋脊点在")
    assert f"屋脊点在 {round(low)}–{round(high)} FLOP/字节（随矩阵乘吞吐而变）" in text
    assert "远在屋脊点左边，是访存受限算子" in text


def test_rstd_words(page):
    """§5.4: per shape, recomputing rstd is faster, level or slower by rmsnorm.json's tie rule; both directions
    occur ("互有快慢")."""
    data = store.load("rmsnorm")
    rows = [{"label": label, "ratio": 1 / (1 + change)} for label, change in rmsnorm.rstd_changes(data).items()]
    faster, level, slower = by_tie(rows, tie(rmsnorm.config(data)))  # ratio = saved ÷ recomputed: above 1, recomputing wins
    assert faster and slower
    text = paragraph(page, "rstd 存下来还是重算")
    assert "两者互有快慢" in text
    for rows_, word in ((faster, "快"), (level, "持平"), (slower, "慢")):
        for r in rows_:
            assert f"在 {r['label']} 上{word}" in text, (r["label"], word)


def test_eight_layer_step_words(page):
    """§6.2, the 8-layer step: ours is faster than F.rms_norm (95 % intervals disjoint); forward alone is level with
    HF eager, and the fused add with ours (intervals overlap)."""
    rows, cfg = _step_rows(), step.config(store.load("step"))
    assert cfg["tie_rule"] == "ci95_disjoint"
    assert step.faster(rows["triton"], rows["torch_rmsnorm"], cfg)
    assert step.level(rows["triton_fwd"], rows["eager"], cfg)
    assert step.level(rows["triton_fused_add"], rows["triton"], cfg)
    text = paragraph(page, "8 层的受控对比")
    assert re.search(r"比 F\.rms_norm 快 [\d.]+%（95% 区间不重叠）", text)
    assert re.search(r"只换 forward 是 [\d.]+×，与 HF eager 持平", text)
    assert "融合残差加法与本站 RMSNorm 持平（95% 区间" in text and "重叠）" in text


def test_amdahl_bound_words(page):
    """§6.2: ours takes over 90 % of the gain the Amdahl bound allows ("已接近"); torch.compile and Liger's patch beat
    the bound even at the slow end of their intervals (HF eager's fast end); compiled, ours is level with HF's."""
    rows, cfg = _step_rows(), step.config(store.load("step"))
    base, ours = rows["eager"], rows["triton"]
    assert ours["speedup"] < base["bound"] and (ours["speedup"] - 1) / (base["bound"] - 1) > 0.9
    for name in ("compile", "liger"):
        assert base["lo"] / rows[name]["hi"] > base["bound"], name
    assert step.level(rows["triton_compile"], rows["compile"], cfg)
    text = paragraph(page, "即使耗时为零")
    assert "本站实现已接近这个上限" in text
    assert "torch.compile（" in text and "Liger 全套补丁（" in text and "连 95% 区间的慢端都超过它" in text
    assert "一步与 HF 原版编译持平" in text


def test_full_model_order_words(page):
    """§6.2, the full model: Liger's patch and Liger + ours share the top tier, regional compile (with or without
    Liger's FLCE) the next, ours and quack the one after; ours alone beats the 8-layer Amdahl bound."""
    resolution = store.load("step")["config"]["resolution"]
    ok = [r for r in fullsize.rows(store.load("fullsize")) if r["status"] == "ok"]
    where = {r["contender"]: i for i, t in enumerate(fullsize.tiers(ok, resolution)) for r in t}
    full = {r["contender"]: r for r in ok}
    assert where["liger"] == where["liger_triton"] == 0
    assert where["compile"] == where["compile_liger_flce"] == 1
    assert where["triton"] == where["quack"] == 2
    assert fullsize.level(full["liger"], full["liger_triton"], resolution)
    assert fullsize.level(full["triton"], full["quack"], resolution)
    assert full["triton"]["speedup"] > _step_rows()["eager"]["bound"]
    text = paragraph(page, "**完整模型**")
    assert "并列最快，按层编译其次" in text and "与 quack 持平、再其次" in text
    assert "已超过 8 层的 Amdahl 上限" in text
    assert f"区间重叠或相差不到 {store.load('step')['config']['resolution'] * 100:.1f}% 算持平" in text


def test_host_time_words(page):
    """§6.2: ours' host-inclusive call is slower than F.rms_norm's at some shapes (beyond the timing spread), each
    host-bound (wall within host.HOST_BOUND of host); the 8-layer step is still faster (95 % intervals disjoint)."""
    data = store.load("host")
    slower = host.slower_shapes(data)
    assert slower
    ours = data["config"]["ours"]
    assert all(e["fwd_bwd"][ours]["wall_us"] / e["fwd_bwd"][ours]["host_us"] - 1 < host.HOST_BOUND for e in slower)
    rows = _step_rows()
    assert rows["triton"]["hi"] < rows["torch_rmsnorm"]["lo"]
    text = paragraph(page, "含主机时间")
    assert f"在 {host.slower_values(data)['slower_shapes']} 上慢于 F.rms_norm" in text and "受主机限制" in text
    assert "8 层的 step 里仍比它快（95% 区间不重叠）" in text


def test_programs_per_sm_words(page):
    """§7.1: each count of resident programs per SM at its own best BLOCK_ROWS and num_warps; the fastest count,
    alone within tuning.TIE, is 2 or 4; at one width several are level and the shipped config takes one of them;
    one program is slower than both 2 and 4 at every width."""
    entries = store.load("tuning")["results"]
    bests = [tuning.best_per_programs(e) for e in entries]
    level = [sorted(c for c in b if b[c] <= (1 + tuning.TIE) * min(b.values())) for b in bests]
    alone = sorted({lv[0] for lv in level if len(lv) == 1})
    ties = [(e, lv) for e, lv in zip(entries, level) if len(lv) > 1]
    assert alone == [2, 4] and len(ties) == 1
    (entry, tied), = ties
    assert entry["heuristic_bwd"]["programs_per_sm"] in tied
    assert all(b[1] > b[c] for b in bests for c in alone)
    text = paragraph(page, "每个 SM 放几个常驻 program")
    assert f"放 {' 或 '.join(map(str, alone))} 个最快" in text
    assert f"只放 1 个在全部 {len(entries)} 个行宽上都慢于这两者" in text
    assert f"{entry['width']} 宽行上 {'、'.join(map(str, tied))} 个持平" in text
    assert f"本站实现取 {entry['heuristic_bwd']['programs_per_sm']} 个" in text
