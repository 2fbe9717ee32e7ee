"""The hand-written readings of 番外二 §三–§七 (and the methods page's FMA reading) that replaced generated sentences.

Each reading is prose on the page with its numbers looked up from the data ({{ fusion.NAME }},
bench/report/fusion_page.py ``summary_values``). Every comparison word in it ("快于", "慢", "全部逐位相同",
"只有", "只快", "仍比 … 慢", "远小于", "改变了", "持平") is checked here twice: against the committed data with the
tie rule of its run (fusion.json's 2 % op-level rule; step_fusion.json's disjoint 95 % intervals and its resolution
for the QKV merge's saving; the QK probe's shares for FMA contraction), and in the page's sentence as the reader
sees it (includes expanded, values put in). The word a test expects is the word the data allows, so a page that says
another fails.
"""
from __future__ import annotations


import docs_tools
from bench import store
from bench.report import fusion, fusion_page, step_fusion
from bench.report.names import tie

PAGE = "qwen3-qk-rope-swiglu.md"


def _values() -> dict:
    return docs_tools._values_hook().load()["fusion"]


def _probe() -> dict:
    return fusion_page.probes(store.load("fusion"))[1]


# ---------------------------------------------------------------- §三: FMA contraction and the QK kernel's bits

def test_fma_reading():
    """"FMA 收缩改变了 RoPE 的舍入": with contraction on, the RoPE stage (HF's RoPE on our normed output) loses HF's bits
    and the norm alone does not; with it off the RoPE stage agrees everywhere ("关掉后 RoPE 一步全部相同");
    "只有 X … 也只有 Y": fewer than all outputs agree with it on; "剩下的差异在归一化一步就已出现": with it off what
    is left is exactly the norm stage's. The methods page says the same in its own words ("差异出在 RoPE 一步",
    "与只做归一化时一样")."""
    qk = fusion_page.probes(store.load("fusion"))[0]
    on, off = qk["fma_on"], qk["fma_off"]
    at_rope = on["rope_stage_equal"] < on["norm_only_equal"] == off["norm_only_equal"]
    changed = at_rope and off["rope_stage_equal"] == 1
    left_at_norm = off["whole_equal"] == off["norm_only_equal"] < 1
    v = _values()
    sentence = docs_tools.sentence(docs_tools.reader_text(PAGE), "FMA 收缩")
    assert sentence.startswith(f"FMA 收缩{'改变了' if changed else '没有改变'} RoPE 的舍入"), sentence
    assert (f"打开时 bf16 输出只有 {v['fma_on_whole']} 与 HF 逐位相同" in sentence) == (on["whole_equal"] < 1)
    assert (f"HF 的 RoPE 接在本站归一化之后也只有 {v['fma_on_rope']}" in sentence) == (on["rope_stage_equal"] < 1)
    assert ("关掉后 RoPE 一步全部相同" in sentence) == (off["rope_stage_equal"] == 1), sentence
    assert f"整体 {v['fma_off_whole']} 相同" in sentence
    assert ("剩下的差异在归一化一步就已出现" in sentence) == left_at_norm, sentence
    methods = docs_tools.reader_text("triton-rmsnorm-extras-methods.md")
    first = docs_tools.sentence(methods, "FMA 收缩打开时")
    assert f"只有 {v['fma_on_whole']} 与 HF 逐位相同" in first and f"也只有 {v['fma_on_rope']}" in first
    assert ("差异出在 RoPE 一步" in first) == at_rope, first
    second = docs_tools.sentence(methods, "关掉收缩后")
    assert ("RoPE 一步全部相同" in second) == (off["rope_stage_equal"] == 1), second
    assert ("与只做归一化时一样：剩下的差异在归一化一步就已出现" in second) == left_at_norm, second


# ---------------------------------------------------------------- §五: the forward + backward tables' readings

def test_qk_rope_is_faster_than_the_fastest_peer_at_every_shape():
    """"N 个形状上都快于最快的对比方案": the fastest peer's time over ours is above the run's tie at every shape."""
    data = store.load("fusion")
    rows = fusion.rows(data, "qk_rope", "fwd_bwd")
    every = all(r["peer"] and r["ratio"] > 1 + tie(data["config"]) for r in rows)
    v = _values()
    sentence = docs_tools.sentence(docs_tools.reader_text(PAGE), "QK-norm + RoPE 的 forward + backward 达到拷贝上限的")
    assert (f"{v['qk_shapes']} 个形状上都快于最快的对比方案" in sentence) == every, sentence
    assert v["qk_shapes"] == str(len(rows))
    assert f"其用时是本站的 {v['qk_fwd_bwd_best_ratio']} 倍" in sentence
    assert v["qk_fwd_bwd_of_copy"] in sentence


