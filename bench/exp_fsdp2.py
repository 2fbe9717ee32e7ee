"""Experiment "fsdp2": the loss-curve gate on a two-GPU FSDP2 run (``torch.distributed.fsdp.fully_shard``).

The same training as bench/exp_loss_curve.py (model geometry, byte tokens of the CPython
stdlib, seeded window order, AdamW with warm-up and cosine decay, grad-norm clip 1.0, both
precision settings), but on ``WORLD_SIZE`` processes under FSDP2, one contender after another:

* ``hf``       transformers' Qwen3 as shipped;
* ``control``  the loss-curve experiment's control: a correct RMSNorm that rounds once
  (``harness.loss_gate.control_norm_class``), its final-loss distance from HF is the noise floor;
* ``triton``   ``patch_qwen3_rmsnorm(TritonQwen3RMSNorm)`` (snippets/qwen3_patch.py);
* ``triton_fused_add`` ``patch_qwen3_fused_add_rmsnorm()`` (snippets/qwen3_fused_add_patch.py): residual add +
  RMSNorm fused at every add -> norm pair. Recorded as unavailable where that module does not exist;
* ``fusion_set``  ``apply_qwen3_fusion()`` (snippets/qwen3_fusion_patch.py): RMSNorm, fused add, QK-norm + RoPE,
  SwiGLU, HF's loss;
* ``fusion_set_loss`` ``apply_qwen3_fusion(loss=True)``: the set and its lm_head + cross-entropy without logits;
* ``liger``    ``apply_liger_kernel_to_qwen3()``'s full patch (GPU only; undone after it: modeling_qwen3 is
  restored from a copy of its namespace).

Host time: every step also records how long the host took to issue it (the call returns before the GPU is
done: nothing in a step waits for it), next to its CUDA-event time. A step whose host time is about its GPU
time is host-bound: more kernels or slower launches show there first.

Large geometry (``BENCH_FSDP2_PARTS`` picks ``small``, ``large`` or both, the default): the reader's job that
needs sharding. Qwen3-8B at full depth (36 layers), bf16 parameters, gradients and AdamW state,
activation checkpointing (non-reentrant) on every decoder layer, ``fully_shard`` per decoder layer and on the
root, random tokens, ``large_batch`` sequences of ``seq_len`` per rank. Contenders: ``hf``, ``fusion_set``,
``fusion_set_loss``, ``liger``. Per contender: the first step's loss (the mean over ranks), the median step
time and host time per rank after ``large_warmup`` steps, tokens per second per GPU, the model FLOPs per token
(bench/harness/training.py, for MFU), and peak memory per rank. 8B in bf16 with AdamW is about 66 GB of
parameters, gradients and state, 33 GB a rank on two GPUs, which leaves room for activations on an 80 GB card.

Each contender patches modeling_qwen3, builds a fresh model with the same seed, loads the same
initial weights (one state dict, built once with HF's classes: equal starts whatever a patch
draws from the RNG), trains, and undoes the patch afterwards. FSDP2: ``fully_shard`` on each
decoder layer, then on the root ``Qwen3ForCausalLM``; defaults otherwise (parameters resharded
after forward). No ``MixedPrecisionPolicy``: the precision settings are the loss-curve
experiment's own, so each rank does the same arithmetic as the single-GPU run:

* ``amp``   fp32 sharded parameters and AdamW state, bf16 autocast; all-gather and reduce-scatter in fp32;
* ``bf16``  bf16 parameters, AdamW state and collectives.

Data: every step draws the global batch of ``batch`` windows from
``loss_consistency.batch_starts`` (one seed, the same in every contender); rank r trains on rows
r, r + WORLD_SIZE, ... of it (DistributedSampler's order, :func:`rank_rows`). Every window has
``seq_len - 1`` targets, so the mean over ranks of each rank's mean loss, which is the loss
recorded, is the global batch's mean loss, and FSDP's averaged gradient is the global batch's.

Gate: ``harness.loss_gate.gate_with_control`` (the loss-curve rule: final loss = mean of the
last 50 steps within 0.5 % of HF, or within twice the control's own final difference when
that is larger; every step within 5 % of HF; all finite), for each patched contender against HF.

Per rank: the time of every step (CUDA events, each step waited for: the timing costs the
overlap of consecutive steps, the same for every contender) and the peak allocated memory of the
training loop (``torch.cuda.max_memory_allocated``, after sharding and building the optimizer).

Launch: ``run()`` starts ``python -m torch.distributed.run --standalone --nproc_per_node 2
-m bench.run_all --worker fsdp2 --out FILE``; rank 0 writes the record, ``run()`` returns it. NCCL
on two GPUs; ``--quick`` without two GPUs runs two CPU processes with gloo under the Triton
interpreter (``CUDA_VISIBLE_DEVICES=""``, ``TRITON_INTERPRET=1``), so the CPU suite runs the whole path.
"""
from __future__ import annotations

