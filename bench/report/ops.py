"""What the op-level reports share (rmsnorm, fused_add, width_sweep, tuning): the copy ceiling,
shape labels, the comparison with the fastest peer, and the bandwidth bars.

The data is laid out as bench/harness/op_timing.py writes it: ``results["copy"]`` (the large
copy, graph-timed and eager), ``results["shapes"]`` (per shape: size, bytes, the same-size copy,
``{phase: {contender: stats}}``).
"""
from __future__ import annotations

from bench.report import plots, prose
from bench.report.names import COLOURS, OP_LABELS, PHASES

# Shapes that files from before every entry carried its label name by their row count (rmsnorm.json's
# rstd entries, tuning.json): the q_norm and k_norm inputs of one Qwen3-8B training batch.
UNLABELLED = {(524288, 128): "q_norm", (131072, 128): "k_norm"}


def copy_ceiling(res) -> dict:
    """The fastest device-to-device copy of the run, however it was timed.

    Candidates: the 4 GiB copy inside a CUDA graph (only ~2.7 TB/s on the H200 at commit
    aeb7b6f), the same 4 GiB copy timed eagerly (~4.2 TB/s), and the copy of each shape's
    forward bytes inside a CUDA graph (67-336 MB, 3.4-4.2 TB/s). The ceiling is the best
    copy actually measured, so every percentage is against the best the card showed.
    """
    graph_timed = "calls_per_graph" in res["copy"]
    large = {"gbps": res["copy"]["gbps"], "bytes": res["copy"]["bytes"],
             "timer": "CUDA graph" if graph_timed else "eager"}
    copies = [large]
    if "eager" in res["copy"]:
        copies.append({"gbps": res["copy"]["eager"]["gbps"], "bytes": res["copy"]["bytes"], "timer": "eager"})
    copies += [{"gbps": s["copy_same_bytes"]["gbps"], "bytes": s["bytes_fwd"], "timer": "CUDA graph",
                "shape": s.get("label")}
               for s in res["shapes"] if graph_timed and "calls_per_graph" in s["copy_same_bytes"]]
    best = max(copies, key=lambda c: c["gbps"])
    return best | {"large_copy_gbps": large["gbps"], "large_copy_bytes": large["bytes"], "large_copy_timer": large["timer"]}


def size(nbytes) -> str:
    """'4 GiB', '1.6 GiB', '336 MB': whole GiB as such, other sizes of a GiB and more to one decimal."""
    if nbytes >= 2**30:
        gib = nbytes / 2**30
        return f"{gib:.0f} GiB" if abs(gib - round(gib)) < 0.05 else f"{gib:.1f} GiB"
    return f"{nbytes / 1e6:.0f} MB"


def ceiling_text(res) -> str:
    """Which copy the ceiling is: its size, timer and rate; when it is a copy of one shape's forward bytes,
    that shape, and what the large copy gave under both timers."""
    c = copy_ceiling(res)
    timer = "eager 计时" if c["timer"] == "eager" else "CUDA graph 计时"
    if "shape" not in c:
        return f"本次测得最快的设备内拷贝：{size(c['bytes'])}、{timer}，{c['gbps']:,.0f} GB/s"
    large = [f"{'CUDA graph' if 'calls_per_graph' in res['copy'] else 'eager'} {res['copy']['gbps']:,.0f} GB/s"]
    if "eager" in res["copy"]:
        large.append(f"eager {res['copy']['eager']['gbps']:,.0f} GB/s")
    return (f"本次测得最快的设备内拷贝：与 {c['shape'] or '一个形状'} 的 forward 同字节数（{size(c['bytes'])}）的拷贝、{timer}，"
            f"{c['gbps']:,.0f} GB/s（{size(c['large_copy_bytes'])} 的拷贝是 {'、'.join(large)}）")


def shape_label(shape: dict) -> str:
    """H=4096 for the hidden-size norms; q_norm / k_norm for the head norms, named by the shape's
    label (quick runs: "q 64x128"), "（dy 转置）" added for a transposed dy."""
    label = shape.get("label") or UNLABELLED.get((shape["rows"], shape["width"]), f"H={shape['width']}")
    if label.startswith("H="):
        return f"H={shape['width']}"
    kind = "k_norm" if label.startswith("k") else "q_norm"
    return kind + ("（dy 转置）" if shape.get("dy_layout") == "heads_transposed" else "")


