"""RMSNorm microbenchmark: every contender side by side, forward and forward+backward.

    python -m bench.run_all rmsnorm          # on a GPU; writes docs/data/<gpu>/rmsnorm.json

Contenders: HF eager Qwen3RMSNorm, torch.nn.functional.rms_norm (fused in
PyTorch >= 2.11), torch.compile(HF module), Liger-Kernel's functional rms_norm
(in_place=False: its default writes dX into dY), quack's CuTe-DSL rmsnorm (CUDA
only: recorded under results["skipped"] with the reason when it cannot be imported),
the naive one-row-per-program kernel (篇2 §四/§五) and this project's kernel.
bf16 throughout.

Bytes counted are the minimum (``harness.op_timing.min_bytes``): forward reads x and w and writes y;
backward reads x, dy and w and writes dx and dW; so forward+backward is
5 * rows * H * 2 bytes plus 3 * H * 2 for the weight.
"""
from __future__ import annotations

import torch

from bench.harness import mode, timers
from bench.harness.contenders import rmsnorm_contenders
from bench.harness.op_timing import add_gbps, large_copy, min_bytes, rmsnorm_inputs, shape_entry, time_contender
from bench.harness.shapes import HIDDEN_SIZES, RMSNORM_SHAPES
from rmsnorm_triton import rms_norm_backward, rms_norm_forward

NAME = "rmsnorm"


def _shape(name, layout="contiguous", label=None):
    rows, width = RMSNORM_SHAPES[name]
    return (label or (name if name.startswith("H=") else f"{name} {rows}x{width}"), rows, width, layout)


SHAPES = [  # (label, rows, width, dy layout)
    *(_shape(f"H={hidden}") for hidden in HIDDEN_SIZES),
    _shape("q_norm"),
    _shape("k_norm"),
    _shape("q_norm", "heads_transposed", "q_norm, dy transposed"),
]
QUICK_SHAPES = [("H=256", 64, 256, "contiguous"), ("q 64x128", 64, 128, "heads_transposed")]
CONTENDERS = ["hf", "torch_rms_norm", "compile_hf", "liger", "quack", "naive", "triton"]
OURS = "triton"
PEERS = ["hf", "torch_rms_norm", "compile_hf", "liger", "quack"]  # what ours is compared with ("naive" is ours too)
TIE_RULE = "within_1pct"  # medians of 25 graph replays: level within 1 % (bench/report/names.py TIE_RULES)
RSTD_SHAPES = [(name, *RMSNORM_SHAPES[name]) for name in ("q_norm", "H=1024", "H=4096")]  # (label, rows, width)
QUICK_RSTD_SHAPES = [("q 64x128", 64, 128), ("H=256", 64, 256)]
PHASES = ("fwd", "fwd_bwd", "fwd_eager", "fwd_bwd_eager")
DTYPE = torch.bfloat16
EPS = 1e-6


def run(args) -> dict:
    quick, _, shapes, device, _ = mode.gpu_or_quick(args, NAME, QUICK_SHAPES, SHAPES)
    results = {"copy": large_copy(quick, device), "shapes": [], "skipped": {}}
    for index, (label, rows, width, layout) in enumerate(shapes):
        print(f"  {label}", flush=True)
        nbytes = min_bytes(rows, width)
        n_sets = 1 if quick else mode.rotating_input_sets(nbytes["fwd_bwd"], device)
        sets = [rmsnorm_inputs(rows, width, layout, DTYPE, device, seed=100 * index + k) for k in range(n_sets)]
        entry = shape_entry(label, rows, width, nbytes, n_sets, 2 * rows * width * 2, device, PHASES,
                            dy_layout=layout)
        for name, (fn, weight) in rmsnorm_contenders(CONTENDERS, width, DTYPE, device, results["skipped"],
                                                     EPS).items():
            time_contender(entry, name, fn, weight, sets)
        add_gbps(entry)
        results["shapes"].append(entry)
        del sets
        if device == "cuda":
            torch.cuda.empty_cache()
    results["rstd"] = rstd_choice(device, DTYPE, quick)
    config = {"dtype": "bfloat16", "eps": EPS, "shapes": [list(s) for s in shapes], "contenders": CONTENDERS,
              "ours": OURS, "peers": PEERS, "tie_rule": TIE_RULE, "l2_bytes": mode.l2_cache_bytes(device),
              "timer": ("fwd/fwd_bwd: median GPU time per call from CUDA-graph replays cycling over input sets "
                        ">= 4x L2; *_eager: triton.testing.do_bench median per eager call (host overhead "
                        "included), warmup=50 ms, rep=300 ms, L2 flushed between runs"),
              "liger_in_place": False}
    return {"config": config, "results": results}


def rstd_choice(device, dtype, quick):
    """Backward time with the saved rstd vs recomputing it in the backward kernel."""
    out = []
    for label, rows, width in QUICK_RSTD_SHAPES if quick else RSTD_SHAPES:
        sets = [rmsnorm_inputs(rows, width, "contiguous", dtype, device, seed=99 + k) for k in range(1 if quick else 3)]
        w = (torch.rand(width, device=device) + 0.5).to(dtype)
        rstds = [rms_norm_forward(x, w, EPS)[1] for x, _ in sets]
        saved = timers.cuda_graph_time_us([lambda k=k: rms_norm_backward(sets[k][1], sets[k][0], w, rstds[k])
                                           for k in range(len(sets))])
        recomputed = timers.cuda_graph_time_us(
            [lambda k=k: rms_norm_backward(sets[k][1], sets[k][0], w, None, eps=EPS) for k in range(len(sets))])
        out.append({"label": label, "rows": rows, "width": width, "saved_us": saved["median_us"],
                    "recomputed_us": recomputed["median_us"], "rstd_bytes": rows * 4,
                    "bwd_bytes": 3 * rows * width * 2})
    return out