import argparse
import itertools
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time
import traceback

import torch

from bench import ROOT
from bench.harness import mode, timers
from bench.harness.training import build_config
from bench.harness.record import worker_args
from bench.harness.loss_gate import (OPTIMIZER, control_norm_class, corpus, gate_with_control, geometry, loss_config,
                                     model_config, rounded)
from loss_consistency import adamw, batch_starts, cosine_lr, get_batch, train_step
from qwen3_configs import rmsnorm_count
from qwen3_patch import count_modules, patch_qwen3_rmsnorm
from rmsnorm_triton import TritonQwen3RMSNorm

NAME = "fsdp2"
WORLD_SIZE = 2
# HF and the control first: the gate needs both; Liger last (its patch is undone from a copy, see liger_patch)
CONTENDERS = ("hf", "control", "triton", "triton_fused_add", "fusion_set", "fusion_set_loss", "liger")
GATED = ("triton", "triton_fused_add", "fusion_set", "fusion_set_loss", "liger")  # held to HF by the gate
LARGE_CONTENDERS = ("hf", "fusion_set", "fusion_set_loss", "liger")
PARTS = ("small", "large")
# The quick run (CPU, interpreted kernels) keeps the suite short: these only in bf16, and the large part with
# HF and the whole set with its loss.
QUICK_BF16_ONLY = ("fusion_set", "fusion_set_loss")
QUICK_LARGE_CONTENDERS = ("hf", "fusion_set_loss")
FUSED_MODULE = "qwen3_fused_add_patch"
TIMEOUT_S = {True: 240, False: 540}  # quick, full: a device job gets 600 s
TIMING_WARMUP = 10  # steps left out of the median step time (allocator, Triton compilation)


def fsdp2_config(quick: bool) -> dict:
    """The loss-curve configuration (model, data, lr, gate), shortened to fit one run of a few minutes."""
    cfg = loss_config(quick)
    if quick:
        cfg.update(steps=4, batch=4, seq_len=32)  # the Triton contenders run interpreted: about 1 s a step
    else:
        cfg.update(steps=300, warmup=30)  # batch 32 (16 per rank) x 256 tokens, as in the loss curve
    if cfg["batch"] % WORLD_SIZE:
        raise ValueError(f"batch {cfg['batch']} does not split over {WORLD_SIZE} ranks")
    return cfg


def large_config(quick: bool) -> dict:
    """The large geometry: Qwen3-8B at full depth (quick: a tiny model) trained as a reader shards it."""
    if quick:
        return dict(model=dict(size="tiny", num_hidden_layers=2, vocab_size=512), large_batch=1, seq_len=32,
                    large_warmup=1, large_steps=2, lr=1e-5, seed=0)
    return dict(model=dict(size="8B", num_hidden_layers=36), large_batch=1, seq_len=4096, large_warmup=2,
                large_steps=8, lr=1e-5, seed=0)


def selected_parts() -> list[str]:
    wanted = os.environ.get("BENCH_FSDP2_PARTS")
    parts = [t.strip() for t in wanted.split(",") if t.strip()] if wanted else list(PARTS)
    unknown = sorted(set(parts) - set(PARTS))
    if unknown:
        raise ValueError(f"unknown parts {unknown}; choose from {list(PARTS)}")
    return parts


def rank_rows(starts: torch.Tensor, rank: int, world_size: int) -> torch.Tensor:
    """Rank ``rank``'s rows of every step's global batch: (steps, batch) -> (steps, batch // world_size),
    rows rank, rank + world_size, ... as DistributedSampler hands them out (no padding, no shuffling)."""
    if starts.dim() != 2:
        raise ValueError(f"expected (steps, batch) window starts, got shape {tuple(starts.shape)}")
    if not 0 <= rank < world_size:
        raise ValueError(f"rank {rank} outside a world of {world_size}")
    if starts.shape[1] % world_size:
        raise ValueError(f"a batch of {starts.shape[1]} rows does not split evenly over {world_size} ranks")
    return starts[:, rank::world_size]


