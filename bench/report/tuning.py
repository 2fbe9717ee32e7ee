"""tuning.json -> 篇2 §七's launch-config tables and plot: the sweep's best, the autotuner's pick, the shipped heuristics."""
from __future__ import annotations

import re

from bench import store
from bench.report import plots, prose, tables
from bench.report.names import PASTEL_LINE
from bench.report.ops import copy_ceiling, rows_caption, shape_label

NAME = "tuning"
COPY_CEILING_FROM = "rmsnorm"  # the data file next to this one whose copy ceiling the plot's percentages use


def _best(entries):
    return min(entries, key=lambda e: e["us"])


def _caption(data):
    counts = re.search(r"(\d+) calls per graph, (\d+) replays", data["config"].get("timer", ""))
    counts = f"（每个 graph {counts[1]} 次调用，重放 {counts[2]} 次）" if counts else ""
    return (f"{data['config']['dtype']}，{rows_caption(data['results'])}。每个配置的时间为 CUDA graph 重放的 GPU 时间"
            f"中位数{counts}；「行」是每个 program 处理的行数 BLOCK_ROWS。")


PLOT_NOTE = ("调参图里，折线上其余参数取本站实现的选择（forward：num_warps；backward：BLOCK_ROWS 与 num_warps），"
             "阴影是扫到的全部配置从最差到最好，星号是本站实现的选择；有效带宽以 rmsnorm 实验中最快的显存拷贝"
             "（{ceiling:,.0f} GB/s）为拷贝上限。")


def _fwd_table(data):
    f = tables.fmt
    rows = []
    for e in data["results"]:
        best = _best(e["fwd"])
        auto = e.get("autotune_fwd_pick")
        rows.append([
            shape_label(e),
            f"{best['block_rows']} / {best['num_warps']}：{f(best['us'])}",
            f"{auto['block_rows']} / {auto['num_warps']}" if auto else "—",
            f"{e['heuristic']['block_rows']} / {e['heuristic']['num_warps']}：{f(e['heuristic_fwd_us'])}",
            prose.times(max(x["us"] for x in e["fwd"]) / best["us"], 1),
        ])
    headers = ["形状", "扫描最优（行 / warps）：µs", "autotune 选择（行 / warps）", "发布的启发式（行 / warps）：µs",
               "最慢 ÷ 最快"]
    note = PLOT_NOTE.format(ceiling=_copy_ceiling_gbps(data))
    return prose.page(tables.md_table(headers, rows, "lllll"), "forward。" + _caption(data) + note)


def _bwd_table(data):
    f = tables.fmt
    rows = []
    for e in data["results"]:
        best, h = _best(e["bwd"]), e["heuristic_bwd"]
        rows.append([
            shape_label(e),
            f"{best['block_rows']} / {best['num_warps']} / {best['programs_per_sm']}：{f(best['us'])}",
            f"{h['block_rows']} / {h['num_warps']} / {h['programs_per_sm']}：{f(e['heuristic_bwd_us'])}",
            prose.times(e["heuristic_bwd_us"] / best["us"]),
        ])
    headers = ["形状", "扫描最优（行 / warps / 每 SM）：µs", "发布的启发式（行 / warps / 每 SM）：µs", "启发式 ÷ 扫描最优"]
    return prose.page(tables.md_table(headers, rows, "lllr"),
                      "backward；「每 SM」是每个 SM 上的 program 数。" + _caption(data))


PLOT_WIDTHS = {128: "q_norm 的 128 宽行", 4096: "H=4096"}  # the narrow and the wide row of 篇2 §七


def _copy_ceiling_gbps(data) -> float:
    """The copy ceiling that the rmsnorm experiment measured on the same GPU (its JSON sits next to this one)."""
    gpu = store.gpu_slug(data["environment"].get("gpu") or "cpu")
    path = store.data_path(COPY_CEILING_FROM, gpu)
    if not path.is_file():
        raise RuntimeError(f"{path} is missing: tuning.svg shows % of the copy ceiling that the rmsnorm "
                           "experiment measured")
    return copy_ceiling(store.load(COPY_CEILING_FROM, gpu)["results"])["gbps"]


