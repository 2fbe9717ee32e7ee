"""Triton tuning sweep for 篇2 §七: BLOCK_ROWS x num_warps (x programs per SM) against time.

    python -m bench.run_all tuning

For a few row widths it times the production forward kernel over a grid of
(BLOCK_ROWS, num_warps), the backward over (BLOCK_ROWS, num_warps, programs
per SM), records what ``triton.autotune`` picks for the forward from the same
candidates, and what the shipped heuristics ``forward_config`` / ``backward_config`` choose.
The candidates are ``rmsnorm_triton.candidate_configs``; each is passed to the wrappers as
``config=``.
"""
from __future__ import annotations

import re

import torch

from bench import common, prose, store
from bench.harness import mode, timers
from bench.harness.shapes import RMSNORM_SHAPES
from rmsnorm_autotune import rms_norm_forward_autotuned
from rmsnorm_triton import (backward_config, candidate_configs, forward_config, rms_norm_backward,
                            rms_norm_forward)

NAME = "tuning"
# (rows, width): q_norm's 128-wide rows and the hidden sizes of the Qwen3 family.
WIDTHS = [RMSNORM_SHAPES[name] for name in ("q_norm", "H=1024", "H=2048", "H=2560", "H=4096", "H=5120")]
QUICK_WIDTHS = [(64, 128), (16, 256)]
EPS = 1e-6


def _time(fn):
    """GPU time per call by CUDA-graph replay (bench.common; a CPU stand-in under --quick)."""
    return timers.cuda_graph_time_us([fn], min_calls=10, replays=10)["median_us"]


def _configs(width, direction, quick):
    """rmsnorm_triton's candidate configs; a --quick run keeps two tile heights, 4 warps, 2 programs per SM."""
    configs = candidate_configs(width, direction)
    if quick:
        configs = [c for c in configs if c.block_rows <= 2 and c.num_warps == 4
                   and (direction == "forward" or c.programs_per_sm == 2)]
    return configs


def _fields(config, names):
    return {name: getattr(config, name) for name in names}


def run(args) -> dict:
    quick, _, widths, device, _ = mode.gpu_or_quick(args, NAME, QUICK_WIDTHS, WIDTHS)
    results = []
    for rows, width in widths:
        print(f"  width {width}", flush=True)
        gen = torch.Generator(device=device).manual_seed(width)
        x = torch.randn(rows, width, device=device, generator=gen).to(torch.bfloat16)
        dy = torch.randn(rows, width, device=device, generator=gen).to(torch.bfloat16)
        w = (torch.rand(width, device=device, generator=gen) + 0.5).to(torch.bfloat16)
        _, rstd = rms_norm_forward(x, w, EPS)
        entry = {"rows": rows, "width": width, "fwd_bytes": 4 * rows * width, "bwd_bytes": 6 * rows * width,
                 "heuristic": _fields(forward_config(width), ("block_rows", "block_cols", "num_warps")),
                 "heuristic_bwd": _fields(backward_config(width),
                                          ("block_rows", "block_cols", "num_warps", "programs_per_sm")),
                 "fwd": [], "bwd": []}
        entry["heuristic_fwd_us"] = _time(lambda: rms_norm_forward(x, w, EPS))
        entry["heuristic_bwd_us"] = _time(lambda: rms_norm_backward(dy, x, w, rstd))
        for config in _configs(width, "forward", quick):
            entry["fwd"].append({**_fields(config, ("block_rows", "num_warps")),
                                 "us": _time(lambda: rms_norm_forward(x, w, EPS, config=config))})
        for config in _configs(width, "backward", quick):
            entry["bwd"].append({**_fields(config, ("block_rows", "num_warps", "programs_per_sm")),
                                 "us": _time(lambda: rms_norm_backward(dy, x, w, rstd, config=config))})
        entry["autotune_fwd_pick"] = None if quick else _autotune_pick(x, w)
        results.append(entry)
    config = {"dtype": "bfloat16", "widths": [list(wd) for wd in widths],
              "timer": "median GPU time per call from CUDA-graph replays (10 calls per graph, 10 replays)"}
    return {"config": config, "results": results}


def _autotune_pick(x, w):
    """What triton.autotune (snippets/rmsnorm_autotune.py) picks from the same forward candidates."""
    _, best = rms_norm_forward_autotuned(x, w, EPS)
    return {"block_rows": best.kwargs["BLOCK_ROWS"], "num_warps": best.num_warps}


# ---------------------------------------------------------------- rendering

def _best(entries):
    return min(entries, key=lambda e: e["us"])


def _label(e):
    from bench.exp_rmsnorm import shape_label

    return shape_label(e["rows"], e["width"])


def _caption(data):
    from bench.exp_rmsnorm import rows_caption

    counts = re.search(r"(\d+) calls per graph, (\d+) replays", data["config"].get("timer", ""))
    counts = f"（每个 graph {counts[1]} 次调用，重放 {counts[2]} 次）" if counts else ""
    return (f"{data['config']['dtype']}，{rows_caption(data['results'])}。每个配置的时间为 CUDA graph 重放的 GPU 时间"
            f"中位数{counts}；「行」是每个 program 处理的行数 BLOCK_ROWS。")