class Unavailable(Exception):
    """A contender whose patch does not exist in this checkout."""


def contender_patch(contender: str):
    """Patch modeling_qwen3 for ``contender``; returns the undo function."""
    if contender == "hf":
        return lambda: None
    if contender == "control":
        return patch_qwen3_rmsnorm(control_norm_class())
    if contender == "triton":
        return patch_qwen3_rmsnorm(TritonQwen3RMSNorm)
    if contender == "triton_fused_add":
        try:
            from qwen3_fused_add_patch import patch_qwen3_fused_add_rmsnorm
        except ModuleNotFoundError as error:
            if error.name != FUSED_MODULE:
                raise  # the module exists but is broken: that is a failure, not an absence
            raise Unavailable(f"snippets/{FUSED_MODULE}.py not in this checkout") from error
        return patch_qwen3_fused_add_rmsnorm()
    if contender in ("fusion_set", "fusion_set_loss"):
        from qwen3_fusion_patch import apply_qwen3_fusion

        return apply_qwen3_fusion(loss=contender == "fusion_set_loss")
    if contender == "liger":
        return liger_patch()
    raise ValueError(f"unknown contender {contender!r}")


def liger_patch():
    """Liger's full Qwen3 patch (rope, rms_norm, swiglu, fused linear cross-entropy); returns an undo that
    restores modeling_qwen3's namespace and Qwen3ForCausalLM.forward (Liger offers none)."""
    if not torch.cuda.is_available():
        raise Unavailable("Liger's kernels run on CUDA only")
    try:
        from liger_kernel.transformers import apply_liger_kernel_to_qwen3
    except ImportError as error:
        raise Unavailable(f"liger_kernel not importable: {error!r}") from error
    import transformers.models.qwen3.modeling_qwen3 as modeling_qwen3

    namespace, forward = dict(vars(modeling_qwen3)), modeling_qwen3.Qwen3ForCausalLM.forward
    apply_liger_kernel_to_qwen3(rope=True, rms_norm=True, swiglu=True, fused_linear_cross_entropy=True,
                                cross_entropy=False)

    def undo():
        for name in set(vars(modeling_qwen3)) - set(namespace):
            delattr(modeling_qwen3, name)
        vars(modeling_qwen3).update(namespace)
        modeling_qwen3.Qwen3ForCausalLM.forward = forward

    return undo


def _gather(value) -> list:
    """``value`` from every rank, in rank order."""
    import torch.distributed as dist

    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, value)
    return out


