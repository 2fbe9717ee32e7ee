"""The hand-written readings of 篇 1 §3.2 and §五, 番外二 §五–§六, 番外 §六–§七 and the two methods pages (RMSNorm;
番外's torch.compile section).

Each reading is prose written on the page with its numbers looked up from the data ({{ report.name }}). Every
comparison word in it ("只省", "快于", "持平", "落后", "慢于", "多半", "大部分"...) is checked here twice: against the
committed data with the tie rule of its run (the step's disjoint 95 % intervals, an op-level run's ratio rule,
the host timing loops' spread), and in the page's sentence as the reader sees it (includes expanded, values put
in). The word a test expects is the word the data allows, so a page that says another fails.
"""
from __future__ import annotations



import docs_tools
from bench import store
from bench.report.names import TIE_RULES, tie


def _containing(page: str, anchor: str) -> str:
    """The one sentence of ``page`` (reader_text) that holds ``anchor``, from the 。 before it to the 。 after it."""
    assert page.count(anchor) == 1, f"{anchor!r} should occur exactly once on the page"
    at = page.index(anchor)
    return page[page.rfind("。", 0, at) + 1:page.index("。", at) + 1].strip()


# ---------------------------------------------------------------- 篇 1 §3.2: the profiled step

def test_p1_profiled_step_reads_as_an_upper_bound():
    """"比不开 profiler 的中位数 … 长 …": the profiled step's kernel span is beyond the unprofiled steps' p80, not only
    their median; "空隙偏宽，只能当上界": the profiled step's GPU idle time is more than the most the median
    unprofiled step can idle (its length less the same kernel time, "空等最多")."""
    from bench.report import summary_p1

    over = summary_p1.profile_overhead(store.load("p1_profile"))
    longer = over["span_ms"] > over["step_p80_ms"]
    wider = over["idle_ms"] > over["unprofiled_idle_ms"]
    v = docs_tools.values("p1")
    page = docs_tools.reader_text("qwen3-fusion.md")
    bound = docs_tools.sentence(page, "开着 profiler 时图上的空隙")
    assert bound.startswith(f"开着 profiler 时图上的空隙{'偏宽，只能当上界' if wider else '与不开时相当'}"), bound
    sentence = docs_tools.sentence(page, "图和 §3.3 的表取自同一个 step")
    assert (f"比不开 profiler 的中位数 {v['step_median']} 长 {v['profiled_extra']}" in sentence) == longer, sentence
    assert f"跨了 {v['profiled_span']}" in sentence
    assert f"GPU 空等 {v['profiled_idle']}（忙碌 {v['profiled_busy']}）" in sentence
    rest = docs_tools.sentence(page, "不开 profiler 时，同样")
    assert (f"同样 {v['kernel_time']} 的 kernel 落在 {v['step_median']} 里，空等最多 {v['unprofiled_idle']}"
            f"（忙碌 {v['unprofiled_busy']}）") in rest, rest


# ---------------------------------------------------------------- 篇 1 §五: the SwiGLU bullet

def test_p1_swiglu_saves_least_of_the_ranked_points():
    """"SwiGLU：每层 forward 只省 …": of the fusion points ranked by the time they save per layer (p20–p80
    intervals apart), SwiGLU's saving is resolved below every other ranked point's; "编译后快" needs a saving whose
    interval stays above 0."""
    from bench.report import summary_p1

    rows = {r["name"]: r for r in summary_p1.ranked(summary_p1.savings(store.load("p1_roofline")))}
    swiglu = rows["SwiGLU"]
    others = [r["rank"] for n, r in rows.items() if n != "SwiGLU" and r["rank"] is not None]
    least = swiglu["rank"] is not None and all(swiglu["rank"] > rank for rank in others)
    faster = swiglu["low_us"] > 0 and swiglu["eager_us"] > swiglu["fused_us"]
    v = docs_tools.values("p1")
    bullet = docs_tools.sentence(docs_tools.reader_text("qwen3-fusion.md"), "SwiGLU：每层 forward ")
    assert bullet.startswith(f"SwiGLU：每层 forward {'只省' if least else '省'} {v['swiglu_saved']}"), bullet
    after = docs_tools.reader_text("qwen3-fusion.md").split(bullet, 1)[1]
    assert after.lstrip().startswith(f"编译后{'快' if faster else '慢'} {v['swiglu_speedup']}，可 eager 才 "
                                     f"{v['swiglu_eager']}")


