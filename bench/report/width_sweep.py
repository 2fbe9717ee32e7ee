"""width_sweep.json -> 篇2 §七's RMSNorm at every hidden size: the bucket table, the plots, and the numbers of the article's
and the methods page's hand-written readings (``values``: {{ width_sweep.NAME }}; their words:
tests/test_readings_p1p2.py, tests/test_readings_methods.py)."""
from __future__ import annotations

import math

from bench.report import plots, prose, tables
from bench.report.names import COLOURS, LIGER_NOT_IN_PLACE, OP_LABELS, PHASES, tie
from bench.report.ops import by_tie, copy_ceiling, fastest_peer

NAME = "width_sweep"
# What the runs before the experiment recorded these used (bench/exp_width_sweep.py then): ours and its
# peers, the tie rule, the targets (share of the copy ceiling at widths >= target_from_width), and the width
# above which the backward takes the chunked kernels (rmsnorm_triton.backward_config).
BEFORE_RECORDED = {"ours": "triton", "peers": ["torch_rms_norm", "compile_hf", "liger", "quack"],
                   "tie_rule": "within_2pct", "targets": {"fwd": 0.85, "fwd_bwd": 0.75}, "target_from_width": 1024,
                   "chunked_backward_above": 12288}


def config(data) -> dict:
    """The run's config, with what a file from before a key was recorded used in its place."""
    return BEFORE_RECORDED | data["config"]


BUCKETS = [(256, 1023), (1024, 2047), (2048, 4095), (4096, 8191), (8192, 16384), (16385, None)]


def sweep_ceiling(res) -> dict:
    """The run's 4 GiB copy, the faster of its two timings (ops.copy_ceiling without the
    same-size copies): a same-size copy is timed on one buffer pair, and below 4x L2 (about 200 MB,
    widths under ~3000) it runs from L2, up to 5.5 TB/s on the H200, which is no ceiling for a
    kernel whose inputs rotate out of L2."""
    return copy_ceiling({**res, "shapes": []})


def per_width(data, phase) -> list[dict]:
    """Per width: ours' and the best peer's share of the copy ceiling, peer ÷ ours (None where one is missing)."""
    cfg, res = config(data), data["results"]
    ceiling = sweep_ceiling(res)["gbps"]
    out = []
    for s in res["shapes"]:
        times = s[phase]
        peers, best = fastest_peer(times, cfg["peers"])
        ours = times.get(cfg["ours"])
        out.append({"width": s["width"], "label": s["label"], "model": s.get("model"),
                    "ours": ours["gbps"] / ceiling if ours else None,
                    "peer": best, "best_peer": times[best]["gbps"] / ceiling if best else None,
                    "ratio": peers[best] / ours["median_us"] if ours and best else None,
                    "error": s["errors"].get(cfg["ours"])})
    return out


def sweep_facts(data) -> dict:
    """What the closing note and the article say about the sweep, from the data.

    ``{"widths", "ceiling_gbps", "skipped": {name: reason}, "fwd": {...}, "fwd_bwd": {...}}``; per direction:
    ``compared`` (widths with ours and a peer), ``level_or_ahead`` (peer ÷ ours >= 1 - the tie), ``behind``
    (widths, slowest first), ``worst`` ({"width", "ratio", "peer"}: lowest peer ÷ ours, or None),
    ``of_copy`` ([lowest, highest] share of ours), ``target`` and ``misses`` (widths >= target_from_width
    where ours is below the target share), ``unsupported`` (widths where ours raised).
    """
    out = {"widths": len(data["results"]["shapes"]), "ceiling_gbps": sweep_ceiling(data["results"])["gbps"],
           "skipped": dict(data["results"].get("skipped", {}))}
    cfg = config(data)
    level = 1 - tie(cfg)
    for phase, target in cfg["targets"].items():
        rows = per_width(data, phase)
        compared = [r for r in rows if r["ratio"] is not None]
        worst = min(compared, key=lambda r: r["ratio"], default=None)
        shares = [r["ours"] for r in rows if r["ours"] is not None]
        out[phase] = {
            "compared": len(compared),
            "level_or_ahead": sum(r["ratio"] >= level for r in compared),
            "behind": [r["width"] for r in sorted(compared, key=lambda r: r["ratio"]) if r["ratio"] < level],
            "worst": {"width": worst["width"], "ratio": worst["ratio"], "peer": worst["peer"]} if worst else None,
            "of_copy": [min(shares), max(shares)] if shares else None,
            "target": target,
            "misses": [r["width"] for r in rows if r["width"] >= cfg["target_from_width"] and r["ours"] is not None
                       and r["ours"] < target],
            "unsupported": [r["width"] for r in rows if r["ours"] is None],
        }
    return out


