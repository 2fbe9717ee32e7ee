"""The hand-written readings of the two methods pages (docs/triton-rmsnorm-methods.md,
docs/triton-rmsnorm-extras-methods.md) that replaced the sentences bench/report/ wrote above their tables.

Each reading is prose on the page with its numbers looked up from the data ({{ report.NAME }}). Every comparison
word in it is checked here twice: against the committed data with the rule of its report (step.json's 95 %
intervals through step.level / step.faster; rmsnorm.NAIVE_FAR for the teaching kernel; the op-level runs' tie
rules through ops.by_tie; width_sweep's and fused_add_sweep's targets and misses; the FSDP2 loss gate), and in
the page's sentence as the reader sees it (includes expanded, values put in). The word a test expects is the
word the data allows, so a page that says another fails.
"""
from __future__ import annotations

import docs_tools
from bench import store
from bench.report import fsdp2, fused_add, fused_add_sweep, fusion, rmsnorm, step, width_sweep
from bench.report.names import OP_LABELS, TRAINING_LABELS, precision_zh, tie
from bench.report.ops import by_tie

P2_METHODS = "triton-rmsnorm-methods.md"
EXTRAS_METHODS = "triton-rmsnorm-extras-methods.md"


def _step_rows() -> tuple[dict, dict]:
    data = store.load("step")
    return {r["contender"]: r for r in step.contender_rows(data) if r["status"] == "ok"}, step.config(data)


# ---------------------------------------------------------------- 篇 2 methods: §六 step 实测

def test_step_time_reading():
    """"降到 … 比 F.rms_norm 快": ours' step is shorter than HF eager's and than F.rms_norm's beyond the intervals;
    "只换 forward … 与 HF eager 持平", "再融合残差加法 … 与本站 RMSNorm 持平": their intervals overlap; torch.compile,
    ours + torch.compile and Liger's patch "都比本站 RMSNorm 快，区间不重叠"."""
    rows, cfg = _step_rows()
    v = docs_tools.values("step")
    page = docs_tools.reader_text(P2_METHODS)
    sentence = docs_tools.sentence(page, "本站 RMSNorm（forward + backward）把一步从 HF eager")
    assert ("降到" in sentence) == (rows["triton"]["step"] < rows["eager"]["step"]), sentence
    said = f"比 `F.rms_norm`（{v['torch_rmsnorm_speedup']}）快 {v['triton_vs_torch']}"
    assert (said in sentence) == step.faster(rows["triton"], rows["torch_rmsnorm"], cfg), sentence
    sentence = docs_tools.sentence(page, f"只换 forward（{v['triton_fwd_speedup']}）")
    assert ("与 HF eager 持平" in sentence) == step.level(rows["triton_fwd"], rows["eager"], cfg), sentence
    sentence = docs_tools.sentence(page, f"再融合残差加法（{v['triton_fused_add_speedup']}）")
    assert ("与本站 RMSNorm 持平，区间重叠" in sentence) == step.level(rows["triton_fused_add"], rows["triton"], cfg)
    sentence = docs_tools.sentence(page, f"`torch.compile`（{v['compile_speedup']}）、本站 RMSNorm + `torch.compile`")
    quicker = all(step.faster(rows[name], rows["triton"], cfg) for name in ("compile", "triton_compile", "liger"))
    assert (f"Liger 全套补丁（{v['liger_speedup']}）都比本站 RMSNorm 快，区间不重叠" in sentence) == quicker, sentence