# ---------------------------------------------------------------- 番外二 §五–§六

def _fusion_rows(kernel: str):
    from bench.report import fusion

    data = store.load("fusion")
    return data, fusion.rows(data, kernel, "fwd_bwd")


def test_fusion_rmsnorm_only_tier_is_slower_at_every_shape():
    """"只打篇 2 补丁时 … 用时是本站的 X 倍": at every shape that tier's time over ours is above the tie (ours faster)."""
    data, rows = _fusion_rows("qk_rope")
    ratios = [r["ratios"]["triton_rmsnorm"] for r in rows]
    assert len(ratios) == len(rows) and min(ratios) > 1 + tie(data["config"])
    sentence = docs_tools.sentence(docs_tools.reader_text("qwen3-qk-rope-swiglu.md"), "只打篇 2 补丁时")
    assert f"用时是本站的 {docs_tools.values('fusion')['qk_fwd_bwd_triton_rmsnorm_ratio']} 倍" in sentence


def test_fusion_liger_qk_time_is_mostly_its_rmsnorm():
    """"Liger 一档多半时间花在 RMSNorm 上": Liger's RMSNorm alone on the same 128-wide rows (rmsnorm.json) takes more
    than half of Liger's QK-norm + RoPE time here; "少半" otherwise."""
    from bench.report import fusion_page

    norm = fusion_page.liger_norm_share(store.load("fusion"), store.load("rmsnorm"))
    word = "多半" if norm["share"] > 0.5 else "少半"
    v = docs_tools.values("fusion")
    sentence = docs_tools.sentence(docs_tools.reader_text("qwen3-qk-rope-swiglu.md"), "Liger 一档")
    assert sentence.startswith(f"Liger 一档{word}时间花在 RMSNorm 上"), sentence
    assert f"合计 {v['liger_norm_us']}，是这里 {v['liger_qk_us']} 的 {v['liger_norm_share']}" in sentence


def test_fusion_compiled_swiglu_reaches_past_the_copy():
    """"能超过它": torch.compile(HF)'s SwiGLU is above the copy ceiling at some shape; the sentence says so only then."""
    _, rows = _fusion_rows("swiglu")
    above = max(r["all_of_copy"]["compile_hf"] for r in rows) > 1
    sentence = docs_tools.sentence(docs_tools.reader_text("qwen3-qk-rope-swiglu.md"), "`torch.compile(HF)` 的 SwiGLU 达到拷贝上限的")
    assert docs_tools.values("fusion")["swiglu_fwd_bwd_compile_hf_of_copy"] in sentence
    assert ("能超过它" in sentence) == above, sentence


def test_fusion_step_reading_follows_the_intervals():
    """§六: the whole set and QK-norm + RoPE alone are faster than the RMSNorm-only step with disjoint 95 %
    intervals ("区间都与它不重叠"); SwiGLU alone overlaps it ("持平"), and gains less than QK-norm + RoPE ("只快")."""
    from bench.report import step_fusion
    from bench.report.step import level

    data = store.load("step_fusion")
    cfg, rows = data["config"], step_fusion.rows_by_contender(data)
    base = rows[cfg["baseline"]]

    def ahead(name):
        return rows[name]["step"] < base["step"] and not level(rows[name], base, cfg)

    sentence = docs_tools.sentence(docs_tools.reader_text("qwen3-qk-rope-swiglu.md"), "本站整套比只打 RMSNorm 补丁")
    head, _, swiglu = sentence.partition("单加 SwiGLU")
    assert ("区间都与它不重叠" in head) == (ahead(cfg["ours"]) and ahead("triton_qk_rope")), head
    assert ("持平" in swiglu) == level(rows["triton_swiglu"], base, cfg), swiglu
    assert ("只快" in swiglu) == (rows["triton_swiglu"]["step"] > rows["triton_qk_rope"]["step"]), swiglu
    v = docs_tools.values("step_fusion")
    for name in ("fusion_set_gain", "triton_qk_rope_gain", "triton_swiglu_gain"):
        assert v[name] in sentence, name


