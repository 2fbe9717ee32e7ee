"""Correctness of the fused SwiGLU kernels (snippets/swiglu.py).

CPU: Triton interpreter, small shapes (each interpreted program costs tens of ms, so
the shapes keep to a few programs per launch). CUDA: the same tests at Qwen3 sizes,
plus torch.compile and more than 2^31 elements.
"""
import json
import operator
import os
import pathlib
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
import triton
import triton.language as tl
from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP

import swiglu as sw
from helpers import REL_TOL, ReportsSecondDevice, poisoned_allocations, rel_err
from qwen3_configs import tiny_qwen3_config
from swiglu import (SwiGLUConfig, launch_config, qwen3_mlp_forward, swiglu, swiglu_backward,
                    swiglu_forward, swiglu_merged)

SNIPPETS = pathlib.Path(__file__).resolve().parents[1] / "snippets"
DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64]
QWEN3_WIDTHS = [3072, 6144, 9728, 12288, 17408, 25600]  # intermediate_size, 0.6B .. 32B


def random_inputs(shape, dtype, device, seed):
    """gate ~ N(0, 3^2) (silu's bend and both tails), up and d_act ~ N(0, 1)."""
    gen = torch.Generator().manual_seed(seed)
    gate = (torch.randn(shape, generator=gen, dtype=torch.float64) * 3).to(dtype).to(device)
    up = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype).to(device)
    d_act = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype).to(device)
    return gate, up, d_act


def fp64_reference(gate, up, d_act):
    """act, d_gate, d_up in fp64 from the exact formulas (no rounding anywhere)."""
    g, u, da = (t.detach().double() for t in (gate, up, d_act))
    s = torch.sigmoid(g)
    return g * s * u, da * u * s * (1 + g * (1 - s)), da * g * s


def hf_reference(gate, up, d_act):
    """HF's Qwen3MLP arithmetic: F.silu(gate) * up, and torch's autograd of it."""
    g, u = gate.detach().clone().requires_grad_(), up.detach().clone().requires_grad_()
    act = F.silu(g) * u
    return (act.detach(), *torch.autograd.grad(act, (g, u), d_act))


def run_triton(gate, up, d_act):
    """act, d_gate, d_up through swiglu's autograd, outputs NaN-poisoned. The inputs are
    used as given (views stay views): gradients are taken with autograd.grad."""
    gate, up = gate.detach().requires_grad_(), up.detach().requires_grad_()
    with poisoned_allocations():
        act = swiglu(gate, up)
        d_gate, d_up = torch.autograd.grad(act, (gate, up), d_act)
    return act.detach(), d_gate, d_up


def ulp_distance(a, b):
    """Distance in units in the last place of a's dtype (a monotone integer map of the bits)."""
    bits = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
    sign = 1 << (8 * a.element_size() - 1)

    def key(t):
        t = t.contiguous().view(bits).to(torch.int64)
        return torch.where(t < 0, -(t & (sign - 1)), t)

    return (key(a) - key(b.to(a.dtype))).abs()


def assert_matches_hf_bits(ours, hf, on_gpu, what):
    """16-bit: at most 2 ulps from HF's, and all but a few elements identical.

    Same cast order, same division: what is left is exp. On the GPU the kernels call
    libdevice's expf as torch does, so (nearly) every element is identical. The CPU
    interpreter uses numpy's exp, torch's CPU kernels Sleef's: they differ in the last
    fp32 bit now and then, which moves the 16-bit rounding of silu (or of the product)
    when it lies that close to a rounding boundary: measured 0 (bf16) and 2e-4 (fp16)
    of 2^20 elements, at most 2 ulps (fp16: one ulp of silu times up)."""
    assert ours.dtype == hf.dtype and ours.shape == hf.shape, what
    distance = ulp_distance(ours, hf)
    identical = (distance == 0).double().mean().item()
    assert distance.max().item() <= 2, (what, distance.max().item())
    assert identical >= (1 - 1e-5 if on_gpu else 1 - 1e-3), (what, identical)


