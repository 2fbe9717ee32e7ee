"""fused_add_sweep.json -> the fused residual add + RMSNorm at every hidden size: the methods page's per-width
table, the ratio plot, and the figures of the article's and the methods page's hand-written readings (``values``:
{{ fused_add_sweep.NAME }}: §六's any-width result, §二's chunked path; the methods page names each width that
misses a target and why).

Everything comes from the record: the contenders and their roles, the tie rule, the targets (share of the
copy ceiling from a width on; no slower than the baseline; level with the fastest peer), and, per width,
the launch configs of ours and its rows' alignment, from which the reasons for a miss are read.
"""
from __future__ import annotations

import math

from bench.report import plots, prose, tables
from bench.report.names import COLOURS, OP_LABELS, PHASES, tie
from bench.report.ops import copy_ceiling, fastest_peer, ours_vs_peers, size

NAME = "fused_add_sweep"
PHASE = "fwd_bwd"  # the phase of the table, the plot and the article: the one the targets are set for
# Why a width can miss a target, as far as the record shows it (the ids reasons() gives, in its order): the forward
# or the backward takes the chunked path (chunked_fwd, chunked_bwd), the rows have no 16-byte loads
# (no_16_byte_loads), the call is short (short_call), and the fastest peer misses the share too (peers_below_target).


def ceiling(res) -> dict:
    """The run's 4 GiB copy, the faster of its two timings (as width_sweep: the same-size copies of narrow
    rows run from L2, which no kernel with rotating inputs does)."""
    return copy_ceiling({**res, "shapes": []})


def _label(width) -> str:
    return f"H={width}"


def reasons(data, shape, phase) -> list[str]:
    """The reasons the record gives for ours being slow at this width (the ids listed above, in that order)."""
    cfg = data["config"]
    out = []
    configs = shape.get("ours_configs", {})
    for direction, key in (("forward", "chunked_fwd"), ("backward", "chunked_bwd")):
        if (direction == "forward" or phase == "fwd_bwd") and configs.get(direction, {}).get("chunked"):
            out.append(key)
    if "align" in shape and shape["align"] * cfg["elem_bytes"] < 16:
        out.append("no_16_byte_loads")
    ours = shape[phase].get(cfg["ours"])
    if ours and ours["median_us"] < cfg["short_call_us"]:
        out.append("short_call")
    # Context for a share-of-copy miss: the fastest peer, on the same bytes, misses the share too.
    target = cfg["targets"].get(phase)
    peers, best = fastest_peer(shape[phase], cfg["peers"])
    if target and shape["width"] >= cfg["target_from_width"] and best:
        share = shape[f"bytes_{phase}"] / (peers[best] * 1e3) / ceiling(data["results"])["gbps"]
        if share < target:
            out.append("peers_below_target")
    return out


def per_width(data, phase) -> list[dict]:
    """Per width: ours' time and share of the copy ceiling, baseline ÷ ours, the fastest peer and its time
    ÷ ours' (None where a side is missing), ours' error, the reasons for a miss."""
    cfg, res = data["config"], data["results"]
    top = ceiling(res)["gbps"]
    out = []
    for s in res["shapes"]:
        row = ours_vs_peers(s[phase], cfg, top)
        base = s[phase].get(cfg["baseline"])
        out.append({"width": s["width"], "label": _label(s["width"]), "ours_us": row["ours_us"],
                    "of_copy": row["of_copy"],
                    "baseline": base["median_us"] / row["ours_us"] if row["ours_us"] and base else None,
                    "peer": row["peer"], "peer_ratio": row["ratio"],
                    "error": s["errors"].get(cfg["ours"]), "reasons": reasons(data, s, phase)})
    return out


def facts(data, phase=PHASE) -> dict:
    """What the sentences say, from the data: widths compared with the baseline and with the peers, how many
    are level or ahead (tie rule), the true lowest of each ratio ({"width", "ratio"[, "peer"]}), the
    misses of each target (``misses[target]``: widths) and the widths without a result of ours."""
    cfg = data["config"]
    level = 1 - tie(cfg)
    rows = per_width(data, phase)
    with_base = [r for r in rows if r["baseline"] is not None]
    with_peer = [r for r in rows if r["peer_ratio"] is not None]
    low_base = min(with_base, key=lambda r: r["baseline"], default=None)
    low_peer = min(with_peer, key=lambda r: r["peer_ratio"], default=None)
    misses = {}
    if phase in cfg["targets"]:
        misses["of_copy"] = [r["width"] for r in rows if r["width"] >= cfg["target_from_width"]
                             and r["of_copy"] is not None and r["of_copy"] < cfg["targets"][phase]]
    if phase in cfg["no_slower_than_baseline"]:
        misses["baseline"] = [r["width"] for r in with_base if r["baseline"] < level]
    if phase in cfg["level_with_best_peer"]:
        misses["peer"] = [r["width"] for r in with_peer if r["peer_ratio"] < level]
    shares = [r["of_copy"] for r in rows if r["of_copy"] is not None]
    return {
        "widths": [r["width"] for r in rows],
        "baseline_compared": len(with_base),
        "no_slower_than_baseline": sum(r["baseline"] >= level for r in with_base),
        "peer_compared": len(with_peer),
        "level_or_ahead": sum(r["peer_ratio"] >= level for r in with_peer),
        "lowest_baseline": {"width": low_base["width"], "ratio": low_base["baseline"]} if low_base else None,
        "lowest_peer": ({"width": low_peer["width"], "ratio": low_peer["peer_ratio"], "peer": low_peer["peer"]}
                        if low_peer else None),
        "of_copy": [min(shares), max(shares)] if shares else None,
        "from_width": [r["width"] for r in rows if r["width"] >= cfg["target_from_width"] and r["of_copy"] is not None],
        "misses": misses,
        "no_result": [r["width"] for r in rows if r["ours_us"] is None],
        "reasons": {r["width"]: r["reasons"] for r in rows},
    }


