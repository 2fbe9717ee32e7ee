"""p1_roofline.json -> 篇1 §五: the measured ceilings, the counts of the five fusable points, the roofline."""
from __future__ import annotations

from bench.report import plots, prose, tables
from bench.report.names import FUSION_LABELS, FUSION_POINT_ZH, SERIES_COLOURS

NAME = "p1_roofline"


BOUND_ZH = {True: "访存", False: "计算"}
# Forms of a fusion point whose FLOPs count other work than the point's own (the whole of sdpa: both GEMMs'
# FLOPs plus the softmax's, next to the softmax-only element-wise FLOPs): never divided into the point's eager time.
OTHER_FLOPS = ("flash",)


def ridge_flop_per_byte(data: dict) -> float:
    """The measured ridge point: matmul ceiling ÷ copy bandwidth, in FLOP per byte."""
    ceilings = data["results"]["ceilings"]
    return ceilings["matmul"]["tflops"] * 1e12 / (ceilings["copy"]["gbps"] * 1e9)


def _point(name):
    return FUSION_POINT_ZH.get(name, name)


def _label(point_name, contender):
    return "一次 GEMM（拼接权重）" if point_name == "QKV merge" and contender == "fused" else FUSION_LABELS[contender]


def _arrow(before, after):
    return before if before == after else f"{before} → {after}"


def _caption(data, *extra):
    c = data["config"]
    return prose.caption(
        f"Qwen3-{c['size']} 几何，{tables.dtype_short(c['dtype'])}；RMSNorm、RoPE、SwiGLU、QKV 在 B={c['batch']}、"
        f"T={c['seq_len']}（{c['tokens']} 个 token）下，注意力在 B={c['softmax_batch']}、T={c['seq_len']} 下",
        "FLOP 与字节按每 token、每个解码层的 forward 计", *extra, sep="；")


def _ceilings_table(data):
    r = data["results"]
    copy, matmul = r["ceilings"]["copy"], r["ceilings"]["matmul"]
    m, n, k = matmul["shape"]
    rows = [
        ["显存带宽（设备内拷贝，读 + 写）", f"{copy['gbps']:,.0f} GB/s",
         f"读写共 {copy['bytes'] / 2**20:,.0f} MiB，用时 {tables.fmt(copy['median_us'])} µs"],
        [f"{tables.dtype_short(matmul['dtype'])} 矩阵乘吞吐", f"{tables.fmt(matmul['tflops'])} TFLOP/s",
         f"{m}×{k} @ {k}×{n}，用时 {tables.fmt(matmul['median_us'])} µs；一次运行、一个形状的中位数"],
        ["屋脊点（本次的矩阵乘吞吐 ÷ 拷贝带宽）", f"{tables.fmt(ridge_flop_per_byte(data))} FLOP/字节",
         "算术强度低于它的算子访存受限"],
    ]
    return tables.md_table(["天花板", "实测值", "怎么测的"], rows, align="lrl")


def _counts_table(data):
    ridge = ridge_flop_per_byte(data)
    rows = []
    for p in data["results"]["points"]:
        e, f = p["eager"], p["fused"]
        rows.append([_point(p["name"]), f"{e['kernels']} → {f['kernels']}",
                     _arrow(f"{e['flops']:,.0f}", f"{f['flops']:,.0f}"), f"{e['bytes']:,.0f} → {f['bytes']:,.0f}",
                     f"{tables.fmt(e['intensity'])} → {tables.fmt(f['intensity'])}",
                     _arrow(BOUND_ZH[e["intensity"] < ridge], BOUND_ZH[f["intensity"] < ridge])])
    headers = ["融合点", "kernel 数（eager → 融合）", "FLOP / token", "字节 / token（eager → 融合）",
               "算术强度（FLOP/字节，eager → 融合）", "受限于"]
    return tables.md_table(headers, rows, align="lrrrrl") + _caption(data)


def _measured_table(data):
    copy = data["results"]["ceilings"]["copy"]["gbps"]
    ridge = ridge_flop_per_byte(data)
    rows = []
    for p in data["results"]["points"]:
        m = p.get("measured", {})
        if "eager" not in m:
            continue
        eager = m["eager"]
        for contender in ("eager", "fused", "flash"):
            if contender not in m:
                continue
            stats = m[contender]
            other_flops = contender in OTHER_FLOPS
            speedup = ("1×" if contender == "eager" else "—" if other_flops
                       else f"{tables.fmt(eager['median_us'] / stats['median_us'])}×")
            memory_bound = p[contender]["intensity"] < ridge
            rows.append([_point(p["name"]) if contender == "eager" else "", _label(p["name"], contender),
                         tables.fmt(stats["median_us"]), speedup,
                         tables.fmt(stats["tflops"]) + ("（矩阵乘加 softmax 的 FLOP）" if other_flops else ""),
                         f"{stats['gbps']:,.0f}（{100 * stats['gbps'] / copy:.0f}%）" if memory_bound else "—"])
    headers = ["融合点", "实现", "耗时（µs）", "相对 eager", "TFLOP/s", "带宽（GB/s，占拷贝上限）"]
    whole = [p for p in data["results"]["points"] if any(c in p.get("measured", {}) for c in OTHER_FLOPS)]
    note = (prose.glue(prose.join(_point(p["name"]) for p in whole), "一组里，sdpa 一行是整个注意力（QKᵀ、softmax、乘 V），")
            +
            "TFLOP/s 按两个矩阵乘与 softmax 的 FLOP 合计；同组其余各行只是 scale、mask、softmax 与类型转换这一段，按逐元素 FLOP 计，"
            "两种口径不能相除，所以它不列相对 eager；roofline 图上它是灰色星号" if whole else "")
    return tables.md_table(headers, rows, align="llrrrr") + _caption(
        data, "带宽按该实现自己读写的字节计，计算受限的行不列", note)