def test_rmsnorm_share_reading():
    """"占比降到": ours' RMSNorm share is below HF eager's; "只换 forward 反而升到": the forward-only share is above it;
    "连区间的慢端都超过这个上限": torch.compile's and Liger's speed-up, HF eager's fast end over their slow end,
    is above HF eager's Amdahl bound."""
    rows, _ = _step_rows()
    base = rows["eager"]
    v = docs_tools.values("step")
    page = docs_tools.reader_text(P2_METHODS)
    assert v["eager_bound"] == f"{base['step'] / (base['step'] - base['rms']):.3f}×"
    sentence = docs_tools.sentence(page, "换成本站 RMSNorm，占比")
    assert (f"占比降到 {v['triton_share']}" in sentence) == (rows["triton"]["share"] < base["share"]), sentence
    assert (f"只换 forward 反而升到 {v['triton_fwd_share']}" in sentence) == (rows["triton_fwd"]["share"] > base["share"])
    beyond = all(base["lo"] / rows[name]["hi"] > base["bound"] for name in ("compile", "liger"))
    sentence = docs_tools.sentence(page, f"`torch.compile`（{v['compile_speedup']}）和 Liger 全套补丁")
    assert ("连区间的慢端都超过这个上限" in sentence) == beyond, sentence


# ---------------------------------------------------------------- 篇 2 methods: the teaching kernel

def test_naive_reading():
    """The teaching kernel against ours by rmsnorm.NAIVE_FAR: forward "相差不超过" on the hidden-size rows and "慢得多"
    on the 128-wide q/k rows; forward + backward "在每个形状上都慢得多"."""
    data = store.load("rmsnorm")
    fwd, both = rmsnorm.naive_ratios(data, "fwd"), rmsnorm.naive_ratios(data, "fwd_bwd")
    close = {r["width"] > 128 for r in fwd if r["ratio"] < rmsnorm.NAIVE_FAR}
    far = {r["width"] for r in fwd if r["ratio"] >= rmsnorm.NAIVE_FAR}
    v = docs_tools.values("rmsnorm")
    page = docs_tools.reader_text(P2_METHODS)
    sentence = docs_tools.sentence(page, "forward 在 hidden 宽度的行上")
    assert (f"两者相差不超过 {v['naive_fwd_close']}" in sentence) == (close == {True}), sentence
    assert (f"在 128 宽的 q_norm、k_norm 行上教学版慢得多，用时是本站实现的 {v['naive_fwd_far']} 倍" in sentence) == \
        (far == {128}), sentence
    every = all(r["ratio"] >= rmsnorm.NAIVE_FAR for r in both)
    sentence = docs_tools.sentence(page, "forward + backward 在每个形状上")
    assert (f"都慢得多（{v['naive_fwd_bwd_far']} 倍）" in sentence) == every, sentence


# ---------------------------------------------------------------- 篇 2 methods: the width sweep

def test_width_sweep_reading():
    """Per direction: "N 个中的 M 个 … 持平或更快" by width_sweep.json's tie, "最差在 H=…，比 … 慢": the lowest peer ÷ ours,
    below 1; "不到拷贝上限 X 的有 …": the widths from ``target_from_width`` on below the direction's target."""
    data = store.load("width_sweep")
    facts, cfg = width_sweep.sweep_facts(data), width_sweep.config(data)
    v = docs_tools.values("width_sweep")
    page = docs_tools.reader_text(P2_METHODS)
    first = docs_tools.sentence(page, f"forward 在 {v['widths']} 个宽度中的")
    second = docs_tools.sentence(page, f"forward + backward 是 {v['fwd_bwd_level_or_ahead']} 个")
    for phase, sentence in (("fwd", first), ("fwd_bwd", second)):
        f = facts[phase]
        assert f["compared"] == int(v["widths"]) and v[f"{phase}_level_or_ahead"] == str(f["level_or_ahead"])
        rows = [r for r in width_sweep.per_width(data, phase) if r["ratio"] is not None]
        worst = min(rows, key=lambda r: r["ratio"])
        assert v[f"{phase}_worst_width"] == f"H={worst['width']}" and v[f"{phase}_worst_peer"] == OP_LABELS[worst["peer"]]
        said = (f"最差在 {v[f'{phase}_worst_width']}，比 {v[f'{phase}_worst_peer']} 慢 "
                f"{v.get(f'{phase}_worst_slower')}")
        assert (said in sentence) == (worst["ratio"] < 1), sentence
    assert f"持平或更快（相差 {v['tie']} 以内算持平）" in first and v["tie"] == f"{100 * tie(cfg):.0f}%"
    assert not facts["fwd"]["unsupported"]  # the reading names no width without a result
    sentence = docs_tools.sentence(page, f"宽度 ≥ {v['target_from']} 时，forward 不到")
    for phase, words in (("fwd", "forward 不到拷贝上限"), ("fwd_bwd", "forward + backward 不到")):
        misses = [r["width"] for r in width_sweep.per_width(data, phase) if r["width"] >= cfg["target_from_width"]
                  and r["ours"] is not None and r["ours"] < cfg["targets"][phase]]
        assert v[f"{phase}_misses"] == "、".join(f"H={w}" for w in misses)
        assert f"{words} {v[f'{phase}_target']} 的有 {v[f'{phase}_misses']}" in sentence, sentence
    assert v["target_from"] == str(cfg["target_from_width"])