# ---------------------------------------------------------------- 番外 §六: any width

def test_fused_add_sweep_reading_follows_the_tie_rule():
    """"每个行宽上都快于不融合": unfused ÷ fused above the tie at every width; "N 个行宽持平或更快，只在 H=… 落后": the
    widths behind the fastest peer by more than the tie are exactly the one named."""
    from bench.report import fused_add_sweep

    data = store.load("fused_add_sweep")
    within = tie(data["config"])
    rows = fused_add_sweep.per_width(data, "fwd_bwd")
    every = all(r["baseline"] is not None and r["baseline"] > 1 + within for r in rows)
    behind = [r["label"] for r in rows if r["peer_ratio"] is not None and r["peer_ratio"] < 1 - within]
    v = docs_tools.values("fused_add_sweep")
    page = docs_tools.reader_text("triton-rmsnorm-fused-add.md")
    sentence = docs_tools.sentence(page, "融合版在每个行宽上")
    assert sentence.startswith("融合版在每个行宽上都快于不融合") == every, sentence
    peers = docs_tools.sentence(page, "与最快的现成实现比")
    assert behind == [v["lowest_peer_width"]], behind
    assert f"{v['level_or_ahead']} 个行宽持平或更快，只在 {v['lowest_peer_width']} 落后" in peers, peers


# ---------------------------------------------------------------- 番外 §七: the modules under torch.compile

def test_compile_reading_follows_the_tie_rule():
    """"编译也不改变它们的 GPU 时间 … 都在 2% 以内": every group's GPU-time ratio within the run's tie of 1;
    "比值有高有低": the host-inclusive ratios fall on both sides of 1; no graph break counted."""
    from bench.report import compile as report

    data = store.load("compile")
    within = tie(data["config"])
    gpu = [r["ratio"] for r in report.ratios(data, "gpu")]
    host = [r["ratio"] for r in report.ratios(data, "host")]
    v = docs_tools.values("compile")
    page = docs_tools.reader_text("triton-rmsnorm-fused-add.md")
    sentence = docs_tools.sentence(page, "编译也")
    assert len(gpu) == len(data["results"]["cases"]) * 2
    assert sentence.startswith("编译也不改变它们的 GPU 时间") == all(abs(r - 1) <= within for r in gpu), sentence
    assert f"compiled ÷ eager 为 {v['gpu_ratio']}，都在 {v['tie']} 以内" in sentence
    for case in data["results"]["cases"]:  # the shapes the sentence names by hand
        assert f"{case['rows']}×{case['width']}" in sentence, case
    assert ("有高有低" in docs_tools.sentence(page, "含主机开销单独计时")) == (min(host) < 1 < max(host))
    assert all(c.get("graph_breaks") == 0 for c in data["results"]["cases"]) and v["graph_breaks"] == "0"
    assert f"图中断 {v['graph_breaks']} 次" in page


def test_compile_methods_reading_follows_the_tie_rule():
    """The methods page, above compile.md: "编译不改变两个模块的 GPU 时间 … 都在 2% 以内" (every group's GPU-time ratio
    within the run's tie of 1, the rule of 番外 §七); "有高有低": the host-inclusive ratios fall on both sides of 1;
    "说明不了快慢": the host-inclusive time is above the GPU time in every group and spreads far wider."""
    from bench.report import compile as report

    data = store.load("compile")
    within = tie(data["config"])
    gpu = [r["ratio"] for r in report.ratios(data, "gpu")]
    host = [r["ratio"] for r in report.ratios(data, "host")]
    over, spread = report._host_spread(data)
    v = docs_tools.values("compile")
    page = docs_tools.reader_text("triton-rmsnorm-extras-methods.md")
    sentence = _containing(page, f"compiled ÷ eager 为 {v['gpu_ratio']}")
    level = all(abs(r - 1) <= within for r in gpu)
    assert sentence.startswith(f"编译{'不改变' if level else '改变了'}两个模块的 GPU 时间"), sentence
    assert (f"{v['gpu_groups']} 组的 compiled ÷ eager 为 {v['gpu_ratio']}，都在 {v['tie']} 以内" in sentence) == level
    assert v["gpu_groups"] == str(len(gpu))
    host_sentence = _containing(page, f"forward {v['host_fwd_ratio']}，forward + backward {v['host_fwd_bwd_ratio']}")
    assert ("含主机开销的比值有高有低" in host_sentence) == (min(host) < 1 < max(host)), host_sentence
    says_little = min(over) > 1 and max(spread["host"]) > 5 * max(spread["gpu"])
    assert ("说明不了快慢" in host_sentence) == says_little, host_sentence
    assert (f"用时是同组 GPU 时间的 {v['host_over_gpu']} 倍，p20–p80 区间最宽为中位数的 {v['host_spread']}"
            f"（GPU 时间不超过 {v['gpu_spread']}）") in host_sentence
    assert f"图中断 {v['graph_breaks']} 次" in page and all(c.get("graph_breaks") == 0 for c in data["results"]["cases"])


