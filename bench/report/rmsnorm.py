"""rmsnorm.json -> 篇2 §四 §五's op-level tables and the bandwidth plot: every contender side by side."""
from __future__ import annotations

import re

from bench.report import prose, tables
from bench.report.names import LIGER_NOT_IN_PLACE, OP_LABELS, PHASES, tie
from bench.report.ops import (bandwidth_bars, ceiling_text, compare_sentence, copy_ceiling, fastest_peer,
                              forward_shapes, rows_caption, shape_label, size)

NAME = "rmsnorm"
# What the runs before the experiment recorded these used (bench/exp_rmsnorm.py then): ours, the peers it is
# compared with (data files from before quack have no "quack"), the tie rule of its comparisons.
BEFORE_RECORDED = {"ours": "triton", "peers": ["hf", "torch_rms_norm", "compile_hf", "liger", "quack"],
                   "tie_rule": "within_1pct"}


def config(data) -> dict:
    """The run's config, with what a file from before a key was recorded used in its place."""
    return BEFORE_RECORDED | data["config"]


def shapes_of(data, phase) -> list[dict]:
    """The shapes a table of ``phase`` shows: a forward table leaves out a shape that repeats another's
    forward with only its dy laid out otherwise (ops.forward_shapes)."""
    shapes = data["results"]["shapes"]
    return forward_shapes(shapes) if phase == "fwd" else shapes


def vs_best_peer(data, phase) -> list[dict]:
    """Per shape of ``phase``: ours, the fastest peer (HF, F.rms_norm, compile, Liger, quack) and peer ÷ ours."""
    cfg, res = config(data), data["results"]
    copy = copy_ceiling(res)["gbps"]
    out = []
    for s in shapes_of(data, phase):
        ours = s[phase][cfg["ours"]]
        peers, best = fastest_peer(s[phase], cfg["peers"])
        out.append({"label": shape_label(s), "ours_us": ours["median_us"], "of_copy": ours["gbps"] / copy,
                    "peer": best, "peer_us": peers[best], "ratio": peers[best] / ours["median_us"],
                    "hf_ratio": peers["hf"] / ours["median_us"] if "hf" in peers else None})
    return out


def compare(data, rows, **words) -> str:
    """ops.compare_sentence with the run's tie rule."""
    return compare_sentence(rows, tie(config(data)), **words)


def _table(data, phase):
    rows = vs_best_peer(data, phase)
    f = tables.fmt
    body = [[r["label"], f(r["ours_us"]), prose.pct(r["of_copy"]), OP_LABELS[r["peer"]], f(r["peer_us"]), prose.times(r["ratio"])]
            for r in rows]
    table = tables.md_table(["形状", "本站实现（µs）", "占拷贝上限", "最快的对比方案", "对比方案（µs）", "对比方案 ÷ 本站实现"], body, "lrrlrr")
    moved = "读 x、写 y" if phase == "fwd" else "forward 读 x、写 y，backward 读 x 和 dy、写 dx"
    caption = (f"bf16，{rows_caption(shapes_of(data, phase))}。时间为每次调用的 GPU 时间：CUDA graph 重放、"
               f"轮换输入（不复用 L2）的中位数。字节按最少计（{moved}）；拷贝上限为{ceiling_text(data['results'])}。")
    if phase == "fwd_bwd" and config(data).get("liger_in_place") is False:
        caption += LIGER_NOT_IN_PLACE
    return prose.page(table, caption)  # the reading above the table is the page's (values())


def _contender_table(data, phase, caption):
    """One column per contender in the data (6 columns at most: with quack's, HF eager's goes and the
    caption says how much slower it was)."""
    cfg, shapes = config(data), shapes_of(data, phase)
    ours = cfg["ours"]
    names = [n for n in cfg["peers"] + [ours] if any(n in s[phase] for s in shapes)]
    dropped = ""
    if len(names) > 5:
        names.remove("hf")
        ratios = [s[phase]["hf"]["median_us"] / s[phase][ours]["median_us"] for s in shapes
                  if "hf" in s[phase] and ours in s[phase]]
        dropped = f"HF eager 未列出（用时是本站实现的 {prose.times_span(ratios, 1)} 倍）。" if ratios else ""
    body = [[shape_label(s)] + [tables.fmt(s[phase][n]["median_us"]) if n in s[phase] else "—" for n in names]
            for s in shapes]
    table = tables.md_table(["形状"] + [OP_LABELS[n] for n in names], body)
    return prose.page(table, caption + f"bf16，{rows_caption(shapes)}。{dropped}")


def _all_table(data, phase):
    return _contender_table(data, phase, f"{PHASES[phase]} 每次调用的 GPU 时间（µs）：CUDA graph 重放、轮换输入"
                                         "（不复用 L2）的中位数；")


def _eager_table(data):
    return _contender_table(data, "fwd_bwd_eager", "forward + backward 每次 eager 调用的时间（µs）："
                            "triton.testing.do_bench 中位数，调用间清空 L2，含主机开销（Python、autograd、kernel 启动）；")


