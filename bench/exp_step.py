"""Experiment "step": one Qwen3 training step, contender by contender, and the share of it spent in RMSNorm.

What a *step* is here: ``model.zero_grad(set_to_none=True)``, forward with
``labels`` (HF computes the shifted cross-entropy), ``loss.backward()``.
No optimizer update: it costs the same in every contender and would only dilute the
differences.

Model: Qwen3-8B layer geometry (hidden 4096, intermediate 12288, 32 heads,
8 KV heads, head_dim 128, vocab 151936), random init from a config, bf16
parameters, sdpa attention, ``use_cache=False``, 8 decoder layers instead of 36
(full depth at B=4, T=4096 does not fit in memory without activation
checkpointing), B=4, T=4096, no activation checkpointing.

Contenders (each in a fresh ``python -m bench.run_all --worker step --contender NAME`` process, so that
no patch, compile cache in memory or allocator state leaks from one into the next):

* ``eager``           HF as shipped: ``Qwen3RMSNorm`` is unfused Python ops;
* ``torch_rmsnorm``   norms swapped for ``torch.nn.functional.rms_norm`` (PyTorch's fused kernel);
* ``triton_fwd``      ``TritonQwen3RMSNormFwdOnly``: Triton forward, autograd backward;
* ``triton``          ``TritonQwen3RMSNorm``: Triton forward and backward;
* ``triton_fused_add`` ``triton`` + every residual add fused into the RMSNorm after it
  (``snippets/qwen3_fused_add_patch.py``: 2 per layer; q_norm, k_norm, layer 0's input norm plain);
* ``compile``         HF eager + ``torch.compile`` (regional: each decoder layer and the final norm);
* ``triton_compile``  ``triton`` + the same regional ``torch.compile``;
* ``liger``           ``liger_kernel.transformers.apply_liger_kernel_to_qwen3()`` with its defaults
  (rope, rms_norm, swiglu, fused linear cross-entropy), applied before the model is built.

Experiment ``step_fusion`` (bench/exp_step_fusion.py) runs this module's machinery over the fusion-set tiers
(``FUSION_PARTS``: our RMSNorm plus one of our kernels or Liger's in its place, our whole set, Liger's patch
without its loss); ``run(args, name=..., default=...)`` serves both.

Environment knobs: ``BENCH_STEP_CONTENDERS=eager,triton`` runs a subset; ``BENCH_STEP_BUDGET_S`` (default 480)
bounds the whole run: a contender that would start with less than 30 s left is recorded as skipped.

Timing: CUDA events around each step. Every contender runs in ``rounds`` fresh processes, the contenders
interleaved (round r starts at contender r of the list), ``timed_steps`` each after warm-up; the median is over all
of a contender's timed steps, with a 95 % interval from a two-level bootstrap (processes, then steps:
``bench/harness/stats.py``). Pages rank two contenders only when their intervals are disjoint.
Peak memory: ``torch.cuda.max_memory_allocated`` over the timed steps (the largest of the rounds).
GPU time per step: the kernels of the one profiled step (round 1), summed.

RMSNorm share, from one profiled step (torch.profiler, CPU + CUDA activities):

* eager contenders: each RMSNorm module's forward runs inside
  ``record_function("rmsnorm_fwd")``; the forward cost is the GPU time of all
  kernels launched inside those ranges. Every autograd node created there has a
  sequence number; the backward nodes carrying the same (sequence number,
  forward thread) are that norm's backward, and their kernels (including those of
  nested ops) are its backward cost. A sequence number belongs to the last op that
  recorded it (the op that created the node), so an op that merely peeked the
  counter cannot steal a neighbour's node.
* ``triton_fused_add``: the norms are subclasses of HF's Qwen3RMSNorm (same name, a
  forward that can take the residual), so the same ranges hold the fused calls; their time includes the residual
  adds they absorbed (in the other contenders those adds are not RMSNorm time).
* compiled contenders: Inductor fuses the norm into neighbouring kernels, so no
  module boundary survives. Kernels whose name contains "rms_norm" (our Triton
  kernels, kept by name in Inductor's output) are counted; for ``compile`` (HF
  norms fused by Inductor) the share is reported as not separable.
* Not counted: AccumulateGrad of the norm weights (no kernel: grads are set to None
  every step) and any launch gaps. The Amdahl bound is ``step / (step - rmsnorm)``:
  the speed-up a zero-time RMSNorm would give that contender.
"""
from __future__ import annotations