def _widths(widths) -> str:
    return prose.join(_label(w) for w in widths)


def _tie_words(cfg) -> str:
    return f"相差 {prose.pct(tie(cfg))} 以内算持平"


def caption(data) -> str:
    cfg, res = data["config"], data["results"]
    top = ceiling(res)
    moved = cfg["bytes"]
    text = (f"{tables.dtype_short(cfg['dtype'])}，每个宽度 {cfg['rows']} 行，共 {len(res['shapes'])} 个宽度；"
            f"{PHASES[PHASE]}，backward 同时传入 dy 和 ds。每次调用的 GPU 时间：{cfg['replays']} 次 CUDA graph 重放、"
            f"轮换输入（不复用 L2）的中位数。字节按最少计：forward 读 x、r，写 s、y（{moved['fwd_io']} 遍），backward 读 "
            f"dy、ds、s，写 dx（{moved['bwd_io']} 遍）；拷贝上限为本次运行测得最快的 {size(top['bytes'])} 设备内拷贝，"
            f"{top['gbps']:,.0f} GB/s。不融合：{OP_LABELS[cfg['baseline']]}。最快的对比方案："
            f"{prose.join(OP_LABELS.get(n, n) for n in cfg['peers'])} 中每个宽度最快的一个。")
    skipped = res.get("skipped", {})
    if skipped:
        text += f"未测：{prose.join(OP_LABELS.get(n, n) for n in skipped)}（在本机不能运行）。"
    return text


def _table(data) -> str:
    rows = per_width(data, PHASE)

    def ratio(value):
        return prose.times(value) if value is not None else "—"

    body = [[r["label"], tables.fmt(r["ours_us"]), prose.pct(r["of_copy"]) if r["of_copy"] is not None else "—",
             ratio(r["baseline"]), OP_LABELS.get(r["peer"], "—"), ratio(r["peer_ratio"])] for r in rows]
    table = tables.md_table(["宽度", "融合版（µs）", "占拷贝上限", "不融合 ÷ 融合版", "最快的对比方案", "对比方案 ÷ 融合版"],
                            body, "lrrrlr")
    return prose.page(table, caption(data))  # read by hand on the methods page (values(): reading_values)


def chunked(data) -> dict | None:
    """Where the fused kernels' tables choose the chunked path, from the launch configs the run recorded: the
    first width where either direction takes it, the widths measured from there on, and of those the ones each
    direction takes it at ({"first", "wide", "forward", "backward"}); None when no width takes it."""
    shapes = [s for s in data["results"]["shapes"] if s.get("ours_configs")]
    directions = ("forward", "backward")

    def takes(s, direction):
        return bool(s["ours_configs"].get(direction, {}).get("chunked"))

    first = min((s["width"] for s in shapes if any(takes(s, d) for d in directions)), default=None)
    if first is None:
        return None
    wide = [s for s in shapes if s["width"] >= first]
    return {"first": first, "wide": [s["width"] for s in wide]} | {
        d: [s["width"] for s in wide if takes(s, d)] for d in directions}


