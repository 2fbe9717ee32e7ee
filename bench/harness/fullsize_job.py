"""The full-size job that experiments "fullsize" and "fullsize_loss" run: Qwen3-8B at full depth, trained the way
readers train it. The experiments differ only in their contenders.

What a *step* is here: forward with ``labels`` (HF's shifted cross-entropy, or Liger's fused linear
cross-entropy where a contender patches it in), ``loss.backward()``, ``optimizer.step()``,
``optimizer.zero_grad(set_to_none=True)``.

Model: Qwen3-8B's config at full depth (36 layers, 8.19 B parameters), random init, bf16 parameters,
gradients and AdamW state (``torch.optim.AdamW(fused=True)``, lr 1e-5), sdpa attention,
``use_cache=False``, activation checkpointing on every decoder layer
(``gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})``).
Tokens per step: B x T = 2 x 4096 by default (``BENCH_FULLSIZE_BATCH`` changes B).

Contenders, each in a fresh process (``python -m bench.run_all --worker EXPERIMENT --contender NAME``):

* ``eager``              HF as shipped;
* ``compile``            regional ``torch.compile`` (each decoder layer and the final norm);
* ``liger``              ``apply_liger_kernel_to_qwen3()``'s full patch (rope, rms_norm, swiglu, fused linear CE);
* ``triton``             this site's RMSNorm (``snippets/qwen3_patch.py``);
* ``triton_fused_add``   this site's RMSNorm with the residual adds fused (``snippets/qwen3_fused_add_patch.py``);
* ``liger_triton``       Liger's full patch with this site's RMSNorm in place of Liger's;
* ``compile_liger_flce`` regional ``torch.compile`` + Liger's fused linear cross-entropy only;
* ``quack``              quack's RMSNorm (``quack.rmsnorm.rmsnorm``) patched in for every Qwen3RMSNorm;
* ``fusion_set``         this site's set (``snippets/qwen3_fusion_patch.py``: RMSNorm, fused residual add,
  QK-norm + RoPE, SwiGLU), HF's loss;
* ``fusion_set_loss``    the set with its fused linear cross-entropy (``apply_qwen3_fusion(loss=True)``);
* ``fusion_set_loss_compile`` that, with the same regional ``torch.compile``.

Timing: CUDA-synchronised wall time per step, ``timed_steps`` after ``warmup`` steps; the median and its
95 % interval (bootstrap over the steps: one process per contender, ``bench/harness/stats.py``).
Tokens/s = B x T / median step. MFU = model FLOPs per step / median step / the bf16 GEMM ceiling measured in
the same run (an 8192^3 bf16 matmul). Model FLOPs per token = 6 x (parameters of every matmul: the decoder
layers' projections and lm_head) + 6 x layers x T x (heads x head_dim) (causal attention: half of the
full score and value products); checkpointing's recomputed forward is not counted (it is overhead, not
model work). Peak memory: ``torch.cuda.max_memory_allocated`` over the timed steps.

Where the time goes (experiments in ``PROFILED``): after the timed steps, each contender profiles one more
step, and its record's ``profile`` holds the GPU time by bucket (GEMM, attention, this site's and Liger's
Triton kernels, Inductor's, the optimizer, copies, PyTorch's elementwise work, ...), the launches and the
GPU's idle time (``bench/harness/step_profile.py``).
"""
from __future__ import annotations

import argparse
import os
import pathlib
import tempfile
import time

import torch
from transformers import Qwen3ForCausalLM

from bench.harness import mode, stats, step_profile
from bench.harness.training import (ContenderSkipped, build_config, fusion_parts, model_flops_per_token,
                                    norm_class, run_contender_process, write_child_record)
from qwen3_fused_add_patch import patch_qwen3_fused_add_rmsnorm
from qwen3_patch import patch_qwen3_rmsnorm
from rmsnorm_triton import TritonQwen3RMSNorm


