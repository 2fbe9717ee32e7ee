"""Correctness of the fused q/k-norm + RoPE kernels (snippets/qk_norm_rope.py).

CPU: the Triton interpreter at tiny shapes, with small tiles so that every path
(several tiles, a partial last tile, the persistent backward walking more than one
tile per program) runs. CUDA: the same tests at a Qwen3-8B-like head layout with the
shipped launch configs. References: an fp64 formula written here (its own rotate_half),
and HF's own Qwen3RMSNorm + apply_rotary_pos_emb.
"""
import json
import os
import pathlib
import subprocess
import sys

import pytest
import torch
import triton
import triton.language as tl
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm, Qwen3RotaryEmbedding, apply_rotary_pos_emb

import qk_norm_rope as qkr
from helpers import REL_TOL, ReportsSecondDevice, poisoned_allocations, rel_err
from qk_norm_rope import TileConfig, _round, qk_norm_rope, qk_norm_rope_backward, qk_norm_rope_forward
from qwen3_configs import tiny_qwen3_config

ROOT = pathlib.Path(__file__).resolve().parents[1]
DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64]
EPS = 1e-6


@pytest.fixture
def small_tiles(monkeypatch, on_gpu):
    """CPU: 8 head rows a tile, 6 programs in the backward (sm_count is 2 under the interpreter):
    q's 40 rows are 5 tiles, k's 20 rows 3 (the last one half masked), so each program walks 2
    tiles, and 4 of the second ones lie past k's end. GPU: the shipped configs."""
    if not on_gpu:
        monkeypatch.setattr(qkr, "launch_configs", lambda head_dim, dtype: (TileConfig(8, 4), TileConfig(8, 4, 3)))


def layout(on_gpu):
    """(batch, seq_len, q heads, kv heads, head_dim)."""
    return (2, 256, 32, 8, 128) if on_gpu else (2, 5, 4, 2, 32)


def make_inputs(dtype, device, seed, batch, seq_len, n_q_heads, n_k_heads, head_dim, cos_batch=None,
                weight_dtype=None, fused_qkv=True):
    """q, k (views of one fused qkv projection output, or contiguous), weights, cos, sin and the
    grads of q_out, k_out. cos and sin are random, their halves different, one row per (batch, token)."""
    gen = torch.Generator().manual_seed(seed)

    def rand(*shape):
        return torch.randn(shape, generator=gen, dtype=torch.float64)

    width = (n_q_heads + 2 * n_k_heads) * head_dim
    qkv = (rand(batch, seq_len, width) * 2 + 0.3).to(dtype).to(device)
    q = qkv[..., :n_q_heads * head_dim].view(batch, seq_len, n_q_heads, head_dim)
    k = qkv[..., n_q_heads * head_dim:(n_q_heads + n_k_heads) * head_dim].view(batch, seq_len, n_k_heads, head_dim)
    if not fused_qkv:
        q, k = q.contiguous(), k.contiguous()
    q_weight, k_weight = ((rand(head_dim) * 0.5 + 1).to(weight_dtype or dtype).to(device) for _ in range(2))
    cos, sin = (torch.rand((cos_batch or batch, seq_len, head_dim), generator=gen, dtype=torch.float64)
                .mul(2).sub(1).to(dtype).to(device) for _ in range(2))
    out_dtype = torch.promote_types(dtype, q_weight.dtype)
    grads = [rand(batch, heads, seq_len, head_dim).to(out_dtype).to(device) for heads in (n_q_heads, n_k_heads)]
    return (q, k, q_weight, k_weight, cos, sin), grads


def run_ours(inputs, grads, eps=EPS, weight_grad=True):
    """Forward and backward through qk_norm_rope, every allocation NaN-poisoned. Every input keeps its
    layout (detach() keeps the strides). Returns (q_out, k_out), [dq, dk, dq_w, dk_w]."""
    q, k, q_weight, k_weight, cos, sin = inputs
    leaves = [q.detach().requires_grad_(), k.detach().requires_grad_(),
              q_weight.detach().requires_grad_(weight_grad), k_weight.detach().requires_grad_(weight_grad)]
    with poisoned_allocations():
        outs = qk_norm_rope(*leaves, cos, sin, eps)
        torch.autograd.backward(outs, grads)
    return [o.detach() for o in outs], [t.grad for t in leaves]