# ---------------------------------------------------------------- the methods page: host time per call

def test_host_reading_follows_the_timing_spread():
    """"在 H=1024 和 k_norm 上慢于 F.rms_norm … 只在 q_norm 上更快；H=4096 上两者的差别小于计时本身的波动": each shape's
    verdict by ``host.differ`` (a difference beyond both timing loops' spread); "主机受限": wall within 1 % of host
    at the slower shapes."""
    from bench.report import host

    data = store.load("host")
    verdict = {}
    for e in data["results"]["shapes"]:
        mine, peer = e["fwd_bwd"]["triton"], e["fwd_bwd"]["torch_rms_norm"]
        verdict[e["label"]] = ("level" if not host.differ(mine, peer)
                               else "slower" if mine["wall_us"] > peer["wall_us"] else "faster")
    page = docs_tools.reader_text("triton-rmsnorm-methods.md")
    sentence = docs_tools.sentence(page, "含主机开销时，本站 RMSNorm")
    slower = [s for s, w in verdict.items() if w == "slower"]
    assert f"在 {' 和 '.join(slower)} 上慢于 `F.rms_norm`" in sentence, (slower, sentence)
    assert f"只在 {'、'.join(s for s, w in verdict.items() if w == 'faster')} 上更快" in sentence
    level = [s for s, w in verdict.items() if w == "level"]
    assert f"{'、'.join(level)} 上两者的差别小于计时本身的波动" in sentence, level
    bound = all(e["fwd_bwd"]["triton"]["wall_us"] / e["fwd_bwd"]["triton"]["host_us"] - 1 < host.HOST_BOUND
                for e in data["results"]["shapes"] if e["label"] in slower)
    assert ("调用是主机受限的" in docs_tools.sentence(page, "慢的两处")) == bound
    assert f"慢的{['一', '两', '三', '四'][len(slower) - 1]}处" in page


def test_host_breakdown_words():
    """"大部分花在 autograd 上 … 只占": the direct forward + backward is under half of the autograd call at every
    shape; "只要 … 因此从 … 降到": the planned launch costs less than kernel[grid], and forward alone drops."""
    data = store.load("host")
    shapes = data["results"]["shapes"]
    share = [(e["ours"]["forward"]["host_us"] + e["ours"]["backward_direct"]["host_us"]) / e["fwd_bwd"]["triton"]["host_us"]
             for e in shapes]
    page = docs_tools.reader_text("triton-rmsnorm-methods.md")
    v = docs_tools.values("host")
    assert ("大部分花在 autograd 上" in docs_tools.sentence(page, "这些主机时间")) == (max(share) < 0.5)
    assert f"只占经 autograd 调用的 {v['direct_share']}" in page
    cheaper = all(e["ours"]["planned_launch"]["host_us"] < e["ours"]["one_launch"]["host_us"] and
                  e["ours"]["forward"]["host_us"] < e["ours"]["forward_usual"]["host_us"] for e in shapes)
    sentence = docs_tools.sentence(page, "Triton 的 `kernel[grid]` 发射一次")
    assert (f"只要 {v['planned_launch']}" in sentence and f"从 {v['forward_usual']} 降到 {v['forward']}" in sentence) == cheaper