CONTENDERS = {
    "eager": "HF eager",
    "compile": "HF + regional torch.compile",
    "liger": "Liger-Kernel (full Qwen3 patch)",
    "triton": "HF + Triton RMSNorm",
    "triton_fused_add": "HF + Triton RMSNorm + fused residual add",
    "liger_triton": "Liger full patch, Triton RMSNorm in place of Liger's",
    "compile_liger_flce": "regional torch.compile + Liger fused linear CE",
    "quack": "HF + quack RMSNorm",
    "fusion_set": "Triton fusion set (RMSNorm, fused add, QK-norm + RoPE, SwiGLU)",
    "fusion_set_loss": "Triton fusion set + fused linear cross-entropy",
    "fusion_set_loss_compile": "Triton fusion set + fused linear cross-entropy + regional torch.compile",
}
COMPILED = {"compile", "compile_liger_flce", "fusion_set_loss_compile"}
NEEDS_GPU = {"compile", "compile_liger_flce", "liger", "liger_triton", "quack", "fusion_set_loss_compile"}
_SET = ("rms_norm", "fused_add", "qk_norm_rope", "swiglu")
FUSION_SET = {"fusion_set": fusion_parts(*_SET), "fusion_set_loss": fusion_parts(*_SET, "loss"),
              "fusion_set_loss_compile": fusion_parts(*_SET, "loss")}
BASELINE = "eager"
OURS = "triton"
TIE_RULE = "ci95_disjoint"
CHILD_TIMEOUT_S = {"compile": 200, "compile_liger_flce": 200, "fusion_set_loss_compile": 200}  # others: 130 s
STEP_DEFINITION = ("forward with labels (loss) + backward + AdamW(fused) step + zero_grad(set_to_none=True); "
                   "activation checkpointing on every decoder layer")


def fullsize_config(quick: bool) -> dict:
    if quick:
        return dict(model=dict(size="tiny", num_hidden_layers=2, vocab_size=512), batch=2, seq_len=32,
                    dtype="bfloat16", warmup=1, timed_steps=3, lr=1e-5, quick=True)
    batch = int(os.environ.get("BENCH_FULLSIZE_BATCH", 2))
    return dict(model=dict(size="8B", num_hidden_layers=36), batch=batch, seq_len=4096, dtype="bfloat16",
                warmup=3, timed_steps=30, lr=1e-5, quick=False)


def quack_norm_class():
    """A Qwen3RMSNorm with quack's autograd-aware RMSNorm (CuTe-DSL; CUDA only)."""
    try:
        from quack.rmsnorm import rmsnorm
    except Exception as error:
        raise ContenderSkipped(f"quack not importable: {error!r}") from error

    def quack_norm(hidden_states, weight, eps):
        rows = hidden_states.reshape(-1, hidden_states.shape[-1])
        return rmsnorm(rows, weight, eps=eps).view(hidden_states.shape)

    return norm_class("QuackQwen3RMSNorm", quack_norm)


def _liger(**options):
    try:
        from liger_kernel.transformers import apply_liger_kernel_to_qwen3
    except Exception as error:
        raise ContenderSkipped(f"liger_kernel not importable: {error!r}") from error
    apply_liger_kernel_to_qwen3(**options)
    return options


LIGER_FULL = dict(rope=True, rms_norm=True, swiglu=True, fused_linear_cross_entropy=True, cross_entropy=False)


def install_patch(contender: str, on_gpu: bool) -> dict:
    """Patch transformers' modeling_qwen3 for the contender, before the model is built."""
    if contender in NEEDS_GPU and not on_gpu:
        raise ContenderSkipped("GPU only (torch.compile of Triton code, Liger, quack)")
    if contender in ("eager", "compile"):
        return {}
    if contender == "liger":
        return {"liger_options": _liger(**LIGER_FULL)}
    if contender == "triton":
        patch_qwen3_rmsnorm(TritonQwen3RMSNorm)
        return {}
    if contender == "triton_fused_add":
        patch_qwen3_fused_add_rmsnorm()
        return {}
    if contender == "liger_triton":
        info = {"liger_options": _liger(**(LIGER_FULL | {"rms_norm": False}))}
        patch_qwen3_rmsnorm(TritonQwen3RMSNorm)
        return info
    if contender == "compile_liger_flce":
        return {"liger_options": _liger(rope=False, rms_norm=False, swiglu=False, cross_entropy=False,
                                        fused_linear_cross_entropy=True)}
    if contender == "quack":
        patch_qwen3_rmsnorm(quack_norm_class())
        return {}
    if contender in FUSION_SET:
        from qwen3_fusion_patch import apply_qwen3_fusion

        apply_qwen3_fusion(**FUSION_SET[contender])  # this process only ever builds this one model
        return {"fusion_parts": FUSION_SET[contender]}
    raise ValueError(f"unknown contender {contender!r}")