import argparse
import pathlib
import re
import statistics
import time

import torch
from torch.autograd import DeviceType
from transformers import Qwen3ForCausalLM

from bench.harness import mode, stats, timers
from bench.harness.step_runs import CONTENDERS, STEP_CONTENDERS, resolution, run_rounds, step_config
from bench.harness.training import (ContenderSkipped, build_config, fusion_parts, norm_class,
                                    write_child_record)
from qwen3_configs import rmsnorm_count
from qwen3_fused_add_patch import patch_qwen3_fused_add_rmsnorm
from qwen3_patch import patch_qwen3_rmsnorm
from rmsnorm_triton import TritonQwen3RMSNorm, TritonQwen3RMSNormFwdOnly

NAME = "step"

# Which parts of snippets/qwen3_fusion_patch.py and of Liger's Qwen3 patch each contender applies.
FUSION_PARTS = {
    "triton_qk_rope": (fusion_parts("rms_norm", "qk_norm_rope"), None),
    "triton_liger_rope": (fusion_parts("rms_norm"), "rope"),
    "triton_swiglu": (fusion_parts("rms_norm", "swiglu"), None),
    "triton_liger_swiglu": (fusion_parts("rms_norm"), "swiglu"),
    "fusion_set": (fusion_parts("rms_norm", "fused_add", "qk_norm_rope", "swiglu"), None),
    "fusion_set_loss": (fusion_parts("rms_norm", "fused_add", "qk_norm_rope", "swiglu", "loss"), None),
    "fusion_set_loss_compile": (fusion_parts("rms_norm", "fused_add", "qk_norm_rope", "swiglu", "loss"), None),
    "liger_no_loss": (None, ("rope", "rms_norm", "swiglu")),
}
COMPILED = {"compile", "triton_compile", "liger_compile", "fusion_set_loss_compile"}
BASELINE = "eager"  # every step is compared with HF as shipped
OURS = "triton"
NORM_KERNEL_NAME = re.compile(r"rms_?norm|dw_reduce", re.IGNORECASE)  # ours, Liger's; Inductor keeps user kernel names
FUSED_RSQRT_NAME = re.compile(r"^triton_.*rsqrt")  # Inductor kernels holding a norm's forward, fused with neighbours


# ---------------------------------------------------------------- one contender (child process)

def _torch_rmsnorm_class():
    return norm_class("TorchFusedRMSNorm", lambda x, weight, eps: torch.nn.functional.rms_norm(
        x, weight.shape, weight, eps))


def _apply_liger(parts, on_gpu: bool) -> dict:
    """Liger's Qwen3 patch with only ``parts`` on (before the model is built); its options."""
    try:
        from liger_kernel.transformers import apply_liger_kernel_to_qwen3
    except Exception as error:  # not installed on this machine
        raise ContenderSkipped(f"liger_kernel not importable: {error!r}") from error
    if not on_gpu:
        raise ContenderSkipped("Liger's kernels do not run under TRITON_INTERPRET (float eps .to()); GPU only")
    options = dict(rope="rope" in parts, rms_norm="rms_norm" in parts, swiglu="swiglu" in parts,
                   fused_linear_cross_entropy="fused_linear_cross_entropy" in parts, cross_entropy=False)
    apply_liger_kernel_to_qwen3(**options)
    return options


def _install_patch(contender: str, on_gpu: bool) -> dict:
    """Apply the contender's patch to transformers' modeling_qwen3 (before the model is built)."""
    if contender in ("eager", "compile"):
        return {"norm_class": "Qwen3RMSNorm"}
    if contender in ("liger", "liger_compile"):
        options = _apply_liger(("rope", "rms_norm", "swiglu", "fused_linear_cross_entropy"), on_gpu)
        return {"norm_class": "LigerRMSNorm", "liger_options": options}
    if contender in FUSION_PARTS:
        from qwen3_fusion_patch import apply_qwen3_fusion  # before Liger's: it keeps HF's classes

        ours, liger = FUSION_PARTS[contender]
        info = {}
        if liger:  # Liger's part first: it replaces module attributes our patch then checks
            info["liger_options"] = _apply_liger(liger, on_gpu)
        if ours:
            apply_qwen3_fusion(**ours)  # this process only ever builds this one model
            info["fusion_parts"] = ours
        norm = ("LigerRMSNorm" if not ours else "Qwen3RMSNorm" if ours["fused_add"]
                else "TritonQwen3RMSNorm")
        return info | {"norm_class": norm}
    if contender == "triton_fused_add":  # modeling_qwen3 builds the fused subclasses
        patch_qwen3_fused_add_rmsnorm()
        return {"norm_class": "Qwen3RMSNorm", "patch": "qwen3_fused_add_patch"}
    norm_cls = {"torch_rmsnorm": _torch_rmsnorm_class(), "triton_fwd": TritonQwen3RMSNormFwdOnly,
                "triton": TritonQwen3RMSNorm, "triton_compile": TritonQwen3RMSNorm}[contender]
    patch_qwen3_rmsnorm(norm_cls)  # this process only ever builds this one model
    return {"norm_class": norm_cls.__name__}


