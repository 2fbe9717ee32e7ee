"""Experiment "host": what one RMSNorm call costs the CPU, contender by contender, and where ours spends it.

A GPU kernel only helps when the host issues it faster than the GPU runs it. Here each contender's forward +
backward (eager autograd: ``fn(x).backward(dy)``, fresh leaves) is issued ``calls`` times without a
synchronisation, and the host time per call is the perf_counter time of the loop over ``calls``; the
wall time per call adds the final synchronisation, so a host-bound contender has host ~ wall and a GPU-bound
one host < wall. Median of ``repeats`` loops. bf16, the Qwen3 shapes of the op-level tables.

For ours (``triton``) the breakdown, same method: the forward alone (no autograd; from its launch plan),
the same forward the usual way (a config override never plans: argument preparation, then Triton's
``kernel[grid]``), the backward function called directly (planned), the argument preparation
(``forward_arguments``: checks, allocations), one launch of the forward kernel through ``kernel[grid]``,
the same launch replayed by a plan (``KernelLaunch``: the binary's launcher, on GPUs whose Triton has the
fast launch), and an autograd ``x * 2`` forward + backward (what any op's backward() call costs: the
engine's hand-off to its device thread and back).
"""
from __future__ import annotations

import statistics
import time

import torch

from bench.harness import mode
from bench.harness.contenders import rmsnorm_contenders
from bench.harness.shapes import RMSNORM_SHAPES
import rmsnorm_triton as rt

NAME = "host"
CONTENDERS = ["hf", "torch_rms_norm", "compile_hf", "liger", "quack", "triton"]
SHAPES = ["H=1024", "H=4096", "k_norm", "q_norm"]
EPS = 1e-6


def host_and_wall_us(fn, calls: int, repeats: int, sync) -> dict:
    """Per-call host and wall time (µs): ``calls`` unsynchronised calls, median over ``repeats`` loops."""
    for _ in range(10):
        fn()
    sync()
    host, wall = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        host.append((time.perf_counter() - start) / calls * 1e6)
        sync()
        wall.append((time.perf_counter() - start) / calls * 1e6)
    return {"host_us": statistics.median(host), "wall_us": statistics.median(wall),
            "host_range_us": [min(host), max(host)]}


def run(args) -> dict:
    quick, on_gpu, setup, device, _ = mode.gpu_or_quick(args, NAME, dict(calls=2, repeats=2, rows=16, shapes=["k_norm"]),
                                                        dict(calls=200, repeats=5, rows=None, shapes=SHAPES))
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    dtype = torch.bfloat16 if on_gpu else torch.float32
    results, skipped = [], {}
    for label in setup["shapes"]:
        rows, width = RMSNORM_SHAPES[label]
        rows = setup["rows"] or rows
        x = torch.randn(rows, width, device=device, dtype=dtype)
        dy = torch.randn_like(x)
        entry = {"label": label, "rows": rows, "width": width, "fwd_bwd": {}, "ours": {}}
        names = CONTENDERS if on_gpu else ["hf", "torch_rms_norm", "triton"]
        for name, (fn, weight) in rmsnorm_contenders(names, width, dtype, device, skipped, EPS).items():
            leaf = x.clone().requires_grad_()

            def forward_backward(fn=fn, leaf=leaf, weight=weight):
                leaf.grad = None
                weight.grad = None
                fn(leaf).backward(dy)

            entry["fwd_bwd"][name] = host_and_wall_us(forward_backward, setup["calls"], setup["repeats"], sync)
        w = torch.ones(width, device=device, dtype=dtype)
        _, rstd = rt.rms_norm_forward(x, w, EPS)
        args_, config = rt.forward_arguments(x, w, EPS)[2], rt.forward_config(width, x.device)
        leaf = x.clone().requires_grad_()
        parts = {
            "forward": lambda: rt.rms_norm_forward(x, w, EPS),
            "forward_usual": lambda: rt.rms_norm_forward(x, w, EPS, config=config),
            "backward_direct": lambda: rt.rms_norm_backward(dy, x, w, rstd),
            "forward_arguments": lambda: rt.forward_arguments(x, w, EPS),
            "one_launch": lambda: rt.launch_forward(args_, config),
            "autograd_mul": lambda: (leaf * 2).backward(dy),
        }
        if rt._FAST_LAUNCH:  # a plan's launch: the binary's launcher, arguments bound once
            replay = rt.launch_forward(args_, config, record=True)
            tensors = [args_[name] for name in ("X", "W", "Y", "RSTD", "R", "S")]
            parts["planned_launch"] = lambda: replay(*tensors)
        for part, fn in parts.items():
            entry["ours"][part] = host_and_wall_us(fn, setup["calls"], setup["repeats"], sync)
        results.append(entry)
        print(f"  {label}: " + ", ".join(f"{k} {v['host_us']:.0f}/{v['wall_us']:.0f}"
                                         for k, v in entry["fwd_bwd"].items()), flush=True)
    config = {"dtype": str(dtype).removeprefix("torch."), "eps": EPS, "shapes": setup["shapes"], "contenders": CONTENDERS,
              "calls": setup["calls"], "repeats": setup["repeats"], "ours": "triton",
              "timer": ("perf_counter over `calls` unsynchronised eager calls (host), + the final "
                        "torch.cuda.synchronize (wall); median of `repeats` loops")}
    return {"config": config, "results": {"shapes": results, "skipped": skipped}}
