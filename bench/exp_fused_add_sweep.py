"""The fused residual add + RMSNorm at every hidden size: width_sweep's 43 widths, forward and forward+backward.

    python -m bench.run_all fused_add_sweep                          # on a GPU -> docs/data/<gpu>/fused_add_sweep.json
    BENCH_WIDTHS=1536,14336 python -m bench.run_all fused_add_sweep   # a subset of SWEEP_WIDTHS

The contenders of exp_fused_add (``harness.contenders.fused_add_contenders``), side by side at each width:
ours fused (``triton_fused_add``), ours unfused (``unfused``: a torch add, then the plain kernels: the
baseline), ``torch.compile`` of HF's add + Qwen3RMSNorm (one static graph per width: dynamo reset before
each width, ``fail_on_recompile_limit_hit`` so that a fallback to eager is never timed as "compile"),
Liger's ``LigerFusedAddRMSNormFunction`` (casting mode llama, in_place=False) and quack's
``rmsnorm(x, w, residual=r, prenorm=True)``. A contender that cannot run here is in ``results["skipped"]``
with the reason; one that fails at a width has its error in that width's ``errors``.

16384 rows, bf16, eps 1e-6. The backward gets dy and ds (``harness.op_timing.time_fused_add``): GPU time of
CUDA-graph replays over rotating input sets, 15 replays as width_sweep. Bytes: ``min_bytes(R, H, fwd_io=4,
bwd_io=4)`` (forward reads x, r and writes s, y; backward reads dy, ds, s and writes dx; plus the weight,
6*H bytes in all, under 0.01 %; rstd not counted). The copy ceiling is the run's 4 GiB copy.

Each width records the launch configs of ours (``ours_configs``: which direction takes the chunked kernels)
and its rows' alignment (``align``, elements: 16-byte loads need 8 bf16), so that the report can say why a
width misses a target. On a GPU, worker processes first compile our Triton kernels at every width into
Triton's cache (``python -m bench.run_all --worker fused_add_sweep precompile ROWS WIDTH ...``): the
timing loop then only loads them. Budget: about 3.5 minutes on an H200, right after width_sweep.
"""
from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
import time

import torch

import rmsnorm_triton
from bench import ROOT
from bench.harness import mode, record, shapes
from bench.harness.compile_only import compile_only
from bench.harness.contenders import fused_add_contenders
from bench.harness.op_timing import (add_gbps, fused_add_inputs, large_copy, min_bytes, shape_entry, sweep_widths,
                                     time_fused_add)
from bench.harness.shapes import BENCH_TOKENS, MODEL_WIDTHS, SWEEP_WIDTHS

NAME = "fused_add_sweep"
ROWS = BENCH_TOKENS  # 16384
EPS = 1e-6
DTYPE = torch.bfloat16
ELEM_BYTES = 2
QUICK_WIDTHS = [256, 300]  # 300: rows without 16-byte loads
QUICK_ROWS = 4
CONTENDERS = ["unfused", "compile_hf", "liger", "quack", "triton_fused_add"]
OURS = "triton_fused_add"
BASELINE = "unfused"  # ours without the fusion: a torch add, then the plain kernels
PEERS = ["compile_hf", "liger", "quack"]
TIE_RULE = "within_2pct"  # 15 replays per timing, as width_sweep (bench/report/names.py TIE_RULES)
# Issue 19's targets, forward+backward with dy and ds: a share of the copy ceiling at widths >= TARGET_FROM,
# no slower than the baseline and level with (or ahead of) the fastest peer at every width, under the tie rule.
TARGETS = {"fwd_bwd": 0.85}
TARGET_FROM = 1024
NO_SLOWER_THAN_BASELINE = ["fwd_bwd"]
LEVEL_WITH_BEST_PEER = ["fwd_bwd"]
SHORT_CALL_US = 100  # a call this short carries launch and tail costs that no tuning removes
BYTES = {"fwd_io": 4, "bwd_io": 4}
REPLAYS = 15
PRECOMPILE_WORKERS = 8
PRECOMPILE_TIMEOUT_S = 240


def selected_widths(quick: bool = False) -> list[int]:
    """SWEEP_WIDTHS (QUICK_WIDTHS for --quick), or the widths BENCH_WIDTHS names."""
    return shapes.selected_widths(QUICK_WIDTHS if quick else SWEEP_WIDTHS)


def ours_configs(width: int, device) -> dict:
    """The fused kernels' launch configs at this width on ``device`` (rmsnorm_config's fused ladders)."""
    return {"forward": dataclasses.asdict(rmsnorm_triton.forward_config(width, device, fused=True)),
            "backward": dataclasses.asdict(rmsnorm_triton.backward_config(width, device, fused=True))}


# ---------------------------------------------------------------- compiling our kernels, in workers