def rows_caption(shapes) -> str:
    """Where the row counts go: 'H=1024 … H=5120 各 16384 行，q_norm 为 524288×128，…'."""
    wide = [s for s in shapes if shape_label(s).startswith("H=")]
    parts = []
    if wide:
        names = (f"{shape_label(wide[0])} … {shape_label(wide[-1])}" if len(wide) > 2
                 else prose.join(shape_label(s) for s in wide))
        counts = {s["rows"] for s in wide}
        parts.append(f"{names} 各 {counts.pop()} 行" if len(counts) == 1
                     else prose.join(f"{shape_label(s)} {s['rows']} 行" for s in wide))
    seen = set()
    for s in shapes:
        base = shape_label(s).split("（")[0]
        if not base.startswith("H=") and base not in seen:
            seen.add(base)
            parts.append(f"{base} 为 {s['rows']}×{s['width']}")
    if any(s.get("dy_layout") == "heads_transposed" for s in shapes):
        parts.append("「dy 转置」的 dy 是 (B, heads, T, D) 张量转置出的非连续视图")
    return "，".join(parts)


def fastest_peer(times: dict, names) -> tuple[dict[str, float], str | None]:
    """{peer: median µs} for the named peers that ran, and the fastest of them (None if none ran)."""
    peers = {n: times[n]["median_us"] for n in names if n in times}
    return peers, min(peers, key=peers.get) if peers else None


def ours_vs_peers(times: dict, cfg: dict, ceiling_gbps: float) -> dict:
    """One shape's comparison: ours' median µs and share of the copy ceiling, the fastest peer, its time ÷
    ours' (``ratio``) and every peer's (``ratios``); None where ours or every peer is missing."""
    ours = times.get(cfg["ours"])
    peers, best = fastest_peer(times, cfg["peers"])
    us = ours["median_us"] if ours else None
    return {"ours_us": us, "of_copy": ours["gbps"] / ceiling_gbps if ours else None, "peer": best,
            "peer_us": peers.get(best), "ratio": peers[best] / us if ours and best else None,
            "ratios": {n: t / us if ours else None for n, t in peers.items()}}


def at(labels) -> str:
    """'在 H=1024、k_norm 上' (no space after a full-width parenthesis)."""
    return f"在 {prose.glue(prose.join(labels), '上')}"


def by_tie(rows, tie: float, ratio=lambda r: r["ratio"]) -> tuple[list, list, list]:
    """``rows`` split by ``ratio(row)`` against 1 and the run's tie rule: (at or above 1 + tie,
    strictly within it, at or below 1 - tie)."""
    return ([r for r in rows if ratio(r) >= 1 + tie], [r for r in rows if 1 - tie < ratio(r) < 1 + tie],
            [r for r in rows if ratio(r) <= 1 - tie])


def compare_sentence(rows, tie: float, subject="本站实现", other="最快的对比方案") -> str:
    """How ``subject`` compares with ``other`` over the shapes (``rows``: label, ratio = other's time ÷
    subject's, and the peer's id where ``other`` is the fastest of several): faster, level (within
    ``tie``, the run's tie rule) or slower, and where."""
    faster, tied, slower = by_tie(rows, tie)
    if len(faster) == len(rows):
        top = max(rows, key=lambda r: r["ratio"])
        return (f"在全部 {len(rows)} 个形状上快于{other}，{other}用时是{subject}的 "
                f"{prose.times_span(r['ratio'] for r in rows)} 倍（差距最大在 {top['label']}）")
    clauses = []
    if faster:
        clauses.append(f"{at(r['label'] for r in faster)}快于{other}（{other}用时是{subject}的 "
                       f"{prose.times_span(r['ratio'] for r in faster)} 倍）")
    if tied:
        clauses.append(f"{at(r['label'] for r in tied)}与{other}持平（相差不到 {prose.pct(tie)}）")
    if slower:
        who = (f"（{prose.join(dict.fromkeys(OP_LABELS[r['peer']] for r in slower))}）"
               if "peer" in slower[0] else "")
        clauses.append(f"{at(r['label'] for r in slower)}比{other}{who}慢 "
                       f"{prose.pct_span(1 / r['ratio'] - 1 for r in slower)}")
    return "，".join(clauses)


