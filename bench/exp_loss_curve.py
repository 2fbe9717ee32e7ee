"""Experiment "loss_curve": train a small Qwen3 with HF's RMSNorm and with the Triton one; compare the losses.

Three models start from the same weights and train in lockstep on the same
batches (``snippets/loss_consistency.py``):

* ``hf``       transformers' ``Qwen3RMSNorm``;
* ``triton``   ``TritonQwen3RMSNorm`` (patched into modeling_qwen3 before construction);
* ``control``  a correct RMSNorm that rounds once instead of HF's twice (x_hat * weight in fp32,
  then one cast). It shows how far two *correct* implementations drift apart
  through bf16 rounding alone: the noise floor the gate has to sit above.

Data: byte tokens (256 bytes + EOS between files) of CPython's standard-library
``*.py`` files in sorted path order; random windows from a seeded generator.

Two precisions:

* ``amp``   fp32 parameters and AdamW state, bf16 autocast (what HF Trainer ``bf16=True`` does);
* ``bf16``  bf16 parameters and AdamW state. The norm weights start at exactly 1.0, where a bf16
  ulp is 2^-7, so AdamW steps of about lr = 1e-3 round away and the norm weights stay at 1.0.

Gate (``loss_gate``): final loss = mean of the last 50 steps, Triton within 0.5 %
of HF, or within twice the control's own final-loss difference from HF when that is
larger (the run's noise floor); no divergence = every loss finite and, at every step,
|Triton - HF| <= 5 % of HF's loss on the same batch. The 5 % is set at five times the
largest per-step gap between two correct implementations: a CPU calibration of HF vs the
one-rounding control (amp, hidden 128, 600 steps) gave a maximum of 1.0 % and a
99th percentile of 0.5 %; the ``control`` column re-measures it on the GPU.

Why the noise-floor term: at commit b370c8a (block + tail kernel, hidden 384 = 256 + 128)
the amp run ended 0.525 % from HF, over the fixed 0.5 %, while the correct control ended
0.427 % from HF in the same run: a fixed 0.5 % sits at this setup's noise level. Log:
docs/data/h200/loss-curve-fixed-gate-b370c8a.log. The CPU tests keep the gate's teeth: two
wrong backwards must fail it.

Schedule: warm-up, then cosine decay to a tenth of the peak lr. The first H200 run at
commit 85d659c kept the lr constant after warm-up and failed the final-loss gate in both
precisions (Triton 1.0 % / 1.7 % from HF) while the correct control was 0.7 % from HF in
amp: at a constant lr the last steps keep fluctuating, and trajectories that differ by one
ulp early on end about a percent apart whatever the kernel. A CPU proxy (hidden 128,
2 layers, 600 steps, amp, HF vs control) ended 0.63 % apart with a constant lr and
0.10 % apart with the cosine decay. Log: docs/data/h200/loss-curve-constant-lr-85d659c.log.
"""
from __future__ import annotations

import time

import torch
from transformers import Qwen3ForCausalLM

from bench.harness import mode
from bench.harness.loss_gate import (OPTIMIZER, control_norm_class, corpus, gate_with_control, geometry, loss_config,
                                     model_config, rounded)
from loss_consistency import batch_starts, build_pair, train_lockstep
from qwen3_configs import rmsnorm_count
from qwen3_patch import count_modules, patch_qwen3_rmsnorm
from rmsnorm_triton import TritonQwen3RMSNorm

NAME = "loss_curve"
CONTENDERS = ("hf", "triton", "control")


def run_variant(variant: str, cfg: dict, tokens, device: str, log=print) -> dict:
    config = model_config(cfg)
    hf, triton_model = build_pair(config, TritonQwen3RMSNorm, seed=cfg["seed"])
    undo = patch_qwen3_rmsnorm(control_norm_class())
    try:
        control = Qwen3ForCausalLM(config)
    finally:
        undo()
    control.load_state_dict(hf.state_dict())
    expected = rmsnorm_count(config)
    if count_modules(triton_model, TritonQwen3RMSNorm) != expected or count_modules(hf, TritonQwen3RMSNorm):
        raise RuntimeError("the Triton model does not have exactly one TritonQwen3RMSNorm per norm")

    dtype = torch.bfloat16 if variant == "bf16" else torch.float32
    models = [m.to(device=device, dtype=dtype).train() for m in (hf, triton_model, control)]
    autocast = torch.bfloat16 if variant == "amp" else None
    starts = batch_starts(tokens.numel(), cfg["batch"], cfg["seq_len"], cfg["steps"], seed=cfg["data_seed"])
    log(f"{variant}: {cfg['steps']} steps x 3 models (hf, triton, control)")
    start = time.perf_counter()
    curves = train_lockstep(models, tokens, starts, cfg["seq_len"], lr=cfg["lr"], warmup=cfg["warmup"],
                            autocast_dtype=autocast, log_every=max(1, cfg["steps"] // 10))
    seconds = time.perf_counter() - start
    gate, control_gate = gate_with_control(curves[0], curves[1], curves[2], cfg["gate"], variant, log)
    norm_weights = [p for n, p in models[0].named_parameters() if "norm" in n]
    return {
        "losses": {name: rounded(curve) for name, curve in zip(CONTENDERS, curves)},
        "gate": gate,
        "control_gate": control_gate,
        "seconds": seconds,
        "norm_modules": expected,
        "parameters": sum(p.numel() for p in models[0].parameters()),
        "hf_norm_weights_all_one": bool(all(torch.all(w == 1) for w in norm_weights)),
    }


def run(args) -> dict:
    _, _, cfg, device, _ = mode.gpu_or_quick(args, NAME, loss_config(True), loss_config(False))
    tokens = corpus(cfg).to(device)
    results = {}
    for variant in cfg["variants"]:
        results[variant] = run_variant(variant, cfg, tokens, device,
                                       log=lambda m: print(f"  [loss_curve] {m}", flush=True))
    cfg["geometry"] = geometry(model_config(cfg))
    cfg["final_loss"] = f"mean of the last {cfg['gate']['final_window']} steps"
    cfg["optimizer"] = OPTIMIZER
    cfg["contenders"] = list(CONTENDERS)
    results["passed"] = all(results[v]["gate"]["passed"] for v in cfg["variants"])
    return {"config": cfg, "results": results}

