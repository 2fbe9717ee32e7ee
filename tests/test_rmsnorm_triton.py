"""Correctness of the production RMSNorm kernels (snippets/rmsnorm_triton.py).

CPU: Triton interpreter, small shapes. CUDA: the same tests at real sizes, plus
the randomized sweep, bit-level HF comparison and determinism at scale.
"""
import math
import random
import re

import pytest
import torch
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

import rmsnorm_triton
from helpers import (REL_TOL, ReportsSecondDevice, cast_order_references, fp64_reference, poisoned_allocations,
                     random_inputs, rel_err)
from rmsnorm_triton import (
    TritonQwen3RMSNorm,
    TritonQwen3RMSNormFwdOnly,
    rms_norm,
    rms_norm_backward,
    rms_norm_forward,
)

DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64]
def run_triton(x, w, eps, dy, weight_grad=True):
    x = x.detach().clone().requires_grad_()
    w = w.detach().clone().requires_grad_(weight_grad)
    with poisoned_allocations():
        y = rms_norm(x, w, eps)
        y.backward(dy)
    return y.detach(), x.grad, w.grad


def shapes(on_gpu):
    if on_gpu:
        return [(4, 512, 4096), (2048, 1024), (3, 1000, 2560), (64, 4, 32, 128), (4097, 5120), (17, 16384),
                (33, 1536), (9, 12288), (1, 7)]
    # 300, 1025 and 2560 take the block + tail path (256 + 64, 1024 + 1, 2048 + 512)
    return [(3, 5, 128), (4, 96), (2, 3, 200), (37, 128), (1, 7), (3, 300), (2, 1025), (2, 2560)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_fp64_reference(dtype, device, on_gpu):
    for i, shape in enumerate(shapes(on_gpu)):
        x, w, dy = random_inputs(shape, dtype, device, seed=i)
        y, dx, dw = run_triton(x, w, 1e-6, dy)
        ref_y, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
        assert y.dtype == dtype and dx.dtype == dtype and dw.dtype == dtype
        assert y.shape == x.shape and dx.shape == x.shape
        tol = REL_TOL[dtype]
        assert rel_err(y, ref_y) < tol, (shape, "y")
        assert rel_err(dx, ref_dx) < tol, (shape, "dx")
        assert rel_err(dw, ref_dw) < tol, (shape, "dw")


def ulp_distance_bf16(a, b):
    """Distance in bf16 units in the last place (monotone integer mapping)."""
    def key(t):
        bits = t.contiguous().view(torch.int16).to(torch.int32)
        return torch.where(bits < 0, -(bits & 0x7FFF), bits)

    return (key(a) - key(b)).abs()


@pytest.mark.parametrize("weight", ["ones", "random"])
def test_bf16_forward_matches_hf_bits(weight, device, on_gpu):
    """HF rounds x_hat to bf16, then multiplies by the bf16 weight; so do we.

    x_hat may differ from HF's by one bf16 ulp where the fp32 row sums differ in
    their last bit (different summation order). With a unit weight that is the
    output; with a random weight |w| < 2 one x_hat ulp can become two output
    ulps, so there the bound is two ulps and nearly all elements must be identical.
    """
    shape = (8, 1024, 4096) if on_gpu else (6, 256)
    x, w, _ = random_inputs(shape, torch.bfloat16, device, seed=11)
    if weight == "ones":
        w = torch.ones_like(w)
    hf = Qwen3RMSNorm(shape[-1], eps=1e-6).to(device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        hf.weight.copy_(w)
        expected = hf(x)
    y, _ = rms_norm_forward(x, w, 1e-6)
    distance = ulp_distance_bf16(y.cpu(), expected.cpu())
    if on_gpu:
        assert distance.max().item() <= (1 if weight == "ones" else 2)
        assert (distance == 0).float().mean().item() > 0.999
    else:  # the interpreter truncates fp32 -> bf16 instead of rounding (twice: x_hat and y)
        assert distance.max().item() <= 3


@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.bfloat16])
def test_mixed_dtypes_follow_hf_promotion(weight_dtype, device, on_gpu):
    x, _, dy = random_inputs((5, 64), torch.bfloat16, device, seed=3)
    w = (torch.rand(64, dtype=torch.float64) + 0.5).to(weight_dtype).to(device)
    hf = Qwen3RMSNorm(64).to(device=device, dtype=weight_dtype)
    with torch.no_grad():
        hf.weight.copy_(w)
        expected = hf(x)
    y = rms_norm(x, w, 1e-6)
    assert y.dtype == expected.dtype == torch.promote_types(torch.bfloat16, weight_dtype)
    # one bf16 rounding of x_hat (plus one of y for a bf16 weight); the interpreter truncates
    torch.testing.assert_close(y, expected, rtol=(8e-3 if on_gpu else 1.6e-2), atol=1e-6)