def _norm_modules(model):
    return [m for m in model.modules() if "RMSNorm" in type(m).__name__]


def _annotate_norms(model) -> None:
    """Wrap each RMSNorm module's forward in record_function("rmsnorm_fwd") (profiling only)."""
    for module in _norm_modules(model):
        forward = module.forward

        def annotated(*args, _forward=forward, **kwargs):
            with torch.profiler.record_function("rmsnorm_fwd"):
                return _forward(*args, **kwargs)

        module.forward = annotated


def measure_contender(contender: str, cfg: dict, device: str, log=print, profiled: bool = True) -> dict:
    on_gpu = device == "cuda"
    if contender in COMPILED and not on_gpu:
        raise ContenderSkipped("torch.compile cannot trace Triton kernels under TRITON_INTERPRET; GPU only")
    info = _install_patch(contender, on_gpu)
    config = build_config(cfg["model"])
    dtype = getattr(torch, cfg["dtype"])

    log(f"build model ({config.num_hidden_layers} layers, hidden {config.hidden_size}) on {device}")
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(config)
    model.to(dtype).train()
    norms = _norm_modules(model)
    info["norm_count"] = len(norms)
    info["norm_classes"] = sorted({type(m).__name__ for m in norms})
    expected = rmsnorm_count(config)
    if len(norms) != expected or info["norm_classes"] != [info["norm_class"]]:
        raise RuntimeError(f"expected {expected} x {info['norm_class']}, found {len(norms)} x {info['norm_classes']}")
    info["parameters"] = sum(p.numel() for p in model.parameters())

    if contender in COMPILED:  # regional compilation: identical layers share one compiled graph
        for layer in model.model.layers:
            layer.compile()
        model.model.norm.compile()

    generator = torch.Generator(device=device).manual_seed(1234)
    batches = [torch.randint(0, config.vocab_size, (cfg["batch"], cfg["seq_len"]), device=device,
                             generator=generator) for _ in range(2)]

    def step(batch):
        model.zero_grad(set_to_none=True)
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        return loss

    def sync():
        if on_gpu:
            torch.cuda.synchronize()

    # Warm-up. The first step includes compilation and Triton JIT; its wall time is kept.
    start = time.perf_counter()
    first_loss = step(batches[0]).item()
    first_step_s = time.perf_counter() - start
    log(f"first step {first_step_s:.1f} s (includes compilation / JIT), loss {first_loss:.5f}")
    for _ in range(cfg["warmup"] - 1 + (contender in COMPILED)):  # one more after compiling (lazy backward)
        step(batches[1])
    sync()

    # Timed steps.
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    step_ms = timers.call_times_ms([lambda b=b: step(b) for b in batches], cfg["timed_steps"], on_gpu)
    peak_gib = torch.cuda.max_memory_allocated() / 2**30 if on_gpu else None
    median_ms = statistics.median(step_ms)
    log(f"{cfg['timed_steps']} timed steps: median {median_ms:.1f} ms, peak {peak_gib} GiB")

    # One more step under the profiler (round 1 only), for the RMSNorm share and the GPU time per step.
    profile = None
    if profiled:
        profile = profile_rmsnorm(model, batches, cfg["profiled_steps"], annotate=contender not in COMPILED,
                                  on_gpu=on_gpu)
        profile["method"] = ("module ranges + autograd sequence numbers" if contender not in COMPILED
                             else "kernel names" if contender == "triton_compile" else "not separable")
        if contender == "compile":
            profile["rmsnorm_ms"] = None  # Inductor fused HF's norm into its neighbours
        log(f"RMSNorm per step: {profile['rmsnorm_ms']} ms of {profile['device_ms']:.1f} ms device time")

    result = dict(info)
    result.update(
        step_ms=step_ms,
        median_ms=median_ms,
        min_ms=min(step_ms),
        max_ms=max(step_ms),
        peak_gib=peak_gib,
        first_step_s=first_step_s,
        loss=first_loss,
        tokens_per_s=cfg["batch"] * cfg["seq_len"] / (median_ms / 1e3),
        profile=profile,
    )
    if contender in COMPILED:
        from torch._dynamo.utils import counters

        result["dynamo"] = {"graph_breaks": sum(counters["graph_break"].values()),
                            "unique_graphs": counters["stats"].get("unique_graphs", 0)}
    return result


