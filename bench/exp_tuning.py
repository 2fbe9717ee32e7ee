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

import torch

from bench.harness import mode, timers
from bench.harness.shapes import RMSNORM_SHAPES
from rmsnorm_autotune import rms_norm_forward_autotuned
from rmsnorm_triton import (backward_config, candidate_configs, forward_config, rms_norm_backward,
                            rms_norm_forward)

NAME = "tuning"
# (label, rows, width): q_norm's 128-wide rows and the hidden sizes of the Qwen3 family.
WIDTHS = [(name, *RMSNORM_SHAPES[name]) for name in ("q_norm", "H=1024", "H=2048", "H=2560", "H=4096", "H=5120")]
QUICK_WIDTHS = [("q 64x128", 64, 128), ("H=256", 16, 256)]
EPS = 1e-6


def _time(fn):
    """GPU time per call by CUDA-graph replay (a CPU stand-in under --quick)."""
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
    for label, rows, width in widths:
        print(f"  width {width}", flush=True)
        gen = torch.Generator(device=device).manual_seed(width)
        x = torch.randn(rows, width, device=device, generator=gen).to(torch.bfloat16)
        dy = torch.randn(rows, width, device=device, generator=gen).to(torch.bfloat16)
        w = (torch.rand(width, device=device, generator=gen) + 0.5).to(torch.bfloat16)
        _, rstd = rms_norm_forward(x, w, EPS)
        entry = {"label": label, "rows": rows, "width": width, "fwd_bytes": 4 * rows * width, "bwd_bytes": 6 * rows * width,
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
    config = {"dtype": "bfloat16", "widths": [[rows, width] for _, rows, width in widths],
              "timer": "median GPU time per call from CUDA-graph replays (10 calls per graph, 10 replays)"}
    return {"config": config, "results": results}


def _autotune_pick(x, w):
    """What triton.autotune (snippets/rmsnorm_autotune.py) picks from the same forward candidates."""
    _, best = rms_norm_forward_autotuned(x, w, EPS)
    return {"block_rows": best.kwargs["BLOCK_ROWS"], "num_warps": best.num_warps}