def test_wide_forward_reading():
    """Past the chunked bound, by width_sweep.json's tie: where ours is level with the fastest peer it is
    torch.compile(HF) (Triton code from Inductor: "Inductor 生成的 Triton kernel"), where it is behind it is quack
    ("速度只有它的 … 倍"); it is ahead nowhere (the sentence names no such width)."""
    data = store.load("width_sweep")
    cfg = width_sweep.config(data)
    ahead, level, behind = by_tie(width_sweep.wide_forward(data), tie(cfg))
    v = docs_tools.values("width_sweep")
    sentence = docs_tools.sentence(docs_tools.reader_text(P2_METHODS), f"宽于 {v['wide_from']} 的行上，forward")
    said = (f"在 {v.get('wide_fwd_level')} 是 `torch.compile(HF)`（Inductor 生成的 Triton kernel），本站实现与它持平"
            f"（它的用时是本站的 {v.get('wide_fwd_level_ratio')} 倍）")
    assert (said in sentence) == (bool(level) and {r["peer"] for r in level} == {"compile_hf"}), sentence
    said = f"在 {v.get('wide_fwd_behind')} 是 quack，本站实现的速度只有它的 {v.get('wide_fwd_behind_ratio')} 倍"
    assert (said in sentence) == (bool(behind) and {r["peer"] for r in behind} == {"quack"}), sentence
    assert not ahead and "快于" not in sentence and "比它快" not in sentence


# ---------------------------------------------------------------- 篇 2 methods: FSDP2

def test_fsdp2_final_loss_reading():
    """"末段 loss 与 HF 最多相差 X（where），对照组最多 Y": X is the largest final-loss difference of a gated contender
    over both precision settings, at the setting and contender named; Y is the control's largest."""
    data = fsdp2.current(store.load("fsdp2"))
    cfg, res = fsdp2.config(data), data["results"]
    gated = [(var, a) for var in cfg["variants"] for a in cfg["gated"] if res[var][a]["status"] == "ok"]
    worst = max(gated, key=lambda va: res[va[0]][va[1]]["gate"]["final_rel_diff"])
    control = max(res[var]["control"]["gate"]["final_rel_diff"] for var in cfg["variants"])
    v = docs_tools.values("fsdp2")
    assert v["worst_final"] == f"{100 * res[worst[0]][worst[1]]['gate']['final_rel_diff']:.3f}%"
    assert v["worst_where"].startswith(precision_zh(worst[0])) and v["worst_where"].endswith(
        TRAINING_LABELS[worst[1]])
    assert v["control_final"] == f"{100 * control:.3f}%"
    sentence = docs_tools.sentence(docs_tools.reader_text(P2_METHODS), "末段 loss 与 HF 最多相差")
    assert sentence == f"末段 loss 与 HF 最多相差 {v['worst_final']}（{v['worst_where']}），对照组最多 {v['control_final']}。"


# ---------------------------------------------------------------- 番外 methods: the fused residual add

def _widths(widths) -> str:
    return "、".join(f"H={w}" for w in widths)