def _share_span(values) -> str:
    values = [v for v in values if v is not None]
    return prose.pct_span(values) if values else "—"


def _bucket_table(data) -> str:
    fwd, both = per_width(data, "fwd"), per_width(data, "fwd_bwd")
    body = []
    for low, high in BUCKETS:
        inside = [i for i, r in enumerate(fwd) if r["width"] >= low and (high is None or r["width"] <= high)]
        if not inside:
            continue
        worst = []
        for rows in (fwd, both):
            compared = [rows[i] for i in inside if rows[i]["ratio"] is not None]
            worst += [min(compared, key=lambda r: r["ratio"])] if compared else []
        low_one = min(worst, key=lambda r: r["ratio"]) if worst else None
        body.append([f"{low}–{high}" if high else f"> {low - 1}", f"{len(inside)}",
                     f"{_share_span(fwd[i]['ours'] for i in inside)}（{_share_span(fwd[i]['best_peer'] for i in inside)}）",
                     f"{_share_span(both[i]['ours'] for i in inside)}（{_share_span(both[i]['best_peer'] for i in inside)}）",
                     f"{low_one['label']}（{prose.times(low_one['ratio'])}）" if low_one else "—"])
    table = tables.md_table(["宽度区间", "宽度数", "forward 占拷贝上限：本站实现（最快的对比方案）",
                             "fwd+bwd 占拷贝上限：本站实现（最快的对比方案）", "最差宽度（对比方案 ÷ 本站实现）"], body, "lrrrl")
    return prose.page(table, caption(data))  # read by hand on the methods page (values())


def caption(data) -> str:
    res, cfg = data["results"], config(data)
    skipped = res.get("skipped", {})
    text = (f"{tables.dtype_short(cfg['dtype'])}，每个宽度 {cfg['rows']} 行，共 {len(res['shapes'])} 个宽度。"
            f"每次调用的 GPU 时间：CUDA graph 重放、轮换输入（不复用 L2）的中位数；字节按最少计；拷贝上限为本次运行"
            f"测得最快的 4 GiB 设备内拷贝，{sweep_ceiling(res)['gbps']:,.0f} GB/s。最快的对比方案："
            f"{prose.join(OP_LABELS.get(n, n) for n in cfg['peers'])} 中每个宽度最快的一个；"
            "最差宽度取两个方向里对比方案 ÷ 本站实现最小的一次。")
    if skipped:
        text += f"未测：{prose.join(OP_LABELS.get(n, n) for n in skipped)}（在本机不能运行）。"
    if cfg.get("liger_in_place") is False and "liger" in cfg["peers"]:
        text += LIGER_NOT_IN_PLACE
    return text


WIDTH_TICKS = (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536)


def _width_axis(ax, widths, label=True):
    """log2 width axis with the powers of two as plain numbers."""
    ax.set_xscale("log", base=2)
    ticks = [w for w in WIDTH_TICKS if min(widths) <= w <= max(widths)]
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    if label:
        ax.set_xlabel("隐藏维度 H（列数，对数坐标）")


def worst(data) -> dict | None:
    """The lowest peer ÷ ours of the sweep in either direction: {"phase", "width", "ratio", "peer"}, or None."""
    facts = sweep_facts(data)
    found = [dict(facts[phase]["worst"], phase=phase) for phase in config(data)["targets"] if facts[phase]["worst"]]
    return min(found, key=lambda w: w["ratio"], default=None)


PHASE_LINES = {"fwd": "-", "fwd_bwd": "--"}  # the ratio plot: one line per direction, the best peer by colour
PHASE_MARKERS = {"fwd": "o", "fwd_bwd": "s"}


