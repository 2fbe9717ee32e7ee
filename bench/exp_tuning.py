"""Triton tuning sweep for 篇2 §七: BLOCK_ROWS x num_warps (x programs per SM) against time.

    python -m bench.run_all tuning

For a few row widths it times the production forward kernel over a grid of
(BLOCK_ROWS, num_warps), the backward over (BLOCK_ROWS, num_warps, programs
per SM), records what ``triton.autotune`` picks for the forward from the same
candidates, and what the shipped heuristics ``forward_config`` / ``backward_config`` choose.
"""
from __future__ import annotations

import contextlib
import re

from bench import common, prose

NAME = "tuning"
WIDTHS = [(16384 * 32, 128), (16384, 1024), (16384, 2048), (16384, 2560), (16384, 4096), (16384, 5120)]
QUICK_WIDTHS = [(64, 128), (16, 256)]
EPS = 1e-6


@contextlib.contextmanager
def forced_config(block_rows, num_warps, programs_per_sm=1):
    """Temporarily replace the shipped launch heuristics in rmsnorm_triton."""

    import rmsnorm_triton

    original = rmsnorm_triton.forward_config, rmsnorm_triton.backward_config
    rmsnorm_triton.forward_config = lambda n: (block_rows, rmsnorm_triton.column_blocks(n)[0], num_warps)
    rmsnorm_triton.backward_config = lambda n: (block_rows, rmsnorm_triton.column_blocks(n)[0], num_warps,
                                                programs_per_sm)
    try:
        yield
    finally:
        rmsnorm_triton.forward_config, rmsnorm_triton.backward_config = original


def _time(fn, quick):
    if quick:
        import time

        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e6
    return common.cuda_graph_time_us([fn], min_calls=10, replays=10)["median_us"]


def _candidates(block_cols, max_tile, quick):
    rows = [r for r in (1, 2, 4, 8, 16, 32, 64) if block_cols * r <= max_tile]
    warps = [4] if quick else [2, 4, 8, 16]
    return [(r, w) for r in (rows[:2] if quick else rows) for w in warps]


def _autotune_pick(x, w, candidates, quick):
    import torch
    import triton

    import rmsnorm_triton

    tuned = triton.autotune(
        configs=[triton.Config({"BLOCK_ROWS": r}, num_warps=nw) for r, nw in candidates],
        key=["n_cols"],
    )(rmsnorm_triton.rms_norm_fwd_kernel)
    n_rows, n_cols = x.shape
    y = torch.empty_like(x)
    rstd = torch.empty(n_rows, dtype=torch.float32, device=x.device)
    block_cols, tail_cols = rmsnorm_triton.column_blocks(n_cols)
    tuned[lambda meta: (triton.cdiv(n_rows, meta["BLOCK_ROWS"]),)](
        x, w, y, rstd, n_rows, n_cols, EPS, 0.0, 1, n_rows, 0, 0, n_cols,
        BLOCK_COLS=block_cols, TAIL_COLS=tail_cols, COMPUTE_DTYPE=rmsnorm_triton.tl.float32,
    )
    best = tuned.best_config
    return {"block_rows": best.kwargs["BLOCK_ROWS"], "num_warps": best.num_warps}