def shapes(on_gpu):
    if on_gpu:
        return [(4, 2048, 3072), (2, 1000, 9728), (3, 512, 25600), (17, 300), (1, 7)]
    # 300: one masked block of 512; 7 and 100: narrower than a block; 2048: unmasked
    return [(2, 3, 300), (5, 7), (1, 100), (2, 2048)]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_fp64_reference(dtype, device, on_gpu):
    for i, shape in enumerate(shapes(on_gpu)):
        gate, up, d_act = random_inputs(shape, dtype, device, seed=i)
        act, d_gate, d_up = run_triton(gate, up, d_act)
        for name, got, ref in zip(("act", "d_gate", "d_up"), (act, d_gate, d_up),
                                  fp64_reference(gate, up, d_act)):
            assert got.dtype == dtype and got.shape == gate.shape, (shape, name)
            assert got.is_contiguous(), (shape, name)
            assert rel_err(got, ref) < REL_TOL[dtype], (shape, name)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_16bit_forward_and_backward_match_hf_bits(dtype, device, on_gpu):
    """act and d_up are one rounding of the number HF rounds; d_gate is torch's
    silu_backward of d_act * up rounded to the dtype, as HF's autograd computes it."""
    shape = (8, 1024, 9728) if on_gpu else (24, 300)
    gate, up, d_act = random_inputs(shape, dtype, device, seed=11)
    ours = run_triton(gate, up, d_act)
    for name, got, ref in zip(("act", "d_gate", "d_up"), ours, hf_reference(gate, up, d_act)):
        assert_matches_hf_bits(got, ref, on_gpu, name)


def test_fp32_matches_hf(device, on_gpu):
    """fp32: no 16-bit rounding hides exp's last bit. On the GPU (libdevice's expf, as
    torch's) nearly all identical; on CPU within fp32 rounding of HF's."""
    shape = (8, 1024, 3072) if on_gpu else (8, 300)
    gate, up, d_act = random_inputs(shape, torch.float32, device, seed=12)
    for name, got, ref in zip(("act", "d_gate", "d_up"), run_triton(gate, up, d_act),
                              hf_reference(gate, up, d_act)):
        assert rel_err(got, ref) < 1e-6, name
        if on_gpu:
            assert (got == ref).double().mean().item() >= 1 - 1e-5, name


def test_backward_rounds_where_hf_does(device):
    """fp16 (the interpreter rounds fp16 like the GPU): d_up uses silu rounded to fp16
    (the forward's value), d_gate uses d_act * up rounded to fp16. Leaving either
    unrounded moves many elements by an ulp; here nearly all agree with HF."""
    gate, up, d_act = random_inputs((16, 256), torch.float16, device, seed=13)
    _, d_gate, d_up = run_triton(gate, up, d_act)
    _, hf_d_gate, hf_d_up = hf_reference(gate, up, d_act)
    s = torch.sigmoid(gate.float())
    unrounded_d_up = (d_act.float() * gate.float() * s).half()
    unrounded_d_gate = (d_act.float() * up.float() * s * (1 + gate.float() * (1 - s))).half()
    for got, hf, unrounded in ((d_up, hf_d_up, unrounded_d_up), (d_gate, hf_d_gate, unrounded_d_gate)):
        assert (unrounded != hf).double().mean().item() > 0.05  # the test can tell them apart
        assert (got == hf).double().mean().item() > 0.999


def test_gradcheck_fp64(device):
    gate, up, _ = random_inputs((2, 3, 10), torch.float64, device, seed=14)
    gate_up = torch.cat([gate, up], -1)
    assert torch.autograd.gradcheck(swiglu, (gate.requires_grad_(), up.requires_grad_()),
                                    fast_mode=True)
    assert torch.autograd.gradcheck(swiglu_merged, (gate_up.requires_grad_(),), fast_mode=True)