def run_hf(inputs, grads=None, eps=EPS):
    """HF's own modules: Qwen3RMSNorm per head, transpose(1, 2), apply_rotary_pos_emb."""
    q, k, q_weight, k_weight, cos, sin = inputs
    leaves = [q.detach().requires_grad_(), k.detach().requires_grad_()]
    norms = []
    for weight in (q_weight, k_weight):
        norm = Qwen3RMSNorm(weight.shape[0], eps).to(device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            norm.weight.copy_(weight)
        norms.append(norm)
    outs = apply_rotary_pos_emb(norms[0](leaves[0]).transpose(1, 2), norms[1](leaves[1]).transpose(1, 2), cos, sin)
    if grads is None:
        return [o.detach() for o in outs], None
    torch.autograd.backward(outs, grads)
    return [o.detach() for o in outs], [leaves[0].grad, leaves[1].grad, norms[0].weight.grad, norms[1].weight.grad]


def fp64_reference(inputs, grads, eps=EPS):
    """The exact math in fp64 (no rounding anywhere), with a rotate_half written here."""
    q, k, q_weight, k_weight, cos, sin = inputs
    leaves = [t.detach().double().requires_grad_() for t in (q, k, q_weight, k_weight)]
    cos64, sin64 = cos.double().unsqueeze(1), sin.double().unsqueeze(1)

    def norm_rope(x, w):
        n = (w * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)).transpose(1, 2)
        first, second = n.chunk(2, dim=-1)
        return n * cos64 + torch.cat((-second, first), dim=-1) * sin64

    outs = (norm_rope(leaves[0], leaves[2]), norm_rope(leaves[1], leaves[3]))
    return [o.detach() for o in outs], list(torch.autograd.grad(outs, leaves, [g.double() for g in grads]))


NAMES = ("q_out", "k_out", "dq", "dk", "dq_weight", "dk_weight")


def assert_close_to_reference(outs, grads, ref_outs, ref_grads, tol):
    errors = {name: rel_err(ours, ref) for name, ours, ref in zip(NAMES, outs + grads, ref_outs + ref_grads)}
    assert max(errors.values()) < tol, errors


def ulp_distance_bf16(a, b):
    def key(t):
        bits = t.contiguous().view(torch.int16).to(torch.int32)
        return torch.where(bits < 0, -(bits & 0x7FFF), bits)

    return (key(a) - key(b)).abs()


MANTISSA_BITS = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23}