def _plot(data):
    """% of copy against one launch parameter, the others as shipped (line) or anything swept (band).

    (a) forward against BLOCK_ROWS, (b) backward against programs per SM, for a narrow and a wide row.
    """
    plt = plots.plot_style()
    ceiling = _copy_ceiling_gbps(data)
    entries = [e for e in data["results"] if e["width"] in PLOT_WIDTHS]
    fig, axes = plt.subplots(1, 2, figsize=(plots.FIGURE_WIDTH, 3.2), sharey=True, gridspec_kw={"wspace": 0.08})
    panels = ((axes[0], "fwd", "heuristic", "block_rows", "(a) forward", "BLOCK_ROWS（每个 program 的行数）"),
              (axes[1], "bwd", "heuristic_bwd", "programs_per_sm", "(b) backward", "每个 SM 常驻的 program 数"))
    for ax, phase, shipped_key, knob, title, xlabel in panels:
        for index, e in enumerate(entries):
            color = (PASTEL_LINE["pink"], PASTEL_LINE["blue"])[index % 2]
            shipped = e[shipped_key]
            percent = {}
            for x in e[phase]:
                percent.setdefault(x[knob], []).append(
                    (100 * e[f"{phase}_bytes"] / (x["us"] * 1e3) / ceiling,
                     all(x[k] == shipped[k] for k in x if k not in ("us", knob))))
            xs = sorted(percent)
            ax.fill_between(xs, [min(p for p, _ in percent[v]) for v in xs], [max(p for p, _ in percent[v]) for v in xs],
                            color=color, alpha=0.18, linewidth=0)
            line = [(v, p) for v in xs for p, is_shipped in percent[v] if is_shipped]
            ax.plot([v for v, _ in line], [p for _, p in line], color=color, marker="o", markersize=4,
                    label=PLOT_WIDTHS[e["width"]])
            star = [p for v, p in line if v == shipped[knob]]
            ax.plot([shipped[knob]] * len(star), star, linestyle="none", marker="*", markersize=12, color=color,
                    markeredgecolor="#555555", markeredgewidth=0.6)
        ax.set_xscale("log", base=2)
        ticks = sorted({x[knob] for e in entries for x in e[phase]})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_ylim(0, 105)
        ax.set_title(title, loc="left")
        ax.set_xlabel(xlabel)
    axes[0].set_ylabel("有效带宽（占拷贝上限 %）")
    handles, labels = axes[0].get_legend_handles_labels()
    handles += [plt.Rectangle((0, 0), 1, 1, facecolor="#BBBBBB", alpha=0.5),
                plt.Line2D([], [], linestyle="none", marker="*", markersize=11, color="#BBBBBB",
                           markeredgecolor="#555555")]
    labels += ["扫到的全部配置", "本站实现的选择"]
    fig.legend(handles, labels, loc="upper center", bbox_to_anchor=(0.5, -0.03), ncol=4, handlelength=1.6,
               columnspacing=1.2)
    return plots.svg_of(fig)


TIE = 0.01  # two best times within 1 % count as level (CUDA-graph medians, as names.TIE_RULES["within_1pct"])


def best_per_programs(entry) -> dict[int, float]:
    """{programs per SM: the best backward time over the other launch parameters} of one width."""
    best: dict[int, float] = {}
    for config in entry["bwd"]:
        best[config["programs_per_sm"]] = min(best.get(config["programs_per_sm"], float("inf")), config["us"])
    return best


def render(data: dict) -> dict[str, str]:
    fwd, bwd = _fwd_table(data), _bwd_table(data)
    return {"tuning_fwd.md": fwd, "tuning_bwd.md": bwd, "tuning.svg": _plot(data)}


def values(data: dict) -> dict[str, str]:
    """{{ tuning.NAME }} (篇 2 §7.1): how many widths the backward sweep covers, how far one resident program per SM
    lags each width's fastest config (each count at its own best BLOCK_ROWS and num_warps), and the tie rule."""
    bests = [best_per_programs(e) for e in data["results"]]
    one = min(set.intersection(*(set(b) for b in bests)))
    return {"widths": str(len(bests)), "one_lag": prose.pct_span(b[one] / min(b.values()) - 1 for b in bests),
            "tie": prose.pct(TIE)}
