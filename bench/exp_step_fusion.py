"""Experiment "step_fusion": the fusion set in a Qwen3 training step, each of our kernels against Liger's.

    python -m bench.run_all step_fusion     # on a GPU; writes docs/data/<gpu>/step_fusion.json

The question of issue "the fusion set, part 1" at step level: added to our RMSNorm patch, is each of our
kernels faster than the same tier with Liger's kernel in its place, and is the whole set faster than Liger's
patch without its loss? Same model, step, timing and statistics as experiment ``step`` (bench/exp_step.py:
Qwen3-8B layer geometry, 8 layers, B=4, T=4096, bf16, sdpa, no optimizer; every contender in ``rounds``
fresh processes, interleaved; pooled median with a 95 % two-level bootstrap interval). Contenders
(bench/harness/step_runs.py; their patches in exp_step.FUSION_PARTS, from snippets/qwen3_fusion_patch.py and Liger's apply_liger_kernel_to_qwen3):

* ``triton``              our RMSNorm alone: the tier every other one adds a kernel to (the baseline);
* ``triton_qk_rope``      + our fused QK-norm + RoPE   | ``triton_liger_rope``   + Liger's RoPE;
* ``triton_swiglu``       + our fused SwiGLU           | ``triton_liger_swiglu`` + Liger's SwiGLU;
* ``fusion_set``          apply_qwen3_fusion(): RMSNorm, fused residual add, QK-norm + RoPE, SwiGLU;
* ``liger_no_loss``       Liger's rope, rms_norm and swiglu (no fused linear cross-entropy: HF's loss).
"""
from __future__ import annotations

from bench.harness.step_runs import FUSION_CONTENDERS, run_rounds

NAME = "step_fusion"
CONTENDERS = ["triton", *FUSION_CONTENDERS]
BASELINE = "triton"
OURS = "fusion_set"
# The pairs the question compares: ours, Liger's, in the same tier.
PAIRS = [("triton_qk_rope", "triton_liger_rope"), ("triton_swiglu", "triton_liger_swiglu"),
         ("fusion_set", "liger_no_loss")]


def run(args) -> dict:
    payload = run_rounds(args, NAME, CONTENDERS, BASELINE, OURS)
    payload["config"]["pairs"] = [list(pair) for pair in PAIRS]
    return payload