def measure_contender(contender: str, cfg: dict, device: str, log=print) -> dict:
    on_gpu = device == "cuda"
    info = install_patch(contender, on_gpu)
    config = build_config(cfg["model"])
    torch.manual_seed(0)
    with torch.device(device):
        model = Qwen3ForCausalLM(config)
    model.to(getattr(torch, cfg["dtype"])).train()
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    info["norm_classes"] = sorted({type(m).__name__ for m in model.modules() if "RMSNorm" in type(m).__name__})
    info["parameters"] = sum(p.numel() for p in model.parameters())
    info["checkpointing"] = model.is_gradient_checkpointing
    if contender in COMPILED:
        for layer in model.model.layers:
            layer.compile()
        model.model.norm.compile()
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg["lr"], fused=on_gpu)

    generator = torch.Generator(device=device).manual_seed(1234)
    batches = [torch.randint(0, config.vocab_size, (cfg["batch"], cfg["seq_len"]), device=device,
                             generator=generator) for _ in range(2)]

    def sync():
        if on_gpu:
            torch.cuda.synchronize()

    def step(batch):
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return loss

    start = time.perf_counter()
    first_loss = step(batches[0]).item()
    first_step_s = time.perf_counter() - start
    log(f"first step {first_step_s:.1f} s, loss {first_loss:.4f}")
    for i in range(cfg["warmup"] - 1 + (contender in COMPILED)):
        step(batches[(i + 1) % 2])
    sync()
    if on_gpu:
        torch.cuda.reset_peak_memory_stats()
    step_ms, losses = [], []
    for i in range(cfg["timed_steps"]):
        sync()
        began = time.perf_counter()
        loss = step(batches[i % 2])
        sync()
        step_ms.append((time.perf_counter() - began) * 1e3)
        losses.append(loss.item())
    peak = torch.cuda.max_memory_allocated() / 2**30 if on_gpu else None
    log(f"{len(step_ms)} steps: median {sorted(step_ms)[len(step_ms) // 2]:.0f} ms, peak {peak} GiB")
    result = dict(info, step_ms=step_ms, losses=losses, first_loss=first_loss, first_step_s=first_step_s,
                  peak_gib=peak, flops_per_token=model_flops_per_token(config, cfg["seq_len"]))
    if cfg.get("profile_step"):  # after the timed steps and the peak: one more step, profiled
        result["profile"] = step_profile.profile(lambda: step(batches[0]), sync)
        log(f"profiled step: {result['profile']['launches']} launches, GPU idle "
            f"{result['profile']['gpu_idle_us'] / 1e3:.1f} ms")
    if contender in COMPILED:
        from torch._dynamo.utils import counters

        result["dynamo"] = {"graph_breaks": sum(counters["graph_break"].values()),
                            "unique_graphs": counters["stats"].get("unique_graphs", 0)}
    return result


def run_child(contender: str, args, out: pathlib.Path, name: str) -> None:
    _, _, cfg, device, _ = mode.gpu_or_quick(args, name, fullsize_config(True), fullsize_config(False))

    def log(message):
        print(f"  [{name}:{contender}] {message}", flush=True)

    cfg = dict(cfg, profile_step=name in PROFILED)
    write_child_record(contender, CONTENDERS[contender], lambda: measure_contender(contender, cfg, device, log=log), out, log)


# Experiments whose contenders each profile one more step after the timed ones (bench/harness/step_profile.py):
# where the step's GPU time goes, by bucket, and how long the GPU waits.
PROFILED = ("fullsize_loss",)

# What the fused add hands a checkpointed layer (snippets/qwen3_fused_add_patch.py); records without this key
# measured the patch that handed every layer the un-added pair.
FUSED_ADD_BOUNDARY = "the sum into a layer that checkpointing runs, the un-added pair otherwise"


def gemm_rate_tflops(m: int, n: int, k: int, reps: int = 10) -> float:
    """bf16 rate of an (m x k) @ (k x n) product on random data, on CUDA: the mean of ``reps`` products
    between two CUDA events, after 3 warm-ups."""
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        a @ b
    end.record()
    torch.cuda.synchronize()
    return 2 * m * n * k * reps / (start.elapsed_time(end) / 1e3) / 1e12


def gemm_ceiling_tflops(device: str, n: int = 8192, reps: int = 10) -> float | None:
    """The n^3 bf16 product's rate (gemm_rate_tflops): the MFU denominator's companion; None off CUDA."""
    return gemm_rate_tflops(n, n, n, reps) if device == "cuda" else None