@pytest.mark.parametrize("n_cols, config", [(7, SwiGLUConfig(4, 4, 1)), (100, SwiGLUConfig(4, 32, 2)),
                                            (300, SwiGLUConfig(4, 64, 4))])
def test_every_column_block_is_written(n_cols, config, device):
    """Widths that are not a multiple of the block, in several column blocks (the last one
    masked) and a row tile with rows past the end: every output element is written (NaN
    otherwise), each with the value the one-block default launch computes."""
    gate, up, d_act = random_inputs((3, n_cols), torch.bfloat16, device, seed=n_cols)
    assert triton.cdiv(n_cols, config.block_cols) >= 2 and n_cols % config.block_cols
    with poisoned_allocations():
        act = swiglu_forward(gate, up, config=config)
        d_gate, d_up = swiglu_backward(d_act, gate, up, config=config)
        d_gate_up = swiglu_backward(d_act, gate, up, merged=True, config=config)
    assert torch.equal(act, swiglu_forward(gate, up))
    default = swiglu_backward(d_act, gate, up)
    assert torch.equal(d_gate, default[0]) and torch.equal(d_up, default[1])
    assert torch.equal(d_gate_up, torch.cat(default, -1))
    ref = fp64_reference(gate, up, d_act)
    for got, want in zip((act, d_gate, d_up), ref):
        assert rel_err(got, want) < REL_TOL[torch.bfloat16]


def test_merged_gate_up_views_and_swiglu_merged(device, on_gpu):
    """gate and up as views of one (B, T, 2I) GEMM output (row stride 2I): no copy, the
    same bits as contiguous inputs. swiglu_merged's gradient is one contiguous (B, T, 2I)
    tensor [d_gate | d_up]."""
    b, t, i = (2, 512, 3072) if on_gpu else (2, 3, 300)
    gate_up, _, _ = random_inputs((b, t, 2 * i), torch.bfloat16, device, seed=15)
    _, _, d_act = random_inputs((b, t, i), torch.bfloat16, device, seed=16)
    gate, up = gate_up[..., :i], gate_up[..., i:]
    assert gate.stride() == up.stride() == (t * 2 * i, 2 * i, 1)
    on_views = run_triton(gate, up, d_act)
    on_copies = run_triton(gate.contiguous(), up.contiguous(), d_act)
    for got, want in zip(on_views, on_copies):
        assert torch.equal(got, want)

    leaf = gate_up.clone().requires_grad_()
    with poisoned_allocations():
        act = swiglu_merged(leaf)
        (d_gate_up,) = torch.autograd.grad(act, leaf, d_act)
    assert torch.equal(act, on_copies[0])
    assert d_gate_up.shape == (b, t, 2 * i) and d_gate_up.is_contiguous()
    assert torch.equal(d_gate_up, torch.cat(on_copies[1:], -1))


def test_strided_and_mixed_layouts(device):
    """Each tensor with its own row strides: gate contiguous, up a view with a row stride
    of 2I, d_act a transposed view (two row dims), and a gate whose last dim is strided
    (copied first). The same bits as contiguous inputs."""
    i = 300
    gate, _, _ = random_inputs((3, 4, i), torch.bfloat16, device, seed=17)
    wide, _, _ = random_inputs((3, 4, 2 * i), torch.bfloat16, device, seed=18)
    d_act_t, _, _ = random_inputs((4, 3, i), torch.bfloat16, device, seed=19)
    up, d_act = wide[..., i:], d_act_t.transpose(0, 1)
    assert not up.is_contiguous() and not d_act.is_contiguous()
    want = run_triton(gate, up.contiguous(), d_act.contiguous())
    for got, name in ((run_triton(gate, up, d_act), "row strides"),
                      (run_triton(gate.transpose(-1, -2).contiguous().transpose(-1, -2), up, d_act),
                       "strided last dim")):
        for g, w in zip(got, want):
            assert torch.equal(g, w), name


