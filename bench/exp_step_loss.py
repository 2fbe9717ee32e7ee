"""Experiment "step_loss": the whole fusion set, its loss included, against Liger's full Qwen3 patch, eager
and with regional torch.compile.

    python -m bench.run_all step_loss       # on a GPU; writes docs/data/<gpu>/step_loss.json

The question of issue "the fusion set, part 2" at step level. Same model, step, timing and statistics as
experiment ``step`` (bench/exp_step.py: Qwen3-8B layer geometry, 8 layers, B=4, T=4096, bf16, sdpa, no
optimizer, ``labels=input_ids``: HF's shifted loss, so the last position of each row is ignore_index; every
contender in ``rounds`` fresh processes, interleaved; pooled median with a 95 % two-level bootstrap
interval). Each record keeps its first step's loss, so a contender whose loss goes wrong shows it.
Contenders (bench/harness/step_runs.py ``LOSS_CONTENDERS``; their patches in exp_step):

* ``liger``                    Liger's apply_liger_kernel_to_qwen3() with its defaults (rope, rms_norm,
  swiglu, fused linear cross-entropy): the baseline;
* ``fusion_set_loss``          apply_qwen3_fusion(loss=True): every part of the site's set;
* ``compile``                  HF + regional torch.compile (each decoder layer and the final norm);
* ``liger_compile``            Liger's full patch + the same regional compile;
* ``fusion_set_loss_compile``  the site's set with its loss + the same regional compile.

Targets (the issue's): eager, the set's step <= 0.92 x Liger's with peak memory <= Liger's; compiled, the set
faster than regional compile alone and than Liger + compile, with HF's loss.
"""
from __future__ import annotations

from bench.harness.step_runs import LOSS_CONTENDERS, run_rounds

NAME = "step_loss"
CONTENDERS = list(LOSS_CONTENDERS)
BASELINE = "liger"
OURS = "fusion_set_loss"
# The pairs the question compares: ours first.
PAIRS = [("fusion_set_loss", "liger"), ("fusion_set_loss_compile", "compile"),
         ("fusion_set_loss_compile", "liger_compile")]
EAGER_TARGET = 0.92  # the set's median step <= this x Liger's


def run(args) -> dict:
    payload = run_rounds(args, NAME, CONTENDERS, BASELINE, OURS)
    payload["config"]["pairs"] = [list(pair) for pair in PAIRS]
    payload["config"]["eager_target"] = EAGER_TARGET
    return payload
