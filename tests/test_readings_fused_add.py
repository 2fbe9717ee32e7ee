"""The hand-written readings of 番外 (the fused residual add) §二, §六 and §七 that replaced generated sentences.

Each reading is prose on the page with its numbers looked up from the data ({{ fused_add.NAME }},
{{ fused_add_sweep.NAME }}, {{ step.NAME }}, {{ fullsize.NAME }}, {{ fsdp2.NAME }}). Every comparison word in it
("才", "只有", "更快", "持平", "只占", "本就不多", "也持平", "相差小于", "反而多", "看不出", "不过", "慢于", "只在 … 更快")
is checked here twice: against the committed data with the rule the report uses (fused_add.json's 1 % op-level tie,
names.tie; the 8-layer step's disjoint 95 % intervals, step.level; the full-size run's intervals and the step run's
resolution, fullsize.level), and in the page's sentence as the reader sees it (includes expanded, values put in).
The word a test expects is the word the data allows, so a page that says another fails.
"""
from __future__ import annotations

import docs_tools
from bench import store
from bench.report import fsdp2, fullsize, fused_add, fused_add_sweep, step
from bench.report.names import DENSE_BF16_PEAK_TFLOPS, tie
from bench.report.ops import by_tie

PAGE = "triton-rmsnorm-fused-add.md"


# ---------------------------------------------------------------- §二: where the chunked path starts

def test_chunked_path_reading():
    """"从 H=… 起才选分块路径：此后测过的 N 个行宽中 forward 有 a 个分块，backward 只有 b 个（…）": the first width
    either direction chunks at, the widths measured from there on, each direction's count; "有" for a direction
    that chunks at more than half of them (not all), "只有" (its widths named) at half or fewer."""
    path = fused_add_sweep.chunked(store.load("fused_add_sweep"))
    assert path is not None
    v = docs_tools.values("fused_add_sweep")
    sentence = docs_tools.sentence(docs_tools.reader_text(PAGE), "融合版的查表从")
    wide = len(path["wide"])
    assert f"从 {v['chunked_from']} 起才选分块路径" in sentence and v["chunked_from"] == f"H={path['first']}"
    assert f"此后测过的 {v['chunked_widths']} 个行宽中" in sentence and v["chunked_widths"] == str(wide)

    def word(direction):
        n = len(path[direction])
        return "全部" if n == wide else "只有" if n <= wide // 2 else "有"

    assert word("forward") == "有" and f"forward 有 {v['chunked_fwd']} 个分块" in sentence, sentence
    assert word("backward") == "只有", sentence
    assert f"backward 只有 {v['chunked_bwd']} 个（{v['chunked_bwd_at']}）" in sentence, sentence
    assert (v["chunked_fwd"], v["chunked_bwd"]) == (str(len(path["forward"])), str(len(path["backward"])))


# ---------------------------------------------------------------- §六: the Qwen3 widths, op level

def test_fwd_bwd_reading_follows_the_tie_rule():
    """"与最快的对比方案比，a 个宽度更快，H=… 持平（相差不到 1%）": the fastest peer over ours at or above 1 + tie at
    a widths, within the tie at the named ones, and no width where ours is behind (the sentence names none)."""
    data = store.load("fused_add")
    within = tie(fused_add.config(data))
    rows = [r for r in fused_add.vs_peers(data, "fwd_bwd") if r["ratio"] is not None]
    ahead, level, behind = by_tie(rows, within)
    v = docs_tools.values("fused_add")
    sentence = docs_tools.sentence(docs_tools.reader_text(PAGE), f"Qwen3 的 {v['fwd_bwd_shapes']} 个 hidden 宽度上")
    assert not behind and ahead and level
    assert v["fwd_bwd_shapes"] == str(len(rows)) and v["tie"] == f"{100 * within:.0f}%"
    said = (f"与最快的对比方案比，{len(ahead)} 个宽度更快，{'、'.join(r['label'] for r in level)} 持平"
            f"（相差不到 {v['tie']}）")
    assert said in sentence, sentence
    assert f"达到拷贝上限的 {v['fwd_bwd_of_copy']}" in sentence


# ---------------------------------------------------------------- §六 and §七: the 8-layer step

def test_step_reading_follows_the_intervals():
    """"融合版与本站 RMSNorm 持平 … 区间重叠": the fused add's 95 % interval overlaps ours (step.level); "只占 … 能省的
    本就不多" and §七's "几乎不占分量": RMSNorm under step.SMALL_SHARE of ours' step."""
    record = store.load("step")
    cfg = step.config(record)
    ok = {r["contender"]: r for r in step.contender_rows(record) if r["status"] == "ok"}
    fused, ours = ok[step.FUSED_ADD], ok[cfg["ours"]]
    v = docs_tools.values("step")
    page = docs_tools.reader_text(PAGE)
    sentence = docs_tools.sentence(page, "换进篇 2 §六 的 8 层训练 step")
    word = ("持平" if step.level(fused, ours, cfg) else "快于" if step.faster(fused, ours, cfg) else "慢于")
    assert cfg["tie_rule"] == "ci95_disjoint"
    assert f"融合版与本站 RMSNorm {word}：{v['triton_fused_add_ms']} 对 {v['triton_ms']}，区间重叠" in sentence, sentence
    small = ours["share"] < step.SMALL_SHARE
    share = docs_tools.sentence(page, "RMSNorm 只占这一步的")
    assert (f"RMSNorm 只占这一步的 {v['triton_share']}（{v['triton_rms']}），能省的本就不多" in share) == small, share
    assert ("在一步里几乎不占分量（§六）" in page) == (small and word == "持平")