def test_deterministic(device, on_gpu):
    shape = (16384, 3072) if on_gpu else (16, 300)
    gate, up, d_act = random_inputs(shape, torch.bfloat16, device, seed=20)
    first, second = run_triton(gate, up, d_act), run_triton(gate, up, d_act)
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_saves_only_gate_and_up_and_leaves_d_act_alone(device):
    gate, up, d_act = random_inputs((4, 64), torch.float32, device, seed=21)
    gate.requires_grad_(), up.requires_grad_()
    act = swiglu(gate, up)
    saved = act.grad_fn.saved_tensors
    assert len(saved) == 2 and saved[0] is gate and saved[1] is up
    d_act_before = d_act.clone()
    act.backward(d_act)
    assert torch.equal(d_act, d_act_before)


# ------------------------------------------------------------------ Qwen3MLP

@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32], ids=str)
def test_qwen3_mlp_forward_matches_hf(dtype, device, on_gpu):
    """qwen3_mlp_forward(mlp, x) on HF's own Qwen3MLP: same output and gradients (x and the
    three weights) as mlp(x), and the module is untouched: the same Parameter objects, the
    same state_dict keys, nothing added."""
    torch.manual_seed(0)
    size = dict(hidden_size=1024, intermediate_size=3072) if on_gpu else dict(intermediate_size=300)
    mlp = Qwen3MLP(tiny_qwen3_config(**size)).to(device=device, dtype=dtype)
    keys, params = list(mlp.state_dict()), list(mlp.parameters())
    x = torch.randn(2, 16, mlp.hidden_size, device=device).to(dtype)
    dy = torch.randn(2, 16, mlp.hidden_size, device=device).to(dtype)
    results = []
    for forward in (mlp, lambda x: qwen3_mlp_forward(mlp, x)):
        x_ = x.clone().requires_grad_()
        y = forward(x_)
        results.append([y, *torch.autograd.grad(y, [x_, *params], dy)])
    assert list(mlp.state_dict()) == keys == ["gate_proj.weight", "up_proj.weight", "down_proj.weight"]
    assert all(a is b for a, b in zip(mlp.parameters(), params)) and len(list(mlp.parameters())) == 3
    for name, hf, ours in zip(["y", "dx", "d_gate_w", "d_up_w", "d_down_w"], *results):
        assert ours.dtype == hf.dtype and ours.shape == hf.shape, name
        # the same act (up to the rare exp-bit differences above), then the same Linear kernels
        assert rel_err(ours, hf) < (1e-3 if dtype == torch.bfloat16 else 1e-6), name
        if dtype == torch.bfloat16:
            assert (ours == hf).double().mean().item() > 0.99, name


def test_qwen3_mlp_forward_refuses_other_activations(device):
    mlp = Qwen3MLP(tiny_qwen3_config(hidden_act="gelu")).to(device)
    with pytest.raises(ValueError, match="hidden_act is 'gelu'"):
        qwen3_mlp_forward(mlp, torch.randn(2, mlp.hidden_size, device=device))


# ------------------------------------------------------------------ errors and edge cases

def _inputs(device, **changes):
    shapes = {"gate": (2, 8), "up": (2, 8), "d_act": (2, 8)}
    tensors = {name: torch.randn(shape, device=device) for name, shape in shapes.items()}
    for name, change in changes.items():
        tensors[name] = change(tensors[name])
    return tensors["gate"], tensors["up"], tensors["d_act"]


