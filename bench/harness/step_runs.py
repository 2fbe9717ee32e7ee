"""The training-step experiments' parent side (step: bench/exp_step.py; step_fusion: bench/exp_step_fusion.py).

Every contender runs in ``rounds`` fresh worker processes (``python -m bench.run_all --worker step
--contender NAME``: exp_step measures one contender, whichever experiment asked), the contenders
interleaved; the records are pooled into a median and a 95 % two-level bootstrap interval
(``bench/harness/stats.py``). The contenders' labels, the measurement's config and the run's budget live
here, so that both experiments share them without importing each other.
"""
from __future__ import annotations

import os
import pathlib
import statistics
import tempfile
import time

from bench.harness import mode, stats
from bench.harness.training import build_config, run_contender_process

WORKER = "step"  # the experiment whose worker measures one contender (bench/exp_step.py)

CONTENDERS = {
    "eager": "HF eager",
    "torch_rmsnorm": "HF + torch F.rms_norm",
    "triton_fwd": "HF + Triton RMSNorm (fwd only)",
    "triton": "HF + Triton RMSNorm (fwd+bwd)",
    "triton_fused_add": "HF + Triton RMSNorm + fused residual add",
    "compile": "HF + torch.compile",
    "triton_compile": "HF + Triton RMSNorm + torch.compile",
    "liger": "Liger-Kernel (full Qwen3 patch)",
    # The fusion set, kernel by kernel against Liger's (experiment step_fusion, bench/exp_step_fusion.py).
    "triton_qk_rope": "HF + Triton RMSNorm + Triton QK-norm + RoPE",
    "triton_liger_rope": "HF + Triton RMSNorm + Liger RoPE",
    "triton_swiglu": "HF + Triton RMSNorm + Triton SwiGLU",
    "triton_liger_swiglu": "HF + Triton RMSNorm + Liger SwiGLU",
    "fusion_set": "Triton fusion set (RMSNorm, fused add, QK-norm + RoPE, SwiGLU)",
    "liger_no_loss": "Liger-Kernel (rope, rms_norm, swiglu; HF's loss)",
    # The whole set with its loss against Liger's full patch, eager and regionally compiled
    # (experiment step_loss, bench/exp_step_loss.py).
    "fusion_set_loss": "Triton fusion set + fused linear cross-entropy",
    "liger_compile": "Liger-Kernel (full Qwen3 patch) + torch.compile",
    "fusion_set_loss_compile": "Triton fusion set + fused linear cross-entropy + torch.compile",
}
STEP_CONTENDERS = ["eager", "torch_rmsnorm", "triton_fwd", "triton", "triton_fused_add", "compile",
                   "triton_compile", "liger"]  # experiment "step"; the rest are step_fusion's
LOSS_CONTENDERS = ["liger", "fusion_set_loss", "compile", "liger_compile",
                   "fusion_set_loss_compile"]  # experiment "step_loss"
FUSION_CONTENDERS = [c for c in CONTENDERS
                     if c not in STEP_CONTENDERS and c not in LOSS_CONTENDERS]  # step_fusion's
TIE_RULE = "ci95_disjoint"  # ranked only when the 95 % intervals are disjoint (bench/report/names.py TIE_RULES)
CHILD_TIMEOUT_S = {"compile": 240, "triton_compile": 240, "liger_compile": 240,
                   "fusion_set_loss_compile": 240}  # others: 150 s
STEP_DEFINITION = ("zero_grad(set_to_none=True) + forward with labels (loss) + backward; "
                   "no optimizer update")



def step_config(quick: bool) -> dict:
    """Everything that defines the measurement; stored in the JSON as ``config``."""
    if quick:
        model = dict(size="tiny", num_hidden_layers=2, vocab_size=512)
        return dict(model=model, batch=2, seq_len=32, dtype="bfloat16", warmup=1, timed_steps=3, rounds=1,
                    profiled_steps=1, activation_checkpointing=False, quick=True)
    model = dict(size="8B", num_hidden_layers=8)
    return dict(model=model, batch=4, seq_len=4096, dtype="bfloat16", warmup=2, timed_steps=10, rounds=3,
                profiled_steps=1, activation_checkpointing=False, quick=False)


def selected_contenders(default: list[str] = STEP_CONTENDERS) -> list[str]:
    """BENCH_STEP_CONTENDERS (comma-separated) when set, else ``default``."""
    wanted = os.environ.get("BENCH_STEP_CONTENDERS")
    if not wanted:
        return list(default)
    contenders = [t.strip() for t in wanted.split(",") if t.strip()]
    unknown = sorted(set(contenders) - set(CONTENDERS))
    if unknown:
        raise ValueError(f"unknown contenders {unknown}; choose from {list(CONTENDERS)}")
    return contenders


