"""What the training-step experiments (exp_step, harness/fullsize_job) share: the model config from a spec, a
Qwen3RMSNorm-shaped module around any norm function, and one contender measured in a child process."""
from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import time

import torch

from bench import ROOT
from bench.harness.record import worker_args
from qwen3_configs import qwen3_config, tiny_qwen3_config


def build_config(spec: dict):
    """A Qwen3 config from ``{"size": "8B" | "tiny", **overrides}``: sdpa, no KV cache."""
    overrides = {k: v for k, v in spec.items() if k != "size"}
    overrides.update(use_cache=False, attn_implementation="sdpa")
    if spec["size"] == "tiny":
        return tiny_qwen3_config(**overrides)
    return qwen3_config(spec["size"], **overrides)


def norm_class(name: str, norm):
    """A module with Qwen3RMSNorm's constructor whose forward is ``norm(hidden_states, weight, eps)``.
    ``name`` must keep "RMSNorm": HF's _init_weights finds norms by class name (weight = ones)."""
    if "RMSNorm" not in name:
        raise ValueError(f"{name!r}: HF initialises norm weights by a class name holding 'RMSNorm'")

    def __init__(self, hidden_size, eps=1e-6):
        torch.nn.Module.__init__(self)
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states):
        return norm(hidden_states, self.weight, self.variance_epsilon)

    return type(name, (torch.nn.Module,), {"__init__": __init__, "forward": forward})


def run_contender_process(experiment: str, contender: str, label: str, out: pathlib.Path, timeout: float,
                          extra: tuple[str, ...] = ()) -> dict:
    """``python -m bench.run_all --worker EXPERIMENT --contender NAME --out FILE EXTRA``: its record, or an
    error record when it timed out or wrote none; ``wall_s`` added either way."""
    command = [sys.executable, *worker_args(experiment, "--contender", contender, "--out", str(out), *extra)]
    start = time.perf_counter()
    try:
        subprocess.run(command, cwd=ROOT, timeout=timeout, check=False)
        record = json.loads(out.read_text(encoding="utf-8"))
    except subprocess.TimeoutExpired:
        record = {"contender": contender, "label": label, "status": "error", "reason": f"timed out after {timeout:.0f} s"}
    except (OSError, ValueError) as error:  # the child died before writing its record
        record = {"contender": contender, "label": label, "status": "error",
                  "reason": f"child process wrote no result: {error!r}"}
    record["wall_s"] = round(time.perf_counter() - start, 1)
    return record


FUSION_SET_PARTS = ("rms_norm", "fused_add", "qk_norm_rope", "swiglu", "loss")  # apply_qwen3_fusion's


def fusion_parts(*parts: str) -> dict:
    """apply_qwen3_fusion's keyword arguments with only ``parts`` on (snippets/qwen3_fusion_patch.py)."""
    unknown = set(parts) - set(FUSION_SET_PARTS)
    if unknown:
        raise ValueError(f"unknown fusion parts {sorted(unknown)}")
    return {part: part in parts for part in FUSION_SET_PARTS}


class ContenderSkipped(Exception):
    """The contender cannot run in this environment; the reason is recorded, not raised."""


def write_child_record(contender: str, label: str, measure, out: pathlib.Path, log) -> None:
    """A child process's record: ``measure()``'s result with status ok, skipped (ContenderSkipped) or error
    (anything else, with its traceback's tail), written to ``out`` for the parent."""
    import traceback

    record = {"contender": contender, "label": label}
    try:
        record.update(measure(), status="ok")
    except ContenderSkipped as reason:
        record.update(status="skipped", reason=str(reason))
        log(f"skipped: {reason}")
    except Exception as error:
        record.update(status="error", reason=repr(error)[:500], traceback=traceback.format_exc()[-3000:])
        log(f"FAILED: {error!r}")
    out.write_text(json.dumps(record), encoding="utf-8")


def model_flops_per_token(config, seq_len: int) -> float:
    """6 x matmul parameters + causal attention's score and value products, forward + backward (the MFU
    numerator of the full-size and FSDP2 runs; checkpointing's recomputation is not counted)."""
    h, layers = config.hidden_size, config.num_hidden_layers
    attn = config.num_attention_heads * config.head_dim
    kv = config.num_key_value_heads * config.head_dim
    per_layer = h * attn + 2 * h * kv + attn * h + 3 * h * config.intermediate_size
    matmul_params = layers * per_layer + h * config.vocab_size  # lm_head; the embedding is a lookup
    return 6 * matmul_params + 6 * layers * seq_len * attn