@pytest.mark.parametrize("changes, error, message", [
    (dict(gate=lambda t: t.to(torch.int32)), TypeError, "gate is torch.int32"),
    (dict(up=lambda t: t.to(torch.int64)), TypeError, "up is torch.int64"),
    (dict(up=lambda t: t.to(torch.complex64)), TypeError, "up is torch.complex64"),
    (dict(up=lambda t: t.to(torch.bfloat16)), TypeError, "up is torch.bfloat16 but gate is torch.float32"),
    (dict(d_act=lambda t: t.double()), TypeError, "d_act is torch.float64 but gate"),
    (dict(up=lambda t: t.tolist()), TypeError, "up is a list"),
    (dict(up=lambda t: t[:, :7]), ValueError, r"up has shape \(2, 7\) but gate has \(2, 8\)"),
    (dict(up=lambda t: t.reshape(16)), ValueError, "up has shape"),
    (dict(d_act=lambda t: t[:1]), ValueError, r"d_act has shape \(1, 8\)"),
    (dict(gate=lambda t: t[0, 0], up=lambda t: t[0, 0]), ValueError, "0-dim"),
    (dict(up=lambda t: t.as_subclass(ReportsSecondDevice)), ValueError, "up is on .*:1 but gate is on"),
    (dict(d_act=lambda t: t.as_subclass(ReportsSecondDevice)), ValueError, "d_act is on .*:1"),
])
def test_bad_input_is_rejected(changes, error, message, device):
    gate, up, d_act = _inputs(device, **changes)
    direction = "backward" if "d_act" in changes else "forward"
    with pytest.raises(error, match=message):
        if direction == "forward":
            swiglu(gate, up)
        else:
            swiglu_backward(d_act, gate, up)


def test_wrong_device_is_rejected(device, monkeypatch):
    gate, up, _ = _inputs("cpu")
    if device == "cpu":  # interpreter: pretend we are on the CUDA backend
        monkeypatch.delenv("TRITON_INTERPRET")
        with pytest.raises(ValueError, match="gate is on cpu.*expected a cuda tensor"):
            swiglu(gate, up)
    else:
        with pytest.raises(ValueError, match="up is on cpu.*expected a cuda tensor"):
            swiglu(gate.cuda(), up)
        monkeypatch.setenv("TRITON_INTERPRET", "1")
        with pytest.raises(ValueError, match="expected a cpu tensor"):
            swiglu(gate.cuda(), up.cuda())


def test_merged_input_is_checked(device):
    with pytest.raises(ValueError, match="last dim must be even"):
        swiglu_merged(torch.randn(2, 7, device=device))
    with pytest.raises(TypeError, match="at least one dimension"):
        swiglu_merged(torch.tensor(1.0, device=device))
    with pytest.raises(TypeError, match="int64"):
        swiglu_merged(torch.ones(2, 8, dtype=torch.int64, device=device))


@pytest.mark.parametrize("shape", [(0, 3, 64), (4, 0), (0,)])
def test_empty_tensors_give_empty_results(shape, device):
    gate, up = (torch.randn(shape, device=device, requires_grad=True) for _ in range(2))
    act = swiglu(gate, up)
    assert act.shape == shape
    act.sum().backward()
    assert gate.grad.shape == shape and up.grad.shape == shape
    gate_up = torch.randn((*shape[:-1], 2 * shape[-1]), device=device, requires_grad=True)
    swiglu_merged(gate_up).sum().backward()
    assert gate_up.grad.shape == gate_up.shape


def test_double_backward_raises(device):
    gate, up = (torch.randn(3, 32, device=device, requires_grad=True) for _ in range(2))
    with pytest.raises(NotImplementedError, match="double backward"):
        torch.autograd.grad(swiglu(gate, up).sum(), gate, create_graph=True)
    gate_up = torch.randn(3, 64, device=device, requires_grad=True)
    with pytest.raises(NotImplementedError, match="double backward"):
        torch.autograd.grad(swiglu_merged(gate_up).sum(), gate_up, create_graph=True)


@pytest.mark.parametrize("config, error, message", [
    ((2, 64, 4), TypeError, "SwiGLUConfig"),
    (SwiGLUConfig(3, 64, 4), ValueError, "powers of two"),
    (SwiGLUConfig(2, 48, 4), ValueError, "powers of two"),
    (SwiGLUConfig(2, 64, 0), ValueError, "num_warps"),
    (SwiGLUConfig(2, 64, 64), ValueError, "num_warps"),
    (SwiGLUConfig(2048, 1024, 8), ValueError, "2\\^20"),
    (SwiGLUConfig(1, 1, 4), ValueError, "column blocks"),
])
def test_bad_config_is_rejected(config, error, message, device):
    gate, up = torch.randn(2, 70000, device=device), torch.randn(2, 70000, device=device)
    with pytest.raises(error, match=message):
        swiglu_forward(gate, up, config=config)