def round_order(contenders: list[str], round_index: int) -> list[str]:
    """Round r starts at contender r: no contender always runs first (cold machine) or last."""
    shift = round_index % len(contenders)
    return contenders[shift:] + contenders[:shift]


def aggregate(contender: str, records: list[dict], cfg: dict) -> dict:
    """One contender's rounds -> its record: pooled median of all timed steps and its 95 % interval."""
    ok = [r for r in records if r.get("status") == "ok"]
    if not ok:
        failed = records[0] if records else {"status": "skipped", "reason": "never run"}
        return failed | {"rounds": records}
    groups = [r["step_ms"] for r in ok]
    median_ms = stats.pooled_median(groups)
    lo, hi = stats.median_ci(groups)
    first = next((r for r in ok if r.get("profile")), ok[0])
    result = {k: v for k, v in first.items() if k not in ("step_ms", "median_ms", "min_ms", "max_ms", "wall_s")}
    result.update(
        status="ok", step_ms=[v for g in groups for v in g], median_ms=median_ms, ci95_ms=[lo, hi],
        min_ms=min(min(g) for g in groups), max_ms=max(max(g) for g in groups),
        round_medians_ms=[statistics.median(g) for g in groups], processes=len(ok),
        peak_gib=max((r["peak_gib"] for r in ok if r.get("peak_gib") is not None), default=None),
        tokens_per_s=cfg["batch"] * cfg["seq_len"] / (median_ms / 1e3),
        rounds=[{k: r.get(k) for k in ("status", "reason", "wall_s", "first_step_s", "median_ms")} for r in records])
    return result


def resolution(results: dict) -> float | None:
    """The smallest step difference this run can resolve, as a fraction of a step: the widest contender's
    interval (upper - lower) over its median. Two medians closer than that can have overlapping intervals."""
    widths = [(r["ci95_ms"][1] - r["ci95_ms"][0]) / r["median_ms"] for r in results.values()
              if r.get("status") == "ok" and r.get("ci95_ms")]
    return max(widths) if widths else None


def _run_one(contender: str, args, tmp: pathlib.Path, round_index: int, timeout: float) -> dict:
    extra = (("--quick",) if args.quick else ()) + (("--no-profile",) if round_index > 0 else ())
    return run_contender_process(WORKER, contender, CONTENDERS[contender], tmp / f"{contender}-{round_index}.json",
                                 timeout, extra)


def run_rounds(args, name: str, default: list[str], baseline: str, ours: str) -> dict:
    """Every contender of ``default`` (or BENCH_STEP_CONTENDERS) in ``rounds`` interleaved processes; the
    record of experiment ``name`` (step, or step_fusion: bench/exp_step_fusion.py)."""
    cfg = mode.gpu_or_quick(args, name, step_config(True), step_config(False)).setup
    contenders = selected_contenders(default)
    budget_s = float(os.environ.get("BENCH_STEP_BUDGET_S", 540))  # all rounds; a device job gets 600 s
    began = time.perf_counter()
    records = {c: [] for c in contenders}
    with tempfile.TemporaryDirectory() as tmp:
        for round_index in range(cfg["rounds"]):
            for index, contender in enumerate(round_order(contenders, round_index), 1):
                left = budget_s - (time.perf_counter() - began)
                where = f"round {round_index + 1}/{cfg['rounds']}, contender {index}/{len(contenders)}: {contender}"
                if left < 30:
                    records[contender].append({"contender": contender, "label": CONTENDERS[contender],
                                               "status": "skipped", "reason": f"time budget of {budget_s:.0f} s used up"})
                    print(f" step {where} skipped (time budget)", flush=True)
                    continue
                print(f" step {where} ({left:.0f} s of budget left)", flush=True)
                timeout = min(CHILD_TIMEOUT_S.get(contender, 150), left)
                records[contender].append(_run_one(contender, args, pathlib.Path(tmp), round_index, timeout))
    results = {c: aggregate(c, records[c], cfg) for c in contenders}
    model = build_config(cfg["model"])
    cfg["geometry"] = {k: getattr(model, k) for k in (
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
        "num_key_value_heads", "head_dim", "vocab_size", "rms_norm_eps")}
    cfg.update(step=STEP_DEFINITION, attention="sdpa", contenders=contenders, baseline=baseline, ours=ours,
               tie_rule=TIE_RULE, budget_s=budget_s, resolution=resolution(results),
               interval=f"{stats.CONFIDENCE:.0%} two-level bootstrap of the pooled median ({stats.RESAMPLES} "
                        "resamples: processes, then steps within each)",
               compile_scope="regional: torch.compile on each decoder layer and on the final norm",
               timing=("CUDA events per step; every contender in `rounds` fresh processes, interleaved; median of "
                       "all timed steps after warm-up"),
               rmsnorm_share=("profiler, one step of round 1: module record_function ranges (forward) + autograd "
                              "sequence numbers (backward); compiled contenders: kernel names"))
    return {"config": cfg, "results": results}