def test_fused_add_forward_reading():
    """The forward table by fused_add.json's tie rule (ops.by_tie): the fused kernel "持平" with the fastest peer at
    some shapes and "快" at the others, slower at none; no fusion is slower everywhere ("用时是它的 N 倍", N > 1)."""
    data = store.load("fused_add")
    cfg = fused_add.config(data)
    rows = [r for r in fused_add.vs_peers(data, "fwd") if r["ratio"] is not None]
    faster, level, slower = by_tie(rows, tie(cfg))
    v = docs_tools.values("fused_add")
    assert v.get("fwd_level") == ("、".join(r["label"] for r in level) or None)
    assert v.get("fwd_faster") == ("、".join(r["label"] for r in faster) or None)
    page = docs_tools.reader_text(EXTRAS_METHODS)
    assert f"融合版的 forward 达到拷贝上限的 {v['fwd_of_copy']}。" in page
    sentence = docs_tools.sentence(page, "与最快的对比方案相比，它在")
    assert (f"在 {v.get('fwd_level')} 上持平（相差不到 {v['tie']}）" in sentence) == bool(level), sentence
    assert (f"在 {v.get('fwd_faster')} 上快（对方用时是它的 {v.get('fwd_faster_ratio')} 倍）" in sentence) == bool(faster)
    assert not slower and "慢" not in sentence
    assert all(r["ratios"][cfg["baseline"]] > 1 + tie(cfg) for r in rows)
    sentence = docs_tools.sentence(page, "不融合（本站 RMSNorm + torch 加法）的用时是它的")
    assert f"的用时是它的 {v['fwd_unfused_ratio']} 倍" in sentence


def test_fused_add_sweep_reading():
    """forward + backward over the sweep, by fused_add_sweep.json's tie rule and target: "在全部 N 个宽度上都不慢于
    不融合", "M 个与最快的对比方案持平或更快", and how many of the widths from ``target_from_width`` on reach the share."""
    data = store.load("fused_add_sweep")
    f, cfg = fused_add_sweep.facts(data), data["config"]
    v = docs_tools.values("fused_add_sweep")
    page = docs_tools.reader_text(EXTRAS_METHODS)
    sentence = docs_tools.sentence(page, "forward + backward 里，融合版")
    every = f["no_slower_than_baseline"] == f["baseline_compared"] == len(f["widths"])
    assert (f"在全部 {v['widths']} 个宽度上都不慢于不融合" in sentence) == every, sentence
    assert v["level_or_ahead"] == str(f["level_or_ahead"]) and f["peer_compared"] == len(f["widths"])
    assert not f["no_result"]  # the reading names no width without a result
    assert f"{v['level_or_ahead']} 个与最快的对比方案持平或更快（相差 {v['tie']} 以内算持平）" in sentence
    misses = f["misses"]["of_copy"]
    assert (v["from_widths"], v["reached"]) == (str(len(f["from_width"])), str(len(f["from_width"]) - len(misses)))
    assert v["target"] == f"{100 * cfg['targets']['fwd_bwd']:.0f}%"
    sentence = docs_tools.sentence(page, f"宽度 ≥ {v['target_from']} 的 {v['from_widths']} 个宽度中")
    assert f"{v['reached']} 个达到拷贝上限的 {v['target']}" in sentence