# ------------------------------------------------------------------ launch configs

def test_launch_config_of_qwen3_widths():
    """Qwen3's intermediate sizes split into whole blocks (no masked lanes); the tile is
    8 KiB of each input (4096 16-bit values, 2048 fp32) and every thread loads two 16-byte
    vectors of each input."""
    expected = {3072: (4, 1024), 6144: (2, 2048), 9728: (8, 512), 12288: (1, 4096),
                17408: (4, 1024), 25600: (4, 1024)}
    for width in QWEN3_WIDTHS:
        for dtype in DTYPES:
            config = launch_config(width, dtype.itemsize)
            sw.check_config(config, width)
            assert width % config.block_cols == 0, (width, dtype)
            assert config.block_rows * config.block_cols == sw.TILE_BYTES // dtype.itemsize
            assert config.block_rows * config.block_cols // (32 * config.num_warps) == 32 // dtype.itemsize
        config = launch_config(width, 2)
        assert (config.block_rows, config.block_cols, config.num_warps) == (*expected[width], 8)
    # widths without a power-of-two divisor of MIN_BLOCK_COLS: one masked block per tile
    assert launch_config(300, 2) == SwiGLUConfig(8, 512, 8)
    assert launch_config(7, 4) == SwiGLUConfig(256, 8, 8)
    assert launch_config(16383, 2) == SwiGLUConfig(1, 4096, 8)  # 4 blocks, the last masked
    assert launch_config(128, 8) == SwiGLUConfig(8, 128, 8)  # narrower than MIN_BLOCK_COLS


def test_launch_plan_traces_under_torch_compile(device):
    """torch.compile (fullgraph; dynamic=True makes the row count symbolic) traces the
    checks and the launch plan, and plans what eager plans: the width stays a number
    (operator.index), so the config is Python arithmetic on it. (The kernels themselves
    run under torch.compile on the GPU: test_compiles_fullgraph_and_matches_eager.)"""
    names = ["n_rows", "n_cols", "size1", "size2", "g_stride0", "g_stride1", "g_stride2",
             "u_stride0", "u_stride1", "u_stride2", "BLOCK_ROWS", "BLOCK_COLS", "ALIGN", "num_warps"]

    def plan(gate, up):
        sw.check_inputs(gate, up)
        grid, args = sw._plan({"g": gate, "u": up}, operator.index(gate.shape[-1]), None)
        return torch.tensor([*grid] + [args[name] for name in names])

    torch._dynamo.reset()
    compiled = torch.compile(plan, fullgraph=True, backend="eager", dynamic=True)
    for rows in (3, 40):
        gate_up = torch.zeros(rows, 2, 600, device=device, dtype=torch.bfloat16)
        gate, up = gate_up[..., :300], gate_up[..., 300:]
        assert compiled(gate, up).tolist() == plan(gate, up).tolist()


@triton.jit
def _rounding_kernel(X, Y, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offsets, mask=offsets < n)
    tl.store(Y + offsets, sw._rounded(x, tl.bfloat16, True), mask=offsets < n)


