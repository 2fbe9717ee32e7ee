"""CPU version of the loss-curve experiment (bench/exp_loss_curve.py): same code, tiny model, fp32.

HF's Qwen3RMSNorm and the Triton one (under the interpreter on CPU) train in
lockstep from the same weights on the same stdlib byte batches; the run must
pass the same gate as the GPU experiment. Two deliberately wrong RMSNorm
backwards must fail it, so the gate is shown to have teeth at this size. The lr
is high (1e-2) so that 24 steps are enough: at 3e-3 the missing-rstd bug ended
0.55 % from HF with torch 2.13 and 0.03 % with torch 2.11, i.e. inside the noise.

What it cannot see: a bug confined to dW (e.g. dW left at zero) changes a
24-step loss by well under the gate (0.1 % here); dW is covered by the kernel's
own gradient tests, not by this one.
"""
import math

import pytest
import torch
from helpers import MissingProjectionTerm
from unmeasured import coverage_paused

from loss_consistency import (EOS, VOCAB_SIZE, batch_starts, build_pair, get_batch, loss_gate, stdlib_tokens,
                              train_lockstep)
from qwen3_configs import rmsnorm_count, tiny_qwen3_config
from qwen3_patch import count_modules
from rmsnorm_triton import TritonQwen3RMSNorm

STEPS, BATCH, SEQ_LEN, LR, WARMUP, FINAL_WINDOW = 24, 4, 32, 1e-2, 5, 5


@pytest.fixture(scope="module")
def tokens():
    return stdlib_tokens(50_000)


def _config():
    return tiny_qwen3_config(vocab_size=VOCAB_SIZE, use_cache=False)


def _train(tokens, norm_cls, device="cpu"):
    baseline, patched = build_pair(_config(), norm_cls, seed=0)
    starts = batch_starts(tokens.numel(), BATCH, SEQ_LEN, STEPS, seed=0)
    models = [m.to(device) for m in (baseline, patched)]
    return train_lockstep(models, tokens.to(device), starts, SEQ_LEN, lr=LR, warmup=WARMUP, log_every=STEPS)


def test_stdlib_tokens_are_deterministic_bytes(tokens):
    again = stdlib_tokens(50_000)
    assert torch.equal(tokens, again)
    assert tokens.numel() == 50_000 and tokens.dtype == torch.int64
    assert 0 <= tokens.min() and tokens.max() <= EOS < VOCAB_SIZE
    assert (tokens == EOS).any(), "several files are joined, each ends with EOS"
    assert len(torch.unique(tokens)) > 60, "real text, not a constant"


def test_batches_follow_the_seed(tokens):
    starts = batch_starts(tokens.numel(), 3, 16, 4, seed=7)
    assert torch.equal(starts, batch_starts(tokens.numel(), 3, 16, 4, seed=7))
    assert not torch.equal(starts, batch_starts(tokens.numel(), 3, 16, 4, seed=8))
    batch = get_batch(tokens, starts[0], 16)
    assert batch.shape == (3, 16)
    for row, start in zip(batch, starts[0].tolist()):
        assert torch.equal(row, tokens[start:start + 16])


def test_build_pair_same_weights_different_norms():
    baseline, patched = build_pair(_config(), TritonQwen3RMSNorm, seed=0)
    assert count_modules(patched, TritonQwen3RMSNorm) == rmsnorm_count(_config())
    assert count_modules(baseline, TritonQwen3RMSNorm) == 0
    for (name, a), (_, b) in zip(baseline.state_dict().items(), patched.state_dict().items()):
        assert torch.equal(a, b), name


@pytest.fixture(scope="module")
def triton_run(tokens, device):
    with coverage_paused():  # train_lockstep is measured by the runs below, the kernels by their tests
        return _train(tokens, TritonQwen3RMSNorm, device)


def test_triton_rmsnorm_training_matches_hf_fp32(triton_run):
    hf_losses, triton_losses = triton_run
    assert hf_losses[-1] < hf_losses[0] - 0.5, "the model must actually learn in these steps"
    gate = loss_gate(hf_losses, triton_losses, final_window=FINAL_WINDOW)
    assert gate["passed"], gate
    # fp32 on both sides: only summation order differs; at this lr the trajectories amplify
    # it to about 0.2 % at worst, still far inside the 5 % step limit that the bugs below break.
    assert gate["max_rel_diff"] < 1e-2, gate


# Two classic RMSNorm backward bugs, in plain torch, to show that the gate catches them.
_DroppedProjection = MissingProjectionTerm


class _MissingRstd(_DroppedProjection):
    """dx without the final multiplication by rstd."""

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        x_hat, w_dy = x * rstd, weight * dy
        dx = w_dy - x_hat * (w_dy * x_hat).mean(-1, keepdim=True)
        return dx, (dy * x_hat).reshape(-1, x.shape[-1]).sum(0), None


def _norm_module(function):
    class BuggyRMSNorm(torch.nn.Module):
        def __init__(self, hidden_size, eps=1e-6):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(hidden_size))
            self.variance_epsilon = eps

        def forward(self, x):
            return function.apply(x, self.weight, self.variance_epsilon)

    return BuggyRMSNorm


@pytest.mark.parametrize("function", [_DroppedProjection, _MissingRstd], ids=["dropped-projection", "missing-rstd"])
def test_gate_rejects_a_wrong_backward(tokens, triton_run, function):
    hf_losses, buggy_losses = _train(tokens, _norm_module(function))
    gate = loss_gate(hf_losses, buggy_losses, final_window=FINAL_WINDOW)
    assert not gate["passed"], gate
    # Also with the limit widened by a noise floor, here the correct kernel's own distance from HF.
    noise = loss_gate(*triton_run, final_window=FINAL_WINDOW)["final_rel_diff"]
    assert not loss_gate(hf_losses, buggy_losses, final_window=FINAL_WINDOW, noise_final_rel_diff=noise)["passed"]


def test_gate_rules():
    curve = [3.0 - 0.01 * i for i in range(100)]
    assert loss_gate(curve, curve)["passed"]
    assert loss_gate(curve, [x * 1.004 for x in curve])["passed"]  # 0.4 % everywhere: inside both limits
    assert not loss_gate(curve, [x * 1.006 for x in curve])["passed"]  # final loss 0.6 % off
    # A noise floor above half the fixed limit widens the final-loss limit to twice the floor ...
    assert loss_gate(curve, [x * 1.006 for x in curve], noise_final_rel_diff=0.004)["final_limit"] == 0.008
    assert loss_gate(curve, [x * 1.006 for x in curve], noise_final_rel_diff=0.004)["passed"]
    assert not loss_gate(curve, [x * 1.009 for x in curve], noise_final_rel_diff=0.004)["passed"]
    # ... a small one leaves it alone, and it never relaxes the per-step limit.
    assert loss_gate(curve, curve, noise_final_rel_diff=0.001)["final_limit"] == 5e-3
    assert not loss_gate(curve, [x * 1.06 for x in curve], noise_final_rel_diff=0.1)["passed"]
    spike = list(curve)
    spike[10] *= 1.2  # one diverging step early on; the final window is clean
    report = loss_gate(curve, spike)
    assert report["final_rel_diff"] == 0 and not report["passed"]
    with_nan = list(curve)
    with_nan[3] = math.nan
    assert not loss_gate(curve, with_nan)["passed"]
    assert not loss_gate(curve, [math.inf] * 100)["passed"]
    with pytest.raises(ValueError):
        loss_gate(curve, curve[:-1])
    with pytest.raises(ValueError):
        loss_gate(curve[:10], curve[:10], final_window=50)
