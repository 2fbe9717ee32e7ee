# SPDX-License-Identifier: Apache-2.0
"""Does swapping in the Triton RMSNorm change training? Train the same Qwen3 twice and
compare the losses.

Both runs start from the same weights (one model's state_dict is copied into
the other), see the same batches in the same order and use the same optimizer.
The only difference is the RMSNorm class that modeling_qwen3 builds.

Data needs no download: byte-level tokens over CPython's own standard-library
sources, which exist wherever Python is installed.
"""
# --8<-- [start:imports]
import math

import torch
# --8<-- [end:imports]


# --8<-- [start:data]
import os
import pathlib
import sysconfig

EOS = 256  # token between two files; bytes are tokens 0..255
VOCAB_SIZE = 257


def stdlib_py_files(folder: pathlib.Path):
    """The *.py files under ``folder`` in sorted path order, never entering
    installed packages (site-packages, dist-packages) or caches."""
    entries = sorted(os.scandir(folder), key=lambda entry: entry.name)
    for entry in entries:
        if entry.is_dir(follow_symlinks=False):
            if entry.name not in ("site-packages", "dist-packages", "__pycache__"):
                yield from stdlib_py_files(pathlib.Path(entry.path))
        elif entry.name.endswith(".py"):
            yield pathlib.Path(entry.path)


def stdlib_tokens(n_tokens: int | None = None) -> torch.Tensor:
    """Byte tokens of the stdlib's *.py files in sorted path order: the first
    ``n_tokens``, or all."""
    root = pathlib.Path(sysconfig.get_paths()["stdlib"])
    texts, total = [], 0
    for path in stdlib_py_files(root):
        texts.append(path.read_bytes())
        total += len(texts[-1]) + 1
        if n_tokens is not None and total >= n_tokens:
            break
    if total < (n_tokens or 1):
        raise ValueError(f"the stdlib at {root} has only {total} tokens, "
                         f"{n_tokens} requested")
    tokens = torch.frombuffer(bytearray(b"\0".join(texts) + b"\0"),
                              dtype=torch.uint8).long()
    file_ends = torch.tensor([len(t) + 1 for t in texts]).cumsum(0) - 1
    tokens[file_ends] = EOS  # the byte after each file becomes the separator
    return tokens[:n_tokens]


def batch_starts(n_tokens: int, batch_size: int, seq_len: int, steps: int,
                 seed: int = 0) -> torch.Tensor:
    """Random window offsets, shape (steps, batch_size); a seed gives one order."""
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(0, n_tokens - seq_len, (steps, batch_size),
                         generator=generator)
# --8<-- [end:data]


# --8<-- [start:models]
from transformers import Qwen3ForCausalLM

from qwen3_patch import patch_qwen3_rmsnorm
from rmsnorm_triton import TritonQwen3RMSNorm


def build_pair(config, norm_cls=TritonQwen3RMSNorm, seed: int = 0):
    """(baseline, patched): HF's RMSNorm vs ``norm_cls``, identical initial weights."""
    torch.manual_seed(seed)
    baseline = Qwen3ForCausalLM(config)
    undo = patch_qwen3_rmsnorm(norm_cls)  # must happen before the model is built
    try:
        patched = Qwen3ForCausalLM(config)
    finally:
        undo()
    patched.load_state_dict(baseline.state_dict())  # strict: same parameter names
    return baseline, patched
# --8<-- [end:models]


# --8<-- [start:train]
def get_batch(tokens: torch.Tensor, starts: torch.Tensor, seq_len: int) -> torch.Tensor:
    """Windows tokens[s : s + seq_len] for each start s, on the tokens' device."""
    starts = starts.to(tokens.device)
    return tokens[starts[:, None] + torch.arange(seq_len, device=tokens.device)]


def adamw(model, lr: float):
    """The optimizer of every run: AdamW, betas (0.9, 0.95), no weight decay."""
    return torch.optim.AdamW(model.parameters(), lr=lr, betas=(0.9, 0.95),
                             weight_decay=0.0)


def train_step(model, optimizer, batch, lr: float, autocast_dtype=None) -> torch.Tensor:
    """One AdamW step; returns the loss as a 0-dim tensor (no host sync)."""
    for group in optimizer.param_groups:
        group["lr"] = lr
    with torch.autocast(batch.device.type, dtype=autocast_dtype,
                        enabled=autocast_dtype is not None):
        loss = model(input_ids=batch, labels=batch).loss  # HF shifts the labels by one
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.detach()