# ---------------------------------------------------------------- §六 and §七: the full-size job

def test_fullsize_reading_follows_the_resolution():
    """"完整的 36 层模型上也持平 … 相差小于能分辨的 1.7%": level by fullsize.level (intervals and the step run's
    resolution), and the medians' difference itself under the resolution; "峰值显存反而多": the fused add's peak above
    ours' by at least the 0.1 GiB the page prints, and its cause, the pairs the checkpoints kept, matching it."""
    full, resolution = store.load("fullsize"), store.load("step")["config"]["resolution"]
    ok = {r["contender"]: r for r in fullsize.rows(full) if r["status"] == "ok"}
    fused, ours = ok[fullsize.FUSED], ok[full["config"]["ours"]]
    v, s = docs_tools.values("fullsize"), docs_tools.values("step")
    page = docs_tools.reader_text(PAGE)
    sentence = docs_tools.sentence(page, f"完整的 {v['layers']} 层模型")
    assert ("上也持平" in sentence) == fullsize.level(fused, ours, resolution), sentence
    close = abs(fused["step"] / ours["step"] - 1) < resolution
    assert (f"{v['triton_fused_add_ms']} 对 {v['triton_ms']}，相差小于能分辨的 {s['resolution']}" in sentence) == close
    extra = fused["peak"] - ours["peak"]
    memory = docs_tools.sentence(page, f"峰值显存反而多 {v['fused_add_extra_peak']}（")
    assert extra >= 0.1 and f"（{v['triton_fused_add_peak']} 对 {v['triton_peak']}）" in memory, memory
    # "N 个层边界各多存 X，共 Y，与实测相符": the extra tensors the pair keeps (the count of
    # tests/test_qwen3_checkpointing.py, in fullsize.json's geometry) within 5 % of the measured extra peak
    boundary = fullsize.boundary_bytes(full)
    total = boundary["count"] * boundary["tensor"] / 2**30
    assert f"{v['boundaries']} 个层边界各多存 {v['boundary_tensor']}，共 {v['boundary_total']}" in memory, memory
    assert ("与实测相符" in memory) == (abs(total / extra - 1) < 0.05), (total, extra)
    assert "fused_add_boundary" not in full["config"]  # "那次测的补丁在层间传没加起来的两个张量": the old rule


# ---------------------------------------------------------------- §七: FSDP2 on a small model

def test_fsdp2_reading():
    """"小模型上看不出 kernel 的快慢 … 不过 X TFLOP/s，填不满 GPU": each GPU's matrix work over the fastest step of HF
    or the fused patch is under 5 % of the GPU's dense bf16 peak; the step times are the file's."""
    data = store.load("fsdp2")
    rate = fsdp2.fused_add_rate(data)
    peak = DENSE_BF16_PEAK_TFLOPS[data["environment"]["gpu"]]
    v = docs_tools.values("fsdp2")
    sentence = docs_tools.sentence(docs_tools.reader_text(PAGE), "小模型上")
    idle = rate < 0.05 * peak
    assert sentence.startswith("小模型上看不出 kernel 的快慢") == idle, sentence
    assert (f"摊到一步里不过 {v['fused_add_rate']}，填不满 GPU" in sentence) == idle, sentence
    for name in ("amp_triton_fused_add_ms", "amp_hf_ms", "bf16_triton_fused_add_ms", "bf16_hf_ms", "tflop"):
        assert v[name] in sentence, name


# ---------------------------------------------------------------- §七: Liger's fused add against no fusion

def test_liger_reading_follows_the_tie_rule():
    """"在 5 个宽度中的 a 个上慢于不融合（用时为其 … 倍），只在 H=… 上更快": Liger's time over no fusion's at or
    above 1 + tie at a widths, at or below 1 - tie only at the named ones, and none within the tie."""
    data = store.load("fused_add")
    pairs = fused_add.liger_vs_unfused(data)
    slower, level, faster = by_tie(pairs, tie(fused_add.config(data)), ratio=lambda pair: pair[1])
    v = docs_tools.values("fused_add")
    sentence = docs_tools.sentence(docs_tools.reader_text(PAGE), "而且它的 forward + backward")
    assert not level and len(slower) > len(pairs) / 2  # the sentence names no level width, and most are slower
    said = (f"在 {len(pairs)} 个宽度中的 {len(slower)} 个上慢于不融合（用时为其 {v['liger_slower_ratio']} 倍），"
            f"只在 {'、'.join(label for label, _ in faster)} 上更快")
    assert said in sentence, sentence
    assert v["fwd_bwd_shapes"] == str(len(pairs)) and v["liger_slower"] == str(len(slower))