def test_swiglu_is_slower_than_the_fastest_peer_at_every_shape():
    """"N 个形状上却都比最快的对比方案（…）慢": the fastest peer's time over ours is below the tie at every shape,
    and the peers named are the fastest ones."""
    data = store.load("fusion")
    rows = fusion.rows(data, "swiglu", "fwd_bwd")
    every = all(r["peer"] and r["ratio"] < 1 - tie(data["config"]) for r in rows)
    v = _values()
    sentence = docs_tools.sentence(docs_tools.reader_text(PAGE), f"SwiGLU 达到拷贝上限的 {v['swiglu_fwd_bwd_of_copy']}，")
    said = (f"{v['swiglu_shapes']} 个形状上却都比最快的对比方案（{v['swiglu_fwd_bwd_best_peers']}）慢 "
            f"{v['swiglu_fwd_bwd_best_slower']}")
    assert (said in sentence) == every, sentence
    assert v["swiglu_shapes"] == str(len(rows))


def test_swiglu_probe_reading():
    """"forward 只快 X … forward 仍比 torch.compile(HF) 慢 Y": with approximate exp and division ours' forward and
    backward both get faster, but its forward stays slower than torch.compile(HF)'s (so the gain is "只")."""
    probe = fusion_page.swiglu_probe(_probe())
    v = _values()
    sentence = docs_tools.sentence(docs_tools.reader_text(PAGE), "本站慢的原因未明")
    assert probe["fwd_gain"] > 0 and probe["bwd_gain"] > 0
    assert f"（{v['swiglu_probe_width']}）" in sentence
    behind = probe["behind"] > 0
    assert (f"forward 只快 {v['swiglu_fast_fwd_gain']}" in sentence) == behind, sentence
    assert (f"forward 仍比 `torch.compile(HF)` 慢 {v['swiglu_fast_behind']}" in sentence) == behind, sentence
    assert f"backward 快 {v['swiglu_fast_bwd_gain']}" in sentence


# ---------------------------------------------------------------- §四: the SwiGLU probe's bits

def test_swiglu_bits_reading():
    """"全部逐位相同 …，torch.compile(HF) 只有 X": ours' act equals HF eager's at every element of every probed
    width; torch.compile(HF)'s does not."""
    shipped = _probe()["shipped"]
    ours = all(r["act_bits_equal"] == 1 for r in shipped.values())
    compiled = max(r["compile_act_bits_equal"] for r in shipped.values())
    v = _values()
    sentence = docs_tools.sentence(docs_tools.reader_text(PAGE), "本站的 act 与 HF eager")
    assert ("全部逐位相同" in sentence) == ours, sentence
    assert (f"`torch.compile(HF)` 只有 {v['swiglu_compile_bits']}" in sentence) == (compiled < 1), sentence
    assert v["swiglu_probe_widths"] == "、".join(f"I={w}" for w in sorted(shipped, key=int))


# ---------------------------------------------------------------- §六: ours against Liger in a training step

def test_step_pairs_are_level():
    """"三对都持平，区间都重叠": each of the run's pairs (ours against Liger's in the same place, the set against
    Liger's patch) ran and is level by the step's rule: its two 95 % intervals overlap (``step_fusion.wins`` is None)."""
    data = store.load("step_fusion")
    rows = step_fusion.rows_by_contender(data)
    pairs = data["config"]["pairs"]
    ran = all(rows[name]["status"] == "ok" for pair in pairs for name in pair)
    wins = step_fusion.wins(data)
    assert len(pairs) == 3 and ran  # "三对": the page names three pairs, all of which ran
    word = ("都持平，区间都重叠" if all(w is None for w in wins.values())
            else "都更快" if all(wins.values()) else "有快有慢")
    sentence = docs_tools.sentence(docs_tools.reader_text(PAGE), "三对")
    assert sentence.startswith(f"三对{word}"), (wins, sentence)


# ---------------------------------------------------------------- §七: the merged QKV projection

def test_qkv_reading():
    """"N 个形状中 M 个快 2% 以上": the count of shapes where merging beats three GEMMs by more than the run's tie;
    "只省 X … 远小于能分辨的 Y": the saving per step is under a fifth of what the step experiment resolves."""
    data, step = store.load("fusion"), store.load("step_fusion")
    within = tie(data["config"])
    rows = fusion.gemm_rows(data, "qkv", "fwd_bwd")
    faster = sum(r["ratio"] <= 1 - within for r in rows)
    slower = sum(r["ratio"] >= 1 + within for r in rows)
    saving = fusion_page.qkv_saving(data, step)
    v = _values()
    page = docs_tools.reader_text(PAGE)
    sentence = docs_tools.sentence(page, "合并后 forward 的用时是三个 GEMM 的")
    assert slower == 0  # no shape where the merge loses: the sentence names only the faster ones
    assert f"（{len(rows)} 个形状中 {faster} 个快 {v['qkv_tie']} 以上）" in sentence, sentence
    assert v["qkv_fwd_ratio"] in sentence and v["qkv_fwd_bwd_ratio"] in sentence
    step_sentence = docs_tools.sentence(page, f"一步训练（{v['qkv_step_model']}")
    far = saving["per_step_ms"] * 5 < saving["resolution_ms"]
    assert (f"只省 {v['qkv_step_ms']}（约 {v['qkv_step_share']}），远小于能分辨的 {v['qkv_resolution_ms']}"
            in step_sentence) == far, step_sentence