def _ratio_plot(data) -> str:
    """篇2 §七's plot: the fastest peer's time ÷ ours against width (log2), one line per direction, each point
    in the colour of the peer that was fastest there; 1.0 and the run's tie band; the worst point named."""
    plt = plots.plot_style()
    cfg = config(data)
    level = tie(cfg)
    fig, ax = plt.subplots(figsize=(plots.FIGURE_WIDTH, 3.3))
    widths = [s["width"] for s in data["results"]["shapes"]]
    ax.axhspan(1 - level, 1 + level, color="#BBBBBB", alpha=0.35, linewidth=0)
    ax.axhline(1, color="#888888", linewidth=1)
    handles, labels, peers = [], [], []
    for phase in cfg["targets"]:
        rows = [r for r in per_width(data, phase) if r["ratio"] is not None]
        line, = ax.plot([r["width"] for r in rows], [r["ratio"] for r in rows], color="#666666", linewidth=1.2,
                        linestyle=PHASE_LINES[phase], zorder=2)
        for r in rows:
            ax.scatter(r["width"], r["ratio"], s=22, marker=PHASE_MARKERS[phase], color=COLOURS[r["peer"]], zorder=3,
                       linewidths=0)
            peers += [r["peer"]] if r["peer"] not in peers else []
        handles.append(plt.Line2D([], [], color="#666666", linestyle=PHASE_LINES[phase], marker=PHASE_MARKERS[phase],
                                  markersize=5, markerfacecolor="#666666", markeredgewidth=0))
        labels.append(PHASES[phase])
    handles.append(plt.Rectangle((0, 0), 1, 1, facecolor="#BBBBBB", alpha=0.5))
    labels.append(f"持平（相差 {prose.pct(level)} 以内）")
    for peer in [n for n in cfg["peers"] if n in peers]:
        handles.append(plt.Line2D([], [], linestyle="none", marker="o", markersize=6, color=COLOURS[peer]))
        labels.append(f"最快的对比方案：{OP_LABELS.get(peer, peer)}")
    _width_axis(ax, widths)
    low = worst(data)
    if low:  # named below the point, inside the axes: room under it, the label on the side with more space
        bottom, top = ax.get_ylim()
        ax.set_ylim(min(bottom, low["ratio"] - 0.12), top)
        right_half = math.log2(low["width"]) > (math.log2(min(widths)) + math.log2(max(widths))) / 2
        ax.annotate(f"最差：{PHASES[low['phase']]}，H={low['width']}，{prose.times(low['ratio'])}",
                    (low["width"], low["ratio"]), textcoords="offset points", xytext=(-10 if right_half else 10, -14),
                    ha="right" if right_half else "left", va="top", fontsize=plots.SMALL,
                    arrowprops={"arrowstyle": "-", "color": "#666666", "linewidth": 0.8})
    ax.set_ylabel("用时比：最快的对比方案 ÷ 本站")
    ax.set_title(f"高于 1：本站实现更快；{tables.dtype_short(cfg['dtype'])}，每个宽度 {cfg['rows']} 行", loc="left")
    ax.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.2), ncol=4, handlelength=1.6,
              columnspacing=1.2)
    return plots.svg_of(fig)


def _all_plot(data) -> str:
    """The methods page's plot: % of the copy ceiling vs width (log2 axis), one line per contender; forward
    above, forward + backward below, each direction's target from the run's config."""
    plt = plots.plot_style()
    res = data["results"]
    shapes = res["shapes"]
    ceiling = sweep_ceiling(res)["gbps"]
    widths = [s["width"] for s in shapes]
    fig, axes = plt.subplots(2, 1, figsize=(plots.FIGURE_WIDTH, 4.2), sharex=True, gridspec_kw={"hspace": 0.3})
    cfg = config(data)
    names = [n for n in cfg["contenders"] if any(n in s["fwd"] or n in s["fwd_bwd"] for s in shapes)]
    for ax, phase in zip(axes, ("fwd", "fwd_bwd")):
        for name in names:
            values = [100 * s[phase][name]["gbps"] / ceiling if name in s[phase] else math.nan for s in shapes]
            ax.plot(widths, values, marker="o", markersize=2.5, linewidth=2.0 if name == cfg["ours"] else 1.0,
                    label=OP_LABELS.get(name, name), color=COLOURS[name],
                    zorder=3 if name == cfg["ours"] else 2)
        ax.axhline(100, color="#D98F92", linestyle="--", linewidth=1.2)
        target = cfg["targets"][phase]
        ax.axhline(100 * target, color="#999999", linestyle=":", linewidth=1)
        ax.set_ylim(0, 112)
        ax.set_yticks(range(0, 101, 20))
        ax.set_title(f"RMSNorm {PHASES[phase]}，{tables.dtype_short(cfg['dtype'])}，{cfg['rows']} 行；"
                     f"点线：{prose.pct(target)}（H ≥ {cfg['target_from_width']}）", loc="left")
    _width_axis(axes[0], widths, label=False)
    _width_axis(axes[1], widths)
    fig.supylabel("有效带宽（占拷贝上限 %）", x=0.05, fontsize=10)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", bbox_to_anchor=(0.5, 0.96),
               ncol=len(names), handlelength=1.4, columnspacing=1.0)
    return plots.svg_of(fig)


