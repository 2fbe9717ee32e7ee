"""Correctness of the fused residual add + RMSNorm (snippets/rmsnorm_fused_add.py).

CPU: Triton interpreter, small shapes. CUDA: the same tests at real sizes, plus
bit-level comparison with HF's two ops and determinism at scale.
"""
import re
import runpy

import pytest
import torch
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

import rmsnorm_fused_add
from helpers import (REL_TOL, ReportsSecondDevice, cast_order_references, fp64_reference, poisoned_allocations,
                     random_inputs, rel_err)
from rmsnorm_fused_add import (
    FusedAddRMSNormFunction,
    TritonQwen3FusedAddRMSNorm,
    fused_add_rms_norm,
    fused_add_rms_norm_backward,
    fused_add_rms_norm_forward,
)
import rmsnorm_triton
from rmsnorm_triton import MAX_COLS, LaunchConfig, check_config, column_blocks, sm_count

DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64]


def fused_inputs(shape, dtype, device, seed, weight_dtype=None):
    """x, residual, w, dy, ds; dy in y's dtype (torch's promotion), ds in s's (x's)."""
    x, w, ds = random_inputs(shape, dtype, device, seed)
    gen = torch.Generator().manual_seed(seed + 1000)
    residual = (torch.randn(shape, generator=gen, dtype=torch.float64) * 1.5 - 0.2).to(dtype).to(device)
    if weight_dtype is not None:
        w = (torch.rand(shape[-1], generator=gen, dtype=torch.float64) + 0.5).to(weight_dtype).to(device)
    dy = torch.randn(shape, generator=gen, dtype=torch.float64).to(torch.promote_types(dtype, w.dtype)).to(device)
    return x, residual, w, dy, ds


def fp64_fused_reference(x, residual, w, eps, dy, ds=None):
    """y, s, dx (= dresidual), dw in fp64 from the exact formula (no intermediate rounding)."""
    s = x.detach().double() + residual.detach().double()
    y, dx, dw = fp64_reference(s, w, eps, dy)
    return y, s, (dx if ds is None else dx + ds.double()), dw


def run_fused(x, residual, w, eps, dy, ds=None, weight_grad=True):
    """Forward + backward through autograd on fresh leaves, every torch.empty NaN-filled.
    Returns y, s, dx, dresidual, dw; ds=None sends no gradient to s."""
    x = x.detach().clone().requires_grad_()
    residual = residual.detach().clone().requires_grad_()
    w = w.detach().clone().requires_grad_(weight_grad)
    with poisoned_allocations():
        y, s = fused_add_rms_norm(x, residual, w, eps)
        torch.autograd.backward((y, s) if ds is not None else (y,), (dy, ds) if ds is not None else (dy,))
    return y.detach(), s.detach(), x.grad, residual.grad, w.grad