def train_contender(contender: str, variant: str, cfg: dict, initial: dict, tokens, rows, device: str,
                    on_gpu: bool) -> dict:
    """Train one contender under FSDP2 on this rank's ``rows``; the record every rank agrees on."""
    import torch.distributed as dist
    from torch.distributed.fsdp import FSDPModule, fully_shard
    from transformers import Qwen3ForCausalLM

    if on_gpu:
        torch.cuda.empty_cache()  # the previous contender's blocks
    undo = contender_patch(contender)
    try:
        torch.manual_seed(cfg["seed"])
        model = Qwen3ForCausalLM(model_config(cfg))
        model.load_state_dict(initial)  # strict: the same parameter names and the same start in every contender
        if contender == "triton" and count_modules(model, TritonQwen3RMSNorm) != rmsnorm_count(model.config):
            raise RuntimeError("the Triton contender does not have one TritonQwen3RMSNorm per norm")
        model.to(device=device, dtype=torch.bfloat16 if variant == "bf16" else torch.float32).train()
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
        optimizer = adamw(model, cfg["lr"])
        autocast = torch.bfloat16 if variant == "amp" else None
        losses, host_ms, steps = [], [], iter(range(cfg["steps"]))

        def step():
            i = next(steps)
            began = time.perf_counter()
            batch = get_batch(tokens, rows[i], cfg["seq_len"])
            lr = cosine_lr(i, cfg["steps"], cfg["lr"], cfg["warmup"])
            losses.append(train_step(model, optimizer, batch, lr, autocast))
            host_ms.append((time.perf_counter() - began) * 1e3)

        if on_gpu:
            torch.cuda.reset_peak_memory_stats(device)
        times_ms = timers.call_times_ms([step], cfg["steps"], on_gpu=on_gpu)
        peak = torch.cuda.max_memory_allocated(device) / 2**30 if on_gpu else None
        local_parameters = sum(p.to_local().numel() for p in model.parameters())
        fsdp_modules = sum(isinstance(m, FSDPModule) for m in model.modules())
    finally:
        undo()
    mean_loss = torch.stack(losses).float()
    dist.all_reduce(mean_loss)  # SUM (gloo has no AVG), then / ranks: the global batch's mean loss
    mean_loss /= dist.get_world_size()
    timed = times_ms[min(TIMING_WARMUP, len(times_ms) - 1):]
    host = host_ms[min(TIMING_WARMUP, len(host_ms) - 1):]
    per_rank = _gather({"step_ms": rounded(times_ms, 4), "median_ms": statistics.median(timed),
                        "host_ms": statistics.median(host), "peak_gib": peak, "parameters": local_parameters})
    return {"status": "ok", "losses": mean_loss.tolist(),  # rounded once gated
            "median_step_ms": [r["median_ms"] for r in per_rank], "peak_gib": [r["peak_gib"] for r in per_rank],
            "median_host_ms": [r["host_ms"] for r in per_rank],
            "parameters_per_rank": [r["parameters"] for r in per_rank], "fsdp_modules": fsdp_modules,
            "step_ms": [r["step_ms"] for r in per_rank]}


def train_large(contender: str, large: dict, device: str, on_gpu: bool) -> dict:
    """One contender of the large geometry under FSDP2; the record every rank agrees on."""
    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard
    from transformers import Qwen3ForCausalLM

    from bench.harness.training import model_flops_per_token

    if on_gpu:
        torch.cuda.empty_cache()
    undo = contender_patch(contender)
    try:
        config = build_config(large["model"])
        torch.manual_seed(large["seed"])
        with torch.device(device):
            model = Qwen3ForCausalLM(config)
        model.to(torch.bfloat16).train()
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        for layer in model.model.layers:
            fully_shard(layer)
        fully_shard(model)
        optimizer = torch.optim.AdamW(model.parameters(), lr=large["lr"])
        generator = torch.Generator(device=device).manual_seed(1234 + dist.get_rank())
        batches = [torch.randint(0, config.vocab_size, (large["large_batch"], large["seq_len"]), device=device,
                                 generator=generator) for _ in range(2)]
        host_ms, counter = [], itertools.count()

        def step():
            began, batch = time.perf_counter(), batches[next(counter) % 2]
            loss = model(input_ids=batch, labels=batch).loss
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            host_ms.append((time.perf_counter() - began) * 1e3)
            return loss.detach()

        first = step()
        if on_gpu:
            torch.cuda.reset_peak_memory_stats(device)
        for _ in range(large["large_warmup"] - 1):
            step()
        times_ms = timers.call_times_ms([step], large["large_steps"], on_gpu=on_gpu)
        peak = torch.cuda.max_memory_allocated(device) / 2**30 if on_gpu else None
    finally:
        undo()
    dist.all_reduce(first)
    first_loss = float(first) / dist.get_world_size()
    host = host_ms[large["large_warmup"]:]
    per_rank = _gather({"step_ms": rounded(times_ms, 4), "median_ms": statistics.median(times_ms),
                        "host_ms": statistics.median(host), "peak_gib": peak})
    tokens = large["large_batch"] * large["seq_len"]
    medians = [r["median_ms"] for r in per_rank]
    return {"status": "ok", "first_loss": first_loss, "median_step_ms": medians,
            "median_host_ms": [r["host_ms"] for r in per_rank], "peak_gib": [r["peak_gib"] for r in per_rank],
            "step_ms": [r["step_ms"] for r in per_rank],
            "tokens_per_s_per_gpu": tokens / (max(medians) / 1e3),
            "flops_per_token": model_flops_per_token(config, large["seq_len"])}