WHOLE_ATTENTION_COLOUR = "#6F6F6F"  # the roofline's sdpa point: no colour of a fusion point's series


def _roofline_plot(data):
    import math

    plt = plots.plot_style()
    r = data["results"]
    bandwidth = r["ceilings"]["copy"]["gbps"] * 1e9
    peak = r["ceilings"]["matmul"]["tflops"] * 1e12
    ridge = r["ridge_flop_per_byte"]
    fig, ax = plt.subplots(figsize=(plots.FIGURE_WIDTH, 4.0))
    xs = [0.05 * 1.25 ** i for i in range(80)]
    xs = [x for x in xs if x <= 20000]
    ax.plot(xs, [min(peak, x * bandwidth) / 1e12 for x in xs], color="#888888", linewidth=1.5)
    ax.axvline(ridge, color="#888888", linestyle=":", linewidth=1)
    ax.text(ridge * 1.15, peak / 1e12 * 0.6, f"屋脊点 {ridge:.0f} FLOP/字节", fontsize=plots.SMALL, rotation=90,
            va="top")
    ax.text(ridge / 40, peak / 1e12 * 1.3, f"矩阵乘 {peak / 1e12:,.0f} TFLOP/s（一次运行）", fontsize=plots.SMALL)
    achieved = []
    handles, labels = [], []
    for index, p in enumerate(r["points"]):
        color = SERIES_COLOURS[index % len(SERIES_COLOURS)]
        m = p.get("measured", {})
        coords = {}
        for contender in ("eager", "fused"):
            if contender in m:
                coords[contender] = (p[contender]["intensity"], m[contender]["tflops"])
                achieved.append(m[contender]["tflops"])
                dot = ax.scatter(*coords[contender], s=55, marker="o", zorder=3,
                                 facecolors="none" if contender == "eager" else color, edgecolors=color, linewidths=1.6)
                if contender == "fused" or (contender == "eager" and "fused" not in m):
                    handles.append(dot)
                    labels.append(FUSION_POINT_ZH.get(p["name"], p["name"]))
        if "eager" in coords and "fused" in coords:
            ax.annotate("", xy=coords["fused"], xytext=coords["eager"],
                        arrowprops={"arrowstyle": "->", "color": color, "lw": 1.2})
        for contender in OTHER_FLOPS:  # another FLOP definition: its own grey marker and legend entry
            if contender in m:
                achieved.append(m[contender]["tflops"])
                handles.append(ax.scatter(p[contender]["intensity"], m[contender]["tflops"], s=110, marker="*",
                                          zorder=3, color=WHOLE_ATTENTION_COLOUR))
                labels.append(f"{FUSION_LABELS[contender]}，FLOP 另算")
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # plain numbers, not 10^n (no mathtext: see plots.plot_style)
        axis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(plt.NullFormatter())
    ax.set_xlabel("算术强度（FLOP/字节，按每个 token 计，对数坐标）")
    ax.set_ylabel("实测算力（TFLOP/s，对数坐标）")
    ax.set_xlim(0.05, 20000)
    low = min(achieved + [peak / 1e12]) / 3
    ax.set_ylim(low, peak / 1e12 * 4)
    (x0, y0), (x1, y1) = ax.transData.transform([(0.07, 0.07 * bandwidth / 1e12), (0.7, 0.7 * bandwidth / 1e12)])
    ax.text(0.07, 0.07 * bandwidth / 1e12 * 1.5, f"拷贝带宽 {bandwidth / 1e9:,.0f} GB/s", fontsize=plots.SMALL,
            rotation=math.degrees(math.atan2(y1 - y0, x1 - x0)), rotation_mode="anchor")
    ax.legend(handles, labels, loc="lower right")
    ax.set_title("空心 = HF eager，实心 = 融合后，箭头 = 融合带来的变化")
    return plots.svg_of(fig)


def render(data: dict) -> dict[str, str]:
    return {
        "p1_roofline_ceilings.md": _ceilings_table(data),
        "p1_roofline_counts.md": _counts_table(data),
        "p1_roofline_measured.md": _measured_table(data),
        "p1_roofline.svg": _roofline_plot(data),
    }
