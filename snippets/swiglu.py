# SPDX-License-Identifier: Apache-2.0
"""Qwen3's SwiGLU, silu(gate) * up, fused in Triton, forward and backward.

HF's Qwen3MLP computes ``down_proj(act_fn(gate_proj(x)) * up_proj(x))`` with
act_fn = SiLU: two elementwise kernels forward (silu, mul) and three backward,
and autograd keeps gate, silu(gate) and up. Here one kernel each way:

* Forward reads gate and up once and writes act once.
* Backward reads d_act, gate and up once and writes d_gate and d_up once. It
  recomputes silu from gate, so only gate and up are saved.

Arithmetic, in HF's cast order (torch's eager kernels): silu(g) = g / (1 + exp(-g))
in fp32 (fp64 for fp64 inputs) with an IEEE division, rounded to the input dtype;
act = that * up in fp32, rounded once, as torch multiplies 16-bit tensors. The
backward rounds where HF's autograd does: d_up = d_act * silu(g), silu rounded as
in the forward; d_gate = silu_backward(d_act * up rounded to the dtype, g) =
d * s * (1 + g * (1 - s)), s = 1 / (1 + exp(-g)), in torch's order of operations.

Where a bit can still differ from torch: exp. On the GPU the kernels call
libdevice's expf, the function torch's CUDA kernels call: the same bits expected.
The CPU interpreter has no libdevice and uses numpy's exp, torch's CPU kernels
Sleef's; the two differ in the last fp32 bit now and then, which moves a 16-bit
result only when it lies that close to a rounding boundary. Measured on 2^20
elements: no bf16 act or d_up differs, 26 bf16 d_gate, 100 to 200 fp16 values of
each; none by more than 2 ulps. The interpreter also truncates fp32 -> bf16 casts
(the GPU rounds to nearest even): under it, ``_rounded`` rounds by the bits.

Cost: the backward spends two IEEE divisions and an expf per element. If the H200
finds it compute-bound, a faster reciprocal for s gives up d_gate's equality with
HF's bits (the tests say by how much), not its accuracy.

Layouts: leading dims are folded into rows with strides (rows_layout of
rmsnorm_triton.py), so gate and up may be views of one merged (.., 2I) gate_up
GEMM output, and d_act may be strided; a tensor whose last dim is not contiguous
is copied first. Outputs are contiguous. ``swiglu_merged(gate_up)`` takes the
merged tensor itself and its backward writes one contiguous (.., 2I) gradient,
d_gate in [.., :I] and d_up in [.., I:]. ``swiglu(gate, up)`` on views of a
merged buffer returns two contiguous gradients, which autograd then copies into
the (.., 2I) gradient of the buffer (one more pass over it).

Grid: programs over (row tiles, column blocks), a BLOCK_ROWS x BLOCK_COLS tile
each (``launch_config``). Offsets are 64-bit. Run on CPU under the interpreter
with TRITON_INTERPRET=1 set before importing triton.
"""
import dataclasses
import operator

# --8<-- [start:imports]
import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from rmsnorm_config import cached_outside_compile
from rmsnorm_triton import (_FLOAT_DTYPES, COMPILE_OPTIONS, _interpreted, _load_tile,
                            _power_of_two, _row_offsets, check_backend_device,
                            compute_dtype, row_alignment, rows_layout)
# --8<-- [end:imports]


# --8<-- [start:math]
@triton.jit
def _exp(x, INTERPRETER: tl.constexpr):
    # torch's silu calls expf (exp for fp64): libdevice's is the same function;
    # tl.exp would be ex2.approx, a few ulps off. The interpreter has no libdevice.
    if INTERPRETER:
        return tl.exp(x)
    else:
        return libdevice.exp(x)  # pragma: gpu only


@triton.jit
def _div_rn(a, b):
    # An IEEE division, as torch's: Triton's fp32 '/' is an approximate one.
    if b.dtype == tl.float32:
        return tl.math.div_rn(a, b)
    else:
        return a / b  # fp64: IEEE already


@triton.jit
def _rounded(x, DTYPE: tl.constexpr, INTERPRETER: tl.constexpr):
    # x rounded to DTYPE (nearest even), kept in x's dtype: what torch's casts do.
    if INTERPRETER and DTYPE == tl.bfloat16:
        # The interpreter's fp32 -> bf16 cast truncates: round the bits (ties to
        # even; NaN stays NaN), after which the cast is exact.
        bits = x.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        return tl.where(x == x, bits.to(tl.float32, bitcast=True), x)
    else:
        return x.to(DTYPE).to(x.dtype)