def summarise(record: dict, cfg: dict, ceiling: float | None) -> dict:
    if record.get("status") != "ok":
        return record
    median_ms = stats.pooled_median([record["step_ms"]])
    lo, hi = stats.median_ci([[v] for v in record["step_ms"]])  # one process: the steps are the draws
    tokens = cfg["batch"] * cfg["seq_len"]
    achieved = record["flops_per_token"] * tokens / (median_ms / 1e3) / 1e12
    return record | dict(median_ms=median_ms, ci95_ms=[lo, hi], tokens_per_s=tokens / (median_ms / 1e3),
                         tokens_per_s_ci95=[tokens / (hi / 1e3), tokens / (lo / 1e3)],
                         model_tflops=achieved, mfu=achieved / ceiling if ceiling else None)


def selected_contenders(default=None) -> list[str]:
    """``BENCH_FULLSIZE_CONTENDERS`` (comma-separated) when set, else ``default``, else every contender."""
    wanted = os.environ.get("BENCH_FULLSIZE_CONTENDERS")
    contenders = ([t.strip() for t in wanted.split(",") if t.strip()] if wanted
                  else list(default or CONTENDERS))
    unknown = sorted(set(contenders) - set(CONTENDERS))
    if unknown:
        raise ValueError(f"unknown contenders {unknown}; choose from {list(CONTENDERS)}")
    return contenders


def run(args, name: str, default_contenders=None) -> dict:
    """Experiment ``name``: every selected contender in its own process (``--worker name``)."""
    m = mode.gpu_or_quick(args, name, fullsize_config(True), fullsize_config(False))
    cfg = m.setup
    ceiling = gemm_ceiling_tflops(m.device)
    if m.device == "cuda":
        torch.cuda.empty_cache()
    contenders = selected_contenders(default_contenders)
    budget_s = float(os.environ.get("BENCH_FULLSIZE_BUDGET_S", 560))
    began = time.perf_counter()
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for index, contender in enumerate(contenders, 1):
            left = budget_s - (time.perf_counter() - began)
            if contender in NEEDS_GPU and m.device != "cuda":
                results[contender] = {"contender": contender, "label": CONTENDERS[contender], "status": "skipped",
                                      "reason": "GPU only (torch.compile of Triton code, Liger, quack)"}
                continue
            if left < 40:
                results[contender] = {"contender": contender, "label": CONTENDERS[contender], "status": "skipped",
                                      "reason": f"time budget of {budget_s:.0f} s used up"}
                continue
            print(f" fullsize contender {index}/{len(contenders)}: {contender} ({left:.0f} s left)", flush=True)
            timeout = min(CHILD_TIMEOUT_S.get(contender, 130), left)
            record = run_contender_process(name, contender, CONTENDERS[contender], pathlib.Path(tmp) / f"{contender}.json",
                                           timeout, ("--quick",) if args.quick else ())
            results[contender] = summarise(record, cfg, ceiling)
    model = build_config(cfg["model"])
    cfg["geometry"] = {k: getattr(model, k) for k in (
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "vocab_size", "tie_word_embeddings")}
    cfg.update(step=STEP_DEFINITION, attention="sdpa", contenders=contenders, baseline=BASELINE, ours=OURS,
               tie_rule=TIE_RULE, budget_s=budget_s, gemm_ceiling_tflops=ceiling,
               optimizer="torch.optim.AdamW(fused=True), bf16 parameters, gradients and states",
               checkpointing="gradient_checkpointing_enable(use_reentrant=False), every decoder layer",
               fused_add_boundary=FUSED_ADD_BOUNDARY, profile_step=name in PROFILED,
               compile_scope="regional: torch.compile on each decoder layer and on the final norm",
               interval=f"{stats.CONFIDENCE:.0%} bootstrap of the median over the timed steps (one process)",
               flops=("per token: 6 x matmul parameters (decoder projections + lm_head) + 6 x layers x T x "
                      "heads x head_dim; recomputation not counted"))
    return {"config": cfg, "results": results}


def worker(argv, name: str) -> int:
    """One contender in a fresh process: measure it, write its record to ``--out``."""
    parser = argparse.ArgumentParser(prog=f"python -m bench.run_all --worker {name}", description=worker.__doc__)
    parser.add_argument("--contender", required=True, choices=list(CONTENDERS))
    parser.add_argument("--out", required=True, type=pathlib.Path)
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args(argv)
    run_child(args.contender, args, args.out, name)
    return 0