def test_interpreter_rounding_is_torchs_round_to_nearest_even(device):
    """_rounded's bit rounding (the interpreter's stand-in for the GPU's cvt.rn.bf16.f32)
    equals torch's fp32 -> bf16 cast: random bit patterns, exact ties with even and odd
    last bits, carries into the exponent, the largest floats (rounding to inf), inf, NaN."""
    gen = torch.Generator().manual_seed(22)
    bits = torch.randint(-2**31, 2**31, (4096,), generator=gen, dtype=torch.int64)
    special = [0x3F808000, 0x3F818000, 0x3F80FFFF, 0x3FFF8000, 0x7F7FFFFF, 0x7F7F7FFF,
               0x7F7F8000, 0x7F800000, 0x00000000, 0x80000000, 0x3F7FFFFF, 0x00818000]
    bits = torch.cat([bits, torch.tensor(special), torch.tensor(special) | (1 << 31)])
    x = bits.to(torch.int32).view(torch.float32)
    x = torch.cat([x, torch.tensor([float("nan")])])
    x = x[~((x.abs() < torch.finfo(torch.float32).tiny) & (x != 0))].to(device)  # no subnormals
    y = torch.empty_like(x)
    _rounding_kernel[(triton.cdiv(x.numel(), 8192),)](x, y, x.numel(), BLOCK=8192)
    want = x.to(torch.bfloat16).float()
    assert torch.equal(y.isnan(), want.isnan())
    assert torch.equal(y[~want.isnan()], want[~want.isnan()])


TTIR_SCRIPT = r"""
import json, re
from triton._C.libtriton import ir
from triton.backends.compiler import GPUTarget
from triton.compiler.compiler import ASTSource, make_backend
import triton.language as tl
import swiglu as sw

target = GPUTarget("cuda", 90, 32)
backend = make_backend(target)
options = backend.parse_options({})
found = {}
for kernel in (sw.swiglu_fwd_kernel, sw.swiglu_bwd_kernel):
    constexprs = dict(BLOCK_ROWS=4, BLOCK_COLS=512, COMPUTE_DTYPE=tl.float32, ALIGN=16,
                      INTERPRETER=False)
    signature = {n: "constexpr" if n in constexprs else "*bf16" if n.isupper() else "i32"
                 for n in kernel.arg_names}
    context = ir.context()
    ir.load_dialects(context)
    backend.load_dialects(context)
    text = str(ASTSource(kernel, signature, constexprs=constexprs).make_ir(
        target, options, backend.get_codegen_implementation(options),
        backend.get_module_map(), context))
    found[kernel.__name__] = dict(
        calls=sorted(set(re.findall(r'symbol = "(\w+)"', text))),
        exp=len(re.findall(r"math\.exp\b", text)),
        precise_div=len(re.findall(r"tt\.precise_divf", text)),
        approximate_div=len(re.findall(r"arith\.divf", text)),
        fp64=len(re.findall(r"f64", text)),
        # the row part of every address: a (BLOCK_ROWS x 1) pointer plus 64-bit offsets
        row_offsets=sorted(set(re.findall(r"tt\.addptr [^:]*: tensor<4x1x!tt\.ptr<bf16>>, "
                                          r"tensor<4x1x(i\d+)>", text))))
print(json.dumps(found))
"""