def worker(argv) -> int:
    """``precompile ROWS WIDTH ...``: compile the kernels that ours fused and ours unfused launch at
    each width (the timed shapes: Triton specializes on the integer arguments), launching none."""
    if argv[:1] != ["precompile"] or len(argv) < 3:
        raise SystemExit(f"usage: --worker {NAME} precompile ROWS WIDTH ...; got {argv}")
    if not mode.gpu_available():
        raise SystemExit("precompiling needs a CUDA GPU (the interpreter compiles nothing)")
    import rmsnorm_fused_add

    compile_only(rmsnorm_triton)
    rows, widths = int(argv[1]), [int(w) for w in argv[2:]]
    failed = 0
    for width in widths:
        x = torch.empty(rows, width, device="cuda", dtype=DTYPE)
        w = torch.empty(width, device="cuda", dtype=DTYPE)
        rstd = torch.empty(rows, device="cuda")
        try:
            rmsnorm_fused_add.fused_add_rms_norm_forward(x, x, w, EPS)
            rmsnorm_fused_add.fused_add_rms_norm_backward(x, x, x, w, rstd)
            rmsnorm_triton.rms_norm_forward(x, w, EPS)
            rmsnorm_triton.rms_norm_backward(x, x, w, rstd)
        except Exception as error:  # the timing loop compiles it again and records the error there
            failed += 1
            print(f"  precompile H={width}: {error!r}"[:300], flush=True)
    return 1 if failed else 0


def precompile(rows: int, widths: list[int]) -> dict:
    """Compile our kernels at every width, ``PRECOMPILE_WORKERS`` processes at a time; what happened.
    A worker that fails only costs time (the timing loop compiles what is missing); it is recorded."""
    began = time.perf_counter()
    n = max(1, min(PRECOMPILE_WORKERS, len(widths), os.cpu_count() or 1))
    # widest first, dealt round-robin: each worker gets a share of the slow compiles
    order = sorted(widths, reverse=True)
    chunks = [order[i::n] for i in range(n)]
    procs = [subprocess.Popen([sys.executable, *record.worker_args(NAME, "precompile", str(rows),
                                                                   *map(str, chunk))], cwd=ROOT)
             for chunk in chunks]
    codes = []
    for proc in procs:
        try:
            codes.append(proc.wait(timeout=max(1.0, PRECOMPILE_TIMEOUT_S - (time.perf_counter() - began))))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
            codes.append("timeout")
    out = {"workers": n, "exit_codes": codes, "wall_s": round(time.perf_counter() - began, 1)}
    print(f"  precompiled our kernels at {len(widths)} widths in {out['wall_s']:.0f} s "
          f"({n} workers, exit codes {codes})", flush=True)
    return out


# ---------------------------------------------------------------- the sweep

def run(args) -> dict:
    quick, on_gpu, _, device, _ = mode.gpu_or_quick(args, NAME, None, None)
    widths = selected_widths(quick)
    rows = QUICK_ROWS if quick else ROWS
    results = {"shapes": [], "skipped": {}}
    if on_gpu:
        results["precompile"] = precompile(rows, widths)
    results["copy"] = large_copy(quick, device)

    def measure(index, width):
        nbytes = min_bytes(rows, width, **BYTES)
        n_sets = 1 if quick else mode.rotating_input_sets(nbytes["fwd_bwd"], device)
        sets = fused_add_inputs(rows, width, DTYPE, device, n_sets, seed=100 * index)
        entry = shape_entry(f"H={width}", rows, width, nbytes, n_sets, nbytes["fwd"], device,
                            model=MODEL_WIDTHS.get(width), align=rmsnorm_triton.row_alignment(width, width),
                            ours_configs=ours_configs(width, device))
        for name, (fn, weight) in fused_add_contenders(CONTENDERS, width, DTYPE, device, results["skipped"],
                                                       EPS).items():
            time_fused_add(entry, name, fn, weight, sets, replays=REPLAYS)
        add_gbps(entry)
        return entry

    results["shapes"] = sweep_widths(widths, on_gpu, measure)
    config = {"dtype": "bfloat16", "eps": EPS, "rows": rows, "widths": widths, "contenders": CONTENDERS,
              "ours": OURS, "peers": PEERS, "baseline": BASELINE, "tie_rule": TIE_RULE,
              "targets": TARGETS, "target_from_width": TARGET_FROM,
              "no_slower_than_baseline": NO_SLOWER_THAN_BASELINE, "level_with_best_peer": LEVEL_WITH_BEST_PEER,
              "short_call_us": SHORT_CALL_US, "max_cols": rmsnorm_triton.MAX_COLS, "elem_bytes": ELEM_BYTES,
              "bytes": BYTES | {"fwd": "reads x, r; writes s, y", "bwd": "reads dy, ds, s; writes dx",
                                "weight": "read each way, dW written: 3 x H elements", "rstd": "not counted"},
              "models": {str(w): m for w, m in MODEL_WIDTHS.items() if w in widths},
              "l2_bytes": mode.l2_cache_bytes(device), "liger_in_place": False, "quack_prenorm": True,
              "compile": "torch.compile(HF add + Qwen3RMSNorm, dynamic=False), dynamo reset per width",
              "replays": REPLAYS,
              "timer": f"median GPU time per call from {REPLAYS} CUDA-graph replays cycling over input sets >= 4x L2"}
    return {"config": config, "results": results}
