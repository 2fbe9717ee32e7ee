"""The hand-written readings of 篇 1 §五 (the other runs' GEMM rates) and 篇 2 §二, §2.5, §6.3 and §7.3.

Each reading is prose on the page with its numbers looked up from the data ({{ report.name }}). Every comparison
word in it ("选择最多", "处处慢于", "都通过", "最多差", "持平或更快", "只在 … 落后", "只有", "最差", "最高", "按前者",
"都不换边") is checked here twice: against the committed data with the tie rule of its run (rmsnorm.json's and
width_sweep.json's ratio rules, the loss gate's verdicts), and in the page's sentence as the reader sees it
(includes expanded, values put in). The word a test expects is the word the data allows, so a page that says
another fails.
"""
from __future__ import annotations


import docs_tools
from bench import store
from bench.report.names import tie


# ---------------------------------------------------------------- 篇 2 §二: the survey table's reading

def test_p2_survey_rmsnorm_has_the_most_choices():
    """"单个 RMSNorm 选择最多": more rows of the survey table fuse RMSNorm than attention (the other single op named)."""
    from bench.report import summary_p2

    fuses = [row[1] for row in summary_p2.SURVEY]
    rmsnorm = sum("RMSNorm" in f for f in fuses)
    attention = sum("注意力" in f or "attention" in f for f in fuses)
    assert rmsnorm > attention >= 1
    sentence = docs_tools.sentence(docs_tools.reader_text("triton-rmsnorm.md"), "注意力用 sdpa 或 FlashAttention", "：")
    assert "整套算子用 Liger，单个 RMSNorm 选择最多：" in sentence


# ---------------------------------------------------------------- 篇 2 §2.5: F.rms_norm's forward

def test_p2_torch_rms_norm_forward_is_slower_everywhere():
    """"处处慢于本站实现": at every forward shape of rmsnorm.json, F.rms_norm's time over ours is above the run's tie;
    the wide rows' and the 128-wide rows' spans are the values the sentence quotes."""
    from bench.report import rmsnorm

    data = store.load("rmsnorm")
    ratios = rmsnorm.torch_fwd_ratios(data)
    assert ratios and min(r["ratio"] for r in ratios) > 1 + tie(rmsnorm.config(data))
    assert {r["shape"]["width"] for r in ratios if r["shape"]["width"] <= 128} == {128}  # "128 宽的 q/k norm 行"
    v = docs_tools.values("rmsnorm")
    sentence = docs_tools.sentence(docs_tools.reader_text("triton-rmsnorm.md"), "不编译时，`F.rms_norm` 的 forward")
    assert sentence.startswith("不编译时，`F.rms_norm` 的 forward 处处慢于本站实现："), sentence
    assert f"宽行上用时是它的 {v['torch_fwd_wide']} 倍，128 宽的 q/k norm 行上是 {v['torch_fwd_narrow']} 倍" in sentence


# ---------------------------------------------------------------- 篇 2 §6.3: the loss gate

def test_p2_loss_curve_every_setting_passes():
    """"N 种精度设置都通过门限，末段 loss 与 HF 最多差 X": every setting's gate passed, and X is the largest final
    difference of ours from HF over the settings."""
    data = store.load("loss_curve")
    gates = [data["results"][v]["gate"] for v in data["config"]["variants"]]
    assert all(g["passed"] for g in gates)
    v = docs_tools.values("loss_curve")
    assert v["worst_final"] == f"{100 * max(g['final_rel_diff'] for g in gates):.2f}%"
    sentence = docs_tools.sentence(docs_tools.reader_text("triton-rmsnorm.md"), f"{v['steps']} 步训练，", "：")
    assert sentence == f"{v['steps']} 步训练，{v['settings']} 种精度设置都通过门限，末段 loss 与 HF 最多差 {v['worst_final']}：", \
        sentence


# ---------------------------------------------------------------- 篇 2 §7.3: the width sweep

def test_p2_width_sweep_reading_follows_the_tie_rule():
    """forward + backward: level or ahead (width_sweep.json's tie) at all widths but one, the one it falls behind at;
    forward: fewer widths ("只有"), and its worst width is the lowest ratio of the forward, beyond the tie."""
    from bench.report import width_sweep

    data = store.load("width_sweep")
    facts, level = width_sweep.sweep_facts(data), 1 - tie(width_sweep.config(data))
    both, fwd = facts["fwd_bwd"], facts["fwd"]
    assert len(both["behind"]) == 1 and both["level_or_ahead"] == both["compared"] - 1  # "只在 … 落后"
    assert fwd["level_or_ahead"] < both["level_or_ahead"]  # "forward 只有 N 个"
    rows = [r for r in width_sweep.per_width(data, "fwd") if r["ratio"] is not None]
    worst = min(rows, key=lambda r: r["ratio"])
    assert worst["width"] == fwd["worst"]["width"] and worst["ratio"] < level  # "最差在 H=…，是 … 的 …×"
    v = docs_tools.values("width_sweep")
    sentence = docs_tools.sentence(docs_tools.reader_text("triton-rmsnorm.md"), "forward + backward 在 " + v["fwd_bwd_level_or_ahead"])
    assert (f"forward + backward 在 {v['fwd_bwd_level_or_ahead']} 个上与最快的对比方案持平或更快（差 {v['tie']} "
            f"内算持平），只在 {v['fwd_bwd_behind']} 落后；forward 只有 {v['fwd_level_or_ahead']} 个，最差在 "
            f"{v['fwd_worst_width']}，是 {v['fwd_worst_peer']} 的 {v['fwd_worst_ratio']}。") == sentence, sentence


# ---------------------------------------------------------------- 篇 1 §五: the matmul rate is one run

def test_p1_other_runs_gemm_rates_move_no_fusion_point():
    """"只是一次运行、一个形状的中位数": another run measured a higher matmul rate; "最高": the QKV value is the fastest
    form's; "按前者算": fullsize.json's rate is the higher of the two; "都不换边": at its ridge point no fusion point
    (eager or fused) is on another side than at the roofline's own."""
    from bench.report import summary_p1

    roofline = store.load("p1_roofline")
    rates = summary_p1.other_gemm_rates(store.load("fullsize"), store.load("fusion"))
    assert max(rates.values()) > roofline["results"]["ceilings"]["matmul"]["tflops"]
    assert rates["fullsize"] >= rates["qkv"]
    assert summary_p1.side_changes(roofline, summary_p1.ridge_at(roofline, rates["fullsize"])) == []
    v = docs_tools.values("p1")
    sentence = docs_tools.sentence(docs_tools.reader_text("qwen3-fusion.md"), "矩阵乘这一行只是")
    rest = docs_tools.reader_text("qwen3-fusion.md").split(sentence, 1)[1].lstrip()
    assert sentence == (f"矩阵乘这一行只是一次运行、一个形状的中位数：篇 2 完整模型实验测到 {v['gemm_fullsize']}，"
                        f"番外二的 QKV 投影 GEMM 最高 {v['gemm_qkv']}。"), sentence
    assert rest.startswith(f"按前者算，屋脊点是 {v['gemm_top_ridge']}，下表各融合点都不换边。"), rest[:80]