def _fwd_table(data):
    f = common.fmt
    rows = []
    for e in data["results"]:
        best = _best(e["fwd"])
        auto = e.get("autotune_fwd_pick")
        rows.append([
            _label(e),
            f"{best['block_rows']} / {best['num_warps']}：{f(best['us'])}",
            f"{auto['block_rows']} / {auto['num_warps']}" if auto else "—",
            f"{e['heuristic']['block_rows']} / {e['heuristic']['num_warps']}：{f(e['heuristic_fwd_us'])}",
            prose.times(max(x["us"] for x in e["fwd"]) / best["us"], 1),
        ])
    headers = ["形状", "扫描最优（行 / warps）：µs", "autotune 选择（行 / warps）", "发布的启发式（行 / warps）：µs",
               "最慢 ÷ 最快"]
    return prose.page(common.md_table(headers, rows, "lllll"), "forward。" + _caption(data))


def _bwd_table(data):
    f = common.fmt
    rows = []
    for e in data["results"]:
        best, h = _best(e["bwd"]), e["heuristic_bwd"]
        rows.append([
            _label(e),
            f"{best['block_rows']} / {best['num_warps']} / {best['programs_per_sm']}：{f(best['us'])}",
            f"{h['block_rows']} / {h['num_warps']} / {h['programs_per_sm']}：{f(e['heuristic_bwd_us'])}",
            prose.times(e["heuristic_bwd_us"] / best["us"]),
        ])
    headers = ["形状", "扫描最优（行 / warps / 每 SM）：µs", "发布的启发式（行 / warps / 每 SM）：µs", "启发式 ÷ 扫描最优"]
    return prose.page(common.md_table(headers, rows, "lllr"),
                      "backward；「每 SM」是每个 SM 上的 program 数。" + _caption(data))


PLOT_WIDTHS = {128: "q_norm 的 128 宽行", 4096: "H=4096"}  # the narrow and the wide row of 篇2 §七


def _copy_ceiling_gbps(data) -> float:
    """The copy ceiling that the rmsnorm experiment measured on the same GPU (its JSON sits next to this one)."""
    from bench import exp_rmsnorm

    gpu = store.gpu_slug(data["environment"].get("gpu") or "cpu")
    if not store.data_path(exp_rmsnorm.NAME, gpu).is_file():
        raise RuntimeError(f"{store.data_path(exp_rmsnorm.NAME, gpu)} is missing: tuning.svg shows % of the copy "
                           "ceiling that the rmsnorm experiment measured")
    return exp_rmsnorm.copy_ceiling(store.load(exp_rmsnorm.NAME, gpu)["results"])["gbps"]


def _plot(data):
    """% of copy against one launch parameter, the others as shipped (line) or anything swept (band).

    (a) forward against BLOCK_ROWS, (b) backward against programs per SM, for a narrow and a wide row.
    """
    plt = common.plot_style()
    ceiling = _copy_ceiling_gbps(data)
    entries = [e for e in data["results"] if e["width"] in PLOT_WIDTHS]
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.2), sharey=True)
    panels = ((axes[0], "fwd", "heuristic", "block_rows", "(a) forward：每个 program 处理的行数",
               "BLOCK_ROWS（每个 program 的行数）"),
              (axes[1], "bwd", "heuristic_bwd", "programs_per_sm", "(b) backward：每个 SM 上常驻的 program 数",
               "每个 SM 的 program 数"))
    for ax, phase, shipped_key, knob, title, xlabel in panels:
        for index, e in enumerate(entries):
            color = (common.PASTEL_LINE["pink"], common.PASTEL_LINE["blue"])[index % 2]
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
            ax.plot([shipped[knob]] * len(star), star, linestyle="none", marker="*", markersize=13, color=color,
                    markeredgecolor="#555555", markeredgewidth=0.6)
        ax.set_xscale("log", base=2)
        ticks = sorted({x[knob] for e in entries for x in e[phase]})
        ax.set_xticks(ticks, [str(t) for t in ticks])
        ax.minorticks_off()
        ax.set_ylim(0, 105)
        ax.set_title(title, fontsize=10, loc="left")
        ax.set_xlabel(xlabel)
    axes[0].set_ylabel("有效带宽（占拷贝上限 %）")
    handles, labels = axes[0].get_legend_handles_labels()
    handles += [plt.Rectangle((0, 0), 1, 1, facecolor="#BBBBBB", alpha=0.5),
                plt.Line2D([], [], linestyle="none", marker="*", markersize=11, color="#BBBBBB",
                           markeredgecolor="#555555")]
    labels += ["扫描到的全部配置（最差到最好）", "生产版选的配置"]
    fig.legend(handles, labels, loc="lower center", bbox_to_anchor=(0.5, -0.1), ncol=4, fontsize=9)
    fig.text(0.5, -0.13, "折线：其余参数取生产版的选择（forward：num_warps；backward：BLOCK_ROWS 与 num_warps）。"
             f"拷贝上限：rmsnorm 实验中最快的显存拷贝，{ceiling:,.0f} GB/s；bf16", ha="center", va="top", fontsize=8)
    return common.svg_of(fig)


def render(data: dict) -> dict[str, str]:
    fwd, bwd = _fwd_table(data), _bwd_table(data)
    return {"tuning_fwd.md": fwd, "tuning_bwd.md": bwd, "tuning.svg": _plot(data)}
