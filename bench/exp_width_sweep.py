"""RMSNorm at every hidden size: 40 widths from 256 to 16384 and 3 beyond, forward and forward+backward.

    python -m bench.run_all width_sweep                        # on a GPU -> docs/data/<gpu>/width_sweep.json
    BENCH_WIDTHS=256,3000,65536 python -m bench.run_all width_sweep   # a subset of SWEEP_WIDTHS

Contenders, each with its default launch config: this project's ``rms_norm``, ``F.rms_norm``,
``torch.compile`` of HF's Qwen3RMSNorm (one static graph per width: dynamic=False, dynamo reset
before each width, and ``fail_on_recompile_limit_hit`` so that a fallback to eager is never timed
as "compile"), Liger's functional rms_norm (casting mode llama, in_place=False) and quack's rmsnorm.
A contender that cannot run here is in ``results["skipped"]`` with the reason; one that fails at a
width has its error string in that width's ``errors`` and the sweep goes on.

16384 rows, bf16, eps 1e-6. Timed as in exp_rmsnorm (``harness.op_timing.time_contender``: CUDA-graph
replays over rotating input sets), bytes from ``harness.op_timing.min_bytes``; the report shows % of the
run's 4 GiB copy. No eager timer: the budget (about 4 minutes on an H200) goes to the compiles,
which each width records (``first_call_s``: the first calls' wall time per contender, compiles
included; ``compiles``: the dynamo graphs built so far, two more per width).
"""
from __future__ import annotations


import torch

import rmsnorm_triton
from bench.harness import mode, shapes
from bench.harness.contenders import rmsnorm_contenders
from bench.harness.op_timing import (add_gbps, large_copy, min_bytes, rmsnorm_inputs, shape_entry, sweep_widths,
                                     time_contender)
from bench.harness.shapes import BENCH_TOKENS, MODEL_WIDTHS, SWEEP_WIDTHS

NAME = "width_sweep"
ROWS = BENCH_TOKENS  # 16384
EPS = 1e-6
DTYPE = torch.bfloat16

QUICK_WIDTHS = [256, 300, 1000, rmsnorm_triton.MAX_COLS + 16]
QUICK_ROWS = 16
CONTENDERS = ["triton", "torch_rms_norm", "compile_hf", "liger", "quack"]
OURS = "triton"
PEERS = CONTENDERS[1:]
TIE_RULE = "within_2pct"  # 15 replays per timing: level within 2 % (bench/report/names.py TIE_RULES)
TARGETS = {"fwd": 0.85, "fwd_bwd": 0.75}  # of the copy ceiling, at widths >= TARGET_FROM
TARGET_FROM = 1024
# Rows wider than this take the chunked backward kernels (the kernels' MAX_COLS: the widest row the
# ladders keep in registers); the report counts the widths behind the best peer beyond it.
CHUNKED_BACKWARD_ABOVE = rmsnorm_triton.MAX_COLS
REPLAYS = 15  # graph replays per timing (exp_rmsnorm: 25): the sweep's budget goes to compiles


def selected_widths(quick: bool = False) -> list[int]:
    """SWEEP_WIDTHS (QUICK_WIDTHS for --quick), or the widths BENCH_WIDTHS names."""
    return shapes.selected_widths(QUICK_WIDTHS if quick else SWEEP_WIDTHS)


def run(args) -> dict:
    quick, on_gpu, _, device, _ = mode.gpu_or_quick(args, NAME, None, None)
    widths = selected_widths(quick)
    rows = QUICK_ROWS if quick else ROWS
    results = {"copy": large_copy(quick, device), "shapes": [], "skipped": {}}

    def measure(index, width):
        nbytes = min_bytes(rows, width)
        n_sets = 1 if quick else mode.rotating_input_sets(nbytes["fwd_bwd"], device)
        sets = [rmsnorm_inputs(rows, width, "contiguous", DTYPE, device, seed=100 * index + k)
                for k in range(n_sets)]
        entry = shape_entry(f"H={width}", rows, width, nbytes, n_sets, 2 * rows * width * 2, device,
                            model=MODEL_WIDTHS.get(width))
        for name, (fn, weight) in rmsnorm_contenders(CONTENDERS, width, DTYPE, device, results["skipped"],
                                                     EPS).items():
            time_contender(entry, name, fn, weight, sets, eager=False, replays=REPLAYS)
        add_gbps(entry)
        return entry

    results["shapes"] = sweep_widths(widths, on_gpu, measure)
    config = {"dtype": "bfloat16", "eps": EPS, "rows": rows, "widths": widths, "contenders": CONTENDERS,
              "ours": OURS, "peers": PEERS, "tie_rule": TIE_RULE, "targets": TARGETS, "target_from_width": TARGET_FROM,
              "chunked_backward_above": CHUNKED_BACKWARD_ABOVE,
              "models": {str(w): m for w, m in MODEL_WIDTHS.items() if w in widths},
              "l2_bytes": mode.l2_cache_bytes(device), "liger_in_place": False,
              "compile": "torch.compile(Qwen3RMSNorm, dynamic=False), dynamo reset per width",
              "timer": f"median GPU time per call from {REPLAYS} CUDA-graph replays cycling over input sets >= 4x L2"}
    return {"config": config, "results": results}