def profile_rmsnorm(model, batches, n_steps: int, annotate: bool, on_gpu: bool) -> dict:
    from torch.profiler import ProfilerActivity, profile, record_function

    if annotate:
        _annotate_norms(model)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if on_gpu else [])
    with profile(activities=activities) as prof:
        for i in range(n_steps):
            batch = batches[i % len(batches)]
            model.zero_grad(set_to_none=True)
            with record_function("step_forward"):
                loss = model(input_ids=batch, labels=batch).loss
            with record_function("step_backward"):
                loss.backward()
        if on_gpu:
            torch.cuda.synchronize()
    result = attribute_rmsnorm(prof.events(), on_gpu=on_gpu)
    per_step = {k: (v / n_steps if isinstance(v, (int, float)) and not isinstance(v, bool) else v)
                for k, v in result.items()}
    return per_step | {"steps": n_steps}


def attribute_rmsnorm(events, on_gpu: bool) -> dict:
    """Per-profile RMSNorm time (ms). See the module docstring for the method.

    On CPU (``--quick``) there are no kernels; CPU time of the ops stands in for it.
    """
    def cost_us(event):
        return event.device_time_total if on_gpu else event.cpu_time_total

    cpu = [e for e in events if e.device_type == DeviceType.CPU]
    forward_windows = [e for e in cpu if e.name == "step_forward"]
    backward_windows = [e for e in cpu if e.name == "step_backward"]
    if not forward_windows or not backward_windows:
        raise RuntimeError("profile lacks the step_forward / step_backward ranges")
    main_thread = forward_windows[0].thread

    def within(event, windows):
        return any(w.time_range.start <= event.time_range.start <= w.time_range.end for w in windows)

    def in_norm(event):
        parent = event.cpu_parent
        while parent is not None:
            if parent.name == "rmsnorm_fwd":
                return True
            parent = parent.cpu_parent
        return False

    regions = [e for e in cpu if e.name == "rmsnorm_fwd"]
    forward_us = sum(cost_us(e) for e in regions)

    # Sequence number -> is its node created inside an RMSNorm range? The last op recording it wins.
    owner = {}
    for event in sorted((e for e in cpu if e.thread == main_thread and e.sequence_nr >= 0
                         and within(e, forward_windows)), key=lambda e: e.time_range.start):
        owner[event.sequence_nr] = in_norm(event)
    norm_seqs = {seq for seq, inside in owner.items() if inside}

    matched = [e for e in cpu if e.sequence_nr in norm_seqs and e.fwd_thread == main_thread
               and not e.name.startswith(("aten::", "autograd::engine")) and within(e, backward_windows)]
    matched_ids = {id(e) for e in matched}

    def has_matched_ancestor(event):
        parent = event.cpu_parent
        while parent is not None:
            if id(parent) in matched_ids:
                return True
            parent = parent.cpu_parent
        return False

    backward_nodes = [e for e in matched if not has_matched_ancestor(e)]
    backward_us = sum(cost_us(e) for e in backward_nodes)

    result = {
        "rmsnorm_fwd_ms": forward_us / 1e3 if regions else None,
        "rmsnorm_bwd_ms": backward_us / 1e3 if regions else None,
        "rmsnorm_ms": (forward_us + backward_us) / 1e3 if regions else None,
        "annotated_ranges": len(regions),
        "backward_nodes": len(backward_nodes),
        "backward_node_names": sorted({e.name for e in backward_nodes}),
    }
    if on_gpu:
        kernels = [e for e in events if e.device_type != DeviceType.CPU
                   and not getattr(e, "is_user_annotation", False)
                   and e.name not in ("rmsnorm_fwd", "step_forward", "step_backward")]
        named = [k for k in kernels if NORM_KERNEL_NAME.search(k.name)]
        result.update(
            device_ms=sum(k.time_range.elapsed_us() for k in kernels) / 1e3,
            kernels=len(kernels),
            named_rmsnorm_ms=sum(k.time_range.elapsed_us() for k in named) / 1e3,
            named_rmsnorm_kernels=sorted({k.name for k in named}),
            fused_rsqrt_ms=sum(k.time_range.elapsed_us() for k in kernels if FUSED_RSQRT_NAME.search(k.name)) / 1e3,
        )
        if not regions:  # compiled contenders: only the kernel names are left
            result["rmsnorm_ms"] = result["named_rmsnorm_ms"]
    else:
        result.update(device_ms=sum(e.cpu_time_total for e in forward_windows + backward_windows) / 1e3,
                      kernels=None, named_rmsnorm_ms=None, named_rmsnorm_kernels=[], fused_rsqrt_ms=None)
    return result