def test_fused_add_sweep_misses_reading():
    """Each width below the share names the reasons its record gives (fused_add_sweep.reasons): a short call, no
    16-byte loads, both directions chunked; "除 … 外 … 最快的对比方案也不到": the widths where the fastest peer
    reaches the share; "只有这一条": the widths with no other reason; "落后于最快的对比方案的只有 …": one width, the
    lowest peer ÷ ours, chunked."""
    data = store.load("fused_add_sweep")
    f, cfg = fused_add_sweep.facts(data), data["config"]
    why, misses = f["reasons"], f["misses"]["of_copy"]
    short = [w for w in misses if "short_call" in why[w]]
    unaligned = [w for w in misses if "no_16_byte_loads" in why[w]]
    chunked = [w for w in misses if {"chunked_fwd", "chunked_bwd"} & set(why[w])]
    peer_only = [w for w in misses if why[w] == ["peers_below_target"]]
    peer_reaches = [w for w in misses if "peers_below_target" not in why[w]]
    assert set(short + unaligned + chunked + peer_only) == set(misses)  # every miss has its reason on the page
    v = docs_tools.values("fused_add_sweep")
    page = docs_tools.reader_text(EXTRAS_METHODS)
    assert docs_tools.sentence(page, f"没到 {v['target']} 的是") == f"没到 {v['target']} 的是 {_widths(misses)}。"
    sentence = docs_tools.sentence(page, "记录里能看出的可能原因")
    assert (f"{_widths(short)} 一次调用不到 {cfg['short_call_us']:g} µs" in sentence) == bool(short), sentence
    assert (f"{_widths(unaligned)} 的行没有 16 字节加载" in sentence) == bool(unaligned), sentence
    both = all({"chunked_fwd", "chunked_bwd"} <= set(why[w]) for w in chunked)
    assert (f"{_widths(chunked)} 的 forward 和 backward 都走分块路径" in sentence) == (bool(chunked) and both)
    sentence = docs_tools.sentence(page, f"除 {v.get('misses_peer_reaches')} 外")
    assert (f"除 {_widths(peer_reaches)} 外，这些宽度上最快的对比方案也不到 {v['target']}" in sentence) == \
        bool(peer_reaches), sentence
    assert (f"{_widths(peer_only)} 只有这一条" in sentence) == bool(peer_only), sentence
    behind, low = f["misses"]["peer"], f["lowest_peer"]
    sentence = docs_tools.sentence(page, "落后于最快的对比方案的只有")
    assert len(behind) == 1 and behind[0] == low["width"] and low["ratio"] < 1 - tie(cfg)  # "只有" one width
    assert sentence.startswith(f"落后于最快的对比方案的只有 {_widths(behind)}（{OP_LABELS[low['peer']]} ÷ 融合版为 "
                               f"{v['lowest_peer_ratio']}）")
    assert ("它走分块路径" in sentence) == ({"chunked_fwd", "chunked_bwd"} <= set(why[behind[0]])), sentence


# ---------------------------------------------------------------- 番外二 methods: the forward tables and the QKV merge

def test_fusion_forward_readings():
    """fusion.json's 2 % rule (fusion.by_peer_tie): QK-norm + RoPE's forward "快于最快的对比方案" at some shapes and
    slower than torch.compile(HF) at the others, level nowhere; SwiGLU's forward slower than the fastest peer
    ("都比 … 慢") at every shape, the peers named the fastest ones."""
    data = store.load("fusion")
    v = docs_tools.values("fusion")
    page = docs_tools.reader_text(EXTRAS_METHODS)
    qk = fusion.by_peer_tie(data, "qk_rope", "fwd")
    sentence = docs_tools.sentence(page, "QK-norm + RoPE 的 forward 达到拷贝上限的")
    assert (f"在 {v.get('qk_fwd_faster')} 上快于最快的对比方案（对方用时是本站的 {v.get('qk_fwd_faster_ratio')} 倍）"
            in sentence) == bool(qk["faster"]), sentence
    slower_than_compile = bool(qk["slower"]) and {r["peer"] for r in qk["slower"]} == {"compile_hf"}
    assert (f"在 {v.get('qk_fwd_slower')} 上比 `torch.compile(HF)` 慢 {v.get('qk_fwd_slower_by')}" in sentence) == \
        slower_than_compile, sentence
    assert not qk["level"] and "持平" not in sentence
    sw, rows = fusion.by_peer_tie(data, "swiglu", "fwd"), fusion.rows(data, "swiglu", "fwd")
    assert v["swiglu_shapes"] == str(len(rows)) and v["swiglu_fwd_slower_peers"] == " 或 ".join(
        dict.fromkeys(OP_LABELS[r["peer"]] for r in sw["slower"]))
    sentence = docs_tools.sentence(page, "SwiGLU 的 forward 达到拷贝上限的")
    every = len(sw["slower"]) == len(rows)
    assert (f"{v['swiglu_shapes']} 个形状上都比最快的对比方案（{v['swiglu_fwd_slower_peers']}）慢 "
            f"{v['swiglu_fwd_slower_by']}" in sentence) == every, sentence


