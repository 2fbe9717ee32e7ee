"""Experiment "fullsize_loss": the full-size job (bench/harness/fullsize_job.py) with the fused loss in the comparison.

Same model, step, optimizer, checkpointing, timing and statistics as experiment "fullsize"; only the contenders
differ: HF eager, regional torch.compile, Liger's full patch, this site's fusion set without and with its fused
linear cross-entropy, and the set + loss under the same regional compile. Last, the Triton RMSNorm alone and with
the fused residual add: experiment "fullsize" measured the fused add before it stopped pairing its adds across a
checkpointed layer's boundary (snippets/qwen3_fused_add_patch.py), and these two rows measure the patch as it is now.
``BENCH_FULLSIZE_CONTENDERS`` and ``BENCH_FULLSIZE_BUDGET_S`` work as there.
"""
from __future__ import annotations

from bench.harness import fullsize_job

NAME = "fullsize_loss"
CONTENDERS = ("eager", "compile", "liger", "fusion_set", "fusion_set_loss", "fusion_set_loss_compile", "triton",
              "triton_fused_add")


def run(args) -> dict:
    return fullsize_job.run(args, NAME, CONTENDERS)


def worker(argv) -> int:
    return fullsize_job.worker(argv, NAME)