def cosine_lr(step: int, steps: int, lr: float, warmup: int,
              final_ratio: float = 0.1) -> float:
    """Linear warm-up to ``lr``, then cosine decay to ``final_ratio * lr`` at the
    last step."""
    if step < warmup:
        return lr * (step + 1) / warmup
    progress = (step - warmup) / max(1, steps - 1 - warmup)
    return lr * (final_ratio
                 + (1 - final_ratio) * 0.5 * (1 + math.cos(math.pi * progress)))


def train_lockstep(models, tokens, starts, seq_len: int, lr: float, warmup: int = 20,
                   autocast_dtype=None, log_every: int = 0):
    """Train every model on the same batches, step by step; returns one list of
    losses per model.

    ``tokens`` should already be on the models' device. The learning rate decays to
    a tenth, as in a real run: at a constant rate the last steps' losses keep
    fluctuating by about lr, so two correct runs would end further apart than the
    precision difference under test.
    """
    optimizers = [adamw(model, lr) for model in models]
    losses = [[] for _ in models]
    for step, step_starts in enumerate(starts):
        batch = get_batch(tokens, step_starts, seq_len)
        step_lr = cosine_lr(step, len(starts), lr, warmup)
        for model, optimizer, history in zip(models, optimizers, losses):
            history.append(train_step(model, optimizer, batch, step_lr, autocast_dtype))
        if log_every and (step + 1) % log_every == 0:
            print(f"step {step + 1:5d}  losses "
                  + "  ".join(f"{h[-1].item():.4f}" for h in losses), flush=True)
    return [torch.stack(h).float().tolist() for h in losses]
# --8<-- [end:train]


# --8<-- [start:gate]
def loss_gate(baseline, patched, final_window: int = 50, final_rtol: float = 5e-3,
              step_rtol: float = 0.05, noise_final_rel_diff: float = 0.0):
    """Compare two loss curves.

    final loss = mean of the last ``final_window`` steps; it must agree within
    ``final_rtol``, or within twice ``noise_final_rel_diff`` when that is larger:
    how far a second *correct* implementation ended from the same baseline (the
    run's own noise floor).
    No divergence: every loss finite, and at every step
    |patched - baseline| <= step_rtol * baseline.
    """
    a = torch.tensor(baseline, dtype=torch.float64)
    b = torch.tensor(patched, dtype=torch.float64)
    if a.shape != b.shape or not 1 <= final_window <= a.numel():
        raise ValueError(f"need two curves of the same length >= {final_window}, "
                         f"got {a.numel()} and {b.numel()}")
    finite = bool(torch.isfinite(a).all() and torch.isfinite(b).all())
    final_a, final_b = a[-final_window:].mean().item(), b[-final_window:].mean().item()
    diff = (b - a).abs()
    report = {
        "finite": finite,
        "final_baseline": final_a,
        "final_patched": final_b,
        "final_rel_diff": abs(final_b - final_a) / abs(final_a),
        "max_abs_diff": diff.max().item(),
        "max_rel_diff": (diff / a.abs()).max().item(),
        "final_window": final_window,
        "final_rtol": final_rtol,
        "final_limit": max(final_rtol, 2 * noise_final_rel_diff),
        "step_rtol": step_rtol,
    }
    report["passed"] = bool(finite and report["final_rel_diff"] <= report["final_limit"]
                            and report["max_rel_diff"] <= step_rtol)
    return report
# --8<-- [end:gate]


if __name__ == "__main__":
    import os

    from qwen3_configs import tiny_qwen3_config

    on_gpu = os.environ.get("TRITON_INTERPRET") != "1" and torch.cuda.is_available()
    device = "cuda" if on_gpu else "cpu"
    steps, batch_size, seq_len = (300, 16, 128) if on_gpu else (12, 4, 32)
    config = tiny_qwen3_config(vocab_size=VOCAB_SIZE, use_cache=False)
    tokens = stdlib_tokens(200_000).to(device)
    baseline, patched = (m.to(device) for m in build_pair(config))
    starts = batch_starts(tokens.numel(), batch_size, seq_len, steps)
    hf_losses, triton_losses = train_lockstep([baseline, patched], tokens, starts,
                                              seq_len, lr=3e-3,
                                              log_every=max(1, steps // 6))
    print(loss_gate(hf_losses, triton_losses, final_window=max(1, steps // 4)))
