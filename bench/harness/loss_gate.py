"""The loss-gate training that bench/exp_loss_curve.py and bench/exp_fsdp2.py both run.

The same small Qwen3, byte tokens of the CPython stdlib, optimizer and schedule, the control
(a correct RMSNorm that rounds once: its distance from HF is the run's noise floor), and the
gate that holds a patched model to HF with that noise floor (``snippets/loss_consistency.py``).
"""
from __future__ import annotations

import hashlib
import platform
import sysconfig

import torch

from loss_consistency import VOCAB_SIZE, loss_gate, stdlib_tokens
from qwen3_configs import tiny_qwen3_config

OPTIMIZER = ("AdamW(betas=(0.9, 0.95), weight_decay=0), grad-norm clip 1.0, linear warm-up, "
             "cosine decay to 0.1 x lr")


def loss_config(quick: bool) -> dict:
    gate = dict(final_window=50, final_rtol=5e-3, step_rtol=0.05)
    if quick:
        return dict(model=dict(), steps=6, batch=2, seq_len=32, lr=3e-3, warmup=2, corpus_tokens=100_000,
                    variants=["amp", "bf16"], seed=0, data_seed=0, gate=dict(gate, final_window=2), quick=True)
    model = dict(hidden_size=384, intermediate_size=1024, num_hidden_layers=4, num_attention_heads=6,
                 num_key_value_heads=2, head_dim=64, max_position_embeddings=512)
    return dict(model=model, steps=1000, batch=32, seq_len=256, lr=1e-3, warmup=50, corpus_tokens=8_000_000,
                variants=["amp", "bf16"], seed=0, data_seed=0, gate=gate, quick=False)


def model_config(cfg: dict):
    return tiny_qwen3_config(vocab_size=VOCAB_SIZE, use_cache=False, **cfg["model"])


def control_norm_class():
    class OneRoundingRMSNorm(torch.nn.Module):
        """RMSNorm computed fully in fp32 and cast once (HF casts x_hat first, then multiplies)."""

        def __init__(self, hidden_size, eps=1e-6):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(hidden_size))
            self.variance_epsilon = eps

        def forward(self, x):
            x32 = x.float()
            y = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.variance_epsilon) * self.weight.float()
            return y.to(torch.promote_types(x.dtype, self.weight.dtype))

    return OneRoundingRMSNorm


def rounded(values, digits: int = 5) -> list:
    return [float(f"{v:.{digits}g}") for v in values]


def gate_with_control(hf, patched, control, gate_cfg: dict, label: str, log=print) -> tuple[dict, dict]:
    """(gate, control_gate): ``patched`` vs ``hf`` with the control's final-loss distance from HF as the
    noise floor, and the control's own report against HF; logs one line that names the verdict."""
    control_gate = loss_gate(hf, control, **gate_cfg)
    gate = loss_gate(hf, patched, **gate_cfg, noise_final_rel_diff=control_gate["final_rel_diff"])
    log(f"{label}: gate {'PASSED' if gate['passed'] else 'FAILED'}: final rel diff {gate['final_rel_diff']:.2e} "
        f"(limit {gate['final_limit']:.2e}; control {control_gate['final_rel_diff']:.2e}), "
        f"max step rel diff {gate['max_rel_diff']:.2e} (control {control_gate['max_rel_diff']:.2e})")
    return gate, control_gate


def corpus(cfg: dict):
    """The training tokens (first ``cfg["corpus_tokens"]`` stdlib bytes, CPU); records their provenance
    in ``cfg["corpus"]``."""
    tokens = stdlib_tokens()[:cfg["corpus_tokens"]]  # all of it if the stdlib is smaller
    if tokens.numel() < 50 * cfg["seq_len"]:
        raise RuntimeError(f"only {tokens.numel()} stdlib tokens found at {sysconfig.get_paths()['stdlib']}")
    cfg["corpus"] = {
        "source": "CPython stdlib *.py files, sorted path order, bytes + EOS (256) between files",
        "stdlib": sysconfig.get_paths()["stdlib"],
        "python": platform.python_version(),
        "tokens": tokens.numel(),
        "sha256": hashlib.sha256(tokens.to(torch.int16).numpy().tobytes()).hexdigest(),
    }
    return tokens


def geometry(config) -> dict:
    return {k: getattr(config, k) for k in (
        "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
        "head_dim", "vocab_size", "rms_norm_eps")}