def wide_forward(data) -> list[dict]:
    """The forward past the chunked bound: per_width's rows wider than ``chunked_backward_above`` with a ratio."""
    bound = config(data)["chunked_backward_above"]
    return [r for r in per_width(data, "fwd") if r["width"] > bound and r["ratio"] is not None]


def render(data: dict) -> dict[str, str]:
    return {"width_sweep.md": _bucket_table(data), "width_sweep.svg": _ratio_plot(data),
            "width_sweep_all.svg": _all_plot(data)}


def values(data: dict) -> dict[str, str]:
    """{{ width_sweep.NAME }}: 篇 2 §7.3's reading of the sweep: the widths, per direction how many are level with or
    ahead of the fastest peer (the run's tie), the worst point of either direction (its width, peer and ratio), the
    other direction's worst, and the widths where the forward + backward falls behind."""
    facts, cfg = sweep_facts(data), config(data)
    widths = [s["width"] for s in data["results"]["shapes"]]
    out = {"widths": str(len(widths)), "lo": str(min(widths)), "hi": str(max(widths)), "tie": prose.pct(tie(cfg))}
    for phase in cfg["targets"]:
        f = facts[phase]
        out[f"{phase}_level_or_ahead"] = str(f["level_or_ahead"])
        if f["worst"]:
            out[f"{phase}_worst_width"] = f"H={f['worst']['width']}"
            out[f"{phase}_worst_peer"] = OP_LABELS[f["worst"]["peer"]]
            out[f"{phase}_worst_ratio"] = f"{f['worst']['ratio']:.2f}×"
        out[f"{phase}_behind"] = prose.join(f"H={w}" for w in sorted(f["behind"]))
    return out | reading_values(data)


def reading_values(data: dict) -> dict[str, str]:
    """The methods page's reading of the bucket table and of the wide forward: per direction how far behind its
    worst width is (``<phase>_worst_slower``, when it is behind), the share of the copy ceiling it is held to from
    ``target_from`` on and the widths below it (``<phase>_misses``); past the chunked bound (``wide_from``), the
    widths where ours' forward is ahead of, level with or behind the fastest peer under the run's tie
    (``wide_fwd_<ahead|level|behind>``), each group's peer time ÷ ours (``…_ratio``) and fastest peers (``…_peers``)."""
    facts, cfg = sweep_facts(data), config(data)
    out = {"target_from": str(cfg["target_from_width"]), "wide_from": str(cfg["chunked_backward_above"])}
    for phase in cfg["targets"]:
        f = facts[phase]
        if f["worst"] and f["worst"]["ratio"] < 1:
            out[f"{phase}_worst_slower"] = prose.pct(1 / f["worst"]["ratio"] - 1)
        out[f"{phase}_target"] = prose.pct(f["target"])
        out[f"{phase}_misses"] = prose.join(f"H={w}" for w in f["misses"])
    ahead, level, behind = by_tie(wide_forward(data), tie(cfg))
    for name, rows in (("ahead", ahead), ("level", level), ("behind", behind)):
        if rows:
            out[f"wide_fwd_{name}"] = prose.join(r["label"] for r in rows)
            out[f"wide_fwd_{name}_ratio"] = prose.times_span(r["ratio"] for r in rows)
            out[f"wide_fwd_{name}_peers"] = prose.join(dict.fromkeys(OP_LABELS[r["peer"]] for r in rows))
    return out