def run_child(contender: str, args, out: pathlib.Path, profiled: bool = True) -> None:
    _, _, cfg, device, _ = mode.gpu_or_quick(args, NAME, step_config(True), step_config(False))

    def log(message):
        print(f"  [step:{contender}] {message}", flush=True)

    write_child_record(contender, CONTENDERS[contender], lambda: measure_contender(contender, cfg, device, log=log, profiled=profiled), out, log)


# ---------------------------------------------------------------- all contenders (parent process)

def add_late_round(result: dict, record: dict, cfg: dict) -> dict:
    """A round that the run's budget skipped, run afterwards as its own worker process
    (``python -m bench.run_all --worker step --contender NAME --out FILE --no-profile``): its steps join the
    contender's, in place of the first skipped round, and the median, interval and spread are recomputed."""
    if record.get("status") != "ok":
        raise ValueError(f"the late round of {result.get('contender')} did not run: {record.get('reason')}")
    n = cfg["timed_steps"]
    ok = [r for r in result["rounds"] if r["status"] == "ok"]
    groups = [result["step_ms"][k * n:(k + 1) * n] for k in range(len(ok))] + [record["step_ms"]]
    if any(len(g) != n for g in groups):
        raise ValueError("every round must have timed_steps steps")
    median_ms = stats.pooled_median(groups)
    lo, hi = stats.median_ci(groups)
    rounds = list(result["rounds"])
    late = {"status": "ok", "reason": None, "wall_s": None, "first_step_s": record.get("first_step_s"),
            "median_ms": record["median_ms"], "late": True}
    skipped = next((k for k, r in enumerate(rounds) if r["status"] != "ok"), None)
    if skipped is None:
        rounds.append(late)
    else:
        rounds[skipped] = late
    return result | dict(
        step_ms=[v for g in groups for v in g], median_ms=median_ms, ci95_ms=[lo, hi],
        min_ms=min(min(g) for g in groups), max_ms=max(max(g) for g in groups),
        round_medians_ms=[statistics.median(g) for g in groups], processes=len(groups),
        peak_gib=max(v for v in (result.get("peak_gib"), record.get("peak_gib")) if v is not None),
        tokens_per_s=cfg["batch"] * cfg["seq_len"] / (median_ms / 1e3), rounds=rounds)


def merge_late_rounds(payload: dict, records: list[dict]) -> dict:
    """step.json + late rounds (worker records) -> step.json with those rounds in; the config says which."""
    cfg = payload["config"]
    results = dict(payload["results"])
    for record in records:
        results[record["contender"]] = add_late_round(results[record["contender"]], record, cfg)
    late = sorted(r["contender"] for r in records)
    config = cfg | {"resolution": resolution(results), "late_rounds": late}
    return payload | {"config": config, "results": results}


def run(args) -> dict:
    """Every contender of STEP_CONTENDERS (or BENCH_STEP_CONTENDERS) in ``rounds`` interleaved processes."""
    return run_rounds(args, NAME, STEP_CONTENDERS, BASELINE, OURS)


def worker(argv) -> int:
    """One contender in a fresh process (``run`` starts one per contender): measure it, write its record
    to ``--out``. Started as ``python -m bench.run_all --worker step --contender NAME --out FILE``."""
    parser = argparse.ArgumentParser(prog="python -m bench.run_all --worker step", description=worker.__doc__)
    parser.add_argument("--contender", required=True, choices=list(CONTENDERS))
    parser.add_argument("--out", required=True, type=pathlib.Path, help="where to write the contender's record")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-profile", action="store_true", help="skip the profiled step (rounds after the first)")
    args = parser.parse_args(argv)
    run_child(args.contender, args, args.out, profiled=not args.no_profile)
    return 0