def test_backward_matches_hf_autograd(device, on_gpu):
    shape = (4, 256, 2048) if on_gpu else (4, 3, 160)
    x, w, dy = random_inputs(shape, torch.bfloat16, device, seed=5)
    hf = Qwen3RMSNorm(shape[-1]).to(device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        hf.weight.copy_(w)
    x_hf = x.clone().requires_grad_()
    hf(x_hf).backward(dy)
    _, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
    y, dx, dw = run_triton(x, w, 1e-6, dy)
    # ours is about as close to the exact gradient as HF's own bf16 autograd
    # (plus the interpreter's truncating bf16 stores on CPU: up to 2^-7 relative)
    slack = 1e-3 if on_gpu else 2.0**-7
    assert rel_err(dx, ref_dx) <= rel_err(x_hf.grad, ref_dx) * 1.5 + slack
    assert rel_err(dw, ref_dw) <= rel_err(hf.weight.grad, ref_dw) * 1.5 + slack


def test_gradcheck_fp64(device, on_gpu):
    for shape in ([(3, 40)] + ([(2, 3, 128), (5, 1000)] if on_gpu else [(2, 2, 24)])):
        x = torch.randn(shape, dtype=torch.float64, device=device, requires_grad=True)
        w = torch.randn(shape[-1], dtype=torch.float64, device=device, requires_grad=True)
        assert torch.autograd.gradcheck(rms_norm, (x, w, 1e-6), fast_mode=not on_gpu)


def test_gradcheck_fp64_strided_input(device):
    base = torch.randn(2, 16, 3, dtype=torch.float64, device=device)
    x = base.transpose(1, 2).requires_grad_()  # last dim not contiguous
    w = torch.randn(16, dtype=torch.float64, device=device).unsqueeze(0)[0].requires_grad_()
    assert not x.is_contiguous()
    assert torch.autograd.gradcheck(rms_norm, (x, w, 1e-5), fast_mode=True)


def test_strided_qk_norm_views(device, on_gpu):
    """q_norm input is a (B, T, heads, 128) view; its grad arrives transposed."""
    b, t, heads = (2, 512, 32) if on_gpu else (2, 5, 3)
    gen = torch.Generator().manual_seed(7)
    q_proj_out = torch.randn(b, t, heads * 128, generator=gen).to(torch.bfloat16).to(device)
    x = q_proj_out.view(b, t, heads, 128)
    dy_heads_first = torch.randn(b, heads, t, 128, generator=gen).to(torch.bfloat16).to(device)
    dy = dy_heads_first.transpose(1, 2)  # (b, t, heads, 128), non-contiguous
    assert not dy.is_contiguous()
    w = (torch.rand(128, generator=gen) + 0.5).to(torch.bfloat16).to(device)
    y, dx, dw = run_triton(x, w, 1e-6, dy)
    y_c, dx_c, dw_c = run_triton(x.contiguous(), w, 1e-6, dy.contiguous())
    assert torch.equal(y, y_c) and torch.equal(dx, dx_c) and torch.equal(dw, dw_c)
    ref_y, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
    assert rel_err(dx, ref_dx) < REL_TOL[torch.bfloat16]
    assert rel_err(dw, ref_dw) < REL_TOL[torch.bfloat16]


def test_other_strided_layouts(device):
    gen = torch.Generator().manual_seed(8)
    big = torch.randn(6, 9, 40, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    for x in (big[:, ::2, :32], big[1:, :, 3:35].permute(1, 0, 2), big.reshape(2, 3, 3, 3, 40)[:, :, 1:, :2]):
        dy = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(device)
        w = torch.randn(x.shape[-1], generator=gen, dtype=torch.float64).to(device)
        assert not x.is_contiguous()
        y, dx, dw = run_on_views(x, w, 1e-6, dy)  # the view itself: clone() would make it dense
        ref_y, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
        assert rel_err(y, ref_y) < 1e-12 and rel_err(dx, ref_dx) < 1e-10 and rel_err(dw, ref_dw) < 1e-10


def test_dw_is_deterministic(device, on_gpu):
    shape = (16384, 4096) if on_gpu else (40, 96)
    x, w, dy = random_inputs(shape, torch.bfloat16, device, seed=21)
    _, dx1, dw1 = run_triton(x, w, 1e-6, dy)
    _, dx2, dw2 = run_triton(x, w, 1e-6, dy)
    assert torch.equal(dw1, dw2) and torch.equal(dx1, dx2)


def test_grad_output_is_not_modified(device):
    x, w, dy = random_inputs((6, 128), torch.bfloat16, device, seed=2)
    dy_before = dy.clone()
    run_triton(x, w, 1e-6, dy)
    assert torch.equal(dy, dy_before)


def test_weight_without_grad_skips_dw(device):
    x, w, dy = random_inputs((6, 64), torch.float32, device, seed=4)
    y, dx, dw = run_triton(x, w, 1e-6, dy, weight_grad=False)
    assert dw is None
    _, ref_dx, _ = fp64_reference(x, w, 1e-6, dy)
    assert rel_err(dx, ref_dx) < REL_TOL[torch.float32]
    saved_rstd = rms_norm_forward(x, w, 1e-6)[1]
    assert rms_norm_backward(dy, x, w, saved_rstd, compute_dw=False)[1] is None


def test_double_backward_raises(device):
    x = torch.randn(3, 32, device=device, requires_grad=True)
    w = torch.randn(32, device=device, requires_grad=True)
    y = rms_norm(x, w)
    with pytest.raises(NotImplementedError, match="double backward"):
        torch.autograd.grad(y.sum(), x, create_graph=True)


def test_empty_input_returns_empty(device):
    x = torch.randn(0, 3, 64, device=device, requires_grad=True)
    w = torch.randn(64, device=device, requires_grad=True)
    y = rms_norm(x, w)
    assert y.shape == (0, 3, 64)
    y.sum().backward()
    assert x.grad.shape == x.shape and torch.equal(w.grad, torch.zeros_like(w))


def test_one_dim_input(device):
    x, w, dy = random_inputs((300,), torch.float32, device, seed=9)
    y, dx, dw = run_triton(x, w, 1e-6, dy)
    ref_y, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
    assert rel_err(y, ref_y) < 1e-6 and rel_err(dx, ref_dx) < 1e-5 and rel_err(dw, ref_dw) < 1e-5


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda d: (torch.randint(0, 5, (2, 8), device=d), torch.ones(8, device=d), 1e-6), TypeError, "int64"),
        (lambda d: (torch.randn(2, 8, device=d), torch.ones(8, dtype=torch.int32, device=d), 1e-6), TypeError, "int32"),
        (lambda d: (torch.randn(2, 8, device=d), torch.ones(7, device=d), 1e-6), ValueError, "shape \\(8,\\)"),
        (lambda d: (torch.randn(2, 8, device=d), torch.ones(2, 8, device=d), 1e-6), ValueError, "weight must have"),
        (lambda d: (torch.randn(2, 8, device=d), torch.ones(8, device=d), 0.0), ValueError, "eps"),
        (lambda d: (torch.randn(2, 8, device=d), torch.ones(8, device=d), -1e-6), ValueError, "eps"),
        (lambda d: (torch.randn(2, 8, device=d), torch.ones(8, device=d), float("nan")), ValueError, "eps"),
        (lambda d: (torch.tensor(1.0, device=d), torch.ones(1, device=d), 1e-6), ValueError, "0-dim"),
    ],
)
def test_bad_input_is_rejected(make, error, message, device):
    x, w, eps = make(device)
    with pytest.raises(error, match=message):
        rms_norm(x, w, eps)


def test_wrong_device_is_rejected(device, monkeypatch):
    x, w = torch.randn(2, 8), torch.ones(8)
    if device == "cpu":  # interpreter: pretend we are on the CUDA backend
        monkeypatch.delenv("TRITON_INTERPRET")
        with pytest.raises(ValueError, match="expected a cuda tensor"):
            rms_norm(x, w)
    else:
        with pytest.raises(ValueError, match="expected a cuda tensor"):
            rms_norm(x, w.cuda())
        with pytest.raises(ValueError, match="expected a cuda tensor"):
            rms_norm(x.cuda(), w)
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        with pytest.raises(ValueError, match="expected a cpu tensor"):
            rms_norm(x.cuda(), w.cuda())


BAD_EPS = [float("inf"), float("-inf"), float("nan"), 0.0, -1e-6, "1e-6", None]
EPS_ENTRY_POINTS = {
    "rms_norm": lambda x, w, eps: rms_norm(x, w, eps),
    "rms_norm_forward": lambda x, w, eps: rms_norm_forward(x, w, eps),
    "TritonQwen3RMSNorm": lambda x, w, eps: TritonQwen3RMSNorm(x.shape[-1], eps=eps).to(x.device)(x),
    "TritonQwen3RMSNormFwdOnly": lambda x, w, eps: TritonQwen3RMSNormFwdOnly(x.shape[-1], eps=eps).to(x.device)(x),
}


@pytest.mark.parametrize("entry", EPS_ENTRY_POINTS)
@pytest.mark.parametrize("eps", BAD_EPS, ids=repr)
def test_eps_must_be_a_positive_finite_number(eps, entry, device):
    """Every entry point refuses an eps that is not a positive finite number with a ValueError naming
    eps, before any launch. eps = inf would run: rstd = 0, so y = 0 and zero gradients, silently;
    -inf, nan, 0 and negative values give NaN or inf; a string or None is no eps at all."""
    x, w, _ = random_inputs((2, 8), torch.float32, device, seed=80)
    with pytest.raises(ValueError, match="eps"):
        EPS_ENTRY_POINTS[entry](x, w, eps)


def test_x_and_weight_on_different_devices_are_rejected(device):
    """x and weight on two devices of the backend's type (two GPUs: the kernel would be handed a
    pointer into the other GPU's memory) are refused with a message that names both devices. The
    interpreter has one device, so here the weight only reports a second one
    (helpers.ReportsSecondDevice); test_x_and_weight_on_two_gpus_are_rejected does it for real."""
    x, w, _ = random_inputs((2, 8), torch.float32, device, seed=81)
    w_elsewhere = w.as_subclass(ReportsSecondDevice)
    assert w_elsewhere.device.type == x.device.type and w_elsewhere.device != x.device
    message = re.escape(f"x is on {x.device} but weight is on {w_elsewhere.device}")
    for call in (lambda: rms_norm_forward(x, w_elsewhere, 1e-6), lambda: rms_norm(x, w_elsewhere, 1e-6)):
        with pytest.raises(ValueError, match=message):
            call()


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_x_and_weight_on_two_gpus_are_rejected():  # pragma: gpu only
    """x on cuda:0 and the weight on cuda:1 (and the other way round): a ValueError naming both."""
    for x_device, w_device in (("cuda:0", "cuda:1"), ("cuda:1", "cuda:0")):
        x = torch.randn(2, 8, device=x_device, requires_grad=True)
        w = torch.ones(8, device=w_device, requires_grad=True)
        message = f"x is on {x_device} but weight is on {w_device}"
        for call in (lambda: rms_norm_forward(x, w, 1e-6), lambda: rms_norm(x, w, 1e-6)):
            with pytest.raises(ValueError, match=message):
                call()


def test_grad_output_shape_mismatch_is_rejected(device):
    x, w, _ = random_inputs((4, 32), torch.float32, device, seed=1)
    y, rstd = rms_norm_forward(x, w, 1e-6)
    with pytest.raises(ValueError, match="grad_output shape"):
        rms_norm_backward(torch.randn(4, 31, device=device), x, w, rstd)