def test_qkv_readings():
    """The merged QKV GEMM against the three, per phase by fusion.json's 2 % rule (fusion.gemm_by_tie): "更快",
    "两者持平" and "更慢" each name exactly the shapes of their group, and a phase without a group does not say it."""
    data = store.load("fusion")
    v = docs_tools.values("fusion")
    page = docs_tools.reader_text(EXTRAS_METHODS)
    assert v["qkv_tie"] == f"{100 * tie(data['config']):.0f}%"
    for phase, start in (("fwd", "合并后的 forward 在"), ("fwd_bwd", "合并后的 forward + backward 在")):
        groups = fusion.gemm_by_tie(data, "qkv", phase)
        sentence = docs_tools.sentence(page, start)
        for group, word in (("faster", "更快"), ("level", "两者持平"), ("slower", "更慢")):
            assert v.get(f"qkv_{phase}_{group}") == ("、".join(r["label"] for r in groups[group]) or None)
            assert (f"在 {v.get(f'qkv_{phase}_{group}')} 上{word}" in sentence) == bool(groups[group]), (phase, sentence)
            assert (word in sentence) == bool(groups[group]), (phase, word, sentence)


# ---------------------------------------------------------------- 番外三 methods: the full-size step's profile

def test_fullsize_profile_reading():
    """The set + loss's two largest buckets outside GEMM and attention are AdamW and this site's kernels;
    PyTorch's elementwise time and the launches drop from HF eager's ("从 … 降到"); the RMSNorm-only contender
    runs as many GEMM kernels as HF eager, and as many attention and AdamW kernels, yet each of those three
    buckets takes longer ("却要", "同样变长")."""
    from bench.harness import step_profile

    data = store.load("fullsize_loss", "h100-80gb-hbm3")
    profile = {name: record["profile"] for name, record in data["results"].items() if record.get("profile")}
    page = docs_tools.reader_text(EXTRAS_METHODS)
    v = docs_tools.values("fullsize_loss")
    ours = profile["fusion_set_loss"]["buckets"]
    outside = sorted((b for b in ours if b not in ("GEMM", "attention")), key=lambda b: -ours[b]["total_us"])
    assert set(outside[:2]) == {"optimizer", step_profile.OURS}
    sentence = docs_tools.sentence(page, "本站整套 + 融合 loss 这一步里")
    assert f"AdamW（{v['fusion_set_loss_adamw']}）和本站的 kernel（{v['fusion_set_loss_our_kernels']}）" in sentence
    sentence = docs_tools.sentence(page, "和 HF eager 比，PyTorch 的逐元素 kernel")
    eager, fused = profile["eager"], profile["fusion_set_loss"]
    assert "降到" in sentence and "启动次数从" in sentence
    assert fused["buckets"]["elementwise"]["total_us"] < eager["buckets"]["elementwise"]["total_us"]
    assert fused["launches"] < eager["launches"]
    sentence = docs_tools.sentence(page, "只换 RMSNorm 的一档与 HF eager")
    assert "却要" in sentence and "同样变长" in sentence, sentence
    for bucket in ("GEMM", "attention", "optimizer"):
        plain, norm_only = eager["buckets"][bucket], profile["triton"]["buckets"][bucket]
        assert plain["kernels"] == norm_only["kernels"], bucket
        assert norm_only["total_us"] > plain["total_us"], bucket


def test_step_loss_memory_reading():
    """"本站整套 + 融合 loss 的峰值显存比 Liger 全套补丁多 …": the 8-layer step's peaks, as the record has them."""
    from bench.report import step_loss

    rows = step_loss.rows_by_contender(store.load("step_loss", "h100-80gb-hbm3"))
    page = docs_tools.reader_text(EXTRAS_METHODS)
    sentence = docs_tools.sentence(page, "这一步不开激活检查点")
    assert f"多 {docs_tools.values('step_loss')['ours_extra_peak']}" in sentence
    assert rows["fusion_set_loss"]["peak"] > rows["liger"]["peak"]