def _short_label(shape):
    """Axis label: the table's label with the transposed-dy marker on a line of its own."""
    return shape_label(shape).replace("（", "\n（")


def forward_twin(shape, shapes):
    """The shape whose forward ``shape`` repeats: one that differs from it only in its dy's layout (the
    backward's input), or None."""
    if shape.get("dy_layout") != "heads_transposed":
        return None
    return next((s for s in shapes if s.get("dy_layout") != "heads_transposed"
                 and (s["rows"], s["width"]) == (shape["rows"], shape["width"])), None)


def forward_shapes(shapes) -> list:
    """The shapes a forward table shows: a shape with a :func:`forward_twin` runs the same forward as its
    twin (there is no dy in a forward), so it is left out."""
    return [s for s in shapes if forward_twin(s, shapes) is None]


def bandwidth_bars(data, contenders, op, side_by_side=False):
    """% of the copy ceiling per shape and contender (bars in ``contenders`` order, each in its colour):
    forward and forward + backward, stacked (``side_by_side``: next to each other, for few shapes). A shape
    that differs only in its dy's layout has no forward bars (see :func:`forward_shapes`). Data laid out as
    rmsnorm.json; the copy ceiling is named in the tables' captions."""
    plt = plots.plot_style()
    res = data["results"]
    shapes = res["shapes"]
    ceiling = copy_ceiling(res)["gbps"]
    if side_by_side:
        fig, axes = plt.subplots(1, 2, figsize=(plots.FIGURE_WIDTH, 3.3), sharey=True,
                                 gridspec_kw={"wspace": 0.06})
    else:
        fig, axes = plt.subplots(2, 1, figsize=(plots.FIGURE_WIDTH, 4.1), sharex=True,
                                 gridspec_kw={"hspace": 0.3})
    names = [n for n in contenders if any(n in s["fwd"] for s in shapes)]
    width = 0.84 / len(names)
    forward = forward_shapes(shapes)
    for ax, phase in zip(axes, ("fwd", "fwd_bwd")):
        for i, name in enumerate(names):
            values = [100 * s[phase][name]["gbps"] / ceiling if name in s[phase] and (phase != "fwd" or s in forward)
                      else 0 for s in shapes]
            ax.bar([k + (i - (len(names) - 1) / 2) * width for k in range(len(shapes))], values, width,
                   label=OP_LABELS.get(name, name), color=COLOURS[name])
        if phase == "fwd":
            for k, s in enumerate(shapes):
                twin = forward_twin(s, shapes)
                if twin is not None:
                    ax.text(k, 50, f"forward\n同 {shape_label(twin)}", ha="center", va="center", fontsize=plots.SMALL)
        ax.axhline(100, color="#D98F92", linestyle="--", linewidth=1.2)
        ax.text(len(shapes) - 0.5, 100, "拷贝上限", va="bottom", ha="right", color="#C0777A", fontsize=plots.SMALL)
        ax.set_ylim(0, 115)
        ax.set_yticks(range(0, 101, 20))
        ax.set_title(PHASES[phase] if side_by_side and phase == "fwd_bwd" else f"{op} {PHASES[phase]}，bf16",
                     loc="left")
        ax.grid(axis="x", visible=False)
        ax.set_xlim(-0.5, len(shapes) - 0.5)
        if side_by_side or phase == "fwd_bwd":
            ax.set_xticks(range(len(shapes)), [_short_label(s) for s in shapes])
    if side_by_side:
        axes[0].set_ylabel("有效带宽（占拷贝上限 %）")
    else:
        fig.supylabel("有效带宽（占拷贝上限 %）", x=0.05, fontsize=10)
    fig.legend(*axes[0].get_legend_handles_labels(), loc="lower center", bbox_to_anchor=(0.5, 0.98 if side_by_side
               else 0.96), ncol=len(names), handlelength=1.0, columnspacing=1.0, handletextpad=0.4)
    return plots.svg_of(fig)