def test_module_is_a_drop_in_for_hf(device):
    hf = Qwen3RMSNorm(96, eps=1e-5)
    ours = TritonQwen3RMSNorm(96, eps=1e-5)
    assert "RMSNorm" in type(ours).__name__
    assert ours.state_dict().keys() == hf.state_dict().keys()
    assert ours.variance_epsilon == hf.variance_epsilon
    with torch.no_grad():
        hf.weight.normal_()
    ours.load_state_dict(hf.state_dict())
    x = torch.randn(2, 5, 96)
    hf, ours, x = hf.to(device), ours.to(device), x.to(device)
    torch.testing.assert_close(ours(x), hf(x), rtol=1e-5, atol=1e-6)
    assert "eps=1e-05" in repr(ours)


def test_forward_only_variant_matches(device):
    x, w, dy = random_inputs((5, 3, 128), torch.bfloat16, device, seed=12)
    module = TritonQwen3RMSNormFwdOnly(128).to(device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        module.weight.copy_(w)
    x_ = x.clone().requires_grad_()
    y = module(x_)
    y.backward(dy)
    ref_y, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
    assert rel_err(y, ref_y) < REL_TOL[torch.bfloat16]
    assert rel_err(x_.grad, ref_dx) < REL_TOL[torch.bfloat16]
    assert rel_err(module.weight.grad, ref_dw) < REL_TOL[torch.bfloat16]


def is_power_of_two(n):
    return n >= 1 and n & (n - 1) == 0


def test_launch_configs_cover_qwen3_widths():
    for n_cols in list(range(1, 4100)) + [5120, 12288, 16383, 16384]:
        block_cols, tail_cols = rmsnorm_triton.column_blocks(n_cols)
        assert is_power_of_two(block_cols) and block_cols + tail_cols >= n_cols, n_cols
        if tail_cols:  # a real saving: fewer lanes than one padded block, tail past the last full block
            assert is_power_of_two(tail_cols) and tail_cols <= block_cols // 2 and block_cols < n_cols
            assert block_cols + tail_cols <= 0.75 * (2 * block_cols)
        else:
            assert block_cols == 1 << (n_cols - 1).bit_length() if n_cols > 1 else block_cols == 1
        fwd, bwd = rmsnorm_triton.forward_config(n_cols), rmsnorm_triton.backward_config(n_cols)
        for config in (fwd, bwd):
            assert isinstance(config, rmsnorm_triton.LaunchConfig)
            # wide rows without 16-byte vector loads (16383) are chunked in both directions
            # (the backward from 12288 lanes on); rows past MAX_COLS are chunked
            unaligned_wide = n_cols % 8 != 0 and block_cols + tail_cols > (8192 if config is fwd else 12288)
            assert config.chunked == (unaligned_wide or n_cols > rmsnorm_triton.MAX_COLS), n_cols
            assert config.chunked or (config.block_cols, config.tail_cols) == (block_cols, tail_cols), n_cols
            assert config.block_rows >= 1 and config.num_warps in (1, 2, 4, 8, 16, 32)
            rmsnorm_triton.check_config(config, n_cols)  # the heuristics pass their own check
        assert bwd.programs_per_sm >= 1
    assert rmsnorm_triton.column_blocks(2560) == (2048, 512)  # Qwen3-4B
    assert rmsnorm_triton.column_blocks(5120) == (4096, 1024)  # Qwen3-14B / 32B
    assert rmsnorm_triton.column_blocks(4096) == (4096, 0) and rmsnorm_triton.column_blocks(128) == (128, 0)
    assert rmsnorm_triton.forward_config(128).block_rows > 1  # narrow rows: many per program
    assert rmsnorm_triton.backward_config(128).block_rows > 1


SHIPPED = {  # width: forward (rows, warps), backward (rows, warps, programs per SM), as in 篇2 §七
    128: ((16, 4), (8, 4, 8)), 1024: ((2, 4), (2, 4, 4)), 2048: ((1, 2), (1, 4, 4)),
    2560: ((1, 2), (2, 4, 2)), 4096: ((1, 2), (1, 8, 2)), 5120: ((1, 2), (1, 4, 2)),
    12288: ((1, 4), (1, 8, 1)),
}


@pytest.mark.parametrize("width", sorted(SHIPPED))
def test_shipped_configs_of_qwen3_widths(width):
    fwd, bwd = rmsnorm_triton.forward_config(width), rmsnorm_triton.backward_config(width)
    assert ((fwd.block_rows, fwd.num_warps), (bwd.block_rows, bwd.num_warps, bwd.programs_per_sm)) == SHIPPED[width]


def test_candidate_configs_are_the_published_sweep():
    """candidate_configs lists, in order, what the H200 sweep behind 篇2 §七 timed; the shipped configs are among them."""
    import json
    import pathlib

    data = json.loads((pathlib.Path(__file__).parents[1] / "docs/data/h200/tuning.json").read_text())
    for entry in data["results"]:
        width = entry["width"]
        fwd = [c for c in rmsnorm_triton.candidate_configs(width, "forward") if not c.chunked]
        bwd = [c for c in rmsnorm_triton.candidate_configs(width, "backward") if not c.chunked]
        assert [(c.block_rows, c.num_warps) for c in fwd] == [(e["block_rows"], e["num_warps"]) for e in entry["fwd"]]
        assert [(c.block_rows, c.num_warps, c.programs_per_sm) for c in bwd] == [
            (e["block_rows"], e["num_warps"], e["programs_per_sm"]) for e in entry["bwd"]]
        assert rmsnorm_triton.forward_config(width) in fwd
        assert rmsnorm_triton.backward_config(width) in bwd
    assert {(c.block_rows, c.num_warps) for c in rmsnorm_triton.candidate_configs(128, "forward")} == {
        (r, w) for r in (1, 2, 4, 8, 16, 32, 64) for w in (2, 4, 8, 16)}
    for n_cols in list(range(1, 300)) + [2560, 5120, 8192, 12288, 16384]:
        for direction, max_tile in (("forward", 16384), ("backward", 8192)):
            configs = rmsnorm_triton.candidate_configs(n_cols, direction)
            assert configs and len(set(configs)) == len(configs), (n_cols, direction)
            for c in configs:
                rmsnorm_triton.check_config(c, n_cols)
                assert c.chunked or c.block_rows == 1 or c.block_rows * (c.block_cols + c.tail_cols) <= max_tile
                assert direction == "backward" or c.programs_per_sm == 1


class LaunchSpy:
    """Wraps a kernel; records each launch's grid and keyword arguments."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((grid, kwargs))
            return self.kernel[grid](*args, **kwargs)
        return launch


@pytest.mark.parametrize("width", [128, 300, 2560])
def test_passed_config_changes_the_launch_not_the_numbers(width, device, monkeypatch):
    from dataclasses import replace

    x, w, dy = random_inputs((2, 9, width), torch.bfloat16, device, seed=width)
    y, rstd = rms_norm_forward(x, w, 1e-6)
    dx, dw = rms_norm_backward(dy, x, w, rstd)
    fwd_spy = LaunchSpy(rmsnorm_triton.rms_norm_fwd_kernel)
    bwd_spy = LaunchSpy(rmsnorm_triton.rms_norm_bwd_kernel)
    monkeypatch.setattr(rmsnorm_triton, "rms_norm_fwd_kernel", fwd_spy)
    monkeypatch.setattr(rmsnorm_triton, "rms_norm_bwd_kernel", bwd_spy)
    fwd = replace(rmsnorm_triton.forward_config(width), block_rows=1, num_warps=1)
    bwd = replace(rmsnorm_triton.backward_config(width), block_rows=2, num_warps=2, programs_per_sm=3)
    assert fwd != rmsnorm_triton.forward_config(width) and bwd != rmsnorm_triton.backward_config(width)
    y2, rstd2 = rms_norm_forward(x, w, 1e-6, config=fwd)
    dx2, dw2 = rms_norm_backward(dy, x, w, rstd, config=bwd)
    (grid, kwargs), = fwd_spy.launches
    assert grid == (18,) and kwargs["BLOCK_ROWS"] == 1 and kwargs["num_warps"] == 1
    (grid, kwargs), = bwd_spy.launches
    n_programs = min(9, rmsnorm_triton.sm_count(x.device) * 3)  # 9 tiles of 2 rows
    assert grid == (n_programs,) and kwargs["BLOCK_ROWS"] == 2 and kwargs["num_warps"] == 2
    # Rows are independent, but on a GPU num_warps changes the tree of each row's sum, so rstd may
    # move by an fp32 ulp and y, dx by a bf16 ulp; dW sums its partials over another grid.
    torch.testing.assert_close(rstd2, rstd, rtol=5e-7, atol=0)
    torch.testing.assert_close(y2, y, rtol=2**-7, atol=0)
    torch.testing.assert_close(dx2, dx, rtol=2**-7, atol=1e-3 * dx.abs().max().item())
    torch.testing.assert_close(dw2, dw)


@pytest.mark.parametrize("change, error, message", [
    (dict(block_cols=1000, tail_cols=0), ValueError, "power-of-two split"),  # not a power of two
    (dict(block_cols=1024, tail_cols=0), ValueError, "column_blocks"),  # drops columns
    (dict(block_cols=4096, tail_cols=0), ValueError, r"\(2048, 512\)"),  # not column_blocks' split
    (dict(tail_cols=256), ValueError, "column_blocks"),
    (dict(block_rows=3), ValueError, "block_rows must be a power of two"),
    (dict(block_rows=0), ValueError, "block_rows must be a power of two"),
    (dict(num_warps=64), ValueError, "num_warps must be 1, 2, 4, 8, 16 or 32"),
    (dict(num_warps=6), ValueError, "num_warps"),
    (dict(programs_per_sm=0), ValueError, "programs_per_sm must be a positive int"),
    (dict(chunked=True, block_cols=1000, tail_cols=0), ValueError, "power-of-two block_cols"),
    (dict(chunked=True, block_cols=1024, tail_cols=512), ValueError, "tail_cols=0"),
    (None, TypeError, "config must be a LaunchConfig"),
])
def test_invalid_configs_are_rejected(change, error, message, device):
    from dataclasses import astuple, replace

    x, w, dy = random_inputs((3, 2560), torch.bfloat16, device, seed=1)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    for direction, call in (("forward", lambda c: rms_norm_forward(x, w, 1e-6, config=c)),
                            ("backward", lambda c: rms_norm_backward(dy, x, w, rstd, config=c))):
        shipped = getattr(rmsnorm_triton, f"{direction}_config")(2560)
        config = astuple(shipped) if change is None else replace(shipped, **change)
        with pytest.raises(error, match=message):
            call(config)


@pytest.mark.parametrize("config", [None, rmsnorm_triton.LaunchConfig(2, 8, 0, 4, chunked=True)],
                         ids=["register", "chunked"])
def test_fp64_eps_is_exact(config, device):
    """eps travels as two fp32 scalars; their fp64 sum must be the fp64 eps, in the register
    and in the chunked forward, and where the backward recomputes rstd."""
    gen = torch.Generator().manual_seed(70)
    x = (torch.randn(4, 16, generator=gen, dtype=torch.float64) * 1e-2).to(device)  # eps matters here
    w = torch.ones(16, dtype=torch.float64, device=device)
    expected = torch.rsqrt(x.pow(2).mean(-1) + 1e-3)
    y, rstd = rms_norm_forward(x, w, 1e-3, config=config)
    torch.testing.assert_close(rstd, expected, rtol=1e-14, atol=0)
    dy = torch.randn(4, 16, generator=gen, dtype=torch.float64).to(device)
    dx_saved, _ = rms_norm_backward(dy, x, w, rstd, config=config)
    dx_recomputed, _ = rms_norm_backward(dy, x, w, None, eps=1e-3, config=config)
    torch.testing.assert_close(dx_recomputed, dx_saved, rtol=1e-13, atol=0)
    for eps in (1e-3, 1e-5, 1e-6, 3.3e-4, 0.1 + 1e-12, 7.0):
        high, low = rmsnorm_triton.split_eps(eps, rmsnorm_triton.tl.float64)
        assert high + low == eps and abs(low) <= abs(eps) * 2**-24
        assert torch.tensor(high, dtype=torch.float32).item() == high  # fp32 holds it
        assert rmsnorm_triton.split_eps(eps, rmsnorm_triton.tl.float32) == (eps, 0.0)


def sweep_cases(n_cases=320, seed=2026):
    """The randomized sweep's cases, drawn once in a fixed order: (case, dtype, width, rows, eps, layout, heads, scale)."""
    rng = random.Random(seed)
    # includes widths on the block + tail path: 300, 1536, 2560, 3000, 5120, 6144, 12288
    widths = [128, 1024, 2048, 2560, 4096, 5120, 64, 96, 200, 300, 1000, 1536, 3000, 6144, 8192, 12288, 16384, 1, 17]
    widths += [rng.randint(256, 16384) for _ in range(16)]  # any width in the swept range
    widths += [16385, 20000, 40000, 65536]  # wider than MAX_COLS: the chunked kernels
    return [(case, rng.choice(DTYPES), rng.choice(widths), rng.choice([1, 3, 64, 255, 1024, 4099]),
             rng.choice([1e-6, 1e-5, 1e-3]), rng.choice(["contiguous", "rows_strided", "heads_transposed"]),
             rng.choice([2, 4, 8]), rng.choice([0.01, 1.0, 30.0])) for case in range(n_cases)]


SWEEP_CHUNKS = 8  # run in parallel under pytest-xdist


def test_sweep_cases_cover_dtypes_layouts_and_tail_widths():
    cases = sweep_cases()
    assert {c[1] for c in cases} == set(DTYPES)
    assert {c[5] for c in cases} == {"contiguous", "rows_strided", "heads_transposed"}
    tail_widths = {c[2] for c in cases if rmsnorm_triton.column_blocks(c[2])[1]}
    assert {2560, 5120, 12288} <= tail_widths
    assert sum(c[2] > rmsnorm_triton.MAX_COLS for c in cases) >= 20  # the chunked path
    assert len({c[2] for c in cases if 256 < c[2] < 16384}) >= 25
    assert sum(len(cases[k::SWEEP_CHUNKS]) for k in range(SWEEP_CHUNKS)) == len(cases)


@pytest.mark.gpu
@pytest.mark.parametrize("chunk", range(SWEEP_CHUNKS))
def test_randomized_sweep_against_fp64(chunk):  # pragma: gpu only
    """320 random cases in all (8 chunks of 40): shapes, dtypes, strides, eps."""
    cases = sweep_cases()
    assert len(cases) >= 300
    failures = []
    for case, dtype, n_cols, n_rows, eps, layout, heads, scale in cases[chunk::SWEEP_CHUNKS]:
        n_rows = min(n_rows, max(1, 2**24 // n_cols))  # wide rows: keep the fp64 inputs (built on CPU) small
        gen = torch.Generator().manual_seed(case)
        if layout == "rows_strided":
            x = torch.randn(n_rows, 2, n_cols, generator=gen, dtype=torch.float64)  # sliced below
        elif layout == "heads_transposed":
            x = torch.randn(2, heads, max(1, n_rows // 8), n_cols, generator=gen, dtype=torch.float64).transpose(1, 2)
        else:
            x = torch.randn(n_rows, n_cols, generator=gen, dtype=torch.float64)
        x = (x * scale).to(dtype).cuda().requires_grad_()
        if layout == "rows_strided":  # a view, passed as it is (run_triton's clone() makes it dense)
            x = x[:, 1]
        w = (torch.randn(n_cols, generator=gen, dtype=torch.float64) + 1).to(dtype).cuda()
        dy = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(dtype).cuda()
        y, dx, dw = run_on_views(x, w, eps, dy)
        ref_y, ref_dx, ref_dw = fp64_reference(x, w, eps, dy)
        # dx = rstd * (w*dy - x_hat * mean(w*dy*x_hat)) cancels when rows are very
        # narrow (width 1: dx ~ eps); measure its error against the size of its terms.
        x64, w64, dy64 = x.double(), w.double(), dy.double()
        term = w64 * dy64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
        dx_err = ((dx.double() - ref_dx).norm() / torch.maximum(ref_dx.norm(), term.norm()).clamp_min(1e-30)).item()
        tol = REL_TOL[dtype] * (2 if n_cols < 4 else 1)
        errors = (rel_err(y, ref_y), dx_err, rel_err(dw, ref_dw))
        if not all(e < tol for e in errors) or any(math.isnan(e) for e in errors):
            failures.append((case, dtype, tuple(x.shape), layout, eps, errors))
    assert not failures, failures[:5]


def test_recomputed_rstd_matches_saved(device):
    x, w, dy = random_inputs((9, 3, 128), torch.float32, device, seed=31)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    dx_saved, dw_saved = rms_norm_backward(dy, x, w, rstd)
    dx_recomputed, dw_recomputed = rms_norm_backward(dy, x, w, None, eps=1e-6)
    torch.testing.assert_close(dx_recomputed, dx_saved, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(dw_recomputed, dw_saved, rtol=1e-6, atol=1e-7)
    with pytest.raises(ValueError, match="rstd"):
        rms_norm_backward(dy, x, w, None)


# Strided inputs as the kernels see them. run_triton() clones x, and clone() makes a
# non-dense view contiguous, so these tests pass the views themselves and check, at
# rows_layout, what the wrappers really received.
@pytest.fixture
def layouts(monkeypatch):
    """Per rows_layout call: (contiguous?, handed to the kernel uncopied?) for each tensor."""
    calls = []
    real = rmsnorm_triton.rows_layout

    def spy(*tensors):
        result = real(*tensors)
        calls.append([(t.is_contiguous(), r.data_ptr() == t.data_ptr())
                      for t, r in zip(tensors, result[0])])
        return result

    monkeypatch.setattr(rmsnorm_triton, "rows_layout", spy)
    return calls


def run_on_views(x_view, w, eps, dy):
    """rms_norm on x_view as it is (a view of a leaf); dx is the gradient w.r.t. the view."""
    w = w.detach().clone().requires_grad_()
    with poisoned_allocations():
        y = rms_norm(x_view, w, eps)
        dx, dw = torch.autograd.grad(y, (x_view, w), dy)
    return y.detach(), dx, dw


@pytest.mark.parametrize("transposed", ["x", "dy"])
def test_transposed_qk_views_reach_the_kernel_uncopied(transposed, device, layouts):
    """q/k-norm: a (B, T, H, D) view of a (B, H, T, D) tensor, for x and for dy."""
    gen = torch.Generator().manual_seed(51)
    b, heads, t, d = 2, 3, 5, 128

    def heads_first(requires_grad=False):
        base = torch.randn(b, heads, t, d, generator=gen).to(device).requires_grad_(requires_grad)
        return base.transpose(1, 2)

    def tokens_first(requires_grad=False):
        return torch.randn(b, t, heads, d, generator=gen).to(device).requires_grad_(requires_grad)

    x = heads_first(True) if transposed == "x" else tokens_first(True)
    dy = heads_first() if transposed == "dy" else tokens_first()
    w = (torch.rand(d, generator=gen) + 0.5).to(device)
    y, dx, dw = run_on_views(x, w, 1e-6, dy)
    x_strided, dy_strided = transposed == "x", transposed == "dy"
    assert layouts == [[(not x_strided, True)],  # forward: x, uncopied
                       [(not x_strided, True), (not dy_strided, True)]]  # backward: x, dy
    y_c, dx_c, dw_c = run_triton(x.contiguous(), w, 1e-6, dy.contiguous())
    assert torch.equal(y, y_c) and torch.equal(dx, dx_c) and torch.equal(dw, dw_c)
    ref_y, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
    for name, out, ref in (("y", y, ref_y), ("dx", dx, ref_dx), ("dw", dw, ref_dw)):
        assert rel_err(out, ref) < REL_TOL[torch.float32], name


def test_sliced_5d_view_reaches_the_kernel_uncopied(device, layouts):
    """Four leading dims with steps that fold into three row dims: no copy."""
    gen = torch.Generator().manual_seed(52)

    def sliced(requires_grad=False):
        base = torch.randn(2, 3, 4, 6, 40, generator=gen, dtype=torch.float64).to(device)
        return base.requires_grad_(requires_grad)[:, 1:, ::2, 1:5, 3:35]  # (2, 2, 2, 4, 32)

    x, dy = sliced(True), sliced()
    w = torch.randn(32, generator=gen, dtype=torch.float64).to(device)
    y, dx, dw = run_on_views(x, w, 1e-6, dy)
    assert layouts == [[(False, True)], [(False, True), (False, True)]]
    ref_y, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
    errors = {"y": rel_err(y, ref_y), "dx": rel_err(dx, ref_dx), "dw": rel_err(dw, ref_dw)}
    assert max(errors.values()) < 1e-10, errors


def test_last_dim_strided_view_is_copied_and_correct(device, layouts):
    gen = torch.Generator().manual_seed(53)
    base = torch.randn(3, 4, 80, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    x = base[:, :, ::2]  # (3, 4, 40), stride 2 along the row
    dy = torch.randn(3, 80, 4, generator=gen, dtype=torch.float64).to(device)[:, ::2].transpose(1, 2)
    w = torch.randn(40, generator=gen, dtype=torch.float64).to(device)
    y, dx, dw = run_on_views(x, w, 1e-6, dy)
    assert layouts == [[(False, False)], [(False, False), (False, False)]]  # both copied
    ref_y, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
    errors = {"y": rel_err(y, ref_y), "dx": rel_err(dx, ref_dx), "dw": rel_err(dw, ref_dw)}
    assert max(errors.values()) < 1e-10, errors


# HF's cast order: x_hat is rounded to the input dtype *before* the weight multiply,
# in y and in dW = sum(dy * x_hat). The interpreter truncates fp32 -> bf16, which
# hides the order in bf16; it rounds fp32 -> fp16 correctly, so fp16 shows it on CPU.
def cast_order_inputs(dtype, weight_dtype, n_cols, device, seed):
    x, _, _ = random_inputs((16, n_cols), dtype, device, seed=seed)
    gen = torch.Generator().manual_seed(seed)
    w = (torch.rand(n_cols, generator=gen, dtype=torch.float64) + 0.5).to(weight_dtype or dtype)
    out_dtype = torch.promote_types(dtype, w.dtype)
    dy = torch.randn(x.shape, generator=gen, dtype=torch.float64).to(out_dtype)
    return x, w.to(device), dy.to(device)


def test_interpreter_rounds_fp32_to_fp16(device):
    """What the cast-order tests rely on under the interpreter (see the comment above)."""
    x = torch.randn(4096, generator=torch.Generator().manual_seed(54)).to(device) * 3
    # dw_reduce_kernel with one partial: a tl cast of fp32 values to fp16, stored
    out = torch.empty(x.shape, dtype=torch.float16, device=device)
    rmsnorm_triton.dw_reduce_kernel[(x.numel() // 64,)](x.reshape(1, -1), out, 1, x.numel(),
                                                         BLOCK_PARTIALS=1, BLOCK_COLS=64)
    assert torch.equal(out, x.half())


@pytest.mark.parametrize("n_cols", [256, 300])  # 300: the block + tail path
@pytest.mark.parametrize("weight_dtype", [None, torch.float32], ids=["same_weight", "fp32_weight"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_forward_rounds_x_hat_before_the_weight(dtype, weight_dtype, n_cols, device, on_gpu):
    if dtype == torch.bfloat16 and not on_gpu:
        pytest.skip("the interpreter truncates fp32 -> bf16; fp16 checks the order on CPU")
    x, w, _ = cast_order_inputs(dtype, weight_dtype, n_cols, device, seed=55)
    (hf_y, _), (weight_first_y, _) = cast_order_references(x, w, 1e-6)
    y, _ = rms_norm_forward(x, w, 1e-6)
    gap, err = rel_err(weight_first_y, hf_y), rel_err(y, hf_y)
    assert err < gap / 10, f"error vs HF's order {err:.3g}; gap between the two orders {gap:.3g}"
    hf = Qwen3RMSNorm(n_cols, eps=1e-6).to(device=device, dtype=w.dtype)
    with torch.no_grad():
        hf.weight.copy_(w)
        assert (y == hf(x)).float().mean().item() > 0.99


@pytest.mark.parametrize("n_cols", [256, 300])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_dw_uses_the_rounded_x_hat(dtype, n_cols, device, on_gpu):
    """fp32 weight: dW comes out in fp32, so the rounding of x_hat is visible in it."""
    if dtype == torch.bfloat16 and not on_gpu:
        pytest.skip("the interpreter truncates fp32 -> bf16; fp16 checks the order on CPU")
    x, w, dy = cast_order_inputs(dtype, torch.float32, n_cols, device, seed=56)
    (_, hf_dw), (_, weight_first_dw) = cast_order_references(x, w, 1e-6, dy)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    _, dw = rms_norm_backward(dy, x, w, rstd)
    gap, err = rel_err(weight_first_dw, hf_dw), rel_err(dw, hf_dw)
    assert err < gap / 10, f"dW error vs HF's order {err:.3g}; gap between the two orders {gap:.3g}"


@pytest.mark.parametrize("path", ["chunked", "reread"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
def test_dw_uses_the_rounded_x_hat_on_the_chunked_and_reread_paths(dtype, path, device, on_gpu):
    """The backward kernels that the ladder gives rows of 300 only when they are wide: the chunked one
    (three column chunks, the last one masked) and the reread one. Each accumulates dW from x_hat
    rounded to the input dtype, as autograd through HF's weight * x_hat.to(input_dtype) does; with
    the saved and with a recomputed rstd. fp32 weight: dW comes out in fp32 and shows the rounding."""
    if dtype == torch.bfloat16 and not on_gpu:
        pytest.skip("the interpreter truncates fp32 -> bf16; fp16 checks the order on CPU")
    config = (rmsnorm_triton.LaunchConfig(2, 128, 0, 4, 2, chunked=True) if path == "chunked"
              else rmsnorm_triton.LaunchConfig(1, 256, 64, 4, 1, reread=True))
    x, w, dy = cast_order_inputs(dtype, torch.float32, 300, device, seed=79)
    (_, hf_dw), (_, weight_first_dw) = cast_order_references(x, w, 1e-6, dy)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    with poisoned_allocations():
        _, dw = rms_norm_backward(dy, x, w, rstd, config=config)
        _, dw_recomputed = rms_norm_backward(dy, x, w, None, eps=1e-6, config=config)
    gap = rel_err(weight_first_dw, hf_dw)
    for name, got in (("saved rstd", dw), ("recomputed rstd", dw_recomputed)):
        err = rel_err(got, hf_dw)
        assert err < gap / 10, f"{name}: dW error vs HF's order {err:.3g}; gap between the two orders {gap:.3g}"


@pytest.mark.parametrize("cls", [TritonQwen3RMSNorm, TritonQwen3RMSNormFwdOnly], ids=lambda c: c.__name__)
@pytest.mark.parametrize("eps", [0.1, 1e-5])
def test_module_uses_its_own_eps(cls, eps, device):
    """Rows with mean(x^2) ~ eps: the result depends on eps strongly."""
    gen = torch.Generator().manual_seed(57)
    x = (torch.randn(4, 96, generator=gen, dtype=torch.float64) * eps ** 0.5).float().to(device)
    dy = torch.randn(4, 96, generator=gen).to(device)
    hf, ours = Qwen3RMSNorm(96, eps=eps), cls(96, eps=eps)
    with torch.no_grad():
        hf.weight.uniform_(0.5, 1.5, generator=gen)
    ours.load_state_dict(hf.state_dict())
    hf, ours = hf.to(device), ours.to(device)
    results = []
    for module in (hf, ours):
        x_ = x.clone().requires_grad_()
        y = module(x_)
        y.backward(dy)
        results.append((y.detach(), x_.grad, module.weight.grad))
    for name, theirs, mine in zip(("y", "dx", "dw"), *results):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")
    with torch.no_grad():  # the inputs are sensitive: eps / 10 moves y by more than 10%
        assert rel_err(rms_norm(x, ours.weight, eps / 10), results[0][0]) > 0.1


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_saved_rstd_is_fp32_or_fp64(dtype, device):
    """rstd is kept in the compute dtype: rounding it to bf16 would cost dX accuracy."""
    x, w, _ = random_inputs((5, 3, 64), dtype, device, seed=58)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    assert rstd.dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    x64 = x.double().reshape(-1, 64)
    expected = torch.rsqrt(x64.pow(2).mean(-1) + 1e-6)
    torch.testing.assert_close(rstd.double(), expected, rtol=1e-12 if dtype == torch.float64 else 1e-6, atol=0)


def test_dw_follows_the_weight_needs_grad(device, monkeypatch):
    """dW is computed iff the weight needs a gradient, whatever x needs."""
    compute_dw_calls = []
    real = rmsnorm_triton.rms_norm_backward

    def spy(*args, **kwargs):
        compute_dw_calls.append(kwargs["compute_dw"])
        return real(*args, **kwargs)

    monkeypatch.setattr(rmsnorm_triton, "rms_norm_backward", spy)
    x, w, dy = random_inputs((6, 64), torch.float32, device, seed=59)
    _, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
    # a frozen input, a trained weight (e.g. the first norm after a frozen embedding)
    w_ = w.clone().requires_grad_()
    rms_norm(x, w_, 1e-6).backward(dy)
    assert compute_dw_calls == [True] and w_.grad is not None
    assert rel_err(w_.grad, ref_dw) < REL_TOL[torch.float32]
    # a frozen weight: no dW partials, no reduction
    x_ = x.clone().requires_grad_()
    rms_norm(x_, w, 1e-6).backward(dy)
    assert compute_dw_calls == [True, False] and w.grad is None
    assert rel_err(x_.grad, ref_dx) < REL_TOL[torch.float32]


def check_rows_of_a_large_input(n_rows, n_cols, device, n_checked=64):
    """bf16 forward + backward on (n_rows, n_cols); checks y, rstd and dx of the first and
    the last n_checked rows against fp64 (unwritten outputs stay NaN and fail)."""
    gen = torch.Generator(device=device).manual_seed(60)
    x = torch.randn(n_rows, n_cols, generator=gen, device=device, dtype=torch.bfloat16)
    dy = torch.randn(n_rows, n_cols, generator=gen, device=device, dtype=torch.bfloat16)
    w = (torch.rand(n_cols, generator=gen, device=device) + 0.5).to(torch.bfloat16)
    with poisoned_allocations():
        y, rstd = rms_norm_forward(x, w, 1e-6)
        dx, _ = rms_norm_backward(dy, x, w, rstd, compute_dw=False)
    for rows in (slice(0, n_checked), slice(n_rows - n_checked, n_rows)):
        ref_y, ref_dx, _ = fp64_reference(x[rows], w, 1e-6, dy[rows])
        x64 = x[rows].double()
        expected_rstd = torch.rsqrt(x64.pow(2).mean(-1) + 1e-6)
        assert rel_err(rstd[rows], expected_rstd) < 1e-6, rows
        assert rel_err(y[rows], ref_y) < REL_TOL[torch.bfloat16], rows
        assert rel_err(dx[rows], ref_dx) < REL_TOL[torch.bfloat16], rows


def test_large_input_row_check_on_a_small_input(device):
    """The checker of the GPU-only 2^31 test, on a small input (so a CPU run exercises it)."""
    check_rows_of_a_large_input(80, 64, device, n_checked=8)


@pytest.mark.gpu
def test_more_than_2_pow_31_elements():  # pragma: gpu only, ~16 GiB of GPU memory
    """Output offsets need 64-bit math: y and dx of rows past element 2^31 land where they belong."""
    n_cols = 4096
    n_rows = 2**31 // n_cols + 64  # the last 64 rows start past element 2^31
    assert n_rows * n_cols > 2**31
    try:
        check_rows_of_a_large_input(n_rows, n_cols, "cuda")
    finally:
        torch.cuda.empty_cache()


# ---------------------------------------------------------------- chunked kernels (wide rows)

def chunked(rows, chunk, warps=4, per_sm=2):
    return rmsnorm_triton.LaunchConfig(rows, chunk, 0, warps, per_sm, chunked=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("n_cols, config", [(300, chunked(1, 128)), (300, chunked(2, 64)),
                                            (1000, chunked(2, 256)), (128, chunked(4, 128))])
def test_chunked_kernels_match_fp64_and_hf(n_cols, config, dtype, device, on_gpu):
    """Any width in chunks: a masked last chunk, several rows per tile, saved or recomputed rstd."""
    x, w, dy = random_inputs((3, 5, n_cols), dtype, device, seed=n_cols + config.block_rows)
    with poisoned_allocations():
        y, rstd = rms_norm_forward(x, w, 1e-6, config=config)
        dx, dw = rms_norm_backward(dy, x, w, rstd, config=config)
        dx_recomputed, dw_recomputed = rms_norm_backward(dy, x, w, None, eps=1e-6, config=config)
    ref_y, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
    tol = 1e-12 if dtype == torch.float64 else REL_TOL[dtype]
    for got, ref in ((y, ref_y), (dx, ref_dx), (dw, ref_dw), (dx_recomputed, ref_dx), (dw_recomputed, ref_dw)):
        assert rel_err(got, ref) < tol
    if dtype == torch.float16 or (dtype == torch.bfloat16 and on_gpu):  # HF's cast order
        hf = Qwen3RMSNorm(n_cols, eps=1e-6).to(device=device, dtype=dtype)
        hf.weight.data.copy_(w)
        assert (y == hf(x)).float().mean().item() > 0.99


def test_chunked_backward_writes_dx_only_and_skips_dw(device):
    x, w, dy = random_inputs((7, 300), torch.float32, device, seed=3)
    dy_before = dy.clone()
    _, rstd = rms_norm_forward(x, w, 1e-6, config=chunked(1, 128))
    dx, dw = rms_norm_backward(dy, x, w, rstd, compute_dw=False, config=chunked(2, 128))
    assert dw is None and torch.equal(dy, dy_before)
    assert rel_err(dx, fp64_reference(x, w, 1e-6, dy)[1]) < REL_TOL[torch.float32]


def test_chunked_gradcheck_fp64_through_autograd(device, monkeypatch):
    monkeypatch.setattr(rmsnorm_triton, "forward_config", lambda *a, **k: chunked(2, 64))
    monkeypatch.setattr(rmsnorm_triton, "backward_config", lambda *a, **k: chunked(2, 64))
    x = torch.randn(2, 3, 150, dtype=torch.float64, device=device, requires_grad=True)
    w = torch.randn(150, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: rms_norm(a, b, 1e-6), (x, w), fast_mode=True)


def test_chunked_strided_views(device):
    gen = torch.Generator().manual_seed(8)
    x = torch.randn(2, 4, 3, 200, generator=gen, dtype=torch.float64).transpose(1, 2).to(device)
    dy = torch.randn(2, 4, 3, 200, generator=gen, dtype=torch.float64).transpose(1, 2).to(device)
    w = torch.randn(200, generator=gen, dtype=torch.float64).to(device)
    y, rstd = rms_norm_forward(x, w, 1e-6, config=chunked(2, 64))
    dx, dw = rms_norm_backward(dy, x, w, rstd, config=chunked(1, 64))
    ref_y, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
    assert rel_err(y, ref_y) < 1e-12 and rel_err(dx, ref_dx) < 1e-10 and rel_err(dw, ref_dw) < 1e-10


def test_rows_wider_than_max_cols_take_the_chunked_path(device, on_gpu):
    n_cols = 3 * rmsnorm_triton.MAX_COLS + 5 if on_gpu else rmsnorm_triton.MAX_COLS + 300
    assert rmsnorm_triton.forward_config(n_cols).chunked and rmsnorm_triton.backward_config(n_cols).chunked
    x, w, dy = random_inputs((64 if on_gpu else 3, n_cols), torch.bfloat16, device, seed=5)
    y, dx, dw = run_triton(x, w, 1e-6, dy)
    ref_y, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
    for got, ref in ((y, ref_y), (dx, ref_dx), (dw, ref_dw)):
        assert rel_err(got, ref) < REL_TOL[torch.bfloat16]
    _, dx2, dw2 = run_triton(x, w, 1e-6, dy)
    assert torch.equal(dw, dw2) and torch.equal(dx, dx2)  # deterministic


def test_register_config_is_refused_for_rows_wider_than_max_cols(device):
    n_cols = rmsnorm_triton.MAX_COLS + 1
    x, w, _ = random_inputs((1, n_cols), torch.float32, device, seed=6)
    block_cols, tail_cols = rmsnorm_triton.column_blocks(n_cols)
    with pytest.raises(ValueError, match="only a chunked config"):
        rms_norm_forward(x, w, 1e-6, config=rmsnorm_triton.LaunchConfig(1, block_cols, tail_cols, 8))


@pytest.mark.gpu
def test_gradcheck_fp64_wide_rows():  # pragma: gpu only
    x = torch.randn(3, 20000, dtype=torch.float64, device="cuda", requires_grad=True)
    w = torch.randn(20000, dtype=torch.float64, device="cuda", requires_grad=True)
    assert torch.autograd.gradcheck(lambda a, b: rms_norm(a, b, 1e-6), (x, w), fast_mode=True)


@pytest.mark.gpu
@pytest.mark.parametrize("n_cols", [3000, 12288, 65536])
def test_dw_is_deterministic_at_any_width(n_cols):  # pragma: gpu only
    x, w, dy = random_inputs((4096, n_cols), torch.bfloat16, "cuda", seed=n_cols)
    _, dx1, dw1 = run_triton(x, w, 1e-6, dy)
    _, dx2, dw2 = run_triton(x, w, 1e-6, dy)
    assert torch.equal(dw1, dw2) and torch.equal(dx1, dx2)


# ---------------------------------------------- what the rules decide, checked at the launch

def test_chunked_backward_walks_every_tile_of_its_slot(device, monkeypatch):
    """Row slots of the chunked backward's persistent grid, four tiles each: slot k owns
    tiles k, k + n_slots, ... A loop stepping by one tile leaves tiles unwritten (NaN)."""
    spy = LaunchSpy(rmsnorm_triton.rms_norm_bwd_chunked_kernel)
    monkeypatch.setattr(rmsnorm_triton, "rms_norm_bwd_chunked_kernel", spy)
    n_slots = rmsnorm_triton.sm_count(torch.device(device)) * 2 // 2  # 2 per SM, 2 chunks
    x, w, dy = random_inputs((3 * n_slots + 1, 100), torch.float32, device, seed=71)
    config = chunked(1, 64, warps=4, per_sm=2)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    with poisoned_allocations():
        dx, dw = rms_norm_backward(dy, x, w, rstd, config=config)
    (grid, kwargs), = spy.launches
    assert grid == (n_slots, 2) and kwargs["tiles_per_program"] == 4
    _, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
    assert rel_err(dx, ref_dx) < REL_TOL[torch.float32] and rel_err(dw, ref_dw) < REL_TOL[torch.float32]


@pytest.mark.parametrize("config", [chunked(2, 32), None], ids=["chunked", "register"])
def test_16bit_dx_is_the_rounded_exact_gradient(config, device):
    """fp16: dx agrees with the exact fp64 gradient rounded once to fp16, element for
    element. Row statistics (rstd, c) kept in fp16 instead of fp32 would move many elements
    by an ulp. (fp16: the interpreter rounds fp32 -> fp16 like a GPU.)"""
    x, w, dy = random_inputs((64, 96), torch.float16, device, seed=72)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    dx, _ = rms_norm_backward(dy, x, w, rstd, config=config)
    x64, w64, dy64 = x.double(), w.double(), dy.double()
    r = torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + 1e-6)
    x_hat = x64 * r
    exact = r * (w64 * dy64 - x_hat * (w64 * dy64 * x_hat).mean(-1, keepdim=True))
    same = (dx == exact.to(torch.float16)).float().mean().item()
    assert same > 0.97, f"{same:.1%} of dx equal to the correctly rounded gradient"


class ArgumentSpy:
    """Wraps a kernel; records each launch's arguments by parameter name (positional ones too)."""

    def __init__(self, kernel):
        self.kernel, self.launches = kernel, []

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append(dict(zip(self.kernel.arg_names, args)) | kwargs)
            return self.kernel[grid](*args, **kwargs)
        return launch


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_chunked_row_stats_are_fp32_sums_of_16bit_rows(dtype, device, monkeypatch):
    """Step 1 of the chunked backward (rms_norm_bwd_row_stats_kernel) sums x*x and w*dy*x over each
    whole row, chunk after chunk, into the rstd and c = mean(w*dy * x_hat) that every chunk of step 2
    reads. 16-bit rows of 1024 values around 6 (mean square ~ 40) in chunks of 32 lanes: an
    accumulator in the input dtype loses most of each addend after a few chunks. In fp32 both
    numbers are within 1e-5 of fp64 (read from the ROW_STATS the kernel wrote), with the saved and
    with a recomputed rstd, and dx follows."""
    spy = ArgumentSpy(rmsnorm_triton.rms_norm_bwd_row_stats_kernel)
    monkeypatch.setattr(rmsnorm_triton, "rms_norm_bwd_row_stats_kernel", spy)
    gen = torch.Generator().manual_seed(82)
    x = (torch.randn(2, 1024, generator=gen, dtype=torch.float64) + 6).to(dtype).to(device)
    w = (torch.rand(1024, generator=gen, dtype=torch.float64) + 0.5).to(dtype).to(device)
    dy = torch.randn(2, 1024, generator=gen, dtype=torch.float64).to(dtype).to(device)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    x64, w64, dy64 = x.double(), w.double(), dy.double()
    expected_rstd = torch.rsqrt(x64.pow(2).mean(-1) + 1e-6)
    terms = w64 * dy64 * x64 * expected_rstd[:, None] / 1024
    _, ref_dx, _ = fp64_reference(x, w, 1e-6, dy)
    for saved in (rstd, None):
        with poisoned_allocations():
            dx, _ = rms_norm_backward(dy, x, w, saved, eps=1e-6, compute_dw=False, config=chunked(2, 32))
        row_stats = spy.launches.pop()["ROW_STATS"].double()
        rstd_err = ((row_stats[0] - expected_rstd).abs() / expected_rstd).max().item()
        c_err = ((row_stats[1] - terms.sum(-1)).abs() / terms.abs().sum(-1)).max().item()  # c cancels
        what = "saved rstd" if saved is not None else "recomputed rstd"
        assert rstd_err < 1e-5 and c_err < 1e-5, f"{what}: rstd off by {rstd_err:.2g}, c by {c_err:.2g} (relative)"
        assert rel_err(dx, ref_dx) < REL_TOL[dtype], what


def row_alignment_rule(n_cols, *strides):
    """The largest power of two up to 16 that divides the row width and every row stride."""
    return max(a for a in (1, 2, 4, 8, 16) if all(v % a == 0 for v in (n_cols, *strides)))


@pytest.mark.parametrize("row_stride", [70, 68, 72, 80])
def test_alignment_hint_follows_the_row_strides(row_stride, device, monkeypatch):
    """ALIGN (what tl.multiple_of promises) divides the row width and the row strides of
    every tensor the launch reads: rows of 64 inside rows of 70 start at multiples of 2."""
    fwd_spy = LaunchSpy(rmsnorm_triton.rms_norm_fwd_kernel)
    bwd_spy = LaunchSpy(rmsnorm_triton.rms_norm_bwd_kernel)
    monkeypatch.setattr(rmsnorm_triton, "rms_norm_fwd_kernel", fwd_spy)
    monkeypatch.setattr(rmsnorm_triton, "rms_norm_bwd_kernel", bwd_spy)
    gen = torch.Generator().manual_seed(row_stride)
    x = torch.randn(6, row_stride, generator=gen).to(device)[:, :64]
    dy = torch.randn(6, 88, generator=gen).to(device)[:, 8:72]  # stride 88
    w = torch.rand(64, generator=gen).to(device) + 0.5
    y, rstd = rms_norm_forward(x, w, 1e-6)
    dx, dw = rms_norm_backward(dy, x, w, rstd)
    (_, fwd), = fwd_spy.launches
    (_, bwd), = bwd_spy.launches
    assert fwd["ALIGN"] == row_alignment_rule(64, row_stride)
    assert bwd["ALIGN"] == row_alignment_rule(64, row_stride, 88)
    _, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
    assert rel_err(dx, ref_dx) < REL_TOL[torch.float32]


@pytest.mark.gpu
def test_misaligned_row_views_on_the_gpu():  # pragma: gpu only
    """bf16 rows of 4096 inside rows of 4100: the first row is 16-byte aligned, the others
    only 8-byte. A 16-byte promise here would be a misaligned vector load (a fault)."""
    base = torch.randn(512, 4100, device="cuda").to(torch.bfloat16)
    x = base.requires_grad_()[:, :4096]
    dy = torch.randn_like(base)[:, :4096]
    w = (torch.rand(4096, device="cuda") + 0.5).to(torch.bfloat16)
    assert rmsnorm_triton.row_alignment(4096, 4100) == 4
    y, dx, dw = run_on_views(x, w, 1e-6, dy)
    ref_y, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
    for got, ref in ((y, ref_y), (dx, ref_dx), (dw, ref_dw)):
        assert rel_err(got, ref) < REL_TOL[torch.bfloat16]


@pytest.mark.parametrize("n_cols", [300, 4100, 2560])
def test_backward_without_prefetch_matches(n_cols, device):
    """The register backward without prefetch (wide rows): every tile of every slot, any split."""
    n_rows = 4 * rmsnorm_triton.sm_count(torch.device(device)) + 1  # 4 or 5 tiles per program
    x, w, dy = random_inputs((n_rows, n_cols), torch.float64, device, seed=n_cols)
    block_cols, tail_cols = rmsnorm_triton.column_blocks(n_cols)
    config = rmsnorm_triton.LaunchConfig(1, block_cols, tail_cols, 4, 1, prefetch=False)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    with poisoned_allocations():
        dx, dw = rms_norm_backward(dy, x, w, rstd, config=config)
        dx_r, dw_r = rms_norm_backward(dy, x, w, None, eps=1e-6, config=config)
    _, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
    for got, ref in ((dx, ref_dx), (dw, ref_dw), (dx_r, ref_dx), (dw_r, ref_dw)):
        assert rel_err(got, ref) < 1e-12


def test_launch_takes_the_ladder_of_the_device(device, monkeypatch):
    """rms_norm_forward / _backward launch what forward_config / backward_config give
    for x's device (the GPU's ladder in rmsnorm_config.py)."""
    calls = []
    for name in ("forward_config", "backward_config"):
        real = getattr(rmsnorm_triton, name)

        def spy(n_cols, device=None, fused=False, real=real, name=name):
            calls.append((name, n_cols, torch.device(device), fused))
            return real(n_cols, device, fused)
        monkeypatch.setattr(rmsnorm_triton, name, spy)
    x, w, dy = random_inputs((3, 80), torch.float32, device, seed=73)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    rms_norm_backward(dy, x, w, rstd)
    assert calls == [("forward_config", 80, x.device, False), ("backward_config", 80, x.device, False)]


@pytest.mark.parametrize("fused", [False, True])
def test_the_chunked_forward_compiles_the_plain_width_as_a_constant(fused, monkeypatch, device):
    """The rule launch_forward implements (explore-widths-a60ed77-eviction-unroll.json): the plain
    chunked forward gets its row width as the constexpr WIDTH (one binary per width, fixed trip
    counts and masks); the fused add's gets 0 and keeps the runtime width. Checked on the
    arguments of the launch, not on timing."""
    spy = LaunchSpy(rmsnorm_triton.rms_norm_fwd_chunked_kernel)
    monkeypatch.setattr(rmsnorm_triton, "rms_norm_fwd_chunked_kernel", spy)
    width = 20480
    x = torch.zeros(4, width, dtype=torch.bfloat16, device=device)
    residual = x if fused else None
    _, _, args = rmsnorm_triton.forward_arguments(
        x, torch.ones(width, dtype=x.dtype, device=device), 1e-6, residual)
    config = rmsnorm_triton.forward_config(width, device, fused=fused)
    assert config.chunked
    rmsnorm_triton.launch_forward(args, config)
    ((_, launch),) = spy.launches
    assert launch["WIDTH"] == (0 if fused else width)
    assert launch["n_cols"] == width and launch["num_warps"] == config.num_warps