def test_host_time_does_not_show_in_the_step():
    """"这笔主机开销没有显出来 … step 却比 F.rms_norm 快 …，区间不重叠": ours' extra host time per step is positive,
    yet its step is faster than F.rms_norm's with disjoint 95 % intervals."""
    from bench.report import host

    data, step = store.load("host"), store.load("step")
    cost = host.step_cost(data, step)
    hidden = cost["extra_ms"] > 0 and cost["step_ms"] < cost["peer_ms"] and cost["disjoint"]
    page = docs_tools.reader_text("triton-rmsnorm-methods.md")
    v = docs_tools.values("host")
    assert ("这笔主机开销没有显出来" in docs_tools.sentence(page, "在 GPU 受限的训练 step 里")) == hidden
    sentence = docs_tools.sentence(page, f"{v['step_layers']} 层训练 step")
    assert (f"step 却比 `F.rms_norm` 快 {v['step_gain']}，区间不重叠" in sentence) == hidden, sentence


# ---------------------------------------------------------------- the methods page: loss curve and FSDP2

def test_loss_curve_step_margin_is_small():
    """"H200 上的余量小得多 … 阈值只是后者的 N 倍": the per-step limit over ours' largest per-step difference is well
    under the CPU calibration's factor of five (the page's "五分之一"), and above 1 (the gate passed)."""
    data = store.load("loss_curve")
    cfg, res = data["config"], data["results"]
    margin = cfg["gate"]["step_rtol"] / max(res[v]["gate"]["max_rel_diff"] for v in cfg["variants"])
    page = docs_tools.reader_text("triton-rmsnorm-methods.md")
    assert "两个正确实现之间的最大逐步差只有它的五分之一" in page
    assert ("H200 上的余量小得多" in page) == (1 < margin < 5 / 2)
    v = docs_tools.values("loss_curve")
    assert f"阈值只是后者的 {v['step_margin']} 倍" in docs_tools.sentence(page, "正确的对照组逐步最多与 HF 差")


def test_fsdp2_reading():
    """"都通过了同一道 loss 门限": every gated contender ran and passed in every setting; "都比 HF 慢" / "都不比 HF 慢":
    each setting's patches against HF by the 2 % rule the run's step times use (slower beyond it / none slower
    beyond it); "时间几乎都不在矩阵运算上": the matrix work over the fastest step is under 5 % of the GPU's dense
    bf16 peak."""
    from bench.report import fsdp2
    from bench.report.names import DENSE_BF16_PEAK_TFLOPS

    data = fsdp2.current(store.load("fsdp2"))
    cfg, res, facts = fsdp2.config(data), data["results"], fsdp2.article_facts(data)
    page = docs_tools.reader_text("triton-rmsnorm-methods.md")
    passed = facts["passed"] and facts["all_gated"] and not facts["failed"]
    assert ("都通过了同一道 loss 门限" in docs_tools.sentence(page, "补丁在两卡训练里同样成立")) == passed
    within = TIE_RULES["within_2pct"].within
    sentence = docs_tools.sentence(page, "fp32 权重 + bf16 autocast 下两个补丁")
    for variant, words in (("amp", "fp32 权重 + bf16 autocast 下两个补丁"), ("bf16", "bf16 权重下")):
        hf = max(res[variant]["hf"]["median_step_ms"])
        steps = [max(res[variant][a]["median_step_ms"]) for a in cfg["gated"]]
        word = ("都比 HF 慢" if all(s > hf * (1 + within) for s in steps)
                else "都不比 HF 慢" if all(s <= hf * (1 + within) for s in steps) else "与 HF 互有快慢")
        assert f"{words}{word}" in sentence, (variant, word, sentence)
    steps = [max(res[v][a]["median_step_ms"]) for v in cfg["variants"] for a in cfg["contenders"]]
    assert 10 < min(steps) and max(steps) < 100  # "一步却要几十毫秒"
    rate = fsdp2.matrix_tflop_per_gpu(data, cfg["variants"]) / (min(steps) / 1e3)
    assert rate < 0.05 * DENSE_BF16_PEAK_TFLOPS[data["environment"]["gpu"]]
    assert "时间几乎都不在矩阵运算上" in page
