"""Residual add + RMSNorm, op level, at Qwen3's hidden sizes: fused kernels side by side.

    python -m bench.run_all fused_add        # on a GPU -> docs/data/<gpu>/fused_add.json

Every contender computes ``s = residual + x`` and ``y = RMSNorm(s)`` and returns (y, s):

* ``triton_fused_add``: this project's ``fused_add_rms_norm`` (snippets/rmsnorm_fused_add.py), one kernel each way;
* ``unfused``: a torch add, then this project's plain ``rms_norm``: the baseline the fusion removes;
* ``compile_hf``: ``torch.compile`` of HF's add + Qwen3RMSNorm (one static graph per width);
* ``liger``: Liger's ``LigerFusedAddRMSNormFunction`` (casting mode llama, in_place=False: the
  functional form's default in_place=True writes dX into the dy buffer, which the graphs reuse);
* ``quack``: quack's ``rmsnorm(x, w, residual=r, prenorm=True)``, which returns (out, residual_out)
  only with prenorm=True; it adds and normalizes in fp32 without rounding s first (not HF's order).

A contender that cannot run here is in ``results["skipped"]`` with the reason; an error at one
width goes in that width's ``errors``.

The backward receives both gradients, dy for y and ds for s (s is the next layer's residual), and
``torch.autograd.grad`` returns the gradients of x, residual and w: no ``.grad`` accumulation,
so no contender pays for a copy of the shared dx.

Bytes, the minimum (``harness.op_timing.min_bytes(R, H, fwd_io=4, bwd_io=4)``) for R rows of H bf16:
forward reads x and r and writes s and y, 4*R*H*2, plus w read; backward reads dy, ds and s (x_hat
is recomputed from s and the saved rstd, 4 bytes per row, not counted) and writes dx, 4*R*H*2, which
is also the residual's gradient, plus w read and dW written. Unfused the same work moves
3 + 2 tensors forward and 3 + 3 (norm) + 2 (ds add) backward.
"""
from __future__ import annotations

import torch

from bench.harness import mode
from bench.harness.contenders import fused_add_contenders
from bench.harness.op_timing import add_gbps, fused_add_inputs, large_copy, min_bytes, shape_entry, time_fused_add
from bench.harness.shapes import BENCH_TOKENS, RMSNORM_SHAPES

NAME = "fused_add"
SHAPES = [RMSNORM_SHAPES[name] for name in RMSNORM_SHAPES if name.startswith("H=")]  # 16384 x 1024 ... 5120
QUICK_SHAPES = [(16, 256), (16, 1000)]
CONTENDERS = ["unfused", "compile_hf", "liger", "quack", "triton_fused_add"]
OURS = "triton_fused_add"
PEERS = CONTENDERS[:-1]
BASELINE = "unfused"  # what the fusion removes: a torch add, then the plain kernel
TIE_RULE = "within_1pct"  # as the rmsnorm experiment's (bench/report/names.py TIE_RULES)
DTYPE = torch.bfloat16
EPS = 1e-6
BYTES = {"fwd_io": 4, "bwd_io": 4}
# Passes over the R x H values (the docstring above): fused forward reads x, r and writes s, y;
# unfused the add reads x, r, writes s, then the norm reads s, writes y. Backward: fused reads
# dy, ds, s, writes dx; unfused the norm reads dy, s, writes its dx, then autograd adds ds to it.
PASSES = {"fused": {"fwd": 4, "fwd_bwd": 8}, "unfused": {"fwd": 5, "fwd_bwd": 11}}


def run(args) -> dict:
    quick, on_gpu, shapes, device, _ = mode.gpu_or_quick(args, NAME, QUICK_SHAPES, SHAPES)
    results = {"copy": large_copy(quick, device), "shapes": [], "skipped": {}}
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        for index, (rows, width) in enumerate(shapes):
            print(f"  H={width}", flush=True)
            nbytes = min_bytes(rows, width, **BYTES)
            n_sets = 1 if quick else mode.rotating_input_sets(nbytes["fwd_bwd"], device)
            sets = fused_add_inputs(rows, width, DTYPE, device, n_sets, seed=100 * index)
            entry = shape_entry(f"H={width}", rows, width, nbytes, n_sets, nbytes["fwd"], device)
            for name, (fn, weight) in fused_add_contenders(CONTENDERS, width, DTYPE, device, results["skipped"],
                                                           EPS).items():
                time_fused_add(entry, name, fn, weight, sets)
            add_gbps(entry)
            results["shapes"].append(entry)
            sets.clear()
            if on_gpu:
                torch.cuda.empty_cache()
    config = {"dtype": "bfloat16", "eps": EPS, "shapes": [list(s) for s in shapes], "contenders": CONTENDERS,
              "ours": OURS, "peers": PEERS, "baseline": BASELINE, "passes": PASSES, "tie_rule": TIE_RULE,
              "rows": BENCH_TOKENS if not quick else QUICK_SHAPES[0][0], "bytes": BYTES,
              "l2_bytes": mode.l2_cache_bytes(device), "liger_in_place": False, "quack_prenorm": True,
              "timer": "median GPU time per call from CUDA-graph replays cycling over input sets >= 4x L2"}
    return {"config": config, "results": results}