def shapes(on_gpu):
    if on_gpu:
        return [(4, 512, 4096), (2048, 1024), (3, 1000, 2560), (64, 4, 32, 128), (4097, 5120), (17, 16384),
                (33, 1536), (9, 12288), (1, 7), (257, 2048)]
    # 300 and 2560 take the block + tail path (256 + 64, 2048 + 512); (9, 2560) and
    # (150, 128) give some programs of the persistent backward two tiles, one of them partly masked
    return [(3, 5, 128), (4, 96), (2, 3, 300), (1, 7), (9, 2560), (150, 128)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_fp64_reference(dtype, device, on_gpu):
    for i, shape in enumerate(shapes(on_gpu)):
        x, r, w, dy, ds = fused_inputs(shape, dtype, device, seed=i)
        y, s, dx, dr, dw = run_fused(x, r, w, 1e-6, dy, ds)
        ref_y, ref_s, ref_dx, ref_dw = fp64_fused_reference(x, r, w, 1e-6, dy, ds)
        assert y.dtype == s.dtype == dx.dtype == dr.dtype == dw.dtype == dtype
        assert y.shape == s.shape == dx.shape == dr.shape == x.shape
        tol = REL_TOL[dtype]
        for name, out, ref in (("y", y, ref_y), ("s", s, ref_s), ("dx", dx, ref_dx), ("dresidual", dr, ref_dx),
                               ("dw", dw, ref_dw)):
            assert rel_err(out, ref) < tol, (shape, name)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_matches_fp64_reference_without_ds(dtype, device):
    """The final norm: nothing reaches s, so dx is the norm's gradient alone (HAS_DS=False)."""
    for i, shape in enumerate([(3, 5, 128), (9, 2560)]):
        x, r, w, dy, _ = fused_inputs(shape, dtype, device, seed=40 + i)
        y, s, dx, dr, dw = run_fused(x, r, w, 1e-6, dy)
        ref_y, _, ref_dx, ref_dw = fp64_fused_reference(x, r, w, 1e-6, dy)
        for name, out, ref in (("y", y, ref_y), ("dx", dx, ref_dx), ("dresidual", dr, ref_dx), ("dw", dw, ref_dw)):
            assert rel_err(out, ref) < REL_TOL[dtype], (shape, name)


@pytest.mark.parametrize("width", [128, 300, 2560])
def test_persistent_loop_with_many_tiles_per_program(width, device):
    """One row per tile and one program per SM: every program walks several tiles
    (prefetching the next), and the last tiles are partly or wholly past the end."""
    n_rows = 4 * sm_count(torch.device(device)) + 1
    x, r, w, dy, ds = fused_inputs((n_rows, width), torch.float64, device, seed=width)
    _, s, rstd = fused_add_rms_norm_forward(x, r, w, 1e-6)
    config = LaunchConfig(1, *column_blocks(width), num_warps=4, programs_per_sm=1)
    with poisoned_allocations():
        dx, dw = fused_add_rms_norm_backward(dy, ds, s, w, rstd, config=config)
    _, _, ref_dx, ref_dw = fp64_fused_reference(x, r, w, 1e-6, dy, ds)
    assert rel_err(dx, ref_dx) < 1e-12 and rel_err(dw, ref_dw) < 1e-12


def test_gradcheck_fp64(device, on_gpu):
    """Both outputs reach the loss (ds given), only y (ds None: the final norm), only s (dy None)."""
    def both(x, r, w):
        return fused_add_rms_norm(x, r, w, 1e-6)

    def only_y(x, r, w):
        return fused_add_rms_norm(x, r, w, 1e-6)[0]

    def only_s(x, r, w):
        return fused_add_rms_norm(x, r, w, 1e-6)[1]

    for shape in [(3, 40), (2, 2, 300)] + ([(5, 2560)] if on_gpu else []):
        x, r = (torch.randn(shape, dtype=torch.float64, device=device, requires_grad=True) for _ in range(2))
        w = torch.randn(shape[-1], dtype=torch.float64, device=device, requires_grad=True)
        for fn in (both, only_y, only_s):  # slow mode on the GPU for the small shapes
            fast = not on_gpu or shape[-1] > 1000
            assert torch.autograd.gradcheck(fn, (x, r, w), fast_mode=fast), (shape, fn.__name__)


def ulp_distance(a, b):
    """Distance in units in the last place of a 16-bit float dtype (monotone integer mapping)."""
    def key(t):
        bits = t.contiguous().view(torch.int16).to(torch.int32)
        return torch.where(bits < 0, -(bits & 0x7FFF), bits)

    return (key(a) - key(b)).abs()


def truncate_to_bf16(t):
    """fp32 -> bf16 by dropping the low 16 bits: what the interpreter's cast does."""
    return (t.float().view(torch.int32) & -65536).view(torch.float32).to(torch.bfloat16)


def hf_two_ops(x, r, w, eps=1e-6):
    """HF's decoder layer: hidden_states = residual + hidden_states; norm(hidden_states)."""
    hf = Qwen3RMSNorm(x.shape[-1], eps=eps).to(device=x.device, dtype=w.dtype)
    with torch.no_grad():
        hf.weight.copy_(w)
        s = r + x
        return hf(s), s


@pytest.mark.parametrize("weight", ["ones", "random"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_16bit_forward_matches_hf_two_ops_bits(dtype, weight, device, on_gpu):
    """s is the same bits as torch's residual + x. y: as close to HF as the plain kernel
    (x_hat may differ by one ulp where the fp32 row sums differ in their last bit).

    The interpreter truncates fp32 -> bf16 instead of rounding; it rounds fp32 -> fp16
    correctly, so on CPU fp16 is compared bit for bit and bf16 against the truncation.
    """
    shape = (8, 1024, 4096) if on_gpu else (6, 2560)
    x, r, w, _, _ = fused_inputs(shape, dtype, device, seed=11)
    if weight == "ones":
        w = torch.ones_like(w)
    expected_y, expected_s = hf_two_ops(x, r, w)
    y, s, _ = fused_add_rms_norm_forward(x, r, w, 1e-6)
    if on_gpu or dtype == torch.float16:
        assert torch.equal(s, expected_s)
        distance = ulp_distance(y.cpu(), expected_y.cpu())
        assert distance.max().item() <= (1 if weight == "ones" else 2)
        assert (distance == 0).float().mean().item() > (0.999 if on_gpu else 0.99)
    else:  # the add is in fp32, stored once; y then carries up to 3 truncations
        assert torch.equal(s, truncate_to_bf16(x.float() + r.float()))
        assert ulp_distance(y, expected_y).max().item() <= 3


@pytest.mark.parametrize("weight_dtype", [torch.float32, torch.bfloat16])
def test_mixed_dtypes_follow_hf_promotion(weight_dtype, device, on_gpu):
    x, r, w, dy, ds = fused_inputs((5, 64), torch.bfloat16, device, seed=3, weight_dtype=weight_dtype)
    expected_y, expected_s = hf_two_ops(x, r, w)
    y, s, dx, dr, dw = run_fused(x, r, w, 1e-6, dy, ds)
    out_dtype = torch.promote_types(torch.bfloat16, weight_dtype)
    assert y.dtype == expected_y.dtype == out_dtype and s.dtype == torch.bfloat16
    assert dx.dtype == dr.dtype == torch.bfloat16 and dw.dtype == weight_dtype
    # one bf16 rounding of x_hat (plus one of y for a bf16 weight); the interpreter
    # truncates instead, also s (three truncations: up to 3 ulps of 2^-7)
    torch.testing.assert_close(y, expected_y, rtol=(8e-3 if on_gpu else 2.4e-2), atol=1e-6)
    _, _, ref_dx, ref_dw = fp64_fused_reference(x, r, w, 1e-6, dy, ds)
    assert rel_err(dx, ref_dx) < REL_TOL[torch.bfloat16] and rel_err(dw, ref_dw) < REL_TOL[torch.bfloat16]


@pytest.mark.parametrize("n_cols", [256, 300])  # 300: the block + tail path
@pytest.mark.parametrize("weight_dtype", [None, torch.float32], ids=["same_weight", "fp32_weight"])
def test_x_hat_is_rounded_before_the_weight(weight_dtype, n_cols, device):
    """HF's cast order in y and in dW = sum(dy * x_hat), with x_hat rounded to fp16 first.
    (fp16: the interpreter rounds fp32 -> fp16 like a GPU; see the comment in the plain kernel's tests.)"""
    x, r, w, dy, _ = fused_inputs((16, n_cols), torch.float16, device, seed=55, weight_dtype=weight_dtype)
    s = r + x
    (hf_y, hf_dw), (weight_first_y, weight_first_dw) = cast_order_references(s, w, 1e-6, dy)
    y, s_out, rstd = fused_add_rms_norm_forward(x, r, w, 1e-6)
    gap, err = rel_err(weight_first_y, hf_y), rel_err(y, hf_y)
    assert err < gap / 10, f"y: error vs HF's order {err:.3g}; gap between the two orders {gap:.3g}"
    if weight_dtype is not None:  # an fp32 dW shows the rounding of x_hat
        _, dw = fused_add_rms_norm_backward(dy, None, s_out, w, rstd)
        gap, err = rel_err(weight_first_dw, hf_dw), rel_err(dw, hf_dw)
        assert err < gap / 10, f"dW: error vs HF's order {err:.3g}; gap between the two orders {gap:.3g}"


def test_backward_matches_hf_autograd(device, on_gpu):
    """bf16 gradients about as close to the exact ones as HF's own two ops under autograd."""
    shape = (4, 256, 2048) if on_gpu else (4, 3, 160)
    x, r, w, dy, ds = fused_inputs(shape, torch.bfloat16, device, seed=5)
    hf = Qwen3RMSNorm(shape[-1]).to(device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        hf.weight.copy_(w)
    x_hf, r_hf = x.clone().requires_grad_(), r.clone().requires_grad_()
    s_hf = r_hf + x_hf
    torch.autograd.backward((hf(s_hf), s_hf), (dy, ds))
    _, _, ref_dx, ref_dw = fp64_fused_reference(x, r, w, 1e-6, dy, ds)
    _, _, dx, dr, dw = run_fused(x, r, w, 1e-6, dy, ds)
    slack = 1e-3 if on_gpu else 2.0**-7  # the interpreter's truncating bf16 stores
    for name, ours, theirs, ref in (("dx", dx, x_hf.grad, ref_dx), ("dresidual", dr, r_hf.grad, ref_dx),
                                    ("dw", dw, hf.weight.grad, ref_dw)):
        assert rel_err(ours, ref) <= rel_err(theirs, ref) * 1.5 + slack, name


def test_rstd_is_saved_per_row_in_fp32_or_fp64(device):
    for dtype in DTYPES:
        x, r, w, _, _ = fused_inputs((5, 3, 64), dtype, device, seed=58)
        _, s, rstd = fused_add_rms_norm_forward(x, r, w, 1e-6)
        assert rstd.dtype == (torch.float64 if dtype == torch.float64 else torch.float32) and rstd.shape == (15,)
        expected = torch.rsqrt(s.double().reshape(-1, 64).pow(2).mean(-1) + 1e-6)  # of the rounded s
        torch.testing.assert_close(rstd.double(), expected, rtol=1e-12 if dtype == torch.float64 else 1e-6, atol=0)


# ------------------------------------------------- dx is returned for x and for residual


def test_shared_gradient_tensor_accumulates_correctly(device):
    """backward returns one tensor as the gradient of both x and residual. Accumulating
    into leaves twice, into one tensor used as both inputs, into a tensor that reaches
    both inputs by two paths, and editing one .grad afterwards all stay correct."""
    x, r, w, dy, ds = fused_inputs((4, 96), torch.float64, device, seed=61)
    _, _, g, _ = fp64_fused_reference(x, r, w, 1e-6, dy, ds)
    # two leaves, two backward passes: .grad accumulates to 2g, each its own tensor
    x_, r_ = x.clone().requires_grad_(), r.clone().requires_grad_()
    y, s = fused_add_rms_norm(x_, r_, w)
    for _ in range(2):
        torch.autograd.backward((y, s), (dy, ds), retain_graph=True)
    torch.testing.assert_close(x_.grad, 2 * g, rtol=1e-12, atol=0)
    torch.testing.assert_close(r_.grad, 2 * g, rtol=1e-12, atol=0)
    assert x_.grad.data_ptr() != r_.grad.data_ptr()
    x_.grad.add_(1.0)  # an edit of one gradient leaves the other alone
    torch.testing.assert_close(r_.grad, 2 * g, rtol=1e-12, atol=0)
    # one tensor as x and residual: the fp64 reference at (a, a), where d/da = 2 * dx
    a = x.clone().requires_grad_()
    torch.autograd.backward(fused_add_rms_norm(a, a, w), (dy, ds))
    _, _, g_aa, _ = fp64_fused_reference(x, x, w, 1e-6, dy, ds)
    torch.testing.assert_close(a.grad, 2 * g_aa, rtol=1e-12, atol=0)
    # a non-leaf reached by two paths: b feeds x through a multiply and residual directly
    b = x.clone().requires_grad_()
    torch.autograd.backward(fused_add_rms_norm(b * 3.0, b, w), (dy, ds))
    _, _, g_3b, _ = fp64_fused_reference(x * 3.0, x, w, 1e-6, dy, ds)
    torch.testing.assert_close(b.grad, 4 * g_3b, rtol=1e-12, atol=0)


def test_chained_layers_match_torch_autograd(device):
    """Three fused norms in a chain, as in a decoder stack: each s is the next residual."""
    gen = torch.Generator().manual_seed(62)
    h, r0 = (torch.randn(3, 5, 64, generator=gen, dtype=torch.float64).to(device) for _ in range(2))
    weights = [torch.randn(64, generator=gen, dtype=torch.float64).to(device) for _ in range(3)]
    dy = torch.randn(3, 5, 64, generator=gen, dtype=torch.float64).to(device)

    def reference_norm(s, w):
        return w * s * torch.rsqrt(s.pow(2).mean(-1, keepdim=True) + 1e-6)

    grads = []
    for fused in (True, False):
        x, r = h.clone().requires_grad_(), r0.clone().requires_grad_()
        ws = [w.clone().requires_grad_() for w in weights]
        hidden, residual = x, r
        for w in ws:
            if fused:
                normed, residual = fused_add_rms_norm(hidden, residual, w)
            else:
                residual = residual + hidden
                normed = reference_norm(residual, w)
            hidden = torch.tanh(normed)  # the "layer"
        hidden.backward(dy)
        grads.append([x.grad, r.grad] + [w.grad for w in ws])
    for ours, theirs in zip(*grads):
        torch.testing.assert_close(ours, theirs, rtol=1e-10, atol=1e-12)


def test_only_s_used_passes_ds_through(device):
    x, r, w, _, ds = fused_inputs((3, 48), torch.float32, device, seed=63)
    x_, r_, w_ = x.clone().requires_grad_(), r.clone().requires_grad_(), w.clone().requires_grad_()
    _, s = fused_add_rms_norm(x_, r_, w_)
    s.backward(ds)
    assert torch.equal(x_.grad, ds) and torch.equal(r_.grad, ds) and torch.equal(w_.grad, torch.zeros_like(w))


# ------------------------------------------------------------ inputs, outputs, layouts


def test_grad_outputs_are_not_modified(device):
    x, r, w, dy, ds = fused_inputs((6, 128), torch.bfloat16, device, seed=2)
    dy_before, ds_before = dy.clone(), ds.clone()
    run_fused(x, r, w, 1e-6, dy, ds)
    assert torch.equal(dy, dy_before) and torch.equal(ds, ds_before)


def test_non_contiguous_inputs_are_copied_and_correct(device):
    gen = torch.Generator().manual_seed(64)

    def transposed(requires_grad=False):  # (3, 5, 40) views of (3, 40, 5) tensors
        base = torch.randn(3, 40, 5, generator=gen, dtype=torch.float64).to(device)
        return base.requires_grad_(requires_grad).transpose(1, 2)

    x, r, dy, ds = transposed(True), transposed(True), transposed(), transposed()
    w = torch.randn(40, generator=gen, dtype=torch.float64).to(device).requires_grad_()
    assert not any(t.is_contiguous() for t in (x, r, dy, ds))
    with poisoned_allocations():
        y, s = fused_add_rms_norm(x, r, w)
        dx, dr, dw = torch.autograd.grad((y, s), (x, r, w), (dy, ds))
    ref_y, ref_s, ref_dx, ref_dw = fp64_fused_reference(x, r, w, 1e-6, dy, ds)
    errors = {"y": rel_err(y, ref_y), "s": rel_err(s, ref_s), "dx": rel_err(dx, ref_dx),
              "dresidual": rel_err(dr, ref_dx), "dw": rel_err(dw, ref_dw)}
    assert max(errors.values()) < 1e-12, errors
    # an expanded (stride-0) gradient, as y.sum().backward() sends
    x2 = x.detach().clone().requires_grad_()
    fused_add_rms_norm(x2, r.detach(), w.detach())[0].sum().backward()
    _, _, ref_dx, _ = fp64_fused_reference(x, r, w, 1e-6, torch.ones_like(dy))
    assert rel_err(x2.grad, ref_dx) < 1e-10


def test_empty_input_returns_empty(device):
    for shape in [(0, 3, 64), (2, 0)]:
        x, r = (torch.randn(shape, device=device, requires_grad=True) for _ in range(2))
        w = torch.randn(shape[-1], device=device, requires_grad=True)
        y, s = fused_add_rms_norm(x, r, w)
        assert y.shape == s.shape == shape
        (y.sum() + s.sum()).backward()
        assert x.grad.shape == r.grad.shape == shape and torch.equal(w.grad, torch.zeros_like(w))


def test_one_dim_input(device):
    x, r, w, dy, ds = fused_inputs((300,), torch.float32, device, seed=9)
    y, s, dx, dr, dw = run_fused(x, r, w, 1e-6, dy, ds)
    ref_y, ref_s, ref_dx, ref_dw = fp64_fused_reference(x, r, w, 1e-6, dy, ds)
    assert max(rel_err(y, ref_y), rel_err(s, ref_s), rel_err(dx, ref_dx), rel_err(dw, ref_dw)) < 1e-5


@pytest.mark.parametrize(
    "make, error, message",
    [
        (lambda d: (torch.randn(2, 8, device=d), torch.randn(2, 8, device=d).half(), torch.ones(8, device=d)),
         ValueError, "same dtype"),
        (lambda d: (torch.randn(2, 8, device=d), torch.randn(3, 8, device=d), torch.ones(8, device=d)),
         ValueError, "same shape"),
        (lambda d: (torch.randn(2, 8, device=d), torch.randn(8, device=d), torch.ones(8, device=d)),
         ValueError, "same shape"),  # no broadcasting of the residual
        (lambda d: (torch.randn(2, 8, device=d), torch.randn(2, 8, device="meta"), torch.ones(8, device=d)),
         ValueError, "same device"),
        (lambda d: (torch.randn(2, 8, device=d), [[0.0] * 8] * 2, torch.ones(8, device=d)), TypeError, "tensors"),
        (lambda d: (torch.randn(2, 8, device=d), torch.randn(2, 8, device=d), torch.ones(7, device=d)),
         ValueError, r"shape \(8,\)"),
        (lambda d: (torch.randn(2, 8, device=d), torch.randn(2, 8, device=d), torch.ones(2, 8, device=d)),
         ValueError, "weight must have"),
        (lambda d: (torch.randn(2, 8, device=d), torch.randn(2, 8, device=d), torch.ones(8, device="meta")),
         ValueError, "weight is on meta"),
        (lambda d: (torch.randint(0, 5, (2, 8), device=d), torch.randint(0, 5, (2, 8), device=d),
                    torch.ones(8, device=d)), TypeError, "int64"),
        (lambda d: (torch.randn(2, 8, device=d), torch.randn(2, 8, device=d), torch.ones(8, device=d), 0.0),
         ValueError, "eps"),
    ],
    ids=["dtype", "shape", "broadcast", "device", "list", "weight_len", "weight_2d", "weight_device", "int",
         "eps"],
)
def test_bad_inputs_raise_clear_errors(make, error, message, device):
    x, r, w, *eps = make(device)
    with pytest.raises(error, match=message):
        fused_add_rms_norm_forward(x, r, w, *eps)
    if message != "same dtype":  # the autograd op adds mixed dtypes in the promoted dtype (autocast)
        with pytest.raises(error, match=message):
            fused_add_rms_norm(x, r, w, *eps)


def test_bad_eps_and_wrong_backend_device_raise(device):
    x, r, w = torch.randn(2, 8, device=device), torch.randn(2, 8, device=device), torch.ones(8, device=device)
    for eps in (0.0, -1e-6, float("nan")):
        with pytest.raises(ValueError, match="eps"):
            fused_add_rms_norm(x, r, w, eps)
    other = "meta"  # on the backend's device type, but not where triton runs
    with pytest.raises(ValueError, match="Triton runs under"):
        fused_add_rms_norm(x.to(other), r.to(other), w.to(other))


def test_backward_rejects_mismatched_gradients(device):
    x, r, w, dy, ds = fused_inputs((4, 32), torch.float32, device, seed=65)
    _, s, rstd = fused_add_rms_norm_forward(x, r, w)
    with pytest.raises(ValueError, match="grad_output shape"):
        fused_add_rms_norm_backward(dy[:3], ds, s, w, rstd)
    with pytest.raises(ValueError, match="ds shape"):
        fused_add_rms_norm_backward(dy, ds[:, :16], s, w, rstd)
    with pytest.raises(ValueError, match="rstd has 3 values for 4 rows"):
        fused_add_rms_norm_backward(dy, ds, s, w, rstd[:3])


def test_double_backward_raises(device):
    x, r = (torch.randn(3, 32, device=device, requires_grad=True) for _ in range(2))
    w = torch.randn(32, device=device, requires_grad=True)
    y, _ = fused_add_rms_norm(x, r, w)
    with pytest.raises(NotImplementedError, match="double backward"):
        torch.autograd.grad(y.sum(), x, create_graph=True)


def test_dw_is_deterministic(device, on_gpu):
    shape = (16384, 4096) if on_gpu else (40, 300)
    x, r, w, dy, ds = fused_inputs(shape, torch.bfloat16, device, seed=21)
    first, second = run_fused(x, r, w, 1e-6, dy, ds), run_fused(x, r, w, 1e-6, dy, ds)
    for name, a, b in zip(("y", "s", "dx", "dresidual", "dw"), first, second):
        assert torch.equal(a, b), name


def test_frozen_weight_skips_dw(device, monkeypatch):
    """dW is computed iff the weight needs a gradient, whatever x and residual need."""
    calls = []
    real = rmsnorm_fused_add.fused_add_rms_norm_backward

    def spy(*args, **kwargs):
        calls.append(args[5] if len(args) > 5 else kwargs.get("compute_dw", True))
        return real(*args, **kwargs)

    monkeypatch.setattr(rmsnorm_fused_add, "fused_add_rms_norm_backward", spy)
    x, r, w, dy, ds = fused_inputs((6, 64), torch.float32, device, seed=4)
    _, _, ref_dx, ref_dw = fp64_fused_reference(x, r, w, 1e-6, dy, ds)
    _, _, dx, dr, dw = run_fused(x, r, w, 1e-6, dy, ds, weight_grad=False)
    assert calls == [False] and dw is None
    assert rel_err(dx, ref_dx) < REL_TOL[torch.float32] and rel_err(dr, ref_dx) < REL_TOL[torch.float32]
    w_ = w.clone().requires_grad_()  # frozen inputs, a trained weight
    torch.autograd.backward(fused_add_rms_norm(x, r, w_), (dy, ds))
    assert calls == [False, True] and rel_err(w_.grad, ref_dw) < REL_TOL[torch.float32]
    _, s, rstd = fused_add_rms_norm_forward(x, r, w)
    assert real(dy, ds, s, w, rstd, compute_dw=False)[1] is None


# ------------------------------------------------------------------ launch configs, module


def test_launch_configs_are_valid_for_every_width():
    for n_cols in list(range(1, 300)) + [1024, 2048, 2560, 4096, 5120, 6144, 8192, 12288, 16384, 16385,
                                         24576, 65536, 65537]:
        fwd = rmsnorm_triton.forward_config(n_cols, fused=True)
        bwd = rmsnorm_triton.backward_config(n_cols, fused=True)
        for config in (fwd, bwd):
            check_config(config, n_cols)
            assert config.chunked or config.block_rows == 1 or (
                config.block_rows * (config.block_cols + config.tail_cols) <= 8192)
            assert config.chunked or n_cols <= MAX_COLS
        assert fwd.programs_per_sm == 1 and bwd.programs_per_sm >= 1
    assert rmsnorm_triton.forward_config(128, fused=True).block_rows > 1  # narrow rows: many per program


def test_the_fused_ladders_are_the_ones_launched(device, monkeypatch):
    """The fused op launches the fused ladders' configs (three tensors per element in the
    backward); with no ds, the final norm's backward is the plain one and takes its ladder."""
    calls = []
    for name in ("forward_config", "backward_config"):
        real = getattr(rmsnorm_triton, name)

        def spy(n_cols, device=None, fused=False, real=real, name=name):
            calls.append((name, fused))
            return real(n_cols, device, fused)
        monkeypatch.setattr(rmsnorm_triton, name, spy)
        monkeypatch.setattr(rmsnorm_fused_add, name, spy, raising=False)
    x, r, w, dy, ds = fused_inputs((3, 80), torch.float32, device, seed=74)
    _, s, rstd = fused_add_rms_norm_forward(x, r, w)
    fused_add_rms_norm_backward(dy, ds, s, w, rstd)
    fused_add_rms_norm_backward(dy, None, s, w, rstd)
    assert calls == [("forward_config", True), ("backward_config", True), ("backward_config", False)]


def chunked(rows, chunk, warps=4, per_sm=2):
    return LaunchConfig(rows, chunk, 0, warps, per_sm, chunked=True)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float16], ids=str)
@pytest.mark.parametrize("n_cols, fwd, bwd", [
    (300, chunked(1, 128), chunked(2, 64)), (300, chunked(2, 64), chunked(1, 128, per_sm=4)),
    (1000, chunked(2, 256), chunked(2, 256))])
def test_chunked_kernels_match_fp64_and_hf(n_cols, fwd, bwd, dtype, device):
    """The fused add on the chunked path (any width): pass 1 adds and stores s, pass 2 reads
    s back; the two-step backward adds ds. fp16: s is the same bits as torch's residual + x."""
    x, r, w, dy, ds = fused_inputs((3, 5, n_cols), dtype, device, seed=n_cols + fwd.block_rows)
    with poisoned_allocations():
        y, s, rstd = fused_add_rms_norm_forward(x, r, w, config=fwd)
        dx, dw = fused_add_rms_norm_backward(dy, ds, s, w, rstd, config=bwd)
        dx_no_ds, _ = fused_add_rms_norm_backward(dy, None, s, w, rstd, config=bwd)
    ref_y, ref_s, ref_dx, ref_dw = fp64_fused_reference(x, r, w, 1e-6, dy, ds)
    _, _, ref_dx_no_ds, _ = fp64_fused_reference(x, r, w, 1e-6, dy)
    tol = 1e-12 if dtype == torch.float64 else REL_TOL[dtype]
    for name, got, ref in (("y", y, ref_y), ("s", s, ref_s), ("dx", dx, ref_dx), ("dw", dw, ref_dw),
                           ("dx without ds", dx_no_ds, ref_dx_no_ds)):
        assert rel_err(got, ref) < tol, name
    if dtype == torch.float16:
        expected_y, expected_s = hf_two_ops(x, r, w)
        assert torch.equal(s, expected_s)
        assert (y == expected_y).float().mean().item() > 0.99


def test_chunked_backward_walks_every_tile_with_ds(device):
    """Two row slots, several tiles each, with ds: every tile written once (poisoned outputs)."""
    n_rows = 3 * sm_count(torch.device(device)) + 1  # 2 slots per SM, 2 chunks: 4 tiles each
    x, r, w, dy, ds = fused_inputs((n_rows, 100), torch.float64, device, seed=75)
    _, s, rstd = fused_add_rms_norm_forward(x, r, w)
    with poisoned_allocations():
        dx, dw = fused_add_rms_norm_backward(dy, ds, s, w, rstd, config=chunked(1, 64, per_sm=2))
    _, _, ref_dx, ref_dw = fp64_fused_reference(x, r, w, 1e-6, dy, ds)
    assert rel_err(dx, ref_dx) < 1e-12 and rel_err(dw, ref_dw) < 1e-12


@pytest.mark.parametrize("n_cols", [300, 4100])
def test_backward_without_prefetch_with_ds(n_cols, device):
    n_rows = 4 * sm_count(torch.device(device)) + 1
    x, r, w, dy, ds = fused_inputs((n_rows, n_cols), torch.float64, device, seed=76)
    _, s, rstd = fused_add_rms_norm_forward(x, r, w)
    config = LaunchConfig(1, *column_blocks(n_cols), num_warps=4, programs_per_sm=1, prefetch=False)
    with poisoned_allocations():
        dx, dw = fused_add_rms_norm_backward(dy, ds, s, w, rstd, config=config)
    _, _, ref_dx, ref_dw = fp64_fused_reference(x, r, w, 1e-6, dy, ds)
    assert rel_err(dx, ref_dx) < 1e-12 and rel_err(dw, ref_dw) < 1e-12


def test_rows_wider_than_max_cols_take_the_chunked_path(device, on_gpu):
    n_cols = 3 * MAX_COLS + 5 if on_gpu else MAX_COLS + 300
    assert rmsnorm_triton.forward_config(n_cols, fused=True).chunked
    assert rmsnorm_triton.backward_config(n_cols, fused=True).chunked
    x, r, w, dy, ds = fused_inputs((64 if on_gpu else 2, n_cols), torch.bfloat16, device, seed=77)
    y, s, dx, dr, dw = run_fused(x, r, w, 1e-6, dy, ds)
    ref_y, ref_s, ref_dx, ref_dw = fp64_fused_reference(x, r, w, 1e-6, dy, ds)
    for name, got, ref in (("y", y, ref_y), ("s", s, ref_s), ("dx", dx, ref_dx), ("dw", dw, ref_dw)):
        assert rel_err(got, ref) < REL_TOL[torch.bfloat16], name
    again = run_fused(x, r, w, 1e-6, dy, ds)
    assert torch.equal(again[2], dx) and torch.equal(again[4], dw)  # deterministic


def test_fp64_eps_is_exact_on_both_paths(device):
    gen = torch.Generator().manual_seed(78)
    x, r = ((torch.randn(4, 16, generator=gen, dtype=torch.float64) * 1e-2).to(device) for _ in range(2))
    w = torch.ones(16, dtype=torch.float64, device=device)
    for config in (None, chunked(2, 8)):
        _, s, rstd = fused_add_rms_norm_forward(x, r, w, 1e-3, config=config)
        torch.testing.assert_close(rstd, torch.rsqrt(s.pow(2).mean(-1) + 1e-3), rtol=1e-14, atol=0)


def test_passed_config_changes_the_launch_not_the_numbers(device):
    x, r, w, dy, ds = fused_inputs((2, 9, 300), torch.float32, device, seed=66)
    y, s, rstd = fused_add_rms_norm_forward(x, r, w)
    dx, dw = fused_add_rms_norm_backward(dy, ds, s, w, rstd)
    fwd = LaunchConfig(1, *column_blocks(300), num_warps=1)
    bwd = LaunchConfig(2, *column_blocks(300), num_warps=2, programs_per_sm=3)
    y2, s2, rstd2 = fused_add_rms_norm_forward(x, r, w, config=fwd)
    dx2, dw2 = fused_add_rms_norm_backward(dy, ds, s, w, rstd, config=bwd)
    assert torch.equal(s2, s)
    torch.testing.assert_close((y2, rstd2, dx2, dw2), (y, rstd, dx, dw), rtol=1e-6, atol=1e-6)
    with pytest.raises(ValueError, match="column_blocks"):
        fused_add_rms_norm_forward(x, r, w, config=LaunchConfig(1, 512, 0, 4))
    with pytest.raises(ValueError, match="num_warps"):
        fused_add_rms_norm_backward(dy, ds, s, w, rstd, config=LaunchConfig(1, 256, 64, 6))


@pytest.mark.parametrize("eps", [0.1, 1e-5])
def test_module_is_a_drop_in_for_the_add_and_qwen3_rmsnorm(eps, device):
    """Same state_dict as Qwen3RMSNorm (just `weight`), its own eps, HF's results."""
    gen = torch.Generator().manual_seed(57)
    # rows with mean(s^2) ~ eps: the result depends on eps strongly
    x, r = ((torch.randn(4, 96, generator=gen, dtype=torch.float64) * eps ** 0.5 / 2).float().to(device)
            for _ in range(2))
    dy, ds = (torch.randn(4, 96, generator=gen).to(device) for _ in range(2))
    hf, ours = Qwen3RMSNorm(96, eps=eps), TritonQwen3FusedAddRMSNorm(96, eps=eps)
    assert list(ours.state_dict()) == list(hf.state_dict()) == ["weight"]
    assert ours.variance_epsilon == eps and repr(ours).endswith("((96,), eps=" + str(eps) + ")")
    with torch.no_grad():
        hf.weight.uniform_(0.5, 1.5, generator=gen)
    ours.load_state_dict(hf.state_dict())
    hf, ours = hf.to(device), ours.to(device)
    results = []
    for module in (hf, ours):
        x_, r_ = x.clone().requires_grad_(), r.clone().requires_grad_()
        if module is hf:
            s = r_ + x_
            y = module(s)
        else:
            y, s = module(x_, r_)
        torch.autograd.backward((y, s), (dy, ds))
        results.append((y.detach(), s.detach(), x_.grad, r_.grad, module.weight.grad))
    for name, theirs, mine in zip(("y", "s", "dx", "dresidual", "dw"), *results):
        torch.testing.assert_close(mine, theirs, rtol=1e-4, atol=1e-6, msg=lambda m: f"{name}: {m}")
    with torch.no_grad():  # eps / 10 moves y by more than 10%
        assert rel_err(fused_add_rms_norm(x, r, ours.weight, eps / 10)[0], results[0][0]) > 0.1


def test_autograd_function_apply_signature(device):
    x, r, w, _, _ = fused_inputs((2, 32), torch.float32, device, seed=67)
    y, s = FusedAddRMSNormFunction.apply(x, r, w, 1e-6)
    y_ref, s_ref, _ = fused_add_rms_norm_forward(x, r, w, 1e-6)
    assert torch.equal(y, y_ref) and torch.equal(s, s_ref)


def test_demo_runs(capsys):
    runpy.run_path(rmsnorm_fused_add.__file__, run_name="__main__")
    out = capsys.readouterr().out
    for name in ("y ", "s ", "dx ", "dresidual", "dw "):
        assert name in out


def test_mixed_dtypes_add_in_the_promoted_dtype(device):
    """Autocast training: a bf16 sublayer output onto an fp32 residual stream, as HF adds them."""
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(3, 256, generator=gen).to(torch.bfloat16).to(device).requires_grad_()
    residual = torch.randn(3, 256, generator=gen).to(device).requires_grad_()
    weight = (torch.rand(256, generator=gen) + 0.5).to(device).requires_grad_()
    y, s = fused_add_rms_norm(x, residual, weight, 1e-6)
    expected_s = residual + x
    assert s.dtype == torch.float32 and torch.equal(s, expected_s)
    hf = Qwen3RMSNorm(256, eps=1e-6).to(device)
    hf.weight.data.copy_(weight.detach())
    torch.testing.assert_close(y, hf(expected_s), rtol=1e-5, atol=1e-6)
    (y.sum() + s.sum()).backward()
    assert x.grad.dtype == torch.bfloat16 and residual.grad.dtype == torch.float32
    torch.testing.assert_close(x.grad, residual.grad.to(torch.bfloat16))


# (x, residual, weight): a bf16 weight, so that y's dtype follows s's; fp64 with an fp32 weight (the
# interpreter casts fp64 -> bf16 wrongly, and an fp64 norm with a bf16 weight has a bf16 dW)
MIXED_DTYPES = [(torch.float32, torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32, torch.bfloat16),
                (torch.float16, torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float16, torch.bfloat16),
                (torch.float16, torch.float32, torch.bfloat16), (torch.float64, torch.float32, torch.float32)]


@pytest.mark.parametrize("x_dtype, residual_dtype, weight_dtype", MIXED_DTYPES,
                         ids=[f"{str(a)[6:]}+{str(b)[6:]}" for a, b, _ in MIXED_DTYPES])
def test_mixed_dtypes_add_in_the_promoted_dtype_either_way(x_dtype, residual_dtype, weight_dtype, device):
    """fused_add_rms_norm(x, residual) adds as torch's ``residual + x`` does, in
    torch.promote_types of the two, whichever of them is the wider one: an fp32 x onto a bf16
    residual as well as the reverse, and fp16 + bf16 in fp32. s and y (dtype and values) are those
    of HF's two ops on that sum; x and residual get their gradients in their own dtypes, with the
    values of autograd through HF's two ops."""
    gen = torch.Generator().manual_seed(68)

    def draw(dtype, scale=1.0, shift=0.0):
        return (torch.randn(4, 256, generator=gen, dtype=torch.float64) * scale + shift).to(dtype).to(device)

    x, residual = draw(x_dtype, 2.0, 0.3), draw(residual_dtype, 1.5, -0.2)
    w = (torch.rand(256, generator=gen, dtype=torch.float64) + 0.5).to(weight_dtype).to(device)
    s_dtype = torch.promote_types(x_dtype, residual_dtype)
    y_dtype = torch.promote_types(s_dtype, w.dtype)
    dy, ds = draw(y_dtype), draw(s_dtype)
    hf = Qwen3RMSNorm(256, eps=1e-6).to(device=device, dtype=w.dtype)
    with torch.no_grad():
        hf.weight.copy_(w)
    x_hf, r_hf = x.clone().requires_grad_(), residual.clone().requires_grad_()
    s_hf = r_hf + x_hf
    y_hf = hf(s_hf)
    torch.autograd.backward((y_hf, s_hf), (dy, ds))
    y, s, dx, dr, dw = run_fused(x, residual, w, 1e-6, dy, ds)
    assert (s.dtype, y.dtype) == (s_hf.dtype, y_hf.dtype) == (s_dtype, y_dtype), "(s, y) dtypes"
    assert torch.equal(s, s_hf.detach())  # an fp32 (fp64) add, as torch's
    torch.testing.assert_close(y, y_hf.detach(), rtol=1e-5, atol=1e-6)
    assert (dx.dtype, dr.dtype, dw.dtype) == (x_dtype, residual_dtype, w.dtype)
    for name, ours, theirs in (("dx", dx, x_hf.grad), ("dresidual", dr, r_hf.grad), ("dw", dw, hf.weight.grad)):
        # one rounding to the gradient's dtype (the interpreter truncates to bf16)
        rtol = {torch.bfloat16: 2**-7, torch.float16: 2**-10}.get(ours.dtype, 1e-5)
        torch.testing.assert_close(ours, theirs, rtol=rtol, atol=1e-5, msg=lambda m: f"{name}: {m}")


BAD_EPS = [float("inf"), float("-inf"), float("nan"), 0.0, -1e-6, "1e-6", None]


def fused_module(x, residual, w, eps):
    module = TritonQwen3FusedAddRMSNorm(x.shape[-1]).to(x.device)
    module.variance_epsilon = eps
    return module(x, residual)


@pytest.mark.parametrize("entry", [fused_add_rms_norm, fused_add_rms_norm_forward, fused_module],
                         ids=lambda f: f.__name__)
@pytest.mark.parametrize("eps", BAD_EPS, ids=repr)
def test_eps_must_be_a_positive_finite_number(eps, entry, device):
    """The fused entry points refuse an eps that is not a positive finite number with a ValueError
    naming eps: inf would run (rstd = 0: y = 0, silently); -inf, nan, 0, negative: NaN or inf; a
    string or None is no eps. The module's eps is its variance_epsilon, set after construction."""
    x, r, w, _, _ = fused_inputs((2, 8), torch.float32, device, seed=69)
    with pytest.raises(ValueError, match="eps"):
        entry(x, r, w, eps)


def test_x_and_weight_on_different_devices_are_rejected(device):
    """x (and residual) on one device, the weight on another of the backend's type: a ValueError naming
    both. The interpreter has one device, so the weight only reports a second one
    (helpers.ReportsSecondDevice); test_x_and_weight_on_two_gpus_are_rejected does it for real."""
    x, r, w, _, _ = fused_inputs((2, 8), torch.float32, device, seed=70)
    w_elsewhere = w.as_subclass(ReportsSecondDevice)
    assert w_elsewhere.device.type == x.device.type and w_elsewhere.device != x.device
    message = re.escape(f"x is on {x.device} but weight is on {w_elsewhere.device}")
    for entry in (fused_add_rms_norm_forward, fused_add_rms_norm):
        with pytest.raises(ValueError, match=message):
            entry(x, r, w_elsewhere, 1e-6)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two CUDA GPUs")
def test_x_and_weight_on_two_gpus_are_rejected():  # pragma: gpu only
    """x and residual on cuda:0, the weight on cuda:1 (and the other way round): a ValueError naming both."""
    for x_device, w_device in (("cuda:0", "cuda:1"), ("cuda:1", "cuda:0")):
        x, r = (torch.randn(2, 8, device=x_device, requires_grad=True) for _ in range(2))
        w = torch.ones(8, device=w_device, requires_grad=True)
        for entry in (fused_add_rms_norm_forward, fused_add_rms_norm):
            with pytest.raises(ValueError, match=f"x is on {x_device} but weight is on {w_device}"):
                entry(x, r, w, 1e-6)