def rope_scale(inputs, eps=EPS):
    """Per output element, |n * cos| + |rotate_half(n) * sin| from HF's own normed n (fp32): the size of
    the two products whose sum RoPE rounds. Where they cancel, one ulp of a product is many of the sum."""
    q, k, q_weight, k_weight, cos, sin = inputs
    scales = []
    for x, weight in ((q, q_weight), (k, k_weight)):
        norm = Qwen3RMSNorm(weight.shape[0], eps).to(device=weight.device, dtype=weight.dtype)
        with torch.no_grad():
            norm.weight.copy_(weight)
            n = norm(x).transpose(1, 2).float()
        c, s = cos.float().unsqueeze(1), sin.float().unsqueeze(1)
        scales.append((n * c).abs() + (torch.cat((-n[..., n.shape[-1] // 2:], n[..., :n.shape[-1] // 2]), -1)
                                       * s).abs())
    return scales


def assert_hf_bits(ours, hf, on_gpu, scale=None):
    """Bit for bit on the CPU. On the GPU, where torch and Triton sum a row's squares in different
    orders, rstd can differ in its last bit, which moves a rare rounded x_hat by one ulp, and RoPE's
    sum after it by up to two ulps of its products (``scale``: many ulps of the sum where the products
    cancel). So on the GPU: at least 99 % of the elements are HF's bits, and every element is within
    two ulps of ``scale`` (without one: two bf16 ulps of the result)."""
    assert ours.dtype == hf.dtype and ours.shape == hf.shape and ours.stride() == hf.stride()
    if not on_gpu:
        assert torch.equal(ours, hf)
        return
    assert (ours == hf).float().mean().item() > 0.99
    if scale is not None:
        ulp = torch.exp2(torch.floor(torch.log2(scale.clamp_min(1e-30))) - MANTISSA_BITS[ours.dtype])
        assert ((ours.float() - hf.float()).abs() <= 2 * ulp).all()
    elif ours.dtype == torch.bfloat16:
        assert ulp_distance_bf16(ours.cpu(), hf.cpu()).max().item() <= 2


# ------------------------------------------------------------------ numbers

@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_fp64_reference(dtype, device, on_gpu, small_tiles):
    inputs, grads = make_inputs(dtype, device, 0, *layout(on_gpu))
    outs, ours = run_ours(inputs, grads)
    assert [o.dtype for o in outs + ours] == [dtype] * 6
    assert outs[0].shape == grads[0].shape and ours[0].shape == inputs[0].shape
    assert_close_to_reference(outs, ours, *fp64_reference(inputs, grads), REL_TOL[dtype])


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_16bit_forward_is_hfs_bit_for_bit(dtype, device, on_gpu, small_tiles):
    """Every rounding of HF's ops (x_hat, weight * x_hat, both products, their sum) happens in the
    kernel too: the outputs are HF's bits, in HF's memory layout."""
    inputs, grads = make_inputs(dtype, device, 1, *layout(on_gpu))
    outs, _ = run_ours(inputs, grads)
    hf_outs, _ = run_hf(inputs)
    for ours, hf, scale in zip(outs, hf_outs, rope_scale(inputs)):
        assert_hf_bits(ours, hf, on_gpu, scale)


@pytest.mark.parametrize("mixed", ["fp32_weight", "fp32_cos"])
def test_mixed_dtypes_follow_hfs_promotion(mixed, device, on_gpu):
    """An fp32 weight (or fp32 cos/sin) with bf16 activations: HF's outputs are fp32, so are ours.
    x_hat is still rounded to bf16 first (fp32 weight), then the rest runs in fp32."""
    inputs, grads = make_inputs(torch.bfloat16, device, 2, *layout(on_gpu),
                                weight_dtype=torch.float32 if mixed == "fp32_weight" else None)
    if mixed == "fp32_cos":
        inputs = (*inputs[:4], inputs[4].float(), inputs[5].float())
        grads = [g.float() for g in grads]
    outs, ours = run_ours(inputs, grads)
    hf_outs, hf_grads = run_hf(inputs, grads)
    for out, hf, scale in zip(outs, hf_outs, rope_scale(inputs)):
        assert out.dtype == hf.dtype == torch.float32
        close = torch.isclose(out, hf, rtol=1e-6, atol=1e-6)  # fp32 math: FMA contraction at most
        # GPU: a rare x_hat one bf16 ulp from HF's (see assert_hf_bits), so its products move by
        # up to two bf16 ulps of their size, however much their sum cancels
        assert close.float().mean().item() > 0.999 if on_gpu else close.all()
        bf16_ulp = torch.exp2(torch.floor(torch.log2(scale.clamp_min(1e-30))) - 7)
        assert ((out - hf).abs() <= 2 * bf16_ulp + 1e-6 * scale).all()
    assert [g.dtype for g in ours] == [g.dtype for g in hf_grads]
    for name, got, hf in zip(NAMES[2:], ours, hf_grads):
        assert rel_err(got, hf) < 1e-2, name


def test_backward_matches_hf_autograd(device, on_gpu, small_tiles):
    """bf16: our gradients are about as close to the exact ones as HF's own autograd (which rounds
    every intermediate to bf16), and close to HF's."""
    inputs, grads = make_inputs(torch.bfloat16, device, 3, *layout(on_gpu))
    _, ours = run_ours(inputs, grads)
    _, hf = run_hf(inputs, grads)
    _, exact = fp64_reference(inputs, grads)
    for name, got, theirs, ref in zip(NAMES[2:], ours, hf, exact):
        assert got.dtype == theirs.dtype and got.shape == theirs.shape, name
        assert rel_err(got, ref) <= rel_err(theirs, ref) * 1.5 + 1e-3, name
        assert rel_err(got, theirs) < 2e-2, name


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_dw_uses_x_hat_rounded_to_the_input_dtype(dtype, device, monkeypatch):
    """HF's weight multiplies x_hat.to(input dtype), so its dW sums dn * rounded x_hat. With an fp32
    weight dW comes out in fp32, where the rounding is visible: ours is 10x closer to that order."""
    monkeypatch.setattr(qkr, "launch_configs", lambda head_dim, dtype: (TileConfig(8, 4), TileConfig(8, 4, 2)))
    inputs, grads = make_inputs(dtype, device, 4, 2, 8, 2, 2, 64, weight_dtype=torch.float32)
    _, (_, _, dq_weight, _) = run_ours(inputs, grads)
    q, _, q_weight, _, cos, sin = inputs
    x = q.double()
    x_hat = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS)
    g1, g2 = grads[0].double().transpose(1, 2).chunk(2, dim=-1)
    c1, c2 = cos.double().unsqueeze(2).chunk(2, dim=-1)
    s1, s2 = sin.double().unsqueeze(2).chunk(2, dim=-1)
    dn = torch.cat((g1 * c1 + g2 * s2, g2 * c2 - g1 * s1), dim=-1)  # RoPE's transpose, fp64
    hf_order, unrounded = ((dn * hat).sum((0, 1, 2)) for hat in (x_hat.to(dtype).double(), x_hat))
    gap, err = rel_err(unrounded, hf_order), rel_err(dq_weight, hf_order)
    assert err < gap / 10, f"dW error vs HF's order {err:.3g}; gap between the two orders {gap:.3g}"


def test_gradcheck_fp64(device):
    inputs, _ = make_inputs(torch.float64, device, 5, 2, 3, 2, 1, 16, cos_batch=1)
    leaves = [t.detach().requires_grad_() for t in inputs[:4]]
    assert torch.autograd.gradcheck(lambda *xs: qk_norm_rope(*xs, *inputs[4:], EPS), leaves, fast_mode=True)


@triton.jit
def round_to_bf16_kernel(X, Y, N: tl.constexpr, SOFTWARE_BF16: tl.constexpr):
    x = tl.load(X + tl.arange(0, N))
    tl.store(Y + tl.arange(0, N), _round(x, tl.bfloat16, SOFTWARE_BF16))


def test_bf16_rounding_matches_torch(device, on_gpu):
    """_round to bf16 is torch's round to nearest even: ties both ways, a carry into the exponent,
    overflow to inf, subnormals, inf and NaN; in integer arithmetic (the interpreter's path) and, on
    the GPU, by the hardware conversion too. The interpreter's own cast truncates (why the first exists)."""

    ties = [1 + 2**-8, 1 + 3 * 2**-8, -(1 + 2**-8), 1 + 2**-8 + 2**-20, 2 - 2**-9, 3.3895e38]
    special = [float("inf"), float("-inf"), float("nan"), 1e-40, -3e-39, 0.0, -0.0]
    x = torch.tensor(ties + special + torch.randn(51, generator=torch.Generator().manual_seed(6)).tolist(),
                     dtype=torch.float32, device=device)
    expected = x.to(torch.bfloat16).float()
    for software in ([True, False] if on_gpu else [True]):
        y = torch.empty_like(x)
        round_to_bf16_kernel[(1,)](x, y, N=64, SOFTWARE_BF16=software)
        torch.testing.assert_close(y, expected, rtol=0, atol=0, equal_nan=True)
    if not on_gpu:
        y = torch.empty_like(x)
        round_to_bf16_kernel[(1,)](x, y, N=64, SOFTWARE_BF16=False)
        assert not torch.equal(y[:4], expected[:4])


# ------------------------------------------------------------------ positions, heads, layouts

def packed_position_ids():
    """Two rows of three packed sequences each, in different orders, so that row b's cos/sin differ."""
    lengths = [(6, 10, 4), (10, 4, 6)]
    return torch.stack([torch.cat([torch.arange(n) for n in row]) for row in lengths])


@pytest.mark.parametrize("positions", ["packed", "batch1_broadcast"])
def test_cos_sin_of_hfs_rotary_embedding(positions, device, on_gpu):
    """cos/sin from a real Qwen3RotaryEmbedding: packed sequences (positions restart inside a row,
    differently per row) and one row of positions broadcast over the batch. The shipped configs."""
    config = tiny_qwen3_config()  # head_dim 16, 4 q heads, 2 kv heads
    position_ids = packed_position_ids() if positions == "packed" else torch.arange(20)[None]
    inputs, grads = make_inputs(torch.bfloat16, device, 7, 2, 20, config.num_attention_heads,
                                config.num_key_value_heads, config.head_dim)
    cos, sin = Qwen3RotaryEmbedding(config).to(device)(inputs[0], position_ids.to(device))
    assert cos.shape == (position_ids.shape[0], 20, config.head_dim) and cos.dtype == torch.bfloat16
    inputs = (*inputs[:4], cos, sin)
    outs, ours = run_ours(inputs, grads)
    hf_outs, hf_grads = run_hf(inputs, grads)
    for out, hf, scale in zip(outs, hf_outs, rope_scale(inputs)):
        assert_hf_bits(out, hf, on_gpu, scale)
    for name, got, hf in zip(NAMES[2:], ours, hf_grads):
        assert rel_err(got, hf) < 2e-2, name


@pytest.mark.parametrize("heads", [(4, 1), (3, 3)], ids=["gqa_4_1", "mha_3_3"])
def test_head_counts(heads, device, small_tiles):
    """GQA (4 q heads per kv head) and as many kv heads as q heads, contiguous q and k."""
    inputs, grads = make_inputs(torch.float32, device, 8, 2, 5, *heads, 16, fused_qkv=False)
    outs, ours = run_ours(inputs, grads)
    assert_close_to_reference(outs, ours, *fp64_reference(inputs, grads), REL_TOL[torch.float32])


def grad_layouts(grad):
    """One grad of q_out (B, H, T, D) in the layouts a backward can hand us."""
    batch, heads, seq_len, head_dim = grad.shape
    padded = torch.zeros(seq_len + 1, batch, heads, head_dim + 8, dtype=grad.dtype, device=grad.device)
    rows = padded[1:, :, :, 8:].permute(1, 2, 0, 3)  # rows scattered by strides, no dim in order
    rows.copy_(grad)
    spread = torch.zeros(seq_len, heads, batch, 2 * head_dim, dtype=grad.dtype, device=grad.device)
    strided = spread[..., 1::2].permute(2, 1, 0, 3)  # last dim stride 2: copied
    strided.copy_(grad)
    return {"sdpa_contiguous": grad.contiguous(), "hf_layout": grad.transpose(1, 2).contiguous().transpose(1, 2),
            "permuted_rows": rows, "last_dim_strided": strided}


def test_grads_in_any_layout(device):
    """Contiguous (B, H, T, D) as sdpa hands it, HF's (B, T, H, D) layout, rows scattered by strides,
    and a last dim with stride 2 (copied): the same bits every time."""
    inputs, grads = make_inputs(torch.bfloat16, device, 9, 2, 5, 4, 2, 32)
    q_out, k_out, rstd = qk_norm_rope_forward(*inputs, EPS)
    results = []
    layouts = [grad_layouts(g) for g in grads]
    for name in layouts[0]:
        dq_out, dk_out = layouts[0][name], layouts[1][name]
        assert torch.equal(dq_out, grads[0]) and torch.equal(dk_out, grads[1])
        with poisoned_allocations():
            results.append(qk_norm_rope_backward(dq_out, dk_out, *inputs, rstd))
    for result in results[1:]:
        assert all(torch.equal(a, b) for a, b in zip(result, results[0]))
    _, exact = fp64_reference(inputs, grads)
    assert all(rel_err(got, ref) < REL_TOL[torch.bfloat16] for got, ref in zip(results[0], exact))


def test_inputs_with_a_strided_last_dim_are_copied(device, small_tiles):
    """q, cos and both weights with a stride of 2 (or 0: an expanded weight) along head_dim."""
    inputs, grads = make_inputs(torch.float32, device, 10, 2, 5, 4, 2, 32)
    q, k, q_weight, k_weight, cos, sin = inputs
    wide = torch.zeros(*q.shape[:3], 64, device=device)
    wide[..., ::2] = q
    cos_wide = torch.zeros(*cos.shape[:2], 64, device=device)
    cos_wide[..., 1::2] = cos
    w_wide = torch.zeros(64, device=device)
    w_wide[1::2] = q_weight
    k_weight = k_weight[:1].expand(32)
    inputs = (q, k, q_weight, k_weight, cos, sin)
    strided = (wide[..., ::2], k, w_wide[1::2], k_weight, cos_wide[..., 1::2], sin)
    assert [t.stride(-1) for t in strided] == [2, 1, 2, 0, 2, 1]
    outs, ours = run_ours(strided, grads)
    assert_close_to_reference(outs, ours, *fp64_reference(inputs, grads), REL_TOL[torch.float32])


@pytest.mark.parametrize("shape", [(2, 5, 4, 2), (1, 5, 4, 2), (2, 1, 4, 2), (2, 5, 1, 1), (1, 1, 1, 1)],
                         ids=lambda s: "x".join(map(str, s)))
def test_output_strides_are_hfs(shape, device, on_gpu):
    """(B, H, T, D) views of (B, T, H, D) memory, as HF's elementwise ops leave them; with T or H of 1
    the contiguous strides HF gives. Batch-1 cos/sin too."""
    inputs, _ = make_inputs(torch.bfloat16, device, 11, *shape, 16, cos_batch=1)
    outs = qk_norm_rope_forward(*inputs, EPS)[:2]
    hf_outs, _ = run_hf(inputs)
    assert [o.stride() for o in outs] == [o.stride() for o in hf_outs]
    for out, hf, scale in zip(outs, hf_outs, rope_scale(inputs)):
        assert_hf_bits(out, hf, on_gpu, scale)


def test_backward_is_deterministic(device, on_gpu):
    """Per-program dW partials added in a fixed order (on the CPU: 3 programs' partials)."""
    inputs, grads = make_inputs(torch.bfloat16, device, 12, *layout(on_gpu))
    first, second = (run_ours(inputs, grads)[1] for _ in range(2))
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_frozen_weights_skip_dw(device, small_tiles):
    """Weights without grad (LoRA-style frozen norms): no dW computed, dq and dk as ever."""
    inputs, grads = make_inputs(torch.float32, device, 13, 2, 5, 4, 2, 32)
    outs, frozen = run_ours(inputs, grads, weight_grad=False)
    assert frozen[2] is None and frozen[3] is None
    ref_outs, ref_grads = fp64_reference(inputs, grads)
    assert_close_to_reference(outs, frozen[:2], ref_outs, ref_grads[:2], REL_TOL[torch.float32])


def test_launch_configs():
    """Qwen3's head_dim 128 in bf16: rmsnorm_triton's H200 configs for rows of 128 (16 rows a tile
    forward; 8 rows, 4 warps and 8 programs per SM backward); powers of two everywhere."""
    assert qkr.launch_configs(128, torch.bfloat16) == (TileConfig(16, 2), TileConfig(16, 4, 4))
    for head_dim in (16, 32, 64, 128, 256):
        for dtype in DTYPES:
            for config in qkr.launch_configs(head_dim, dtype):
                assert config.block_rows >= 1 and config.block_rows & (config.block_rows - 1) == 0


# ------------------------------------------------------------------ refusals

@pytest.mark.parametrize("fields", [(3, 4), (8, 3), (0, 4), (8, 4, 0), (8.0, 4)], ids=str)
def test_bad_tile_configs_are_refused(fields):
    with pytest.raises(ValueError, match="power|positive"):
        TileConfig(*fields)

def test_empty_inputs_give_empty_outputs(device):
    for batch, seq_len in ((0, 5), (2, 0)):
        inputs, grads = make_inputs(torch.float32, device, 14, batch, seq_len, 4, 2, 16)
        outs, ours = run_ours(inputs, grads)
        assert [tuple(o.shape) for o in outs] == [(batch, 4, seq_len, 16), (batch, 2, seq_len, 16)]
        assert ours[0].shape == inputs[0].shape and ours[1].shape == inputs[1].shape
        assert torch.equal(ours[2], torch.zeros(16, device=device)) and torch.equal(ours[3], ours[2])


def bad_inputs(device):
    """(name, change to (q, k, q_weight, k_weight, cos, sin, eps), error, message)."""
    inputs, _ = make_inputs(torch.float32, device, 15, 2, 5, 4, 2, 16)

    def with_(**changes):
        names = ("q", "k", "q_weight", "k_weight", "cos", "sin", "eps")
        values = dict(zip(names, (*inputs, EPS)))
        return [changes.get(n, values[n]) for n in names]

    q, k, q_weight, k_weight, cos, sin = inputs
    elsewhere = ReportsSecondDevice
    return [
        ("int_q", with_(q=q.int()), TypeError, "got q=torch.int32"),
        ("int_cos", with_(cos=cos.long()), TypeError, "got cos=torch.int64"),
        ("list_k", with_(k=k.tolist()), TypeError, "a tensor for k"),
        ("q_k_dtypes", with_(k=k.double()), TypeError, "q and k must have the same dtype"),
        ("weight_dtypes", with_(k_weight=k_weight.half()), TypeError, "q_weight and k_weight"),
        ("cos_sin_dtypes", with_(sin=sin.half()), TypeError, "cos and sin"),
        ("k_elsewhere", with_(k=k.as_subclass(elsewhere)), ValueError, "q is on cpu but k is on cpu:1"),
        ("weight_elsewhere", with_(q_weight=q_weight.as_subclass(elsewhere)), ValueError, "q_weight is on"),
        ("cos_elsewhere", with_(cos=cos.as_subclass(elsewhere)), ValueError, "cos is on"),
        ("q_3d", with_(q=q.flatten(2)), ValueError, "must be \\(batch, seq_len, heads, head_dim\\)"),
        ("k_batch", with_(k=k[:1]), ValueError, "must agree in batch, seq_len and head_dim"),
        ("k_seq_len", with_(k=k[:, :4]), ValueError, "must agree"),
        ("k_head_dim", with_(k=torch.zeros(2, 5, 2, 32, device=device)), ValueError, "must agree"),
        ("head_dim_48", with_(q=q.new_zeros(2, 5, 4, 48), k=k.new_zeros(2, 5, 2, 48)), ValueError,
         "power of two from 16 to 256"),
        ("head_dim_8", with_(q=q[..., :8], k=k[..., :8]), ValueError, "got 8"),
        ("head_dim_512", with_(q=q.new_zeros(1, 1, 1, 512), k=k.new_zeros(1, 1, 1, 512)), ValueError, "got 512"),
        ("q_weight_length", with_(q_weight=q_weight[:8]), ValueError, "q_weight must have shape \\(16,\\)"),
        ("k_weight_2d", with_(k_weight=k_weight[None]), ValueError, "k_weight must have shape"),
        ("cos_batch", with_(cos=torch.cat([cos, cos[:1]])), ValueError, "cos must have shape \\(2 or 1, 5, 16\\)"),
        ("cos_seq_len", with_(cos=cos[:, :4]), ValueError, "cos must have shape"),
        ("sin_head_dim", with_(sin=sin[..., :8]), ValueError, "sin must have shape"),
        ("sin_2d", with_(sin=sin[0]), ValueError, "sin must have shape"),
        ("eps_zero", with_(eps=0.0), ValueError, "eps"),
        ("eps_negative", with_(eps=-1e-6), ValueError, "eps"),
        ("eps_nan", with_(eps=float("nan")), ValueError, "eps"),
        ("eps_inf", with_(eps=float("inf")), ValueError, "eps"),
        ("eps_str", with_(eps="1e-6"), ValueError, "eps"),
        ("eps_none", with_(eps=None), ValueError, "eps"),
    ]


BAD = bad_inputs("cpu")


@pytest.mark.parametrize("case", range(len(BAD)), ids=[name for name, *_ in BAD])
def test_bad_inputs_are_refused(case, device):
    name, args, error, message = bad_inputs(device)[case]
    if device != "cpu":
        message = message.replace("cpu:1", "cuda:1").replace("q is on cpu", "q is on cuda:0")
    for call in (qk_norm_rope, qk_norm_rope_forward):
        with pytest.raises(error, match=message):
            call(*args)


def test_wrong_backend_device_is_refused(device, monkeypatch):
    inputs, _ = make_inputs(torch.float32, "cpu", 16, 1, 2, 2, 1, 16)
    if device == "cpu":  # interpreter: pretend we are on the CUDA backend
        monkeypatch.delenv("TRITON_INTERPRET")
    else:
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        inputs = [t.cuda() for t in inputs]
    with pytest.raises(ValueError, match="q is on .*: expected a (cuda|cpu) tensor"):
        qk_norm_rope(*inputs, EPS)


@pytest.mark.parametrize("which", ["cos", "sin"])
def test_cos_sin_with_grad_are_refused(which, device):
    inputs, _ = make_inputs(torch.float32, device, 17, 1, 2, 2, 1, 16)
    inputs = list(inputs)
    inputs[4 if which == "cos" else 5].requires_grad_()
    with pytest.raises(ValueError, match="cos and sin get no gradient"):
        qk_norm_rope(*inputs, EPS)


def test_double_backward_raises(device):
    inputs, _ = make_inputs(torch.float32, device, 18, 1, 2, 2, 1, 16)
    q = inputs[0].detach().requires_grad_()
    q_out, _ = qk_norm_rope(q, *inputs[1:], EPS)
    with pytest.raises(NotImplementedError, match="double backward"):
        torch.autograd.grad(q_out.sum(), q, create_graph=True)


def test_backward_refuses_mismatched_grads_and_rstd(device):
    inputs, grads = make_inputs(torch.float32, device, 19, 1, 3, 2, 1, 16)
    rstd = qk_norm_rope_forward(*inputs, EPS)[2]
    with pytest.raises(ValueError, match="grad of q_out has shape"):
        qk_norm_rope_backward(grads[0].transpose(1, 2), grads[1], *inputs, rstd)
    with pytest.raises(ValueError, match="grad of k_out has shape"):
        qk_norm_rope_backward(grads[0], grads[0], *inputs, rstd)
    with pytest.raises(ValueError, match="rstd has 5 values for 9 head rows"):
        qk_norm_rope_backward(*grads, *inputs, rstd[:5])


# ------------------------------------------------------------------ compiling for the GPU

COMPILE_SCRIPT = r"""
import json, re
import torch
import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource
import qk_norm_rope as qkr

pointers = {"RSTD": "*fp32", "DW_PARTIAL": "*fp32", "DQ_W": "*fp32", "DK_W": "*fp32"}
def compiled(kernel, constexprs, num_warps=4):
    signature = {n: "constexpr" if n in constexprs else "fp64" if n.startswith("eps")
                 else pointers.get(n, "*bf16") if n.isupper() else "i32" for n in kernel.arg_names}
    return triton.compile(ASTSource(kernel, signature, constexprs=constexprs),
                          target=GPUTarget("cuda", 90, 32),
                          options={"num_warps": num_warps, **qkr.COMPILE_OPTIONS})

fwd, bwd = qkr.launch_configs(128, torch.bfloat16)  # Qwen3's heads, as shipped
common = dict(HEAD_DIM=128, COMPUTE_DTYPE=tl.float32, SOFTWARE_BF16=False, ALIGN=16)
kernels = {
    "fwd": compiled(qkr.qk_norm_rope_fwd_kernel,
                    dict(common, BLOCK_ROWS=fwd.block_rows, NORM_DTYPE=tl.bfloat16), fwd.num_warps),
    "bwd": compiled(qkr.qk_norm_rope_bwd_kernel,
                    dict(common, BLOCK_ROWS=bwd.block_rows, COMPUTE_DW=True), bwd.num_warps),
    "reduce": compiled(qkr.dw_pair_reduce_kernel, dict(HEAD_DIM=128, BLOCK_PARTIALS=2048, BLOCK_COLS=4)),
}
print(json.dumps({name: {"fp64": re.findall(r"tensor<[^>]*xf64>", k.asm["ttir"]),
                         "cubin": len(k.asm["cubin"]),
                         "hardware_bf16": len(re.findall(r"cvt\.rn\.bf16", k.asm["ptx"]))}
                  for name, k in kernels.items()}))
"""


def test_kernels_compile_for_the_h200_with_fp64_eps():
    """The interpreter runs what a GPU compile would refuse, so the kernels are compiled here for
    sm_90 down to a cubin (Triton's own compiler and ptxas, no GPU needed), with eps as the fp64
    scalar torch.compile passes (Liger #1350): no fp64 math, and bf16 rounded by the hardware."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT / "snippets"), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", COMPILE_SCRIPT], capture_output=True, text=True, env=env,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(result) == {"fwd", "bwd", "reduce"}
    assert all(r["fp64"] == [] and r["cubin"] > 0 for r in result.values()), result
    assert result["fwd"]["hardware_bf16"] > 0, result


@pytest.mark.gpu
@pytest.mark.parametrize("dynamic", [False, True])
def test_compiles_fullgraph_and_matches_eager(dynamic):  # pragma: gpu only
    """Under torch.compile(fullgraph=True): no graph break, the eager bits forward and backward."""
    import torch._dynamo

    inputs, grads = make_inputs(torch.bfloat16, "cuda", 20, 2, 64, 8, 2, 128)

    def step(q, k, q_weight, k_weight, cos, sin):
        return qk_norm_rope(q, k, q_weight, k_weight, cos, sin, EPS)

    torch._dynamo.reset()
    assert torch._dynamo.explain(step)(*inputs).graph_break_count == 0
    results = []
    for fn in (step, torch.compile(step, fullgraph=True, dynamic=dynamic)):
        leaves = [t.detach().requires_grad_() for t in inputs[:4]]
        outs = fn(*leaves, *inputs[4:])
        results.append(list(outs) + list(torch.autograd.grad(outs, leaves, grads)))
    for eager, compiled in zip(*results):  # the same kernels, the same fp32 eps
        torch.testing.assert_close(compiled, eager, rtol=2**-8, atol=1e-3)