def run_large(large: dict, device: str, on_gpu: bool, log, quick: bool) -> dict:
    out = {}
    for contender in QUICK_LARGE_CONTENDERS if quick else LARGE_CONTENDERS:
        log(f"large/{contender}: {large['large_steps']} timed steps")
        try:
            out[contender] = train_large(contender, large, device, on_gpu)
        except Unavailable as why:
            out[contender] = {"status": "unavailable", "reason": str(why)}
            continue
        except Exception as error:  # raised alike on every rank: record, go on
            out[contender] = {"status": "error", "reason": f"{type(error).__name__}: {error}"}
            log(f"large/{contender}: ERROR {out[contender]['reason']}\n{traceback.format_exc(limit=-4)}")
            continue
        r = out[contender]
        log(f"large/{contender}: first loss {r['first_loss']:.4f}, median step "
            + ", ".join(f"{t:.1f}" for t in r["median_step_ms"]) + " ms, host "
            + ", ".join(f"{t:.1f}" for t in r["median_host_ms"]) + " ms (per rank)")
    return out


def rank(quick: bool, out: pathlib.Path) -> None:
    """One rank of the torchrun job; rank 0 writes ``{"config", "results"}`` to ``out``."""
    import torch.distributed as dist
    from transformers import Qwen3ForCausalLM

    on_gpu = mode.gpu_available()
    if on_gpu:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    dist.init_process_group("nccl" if on_gpu else "gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    device = f"cuda:{torch.cuda.current_device()}" if on_gpu else "cpu"
    log = (lambda m: print(f"  [fsdp2] {m}", flush=True)) if rank == 0 else (lambda m: None)
    cfg = fsdp2_config(quick)
    tokens = corpus(cfg).to(device)
    torch.manual_seed(cfg["seed"])
    initial = Qwen3ForCausalLM(model_config(cfg)).state_dict()
    rows = rank_rows(batch_starts(tokens.numel(), cfg["batch"], cfg["seq_len"], cfg["steps"],
                                  seed=cfg["data_seed"]), rank, world)
    results = {}
    parts = selected_parts()
    for variant in cfg["variants"] if "small" in parts else ():
        trained = {}
        for contender in CONTENDERS:
            if quick and variant != "bf16" and contender in QUICK_BF16_ONLY:
                trained[contender] = {"status": "skipped", "reason": "quick run: bf16 only (CPU time)"}
                continue
            log(f"{variant}/{contender}: {cfg['steps']} steps on {world} ranks")
            try:
                trained[contender] = train_contender(contender, variant, cfg, initial, tokens, rows, device, on_gpu)
            except Unavailable as why:
                trained[contender] = {"status": "unavailable", "reason": str(why)}
                log(f"{variant}/{contender}: unavailable: {why}")
                continue
            except Exception as error:  # raised alike on every rank (same code, same shapes): record, go on
                trained[contender] = {"status": "error", "reason": f"{type(error).__name__}: {error}"}
                log(f"{variant}/{contender}: ERROR {trained[contender]['reason']}\n{traceback.format_exc(limit=-4)}")
                if contender in ("hf", "control"):
                    raise  # nothing to gate against
                continue
            r = trained[contender]
            log(f"{variant}/{contender}: final loss {r['losses'][-1]:.4f}, median step "
                + ", ".join(f"{t:.2f}" for t in r["median_step_ms"]) + " ms (per rank)"
                + (", peak " + ", ".join(f"{p:.2f}" for p in r["peak_gib"]) + " GiB" if on_gpu else ""))
        hf, control = trained["hf"]["losses"], trained["control"]["losses"]
        for contender in GATED:  # the control's "gate" is its own report against HF: the noise floor
            if trained[contender]["status"] == "ok":
                trained[contender]["gate"], trained["control"]["gate"] = gate_with_control(
                    hf, trained[contender]["losses"], control, cfg["gate"], f"{variant}/{contender}", log)
        for r in trained.values():
            if r["status"] == "ok":
                r["losses"] = rounded(r["losses"])
        results[variant] = trained
    variants = [v for v in cfg["variants"] if v in results]
    gated = [results[v][a] for v in variants for a in GATED if results[v][a]["status"] == "ok"]
    statuses = [results[v][a]["status"] for v in variants for a in CONTENDERS]
    results["passed"] = bool(gated) and all(r["gate"]["passed"] for r in gated) and "error" not in statuses
    results["unavailable"] = sorted({a for v in variants for a in CONTENDERS
                                     if results[v][a]["status"] == "unavailable"})
    results["errors"] = [f"{v}/{a}" for v in variants for a in CONTENDERS if results[v][a]["status"] == "error"]
    large = large_config(quick)
    if "large" in parts:
        results["large"] = run_large(large, device, on_gpu, log, quick)
    config = model_config(cfg)
    cfg.update(
        geometry=geometry(config), world_size=world, backend=dist.get_backend(),
        nccl=".".join(map(str, torch.cuda.nccl.version())) if on_gpu else None,
        contenders=list(CONTENDERS), gated=list(GATED), optimizer=OPTIMIZER,
        final_loss=f"mean of the last {cfg['gate']['final_window']} steps",
        sharding=f"fully_shard on each of the {config.num_hidden_layers} decoder layers, then on Qwen3ForCausalLM",
        precision={"amp": "fp32 sharded parameters and AdamW state, bf16 autocast, fp32 collectives",
                   "bf16": "bf16 parameters, AdamW state and collectives"},
        data=(f"global batch of {cfg['batch']} windows per step from batch_starts(seed={cfg['data_seed']}); "
              f"rank r takes rows r, r + {world}, ...; loss = mean over ranks = the global batch's mean"),
        timing="per rank: CUDA events around each step, median after the first "
               f"{TIMING_WARMUP} steps; host time: how long the step's Python call took to return (nothing in a "
               "step waits for the GPU); peak = max_memory_allocated of the training loop",
        parts=parts,
        large=dict(large, contenders=list(LARGE_CONTENDERS), geometry=geometry(build_config(large["model"])),
                   step="forward with labels + backward + AdamW (foreach, bf16 state) + zero_grad; activation "
                        "checkpointing (non-reentrant) on every decoder layer; fully_shard per decoder layer, "
                        "then on the root; random tokens, each rank its own",
                   timing=f"per rank: CUDA events around each of the {large['large_steps']} steps after "
                          f"{large['large_warmup']} warm-up steps (the first's loss recorded), median; tokens/s per "
                          "GPU from the slowest rank's median; peak = max_memory_allocated after the first step"))
    if rank == 0:
        out.write_text(json.dumps({"config": cfg, "results": results}, ensure_ascii=False), encoding="utf-8")
    dist.barrier()
    dist.destroy_process_group()


def run(args) -> dict:
    where = mode.gpu_or_quick(args, NAME, True, False)
    on_gpu = where.on_gpu and torch.cuda.device_count() >= WORLD_SIZE
    if not (on_gpu or where.quick):
        raise RuntimeError(f"{NAME} needs {WORLD_SIZE} CUDA GPUs, found {torch.cuda.device_count()}")
    env = dict(os.environ)
    if not on_gpu:  # two CPU processes, gloo, Triton's interpreter (it must be chosen before triton loads)
        env.update(CUDA_VISIBLE_DEVICES="", TRITON_INTERPRET="1", OMP_NUM_THREADS=env.get("OMP_NUM_THREADS", "1"))
    with tempfile.TemporaryDirectory() as tmp:
        out = pathlib.Path(tmp) / f"{NAME}.json"
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={WORLD_SIZE}",
                   *worker_args(NAME, "--out", str(out))] + (["--quick"] if where.quick else [])
        print(f"  [fsdp2] {' '.join(command[1:])}", flush=True)
        done = subprocess.run(command, cwd=ROOT, env=env, timeout=TIMEOUT_S[where.quick], check=False)
        if done.returncode or not out.exists():
            raise RuntimeError(f"the torchrun job exited with {done.returncode} and "
                               f"{'wrote' if out.exists() else 'did not write'} {out.name}")
        return json.loads(out.read_text(encoding="utf-8"))


def worker(argv) -> int:
    """One rank of the torchrun job that ``run`` starts: ``python -m torch.distributed.run ... -m bench.run_all
    --worker fsdp2 --out FILE [--quick]``; rank 0 writes the record to FILE."""
    parser = argparse.ArgumentParser(prog="python -m bench.run_all --worker fsdp2", description=worker.__doc__)
    parser.add_argument("--out", required=True, type=pathlib.Path, help="where rank 0 writes the record")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    rank(args.quick, args.out)
    return 0
