"""Where one training step's GPU time goes: every kernel of a profiled step in one bucket, and the time the
GPU waits.

The buckets split what is not GEMM or attention into what a reader can act on: this site's Triton kernels
(their names read from the snippets' ``@triton.jit`` functions), Liger's (read from ``liger_kernel.ops``),
Inductor's generated ones (``triton_*``), the optimizer's, copies and layout changes, and PyTorch's
remaining elementwise, reduction and loss kernels. ``breakdown`` also gives the step's launches, the GPU's
busy time (the union of kernel intervals), its idle time between the first and the last kernel, and the
host time before the first and after the last kernel.

A profiled step runs slower than an unprofiled one (the profiler records every op and launch on the CPU),
so the record keeps the profiled step's wall time beside the timed steps' median: the kernel times are
the GPU's, the idle time is an upper bound.
"""
from __future__ import annotations

import collections
import gzip
import importlib
import json
import pathlib
import pkgutil
import re
import tempfile
import time

import p1_profile_step
import torch

# Snippet modules with Triton kernels that the fusion patches launch.
OUR_KERNEL_MODULES = ("rmsnorm_triton", "rmsnorm_fused_add", "qk_norm_rope", "swiglu", "linear_cross_entropy")

# Checked in order: the first bucket whose rule matches a kernel's name takes it.
NAME_BUCKETS = (
    ("Inductor (torch.compile)", r"^triton_"),
    ("attention", r"flash|fmha|attention|sdpa|cudnn_generated"),
    ("GEMM", r"gemm|nvjet|xmma|cutlass|cublas|sm90_|sm80_|splitk"),
    ("optimizer", r"adam|multi_tensor"),
    ("softmax / loss", r"softmax|nll_loss|cross_entropy|log_softmax"),
    ("reduction", r"reduce_kernel|reduction"),
    ("copy / cast / layout", r"copy|catarray|cat_array|transpose|index|gather|scatter|fill|memcpy|memset"),
    ("elementwise", r"elementwise"),
)
OURS, LIGER, OTHER = "this site's Triton kernels", "Liger's Triton kernels", "other"
BUCKETS = ("GEMM", "attention", OURS, LIGER, *(b for b, _ in NAME_BUCKETS if b not in ("GEMM", "attention")), OTHER)
DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def jit_function_names(module) -> set[str]:
    """The names of a module's Triton kernels (``@triton.jit`` functions, autotuned or not)."""
    from triton.runtime.jit import KernelInterface  # JITFunction, Autotuner, Heuristics, the interpreter's

    names = set()
    for value in vars(module).values():
        if isinstance(value, KernelInterface):
            while isinstance(value, KernelInterface):
                value = value.fn
            names.add(value.__name__)
    return names


def our_kernel_names() -> set[str]:
    return set().union(*(jit_function_names(importlib.import_module(m)) for m in OUR_KERNEL_MODULES))


def liger_kernel_names() -> set[str]:
    """Liger's kernel names, or none where liger_kernel is not installed."""
    try:
        ops = importlib.import_module("liger_kernel.ops")
    except ImportError:
        return set()
    names = set()
    for info in pkgutil.iter_modules(ops.__path__):
        try:
            names |= jit_function_names(importlib.import_module(f"liger_kernel.ops.{info.name}"))
        except Exception:  # an op module that needs what this machine lacks: its kernels cannot run here either
            continue
    return names


def bucket(name: str, ours: set[str], liger: set[str]) -> str:
    """The bucket of a kernel called ``name`` (a Triton kernel's trace name is its function's name)."""
    base = re.sub(r"_\d+$", "", name)  # a kernel torch.compile launches for the user may carry a suffix
    if name in ours or base in ours:
        return OURS
    if name in liger or base in liger:
        return LIGER
    lowered = name.lower()
    return next((b for b, rule in NAME_BUCKETS if re.search(rule, lowered)), OTHER)


def device_events(events: list) -> list:
    """The kernels, copies and memsets of a Chrome trace, by start time."""
    return sorted((e for e in events if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES),
                  key=lambda e: e["ts"])


def breakdown(events: list, wall_us: float, ours: set[str], liger: set[str]) -> dict:
    """One profiled step's GPU time by bucket, with its launches, busy and idle time (µs)."""
    kernels = device_events(events)
    per_bucket = collections.defaultdict(lambda: {"kernels": 0, "total_us": 0.0})
    for k in kernels:
        entry = per_bucket[bucket(k["name"], ours, liger)]
        entry["kernels"] += 1
        entry["total_us"] += k["dur"]
    # Busy, span and idle as 篇 1's launch-overhead reading counts them (the same device events when there are any).
    summary = p1_profile_step.launch_summary(events) if kernels else {"busy_us": 0.0, "span_us": 0.0}
    busy, span = summary["busy_us"], summary["span_us"]
    return {"wall_us": wall_us, "launches": len(kernels), "kernel_time_us": sum(k["dur"] for k in kernels),
            "busy_us": busy, "span_us": span, "gpu_idle_us": span - busy, "outside_span_us": max(wall_us - span, 0.0),
            "buckets": {b: dict(per_bucket[b]) for b in BUCKETS if b in per_bucket}}


def profile(step, sync) -> dict:
    """Run ``step`` once under torch.profiler (CPU and, where there is one, the GPU); its breakdown."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if torch.cuda.is_available():
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    sync()
    with torch.profiler.profile(activities=activities) as profiler:
        began = time.perf_counter()
        step()
        sync()
        wall_us = (time.perf_counter() - began) * 1e6
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "step.json.gz"
        profiler.export_chrome_trace(str(path))
        with gzip.open(path, "rt", encoding="utf-8") as file:
            events = json.load(file)["traceEvents"]
    return breakdown(events, wall_us, our_kernel_names(), liger_kernel_names())