def test_gpu_kernels_compile_to_torchs_exp_and_ieee_divisions():
    """What the GPU runs, checked without one: each bf16 kernel's Triton IR (built in a
    subprocess, outside the interpreter) calls libdevice's expf (not tl.exp's ex2.approx),
    divides with IEEE rounding (precise_divf: silu forward; silu and s backward), has no
    approximate fp32 division and no fp64 value, and adds 64-bit row offsets to its
    pointers (rows past element 2^31; test_more_than_2_pow_31_elements runs them)."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(SNIPPETS), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", TTIR_SCRIPT], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    for name, divisions in (("swiglu_fwd_kernel", 1), ("swiglu_bwd_kernel", 2)):
        assert found[name] == dict(calls=["__nv_expf"], exp=0, precise_div=divisions,
                                   approximate_div=0, fp64=0, row_offsets=["i64"]), (name, found[name])


# ------------------------------------------------------------------ GPU only

def check_rows_of_a_large_input(n_rows, n_cols, device, n_checked=64):
    """bf16 forward + merged backward on a (n_rows, 2 * n_cols) gate_up; checks act and
    d_gate_up of the first and last n_checked rows against fp64 and HF (NaN-poisoned)."""
    gen = torch.Generator(device=device).manual_seed(23)
    gate_up = torch.randn(n_rows, 2 * n_cols, generator=gen, device=device, dtype=torch.bfloat16)
    d_act = torch.randn(n_rows, n_cols, generator=gen, device=device, dtype=torch.bfloat16)
    gate, up = gate_up[:, :n_cols], gate_up[:, n_cols:]
    with poisoned_allocations():
        act = swiglu_forward(gate, up)
        d_gate_up = swiglu_backward(d_act, gate, up, merged=True)
    for rows in (slice(0, n_checked), slice(n_rows - n_checked, n_rows)):
        ref = fp64_reference(gate[rows], up[rows], d_act[rows])
        got = (act[rows], d_gate_up[rows, :n_cols], d_gate_up[rows, n_cols:])
        for name, g, want, hf in zip(("act", "d_gate", "d_up"), got, ref,
                                     hf_reference(gate[rows], up[rows], d_act[rows])):
            assert rel_err(g, want) < REL_TOL[torch.bfloat16], (rows, name)
            assert ulp_distance(g, hf).max().item() <= 2, (rows, name)


def test_large_input_row_check_on_a_small_input(device):
    """The checker of the GPU-only 2^31 test, on a small input (so a CPU run exercises it)."""
    check_rows_of_a_large_input(16, 300, device, n_checked=4)


@pytest.mark.gpu
def test_more_than_2_pow_31_elements():  # pragma: gpu only, ~30 GiB of GPU memory
    """Qwen3-32B's width, rows past element 2^31 of act (and of the merged gate_up and its
    gradient): 64-bit offsets put them where they belong."""
    n_cols = 25600
    n_rows = -(-2**31 // n_cols) + 64
    assert (n_rows - 64) * n_cols >= 2**31
    try:
        check_rows_of_a_large_input(n_rows, n_cols, "cuda")
    finally:
        torch.cuda.empty_cache()


def graph_breaks(fn, *args):
    torch._dynamo.reset()
    return torch._dynamo.explain(fn)(*args).graph_break_count


@pytest.mark.gpu
@pytest.mark.parametrize("dynamic", [False, True])
def test_compiles_fullgraph_and_matches_eager(dynamic):  # pragma: gpu only
    """swiglu, swiglu_merged and qwen3_mlp_forward under torch.compile(fullgraph=True): no
    graph break, and the same kernels give the same bits as eager."""
    gate_up, _, d_act = random_inputs((4, 256, 2 * 3072), torch.bfloat16, "cuda", seed=24)
    d_act = d_act[..., :3072].contiguous()
    gate, up = gate_up[..., :3072].contiguous(), gate_up[..., 3072:].contiguous()
    mlp = Qwen3MLP(tiny_qwen3_config(hidden_size=1024, intermediate_size=3072)).cuda().to(torch.bfloat16)
    x = torch.randn(4, 256, 1024, device="cuda").to(torch.bfloat16)
    cases = [(swiglu, (gate, up), d_act), (swiglu_merged, (gate_up,), d_act),
             (lambda x: qwen3_mlp_forward(mlp, x), (x,), torch.randn_like(x))]
    for fn, inputs, grad in cases:
        assert graph_breaks(fn, *inputs) == 0
        results = []
        torch._dynamo.reset()
        for run in (fn, torch.compile(fn, fullgraph=True, dynamic=dynamic)):
            leaves = [t.clone().requires_grad_() for t in inputs]
            out = run(*leaves)
            results.append([out, *torch.autograd.grad(out, leaves, grad)])
        for eager, compiled in zip(*results):
            if fn is cases[2][0]:  # Inductor may fuse the Linear layers' epilogues differently
                torch.testing.assert_close(compiled, eager, rtol=2**-7, atol=1e-3)
            else:
                assert torch.equal(compiled, eager), (getattr(fn, "__name__", fn), dynamic)