def _naive_table(data):
    ours, shapes = config(data)["ours"], data["results"]["shapes"]
    f = tables.fmt
    body = [[shape_label(s), f(s["fwd"]["naive"]["median_us"]), f(s["fwd"][ours]["median_us"]),
             f(s["fwd_bwd"]["naive"]["median_us"]), f(s["fwd_bwd"][ours]["median_us"])] for s in shapes]
    table = tables.md_table(["形状", "教学版 forward（µs）", "本站实现 forward（µs）", "教学版 fwd+bwd（µs）",
                             "本站实现 fwd+bwd（µs）"], body)
    caption = (f"bf16，{rows_caption(shapes)}。每次调用的 GPU 时间：CUDA graph 重放、轮换输入（不复用 L2）的中位数。")
    return prose.page(table, caption)  # the methods page reads it by hand (values(): naive_*)


# The teaching kernel is "much slower" (慢得多) than ours at a shape where it takes at least this many times ours'
# time; below it, the methods page gives the largest difference.
NAIVE_FAR = 1.5


def naive_ratios(data, phase) -> list[dict]:
    """Per shape: the teaching kernel's time over ours ({"label", "width", "ratio"})."""
    ours = config(data)["ours"]
    return [{"label": shape_label(s), "width": s["width"],
             "ratio": s[phase]["naive"]["median_us"] / s[phase][ours]["median_us"]} for s in data["results"]["shapes"]]


def naive_values(data) -> dict[str, str]:
    """Per phase: the largest difference where the teaching kernel is within NAIVE_FAR of ours (``naive_<phase>_close``)
    and its time over ours where it is much slower (``naive_<phase>_far``)."""
    out = {}
    for phase in ("fwd", "fwd_bwd"):
        rows = naive_ratios(data, phase)
        close = [r["ratio"] for r in rows if r["ratio"] < NAIVE_FAR]
        far = [r["ratio"] for r in rows if r["ratio"] >= NAIVE_FAR]
        if close:
            out[f"naive_{phase}_close"] = prose.pct(max(abs(r - 1) for r in close), 1)
        if far:
            out[f"naive_{phase}_far"] = prose.times_span(far, 1)
    return out


def copy_candidates(res) -> list[dict]:
    """The copies ``copy_ceiling`` chooses from, grouped as the methods page lists them."""
    large = res["copy"]
    graph_timed = "calls_per_graph" in large
    out = [{"name": "大块拷贝", "bytes": size(large["bytes"]), "timer": "CUDA graph 重放" if graph_timed else "eager（do_bench）",
            "gbps": [large["gbps"]]}]
    if "eager" in large:
        out.append({"name": "大块拷贝", "bytes": size(large["bytes"]), "timer": "eager（do_bench）",
                    "gbps": [large["eager"]["gbps"]]})
    same = [s for s in res["shapes"] if graph_timed and "calls_per_graph" in s["copy_same_bytes"]]
    if same:
        out.append({"name": f"与各形状 forward 同字节的拷贝（{len(same)} 个）",
                    "bytes": prose.span((s["bytes_fwd"] for s in same), size), "timer": "CUDA graph 重放",
                    "gbps": [s["copy_same_bytes"]["gbps"] for s in same]})
    return out


def _copy_table(data):
    res = data["results"]
    ceiling = copy_ceiling(res)["gbps"]
    body = [[c["name"], c["bytes"], c["timer"], prose.span(c["gbps"], lambda v: f"{v:,.0f}"),
             "是" if ceiling in c["gbps"] else "—"] for c in copy_candidates(res)]
    table = tables.md_table(["候选", "字节", "计时方式", "带宽（GB/s）", "作为拷贝上限"], body, "lllrl")
    caption = ("设备内拷贝 dst.copy_(src)，带宽 = 读 + 写的字节 ÷ 时间；拷贝上限取本次运行测得最快的一次，"
               "各表的「占拷贝上限」都以它为分母。")
    return prose.page(table, caption)


def _same_size_table(data):
    ours, shapes = config(data)["ours"], data["results"]["shapes"]
    if not all("calls_per_graph" in s["copy_same_bytes"] for s in shapes):
        return None  # only comparable when the copy was timed like the kernels
    body = [[shape_label(s), f"{s['bytes_fwd'] / 1e6:.0f}", f"{s['copy_same_bytes']['gbps']:,.0f}",
             f"{s['fwd'][ours]['gbps']:,.0f}", prose.pct(s["fwd"][ours]["gbps"] / s["copy_same_bytes"]["gbps"])]
            for s in shapes]
    table = tables.md_table(["形状", "字节（MB）", "同字节拷贝（GB/s）", "本站实现 forward（GB/s）",
                             "本站实现 forward 占同字节拷贝"], body)
    caption = (f"同字节拷贝：把 x 拷贝一次，读写的字节与 forward 相同，与 kernel 一样在 CUDA graph 里计时；"
               f"bf16，{rows_caption(shapes)}。")
    return prose.page(table, caption)