@triton.jit
def _silu(g, DTYPE: tl.constexpr, INTERPRETER: tl.constexpr):
    # torch's silu: g / (1 + exp(-g)) in the compute dtype, rounded to DTYPE.
    # Returns it and the denominator 1 + exp(-g), which the backward reuses.
    denominator = 1.0 + _exp(-g, INTERPRETER)
    return _rounded(_div_rn(g, denominator), DTYPE, INTERPRETER), denominator


@triton.jit
def _store_rows(Y, values, rows, cols, row_mask, n_cols, row_stride, col_offset,
                ALIGN: tl.constexpr, INTERPRETER: tl.constexpr):
    # A tile into rows of a dense buffer (row r starts at r * row_stride +
    # col_offset), rounded to Y's dtype. 64-bit offsets.
    offsets = tl.multiple_of(rows.to(tl.int64) * row_stride + col_offset, ALIGN)
    values = _rounded(values, Y.dtype.element_ty, INTERPRETER)
    tl.store(Y + offsets[:, None] + cols[None, :], values.to(Y.dtype.element_ty),
             mask=row_mask[:, None] & (cols < n_cols)[None, :])
# --8<-- [end:math]


# --8<-- [start:fwd_kernel]
@triton.jit
def swiglu_fwd_kernel(
    G, U, A,
    n_rows, n_cols, size1, size2,  # rows fold up to three leading dims (rows_layout)
    g_stride0, g_stride1, g_stride2, u_stride0, u_stride1, u_stride2,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,  # a power of two; the last column block is masked
    COMPUTE_DTYPE: tl.constexpr,  # fp32, or fp64 for fp64 inputs
    ALIGN: tl.constexpr,  # a power of two dividing n_cols and every row stride
    INTERPRETER: tl.constexpr,
):
    n_cols = n_cols // ALIGN * ALIGN  # the same value: tells Triton ALIGN divides it
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.program_id(1) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    row_mask = rows < n_rows
    g_offsets = _row_offsets(rows, size1, size2, g_stride0, g_stride1, g_stride2, ALIGN)
    u_offsets = _row_offsets(rows, size1, size2, u_stride0, u_stride1, u_stride2, ALIGN)
    g = _load_tile(G, g_offsets, cols, row_mask, n_cols).to(COMPUTE_DTYPE)
    u = _load_tile(U, u_offsets, cols, row_mask, n_cols).to(COMPUTE_DTYPE)
    silu, _ = _silu(g, G.dtype.element_ty, INTERPRETER)
    # torch's product of two 16-bit tensors: in fp32, rounded once (in the store)
    _store_rows(A, silu * u, rows, cols, row_mask, n_cols, n_cols, 0, ALIGN,
                INTERPRETER)
# --8<-- [end:fwd_kernel]


# --8<-- [start:bwd_kernel]
@triton.jit
def swiglu_bwd_kernel(
    DA, G, U, DG, DU,
    n_rows, n_cols, size1, size2,
    da_stride0, da_stride1, da_stride2, g_stride0, g_stride1, g_stride2,
    u_stride0, u_stride1, u_stride2,
    out_stride, du_offset,  # DG, DU: dense rows of out_stride; d_up from du_offset
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    COMPUTE_DTYPE: tl.constexpr,
    ALIGN: tl.constexpr,
    INTERPRETER: tl.constexpr,
    MERGED: tl.constexpr,  # d_up goes into DG's rows too (DU is then never written)
):
    n_cols = n_cols // ALIGN * ALIGN
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    cols = tl.program_id(1) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    row_mask = rows < n_rows
    da = _load_tile(DA, _row_offsets(rows, size1, size2, da_stride0, da_stride1,
                                     da_stride2, ALIGN), cols, row_mask, n_cols)
    g = _load_tile(G, _row_offsets(rows, size1, size2, g_stride0, g_stride1,
                                   g_stride2, ALIGN), cols, row_mask, n_cols)
    u = _load_tile(U, _row_offsets(rows, size1, size2, u_stride0, u_stride1,
                                   u_stride2, ALIGN), cols, row_mask, n_cols)
    da, g, u = da.to(COMPUTE_DTYPE), g.to(COMPUTE_DTYPE), u.to(COMPUTE_DTYPE)
    dtype = G.dtype.element_ty

    # d_up = d_act * silu(g), silu recomputed and rounded as the forward stored it
    silu, denominator = _silu(g, dtype, INTERPRETER)
    # Merged: no second pointer into DG's buffer. torch.compile treats each pointer a
    # kernel stores through as its own output: two into one buffer lose one's writes.
    _store_rows(DG if MERGED else DU, da * silu, rows, cols, row_mask, n_cols,
                out_stride, du_offset, ALIGN, INTERPRETER)
    # d_gate = d_silu * silu'(g), silu'(g) = s * (1 + g * (1 - s)), s = sigmoid(g);
    # d_silu = d_act * up rounded to the dtype, as HF's autograd keeps it
    s = _div_rn(1.0, denominator)
    d_silu = _rounded(da * u, dtype, INTERPRETER)
    _store_rows(DG, d_silu * s * (1.0 + g * (1.0 - s)), rows, cols, row_mask, n_cols,
                out_stride, 0, ALIGN, INTERPRETER)