def _plot(data) -> str:
    """Time ÷ ours' time against the width (log2 axis), forward + backward: the fastest peer (its line, a
    marker in the colour of whichever peer it is) and the baseline; a line at 1 and the tie band."""
    plt = plots.plot_style()
    plt.rcParams.update({"font.size": 11, "axes.titlesize": 11, "axes.labelsize": 11, "xtick.labelsize": 11,
                         "ytick.labelsize": 11, "legend.fontsize": 11})
    cfg = data["config"]
    rows = per_width(data, PHASE)
    widths = [r["width"] for r in rows]
    fig, ax = plt.subplots(figsize=(7.2, 2.75))
    band = tie(cfg)
    ax.axhspan(1 - band, 1 + band, color="#B9BEC7", alpha=0.35, linewidth=0, label=_tie_words(cfg))
    ax.axhline(1, color="#888888", linestyle="--", linewidth=1)
    base = [r["baseline"] if r["baseline"] is not None else math.nan for r in rows]
    ax.plot(widths, base, color=COLOURS[cfg["baseline"]], marker="o", markersize=3.5, linewidth=1.6,
            label="不融合 ÷ 融合版")
    peer = [r["peer_ratio"] if r["peer_ratio"] is not None else math.nan for r in rows]
    ax.plot(widths, peer, color="#555555", linewidth=1.2, label="最快的对比方案 ÷ 融合版")
    for name in cfg["peers"]:
        points = [(r["width"], r["peer_ratio"]) for r in rows if r["peer"] == name and r["peer_ratio"] is not None]
        if points:
            ax.scatter(*zip(*points), color=COLOURS[name], s=22, zorder=3, label=f"最快的是 {OP_LABELS[name]}")
    ax.set_xscale("log", base=2)
    ticks = [w for w in (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536) if min(widths) <= w <= max(widths)]
    ax.set_xticks(ticks, [str(t) for t in ticks])
    ax.minorticks_off()
    values = [v for v in base + peer if not math.isnan(v)] or [1.0]
    ax.set_ylim(min(0.9, min(values) - 0.05), max(1.1, max(values) + 0.1))
    ax.set_xlabel("隐藏维度 H（列数，对数坐标）")
    ax.set_ylabel("用时 ÷ 融合版用时（µs 之比）")
    ax.set_title(f"残差加 + RMSNorm {PHASES[PHASE]}，{tables.dtype_short(cfg['dtype'])}，{cfg['rows']} 行；"
                 "高于 1 表示融合版更快", loc="left")
    ax.legend(loc="lower center", bbox_to_anchor=(0.5, 1.06), ncol=3, columnspacing=1.2, handlelength=1.6)
    return plots.svg_of(fig)


def render(data: dict) -> dict[str, str]:
    return {"fused_add_sweep.md": _table(data),
            "fused_add_sweep.svg": _plot(data)}


def values(data: dict) -> dict[str, str]:
    """{{ fused_add_sweep.NAME }}: the widths swept, how many are level with or ahead of the fastest peer (and how
    many behind), the lowest of each ratio with its width and the tie rule, forward + backward; where the chunked
    path starts, how many widths from there on were measured and how many take it forward and backward (those
    backward named): 番外 §二's reading."""
    cfg, f = data["config"], facts(data)
    out = {"widths": str(len(f["widths"])), "min_width": str(min(f["widths"])), "max_width": str(max(f["widths"])),
           "tie": prose.pct(tie(cfg)), "level_or_ahead": str(f["level_or_ahead"]),
           "behind": str(f["peer_compared"] - f["level_or_ahead"])}
    if f["lowest_peer"]:
        low = f["lowest_peer"]
        out |= {"lowest_peer_width": _label(low["width"]), "lowest_peer_ratio": prose.times(low["ratio"]),
                "lowest_peer": OP_LABELS[low["peer"]]}
    if f["lowest_baseline"]:
        low = f["lowest_baseline"]
        out |= {"lowest_baseline_width": _label(low["width"]), "lowest_baseline_ratio": prose.times(low["ratio"])}
    path = chunked(data)
    if path:
        out |= {"chunked_from": _label(path["first"]), "chunked_widths": str(len(path["wide"])),
                "chunked_fwd": str(len(path["forward"])), "chunked_bwd": str(len(path["backward"])),
                "chunked_bwd_at": _widths(path["backward"])}
    return out | reading_values(data)


def reading_values(data: dict) -> dict[str, str]:
    """The methods page's reading of the table and of its misses: how many widths are no slower than the baseline
    (``no_slower``), the share of the copy ceiling from ``target_from`` on (how many widths, how many reach it, the
    ones that miss it), the forward's share span; per reason the record gives, the widths that miss the share for
    it (``misses_<short_call|unaligned|chunked>``), those with no reason but the fastest peer's own miss
    (``misses_peer_only``) and those where the fastest peer does reach the share (``misses_peer_reaches``; a miss
    with no reason at all is in no group: the page cannot explain it); the widths behind the fastest peer
    (``behind_widths``)."""
    cfg, f = data["config"], facts(data)
    out = {"no_slower": str(f["no_slower_than_baseline"]), "short_call": f"{cfg['short_call_us']:g} µs"}
    if f["misses"].get("peer"):
        out["behind_widths"] = _widths(f["misses"]["peer"])
    if PHASE in cfg["targets"]:
        misses = f["misses"]["of_copy"]
        out |= {"target_from": str(cfg["target_from_width"]), "target": prose.pct(cfg["targets"][PHASE]),
                "from_widths": str(len(f["from_width"])), "reached": str(len(f["from_width"]) - len(misses)),
                "misses": _widths(misses)}
        why = f["reasons"]
        groups = {"short_call": [w for w in misses if "short_call" in why[w]],
                  "unaligned": [w for w in misses if "no_16_byte_loads" in why[w]],
                  "chunked": [w for w in misses if {"chunked_fwd", "chunked_bwd"} & set(why[w])],
                  "peer_only": [w for w in misses if why[w] == ["peers_below_target"]],
                  "peer_reaches": [w for w in misses if "peers_below_target" not in why[w]]}
        out |= {f"misses_{name}": _widths(widths) for name, widths in groups.items() if widths}
    fwd = facts(data, "fwd")
    if fwd["of_copy"]:
        out["fwd_of_copy"] = prose.pct_span(fwd["of_copy"])
    return out