def run(args) -> dict:
    import torch
    import triton

    import rmsnorm_triton
    from rmsnorm_triton import rms_norm_backward, rms_norm_forward

    quick = getattr(args, "quick", False)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results = []
    for rows, width in (QUICK_WIDTHS if quick else WIDTHS):
        print(f"  width {width}", flush=True)
        gen = torch.Generator(device=device).manual_seed(width)
        x = torch.randn(rows, width, device=device, generator=gen).to(torch.bfloat16)
        dy = torch.randn(rows, width, device=device, generator=gen).to(torch.bfloat16)
        w = (torch.rand(width, device=device, generator=gen) + 0.5).to(torch.bfloat16)
        block_cols = triton.next_power_of_2(width)
        _, rstd = rms_norm_forward(x, w, EPS)
        entry = {"rows": rows, "width": width, "fwd_bytes": 4 * rows * width, "bwd_bytes": 6 * rows * width,
                 "heuristic": dict(zip(("block_rows", "block_cols", "num_warps"), rmsnorm_triton.forward_config(width))),
                 "heuristic_bwd": dict(zip(("block_rows", "block_cols", "num_warps", "programs_per_sm"),
                                           rmsnorm_triton.backward_config(width))),
                 "fwd": [], "bwd": []}
        entry["heuristic_fwd_us"] = _time(lambda: rms_norm_forward(x, w, EPS), quick)
        entry["heuristic_bwd_us"] = _time(lambda: rms_norm_backward(dy, x, w, rstd), quick)
        fwd_candidates = _candidates(block_cols, 16384, quick)
        for block_rows, num_warps in fwd_candidates:
            with forced_config(block_rows, num_warps):
                entry["fwd"].append({"block_rows": block_rows, "num_warps": num_warps,
                                     "us": _time(lambda: rms_norm_forward(x, w, EPS), quick)})
        for block_rows, num_warps in _candidates(block_cols, 8192, quick):
            if num_warps < 4:
                continue
            for programs_per_sm in ([2] if quick else [1, 2, 4, 8]):
                with forced_config(block_rows, num_warps, programs_per_sm):
                    entry["bwd"].append({"block_rows": block_rows, "num_warps": num_warps,
                                         "programs_per_sm": programs_per_sm,
                                         "us": _time(lambda: rms_norm_backward(dy, x, w, rstd), quick)})
        entry["autotune_fwd_pick"] = None if quick else _autotune_pick(x, w, fwd_candidates, quick)
        results.append(entry)
    config = {"dtype": "bfloat16", "widths": [list(wd) for wd in (QUICK_WIDTHS if quick else WIDTHS)],
              "timer": "median GPU time per call from CUDA-graph replays (10 calls per graph, 10 replays)"}
    return {"config": config, "results": results}


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


def _plot(data):
    """Forward panels on top, backward panels below; three widths per row."""
    plt = common.plot_style()
    entries = data["results"]
    ncols = 3
    group_rows = -(-len(entries) // ncols)
    fig, axes = plt.subplots(2 * group_rows, ncols, figsize=(11, 3.0 * 2 * group_rows), squeeze=False)
    for index, e in enumerate(entries):
        ax = axes[index // ncols][index % ncols]
        for nw in sorted({x["num_warps"] for x in e["fwd"]}):
            pts = sorted((x["block_rows"], e["fwd_bytes"] / (x["us"] * 1e3)) for x in e["fwd"] if x["num_warps"] == nw)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=f"num_warps={nw}")
        ax.set_xscale("log", base=2)
        ax.set_title(f"forward, {e['rows']}×{e['width']}", fontsize=9)
        ax.set_xlabel("BLOCK_ROWS (rows per program)", fontsize=8)
        ax = axes[group_rows + index // ncols][index % ncols]
        for ppsm in sorted({x["programs_per_sm"] for x in e["bwd"]}):
            best = {}
            for x in e["bwd"]:
                if x["programs_per_sm"] == ppsm:
                    best[x["block_rows"]] = min(best.get(x["block_rows"], 1e30), x["us"])
            pts = sorted(best.items())
            ax.plot([p[0] for p in pts], [e["bwd_bytes"] / (p[1] * 1e3) for p in pts], marker="s",
                    label=f"{ppsm} programs/SM")
        ax.set_xscale("log", base=2)
        ax.set_title(f"backward, {e['rows']}×{e['width']} (best num_warps)", fontsize=9)
        ax.set_xlabel("BLOCK_ROWS (rows per program)", fontsize=8)
    for row in range(2 * group_rows):
        axes[row][0].set_ylabel("GB/s (minimum bytes)")
    for index in range(len(entries), group_rows * ncols):  # unused panels
        axes[index // ncols][index % ncols].set_visible(False)
        axes[group_rows + index // ncols][index % ncols].set_visible(False)
    axes[0][0].legend(fontsize=7)
    axes[group_rows][0].legend(fontsize=7)
    fig.suptitle(f"{data['environment'].get('gpu') or 'CPU'}, bf16: RMSNorm launch configurations (higher is better)",
                 fontsize=9)
    fig.tight_layout()
    return common.svg_of(fig)


def render(data: dict) -> dict[str, str]:
    fwd, bwd = _fwd_table(data), _bwd_table(data)
    # tuning.md: both tables, only until docs/triton-rmsnorm.md includes tuning_fwd.md and tuning_bwd.md.
    return {"tuning_fwd.md": fwd, "tuning_bwd.md": bwd, "tuning.md": fwd + "\n" + bwd, "tuning.svg": _plot(data)}