# --8<-- [end:bwd_kernel]


# --8<-- [start:config]
@dataclasses.dataclass(frozen=True)
class SwiGLUConfig:
    """How the kernels are launched: BLOCK_ROWS x BLOCK_COLS tiles, num_warps."""

    block_rows: int
    block_cols: int
    num_warps: int


TILE_BYTES = 8192  # of each input per program: 4096 16-bit values, 2048 fp32
MIN_BLOCK_COLS = 256  # a narrower power-of-two divisor: one masked block instead


@cached_outside_compile
def launch_config(n_cols: int, itemsize: int) -> SwiGLUConfig:
    """The launch config for rows of n_cols values of itemsize bytes (not yet
    timed: a rule to tune on the H200).

    BLOCK_COLS: the largest power of two dividing n_cols, up to a tile, so the
    Qwen3 widths need no masked lanes (3072 = 3 x 1024, 9728 = 19 x 512,
    25600 = 25 x 1024); if that is below MIN_BLOCK_COLS (odd widths), the width
    rounded up to a power of two (up to a tile), masked. BLOCK_ROWS fills the
    tile; num_warps gives each thread two 16-byte loads of each input.
    """
    tile = TILE_BYTES // itemsize
    divisor = n_cols & -n_cols
    if divisor >= MIN_BLOCK_COLS:
        block_cols = min(divisor, tile)
    else:
        block_cols = min(triton.next_power_of_2(n_cols), tile)
    per_thread = 2 * 16 // itemsize
    num_warps = max(1, min(8, tile // (32 * per_thread)))
    return SwiGLUConfig(max(1, tile // block_cols), block_cols, num_warps)
# --8<-- [end:config]


MAX_GRID_COLS = 65535  # CUDA's limit on the grid's second dimension


def check_config(config: SwiGLUConfig, n_cols: int) -> None:
    """Reject a launch config the kernels cannot run on rows of n_cols."""
    if not isinstance(config, SwiGLUConfig):
        raise TypeError(f"config must be a SwiGLUConfig, got {type(config).__name__}")
    if not (_power_of_two(config.block_rows) and _power_of_two(config.block_cols)):
        raise ValueError("block_rows and block_cols must be powers of two, got "
                         f"{config.block_rows!r}, {config.block_cols!r}")
    if config.block_rows * config.block_cols > 2**20:
        raise ValueError("a tile holds at most 2^20 values (Triton's limit), got "
                         f"{config.block_rows} x {config.block_cols}")
    if not (_power_of_two(config.num_warps) and config.num_warps <= 32):
        raise ValueError(f"num_warps must be 1, 2, 4, 8, 16 or 32, "
                         f"got {config.num_warps!r}")
    if triton.cdiv(n_cols, config.block_cols) > MAX_GRID_COLS:
        raise ValueError(f"rows of {n_cols} in blocks of {config.block_cols} need "
                         f"more than {MAX_GRID_COLS} column blocks")


def check_inputs(gate, up, d_act=None) -> None:
    """Reject what the kernels would get wrong, with a message naming the problem."""
    named = [("gate", gate), ("up", up)] + ([] if d_act is None else [("d_act", d_act)])
    for name, tensor in named:
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"swiglu expects tensors, {name} is a "
                            f"{type(tensor).__name__}")
        if tensor.dtype not in _FLOAT_DTYPES:
            raise TypeError("swiglu supports float16/bfloat16/float32/float64, "
                            f"{name} is {tensor.dtype}")
    if gate.dim() == 0:
        raise ValueError("swiglu needs at least one dimension; got 0-dim tensors")
    for name, tensor in named:
        if tensor.dtype != gate.dtype:
            raise TypeError(f"{name} is {tensor.dtype} but gate is {gate.dtype}: "
                            "swiglu needs one dtype")
        if tensor.shape != gate.shape:
            raise ValueError(f"{name} has shape {tuple(tensor.shape)} but gate has "
                             f"{tuple(gate.shape)}")
        check_backend_device(name, tensor)
        if tensor.device != gate.device:
            raise ValueError(f"{name} is on {tensor.device} but gate is on "
                             f"{gate.device}")


def _plan(tensors: dict, n_cols: int, config: SwiGLUConfig | None):
    """The launch shared by both directions: tensors by argument prefix ("g": G
    with g_stride0..2) -> their rows layout, the grid and the kernel arguments."""
    first = next(iter(tensors.values()))
    if config is None:
        config = launch_config(n_cols, first.element_size())
    else:
        check_config(config, n_cols)
    n_rows = first.numel() // n_cols
    laid_out, (size1, size2), strides = rows_layout(*tensors.values())
    args = {prefix.upper(): tensor for prefix, tensor in zip(tensors, laid_out)}
    for prefix, three in zip(tensors, strides):
        args.update({f"{prefix}_stride{i}": stride for i, stride in enumerate(three)})
    grid = (triton.cdiv(n_rows, config.block_rows),
            triton.cdiv(n_cols, config.block_cols))
    flat = [stride for three in strides for stride in three]
    return grid, dict(args, n_rows=n_rows, n_cols=n_cols, size1=size1, size2=size2,
                      BLOCK_ROWS=config.block_rows, BLOCK_COLS=config.block_cols,
                      COMPUTE_DTYPE=compute_dtype(first),
                      ALIGN=row_alignment(n_cols, *flat), INTERPRETER=_interpreted(),
                      num_warps=config.num_warps, **COMPILE_OPTIONS)


# --8<-- [start:launch]
def swiglu_forward(gate: torch.Tensor, up: torch.Tensor,
                   config: SwiGLUConfig | None = None) -> torch.Tensor:
    """act = silu(gate) * up, contiguous, with gate's shape and dtype.

    ``config`` overrides the launch config; None takes ``launch_config``'s.
    """
    check_inputs(gate, up)
    act = torch.empty(gate.shape, dtype=gate.dtype, device=gate.device)
    n_cols = operator.index(gate.shape[-1])  # torch.compile: a constant
    if act.numel() == 0:
        return act
    grid, args = _plan({"g": gate, "u": up}, n_cols, config)
    swiglu_fwd_kernel[grid](A=act, **args)
    return act


def swiglu_backward(d_act: torch.Tensor, gate: torch.Tensor, up: torch.Tensor,
                    merged: bool = False, config: SwiGLUConfig | None = None):
    """(d_gate, d_up) for act = swiglu(gate, up), both contiguous with gate's shape.

    ``merged=True``: one contiguous (.., 2I) tensor instead, d_gate in [.., :I] and
    d_up in [.., I:] (the gradient of a merged gate_up). d_act is never written.
    """
    check_inputs(gate, up, d_act)
    n_cols = operator.index(gate.shape[-1])
    shape = (*gate.shape[:-1], 2 * n_cols) if merged else gate.shape
    d_gate = torch.empty(shape, dtype=gate.dtype, device=gate.device)
    d_up = d_gate if merged else torch.empty_like(d_gate)
    if d_gate.numel() > 0:
        grid, args = _plan({"da": d_act, "g": gate, "u": up}, n_cols, config)
        swiglu_bwd_kernel[grid](DG=d_gate, DU=gate if merged else d_up,  # gate: unused
                                out_stride=d_gate.shape[-1], MERGED=merged,
                                du_offset=n_cols if merged else 0, **args)
    return d_gate if merged else (d_gate, d_up)
# --8<-- [end:launch]


# --8<-- [start:autograd]
class SwiGLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate, up):
        # gate and up only: HF's autograd keeps gate, silu(gate) and up
        ctx.save_for_backward(gate, up)
        return swiglu_forward(gate, up)

    @staticmethod
    def backward(ctx, d_act):
        if torch.is_grad_enabled():
            raise NotImplementedError("double backward (create_graph=True) is not "
                                      "implemented for swiglu")
        gate, up = ctx.saved_tensors
        return swiglu_backward(d_act, gate, up)


class SwiGLUMergedFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, gate_up):
        ctx.save_for_backward(gate_up)
        return swiglu_forward(*_halves(gate_up))

    @staticmethod
    def backward(ctx, d_act):
        if torch.is_grad_enabled():
            raise NotImplementedError("double backward (create_graph=True) is not "
                                      "implemented for swiglu_merged")
        (gate_up,) = ctx.saved_tensors
        return swiglu_backward(d_act, *_halves(gate_up), merged=True)


def _halves(gate_up):
    if not isinstance(gate_up, torch.Tensor) or gate_up.dim() == 0:
        raise TypeError("swiglu_merged expects a tensor of at least one dimension")
    width = operator.index(gate_up.shape[-1])
    if width % 2:
        raise ValueError(f"gate_up's last dim must be even (gate, then up), "
                         f"got {width}")
    return gate_up[..., :width // 2], gate_up[..., width // 2:]


def swiglu(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu(gate) * up, as HF's Qwen3MLP computes it, Triton forward and backward."""
    return SwiGLUFunction.apply(gate, up)


def swiglu_merged(gate_up: torch.Tensor) -> torch.Tensor:
    """swiglu(gate_up[.., :I], gate_up[.., I:]) of a merged (.., 2I) GEMM output;
    its gradient is one contiguous (.., 2I) tensor."""
    return SwiGLUMergedFunction.apply(gate_up)
# --8<-- [end:autograd]


# --8<-- [start:mlp]
def qwen3_mlp_forward(mlp: torch.nn.Module, x: torch.Tensor) -> torch.Tensor:
    """HF Qwen3MLP's forward with the fused SwiGLU: the module's own gate_proj,
    up_proj and down_proj (no parameter added or copied; state_dict unchanged)."""
    hidden_act = getattr(getattr(mlp, "config", None), "hidden_act", None)
    if hidden_act not in ("silu", "swish"):
        raise ValueError(f"qwen3_mlp_forward fuses SiLU; this MLP's hidden_act is "
                         f"{hidden_act!r}")
    return mlp.down_proj(swiglu(mlp.gate_proj(x), mlp.up_proj(x)))
# --8<-- [end:mlp]


if __name__ == "__main__":
    # --8<-- [start:kernel_imports]
    from swiglu import _div_rn, _rounded, _silu, _store_rows
    # --8<-- [end:kernel_imports]

    # --8<-- [start:demo]
    from transformers.models.qwen3.modeling_qwen3 import Qwen3MLP

    from qwen3_configs import tiny_qwen3_config

    device = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: TRITON_INTERPRET=1
    torch.manual_seed(0)
    mlp = Qwen3MLP(tiny_qwen3_config(intermediate_size=300))
    mlp = mlp.to(device=device, dtype=torch.bfloat16)
    x = torch.randn(2, 16, 64, device=device).to(torch.bfloat16)
    dy = torch.randn(2, 16, 64, device=device).to(torch.bfloat16)

    gate, up = mlp.gate_proj(x).detach(), mlp.up_proj(x).detach()
    same = (swiglu(gate, up) == torch.nn.functional.silu(gate) * up).float().mean()
    print(f"act: {same.item():.4%} of elements bit-identical to HF's")

    results = []
    for forward in (mlp, lambda x: qwen3_mlp_forward(mlp, x)):
        x_ = x.clone().requires_grad_()
        y = forward(x_)
        grads = torch.autograd.grad(y, [x_, *mlp.parameters()], dy)
        results.append([y, *grads])
    names = ["y", "dx"] + [f"d {name}" for name, _ in mlp.named_parameters()]
    for name, hf, ours in zip(names, *results):
        error = (ours.float() - hf.float()).abs().max() / hf.float().abs().max()
        print(f"{name}: max |ours - HF| = {error.item():.2g} of max |HF|")
    # --8<-- [end:demo]