def _rstd_table(data):
    entries = data["results"]["rstd"]
    body = [[shape_label(r), tables.fmt(r["saved_us"]), tables.fmt(r["recomputed_us"]),
             prose.times(r["recomputed_us"] / r["saved_us"]), f"{r['rstd_bytes'] / 2**20:.2f}"] for r in entries]
    table = tables.md_table(["形状", "保存 rstd（µs）", "重算 rstd（µs）", "重算 ÷ 保存", "rstd 显存（MiB）"], body)
    caption = (f"只计 backward：CUDA graph 重放的 GPU 时间中位数；rstd 每行一个 fp32。bf16，{rows_caption(entries)}。")
    return prose.page(table, caption)


def render(data: dict) -> dict[str, str]:
    out = {
        "rmsnorm_fwd.md": _table(data, "fwd"),
        "rmsnorm_fwdbwd.md": _table(data, "fwd_bwd"),
        "rmsnorm_fwd_all.md": _all_table(data, "fwd"),
        "rmsnorm_fwdbwd_all.md": _all_table(data, "fwd_bwd"),
        "rmsnorm_naive.md": _naive_table(data),
        "rmsnorm_copy.md": _copy_table(data),
        "rmsnorm_same_size.md": _same_size_table(data),
        "rmsnorm_rstd.md": _rstd_table(data),
        "rmsnorm_eager.md": _eager_table(data),
        "rmsnorm_bandwidth.svg": bandwidth_bars(data, data["config"]["contenders"], "RMSNorm"),
    }
    return {name: text for name, text in out.items() if text is not None}


def rstd_changes(data) -> dict[str, float]:
    """{shape label: recomputing rstd's backward time over saving it, minus 1} (above 0: recomputing is slower)."""
    return {shape_label(r): r["recomputed_us"] / r["saved_us"] - 1 for r in data["results"].get("rstd") or []}


def torch_fwd_ratios(data) -> list[dict]:
    """篇 2 §2.5: per forward shape, F.rms_norm's time over ours ({"shape", "ratio"}), uncompiled."""
    ours = config(data)["ours"]
    return [{"shape": s, "ratio": s["fwd"]["torch_rms_norm"]["median_us"] / s["fwd"][ours]["median_us"]}
            for s in shapes_of(data, "fwd")]


def value_key(label: str) -> str:
    """'H=1024' -> 'h1024', 'q_norm' -> 'q_norm': a shape label as part of a value's name."""
    return re.sub(r"[^a-z0-9_]", "", label.lower())


def values(data: dict) -> dict[str, str]:
    """{{ rmsnorm.NAME }}: ours against the fastest peer per phase, the H=4096 row 篇 2's §八 quotes, the run's tie
    rule, recomputing rstd against saving it (篇 2 §5.4: each shape's difference and the largest), and the teaching
    kernel against ours (the methods page: naive_values)."""
    ours = config(data)["ours"]
    out = {"tie": prose.pct(tie(config(data)))} | naive_values(data)
    changes = rstd_changes(data)
    for label, change in changes.items():
        out[f"rstd_{value_key(label)}"] = prose.pct(abs(change), 1)
    if changes:
        out["rstd_spread"] = prose.pct(max(abs(c) for c in changes.values()), 1)
    for phase in ("fwd", "fwd_bwd"):
        rows = vs_best_peer(data, phase)
        out[f"{phase}_shapes"] = str(len(rows))
        out[f"{phase}_of_copy"] = prose.pct_span(r["of_copy"] for r in rows)
        out[f"{phase}_peer_ratio"] = prose.times_span(r["ratio"] for r in rows)
        out[f"{phase}_worst"] = prose.pct(max(1 / r["ratio"] - 1 for r in rows))
    both = {r["label"]: r for r in vs_best_peer(data, "fwd_bwd")}
    out["h4096_us"] = f"{tables.fmt(both['H=4096']['ours_us'])} µs"
    out["h4096_hf_ratio"] = f"{both['H=4096']['hf_ratio']:.1f}"
    out["transposed_ratio"] = f"{max(r['ratio'] for r in both.values()):.2f}"
    ratios = torch_fwd_ratios(data)  # §2.5: F.rms_norm's forward over ours, Qwen3's wide rows and the q/k-norm rows
    narrow = [r for r in ratios if r["shape"]["width"] <= 128]
    out["torch_fwd_wide"] = prose.times_span((r["ratio"] for r in ratios if r["shape"]["width"] > 128), 1)
    out["torch_fwd_narrow"] = prose.times_span((r["ratio"] for r in narrow), 1)
    if narrow:
        q = max(narrow, key=lambda r: r["shape"]["rows"])["shape"]
        out["torch_fwd_q_shape"] = f"{q['rows']}×{q['width']}"
        out["torch_fwd_q_us"] = f"{tables.fmt(q['fwd']['torch_rms_norm']['median_us'])} µs"
        out["ours_fwd_q_us"] = f"{tables.fmt(q['fwd'][ours]['median_us'])} µs"
    return out
