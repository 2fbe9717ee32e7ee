"""Experiment "fullsize": the reader's job, Qwen3-8B at full depth with AdamW and activation checkpointing, for
HF eager, regional compile, Liger, this site's RMSNorm (alone, with the fused add, under Liger), quack and the
fusion set. The job, its timing and statistics are bench/harness/fullsize_job.py's (its docstring defines them).
``BENCH_FULLSIZE_CONTENDERS`` picks a subset, ``BENCH_FULLSIZE_BUDGET_S`` sets the time budget.
"""
from __future__ import annotations

from bench.harness import fullsize_job

NAME = "fullsize"


def run(args) -> dict:
    return fullsize_job.run(args, NAME)


def worker(argv) -> int:
    return fullsize_job.worker(argv, NAME)
