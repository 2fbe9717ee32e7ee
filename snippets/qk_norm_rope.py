# SPDX-License-Identifier: Apache-2.0
"""Qwen3's q_norm/k_norm + RoPE fused in Triton, forward and backward, for training.

Computes what HF's Qwen3Attention computes between the q/k projections and
attention, in HF's cast order:

    q_out = apply_rotary_pos_emb(q_norm(q).transpose(1, 2), ...)  (the same for k)
    q_norm(q) = weight * x_hat.to(q.dtype), x_hat = q32 * rsqrt(mean(q32^2) + eps)
    rope(n) = n * cos + rotate_half(n) * sin, rotate_half(n) = cat(-n2, n1)

In 16-bit every op of HF rounds: x_hat, weight * x_hat, each product with cos or
sin, and their sum. The kernel computes in fp32 (fp64 for fp64 inputs) and rounds
at the same points, so a bf16 forward gives HF's bits. Output dtypes follow
torch's type promotion of (activation, weight, cos), as HF's do. fp64 inputs
get fp64 math throughout (for gradcheck; HF's own norm runs in fp32 there).

* Forward: ONE launch for q and k. Program ids first cover q's tiles, then k's;
  a tile is BLOCK_ROWS head rows x head_dim. q and k are read by strides (views
  of the projections' outputs, e.g. of one fused qkv buffer), cos/sin by
  (batch or broadcast, token). Each q/k element is read once and each output
  written once, into (B, T, H, D) memory returned as the (B, H, T, D) view:
  HF's own layout. Saves one rstd per head row (fp32) for the backward.
  Tiles and warps come from launch_configs (untuned starting points).
* Backward: ONE persistent launch for q and k (a walk over q's tiles, then k's),
  reading the incoming grads by strides in any layout. Each program keeps dW
  partials of both weights in registers; a second small launch adds them in a
  fixed order (deterministic, no atomics). RoPE's transpose comes first:
  dn1 = g1*cos1 + g2*sin2, dn2 = g2*cos2 - g1*sin1; then the RMSNorm backward,
  with dW from x_hat rounded to the input dtype (HF's weight * x_hat.to(dtype)).
* A last dim with a stride other than 1 (rare: q/k views always have 1) is
  copied, strided weights too; everything else is read in place. Empty inputs
  give empty outputs (and zero dW). cos and sin get no gradient (HF computes
  them under no_grad): cos or sin requiring grad is refused, as is double
  backward.

Reuses rmsnorm_triton.py's helpers (eps handling, row alignment, SM count).
Run on CPU under the interpreter with TRITON_INTERPRET=1 set before importing
triton; the interpreter truncates fp32 -> bf16, so there the kernels round bf16
in integer arithmetic instead (what the GPU's conversion does in hardware).
"""
import dataclasses
import math
import operator

# --8<-- [start:imports]
import torch
import triton
import triton.language as tl

from rmsnorm_triton import (COMPILE_OPTIONS, _interpreted, _inv_rms, _stats_dtype,
                            check_backend_device, compute_dtype, row_alignment,
                            sm_count, split_eps)
# --8<-- [end:imports]


@triton.jit
def _round(v, DTYPE: tl.constexpr, SOFTWARE_BF16: tl.constexpr):
    # v rounded to DTYPE (to nearest even) and back to v's dtype: where HF's
    # 16-bit ops round. SOFTWARE_BF16: the rounding in integer arithmetic, for
    # the interpreter (its fp32 -> bf16 cast truncates).
    if DTYPE == v.dtype:
        return v
    elif DTYPE == tl.bfloat16 and SOFTWARE_BF16:
        v32 = v.to(tl.float32)
        bits = v32.to(tl.uint32, bitcast=True)
        bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
        rounded = bits.to(tl.float32, bitcast=True)
        return tl.where(v32 == v32, rounded, v32).to(v.dtype)  # NaN stays NaN
    else:
        return v.to(DTYPE).to(v.dtype)


@triton.jit
def _product(a, b, SOFTWARE_BF16: tl.constexpr):
    # a * b rounded on its own, as HF's separate multiply kernels round it. With
    # FMA contraction on (COMPILE_OPTIONS, and Inductor's default) the compiler
    # fused a RoPE product into the add across its bf16 rounding (H200 probe:
    # 11 % of outputs off). PTX mul.rn is never contracted. The interpreter (and
    # fp64 math) has no inline PTX and no contraction: a plain multiply.
    if SOFTWARE_BF16 or a.dtype != tl.float32:
        return a * b
    else:
        return tl.inline_asm_elementwise(  # pragma: gpu only
            "mul.rn.f32 $0, $1, $2;", "=r,r,r", [a, b], dtype=tl.float32,
            is_pure=True, pack=1)


@triton.jit
def _head_rows(tile, n_rows, n_heads, seq_len, BLOCK_ROWS: tl.constexpr):
    # Head row r = (b * T + t) * H + h of a (B, T, H, D) tensor -> (b, t, h).
    rows = tile * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = rows < n_rows
    rows = rows.to(tl.int64)
    tokens = rows // n_heads
    return rows, row_mask, tokens // seq_len, tokens % seq_len, rows % n_heads


@triton.jit
def _load_halves(PTR, offsets, row_mask, HALF: tl.constexpr,
                 COMPUTE_DTYPE: tl.constexpr, ALIGN: tl.constexpr):
    # The two halves of a tile's rows, as rotate_half splits them.
    offsets = tl.multiple_of(offsets, ALIGN)
    ptrs = PTR + offsets[:, None] + tl.arange(0, HALF)[None, :]
    first = tl.load(ptrs, mask=row_mask[:, None], other=0.0)
    second = tl.load(ptrs + HALF, mask=row_mask[:, None], other=0.0)
    return first.to(COMPUTE_DTYPE), second.to(COMPUTE_DTYPE)


@triton.jit
def _store_halves(PTR, rows, first, second, row_mask, HALF: tl.constexpr,
                  SOFTWARE_BF16: tl.constexpr):
    # Rows of a contiguous (n_rows, 2 * HALF) output, in its dtype.
    dtype: tl.constexpr = PTR.dtype.element_ty
    ptrs = PTR + rows[:, None] * (2 * HALF) + tl.arange(0, HALF)[None, :]
    tl.store(ptrs, _round(first, dtype, SOFTWARE_BF16).to(dtype),
             mask=row_mask[:, None])
    tl.store(ptrs + HALF, _round(second, dtype, SOFTWARE_BF16).to(dtype),
             mask=row_mask[:, None])


# --8<-- [start:fwd_tile]
@triton.jit
def _norm_rope_tile(X, W, Y, RSTD, COS, SIN, tile, n_rows, n_heads, seq_len,
                    x_sb, x_st, x_sh, cos_sb, cos_st, sin_sb, sin_st, eps, eps_low,
                    BLOCK_ROWS: tl.constexpr, HEAD_DIM: tl.constexpr,
                    COMPUTE_DTYPE: tl.constexpr, NORM_DTYPE: tl.constexpr,
                    SOFTWARE_BF16: tl.constexpr, ALIGN: tl.constexpr):
    HALF: tl.constexpr = HEAD_DIM // 2
    in_dtype: tl.constexpr = X.dtype.element_ty
    out_dtype: tl.constexpr = Y.dtype.element_ty
    rows, row_mask, b, t, h = _head_rows(tile, n_rows, n_heads, seq_len, BLOCK_ROWS)
    x1, x2 = _load_halves(X, b * x_sb + t * x_st + h * x_sh, row_mask, HALF,
                          COMPUTE_DTYPE, ALIGN)
    cos1, cos2 = _load_halves(COS, b * cos_sb + t * cos_st, row_mask, HALF,
                              COMPUTE_DTYPE, ALIGN)
    sin1, sin2 = _load_halves(SIN, b * sin_sb + t * sin_st, row_mask, HALF,
                              COMPUTE_DTYPE, ALIGN)
    cols = tl.arange(0, HALF)
    w1 = tl.load(W + cols).to(COMPUTE_DTYPE)[None, :]
    w2 = tl.load(W + HALF + cols).to(COMPUTE_DTYPE)[None, :]

    sum_squares = tl.sum(x1 * x1, axis=1) + tl.sum(x2 * x2, axis=1)
    rstd = _inv_rms(sum_squares / HEAD_DIM, eps, eps_low, COMPUTE_DTYPE)
    # HF: weight * x_hat.to(input dtype), rounded to NORM_DTYPE
    n1 = _round(w1 * _round(x1 * rstd[:, None], in_dtype, SOFTWARE_BF16),
                NORM_DTYPE, SOFTWARE_BF16)
    n2 = _round(w2 * _round(x2 * rstd[:, None], in_dtype, SOFTWARE_BF16),
                NORM_DTYPE, SOFTWARE_BF16)
    # n * cos + rotate_half(n) * sin, each product rounded, then the sum
    y1 = (_round(_product(n1, cos1, SOFTWARE_BF16), out_dtype, SOFTWARE_BF16)
          - _round(_product(n2, sin1, SOFTWARE_BF16), out_dtype, SOFTWARE_BF16))
    y2 = (_round(_product(n2, cos2, SOFTWARE_BF16), out_dtype, SOFTWARE_BF16)
          + _round(_product(n1, sin2, SOFTWARE_BF16), out_dtype, SOFTWARE_BF16))
    _store_halves(Y, rows, y1, y2, row_mask, HALF, SOFTWARE_BF16)
    tl.store(RSTD + rows, rstd, mask=row_mask)
# --8<-- [end:fwd_tile]


@triton.jit
def qk_norm_rope_fwd_kernel(
    Q, K, Q_W, K_W, COS, SIN, Q_OUT, K_OUT, RSTD,  # RSTD: q's rows, then k's
    n_q_rows, n_k_rows, n_q_heads, n_k_heads, seq_len, n_q_tiles, eps, eps_low,
    q_sb, q_st, q_sh, k_sb, k_st, k_sh, cos_sb, cos_st, sin_sb, sin_st,
    BLOCK_ROWS: tl.constexpr,
    HEAD_DIM: tl.constexpr,  # a power of two, 16 .. 256
    COMPUTE_DTYPE: tl.constexpr,
    NORM_DTYPE: tl.constexpr,  # weight * x_hat's dtype: promote(input, weight)
    SOFTWARE_BF16: tl.constexpr,
    ALIGN: tl.constexpr,  # a power of two dividing HEAD_DIM and every row stride
):
    tile = tl.program_id(0)
    if tile < n_q_tiles:
        _norm_rope_tile(Q, Q_W, Q_OUT, RSTD, COS, SIN, tile, n_q_rows, n_q_heads,
                        seq_len, q_sb, q_st, q_sh, cos_sb, cos_st, sin_sb, sin_st,
                        eps, eps_low, BLOCK_ROWS, HEAD_DIM, COMPUTE_DTYPE,
                        NORM_DTYPE, SOFTWARE_BF16, ALIGN)
    else:
        _norm_rope_tile(K, K_W, K_OUT, RSTD + n_q_rows, COS, SIN, tile - n_q_tiles,
                        n_k_rows, n_k_heads, seq_len, k_sb, k_st, k_sh, cos_sb,
                        cos_st, sin_sb, sin_st, eps, eps_low, BLOCK_ROWS, HEAD_DIM,
                        COMPUTE_DTYPE, NORM_DTYPE, SOFTWARE_BF16, ALIGN)


# --8<-- [start:grad_tile]
@triton.jit
def _norm_rope_grad_tile(X, DY, W, DX, RSTD, COS, SIN, tile, n_rows, n_heads,
                         seq_len, x_sb, x_st, x_sh, dy_sb, dy_st, dy_sh, cos_sb,
                         cos_st, sin_sb, sin_st, BLOCK_ROWS: tl.constexpr,
                         HEAD_DIM: tl.constexpr, COMPUTE_DTYPE: tl.constexpr,
                         SOFTWARE_BF16: tl.constexpr, ALIGN: tl.constexpr):
    # dx of one tile (stored) and its dW terms (returned, one per element).
    HALF: tl.constexpr = HEAD_DIM // 2
    rows, row_mask, b, t, h = _head_rows(tile, n_rows, n_heads, seq_len, BLOCK_ROWS)
    x1, x2 = _load_halves(X, b * x_sb + t * x_st + h * x_sh, row_mask, HALF,
                          COMPUTE_DTYPE, ALIGN)
    g1, g2 = _load_halves(DY, b * dy_sb + t * dy_st + h * dy_sh, row_mask, HALF,
                          COMPUTE_DTYPE, ALIGN)
    cos1, cos2 = _load_halves(COS, b * cos_sb + t * cos_st, row_mask, HALF,
                              COMPUTE_DTYPE, ALIGN)
    sin1, sin2 = _load_halves(SIN, b * sin_sb + t * sin_st, row_mask, HALF,
                              COMPUTE_DTYPE, ALIGN)
    cols = tl.arange(0, HALF)
    w1 = tl.load(W + cols).to(COMPUTE_DTYPE)[None, :]
    w2 = tl.load(W + HALF + cols).to(COMPUTE_DTYPE)[None, :]
    rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0).to(COMPUTE_DTYPE)

    # RoPE's transpose: y1 = n1*cos1 - n2*sin1, y2 = n2*cos2 + n1*sin2
    dn1 = g1 * cos1 + g2 * sin2
    dn2 = g2 * cos2 - g1 * sin1
    # RMSNorm: dx = rstd * (w*dn - x_hat * mean(w*dn * x_hat)); masked rows are 0
    x_hat1, x_hat2 = x1 * rstd[:, None], x2 * rstd[:, None]
    wdn1, wdn2 = w1 * dn1, w2 * dn2
    c = (tl.sum(wdn1 * x_hat1, axis=1) + tl.sum(wdn2 * x_hat2, axis=1)) / HEAD_DIM
    _store_halves(DX, rows, (wdn1 - x_hat1 * c[:, None]) * rstd[:, None],
                  (wdn2 - x_hat2 * c[:, None]) * rstd[:, None], row_mask, HALF,
                  SOFTWARE_BF16)
    # HF multiplies the weight by x_hat rounded to the input dtype
    in_dtype: tl.constexpr = X.dtype.element_ty
    return (dn1 * _round(x_hat1, in_dtype, SOFTWARE_BF16),
            dn2 * _round(x_hat2, in_dtype, SOFTWARE_BF16))
# --8<-- [end:grad_tile]


@triton.jit
def qk_norm_rope_bwd_kernel(
    DQ_OUT, DK_OUT, Q, K, Q_W, K_W, COS, SIN, RSTD, DQ, DK, DW_PARTIAL,
    n_q_rows, n_k_rows, n_q_heads, n_k_heads, seq_len, n_q_tiles, tiles_per_program,
    q_sb, q_st, q_sh, k_sb, k_st, k_sh, dq_sb, dq_st, dq_sh, dk_sb, dk_st, dk_sh,
    cos_sb, cos_st, sin_sb, sin_st,
    BLOCK_ROWS: tl.constexpr,
    HEAD_DIM: tl.constexpr,
    COMPUTE_DTYPE: tl.constexpr,
    COMPUTE_DW: tl.constexpr,
    SOFTWARE_BF16: tl.constexpr,
    ALIGN: tl.constexpr,
):
    # Persistent: program p walks tiles p, p + n_programs, ... of q's tiles
    # followed by k's, and keeps dW sums of both weights per (row slot, column).
    HALF: tl.constexpr = HEAD_DIM // 2
    program = tl.program_id(0)
    n_programs = tl.num_programs(0)
    dwq1 = tl.zeros([BLOCK_ROWS, HALF], dtype=COMPUTE_DTYPE)
    dwq2 = tl.zeros([BLOCK_ROWS, HALF], dtype=COMPUTE_DTYPE)
    dwk1 = tl.zeros([BLOCK_ROWS, HALF], dtype=COMPUTE_DTYPE)
    dwk2 = tl.zeros([BLOCK_ROWS, HALF], dtype=COMPUTE_DTYPE)
    for i in range(tiles_per_program):
        tile = program + i * n_programs
        if tile < n_q_tiles:
            d1, d2 = _norm_rope_grad_tile(
                Q, DQ_OUT, Q_W, DQ, RSTD, COS, SIN, tile, n_q_rows, n_q_heads,
                seq_len, q_sb, q_st, q_sh, dq_sb, dq_st, dq_sh, cos_sb, cos_st,
                sin_sb, sin_st, BLOCK_ROWS, HEAD_DIM, COMPUTE_DTYPE, SOFTWARE_BF16,
                ALIGN)
            dwq1 += d1
            dwq2 += d2
        else:  # k's tiles; past k's last one, every row is masked (adds zeros)
            d1, d2 = _norm_rope_grad_tile(
                K, DK_OUT, K_W, DK, RSTD + n_q_rows, COS, SIN, tile - n_q_tiles,
                n_k_rows, n_k_heads, seq_len, k_sb, k_st, k_sh, dk_sb, dk_st, dk_sh,
                cos_sb, cos_st, sin_sb, sin_st, BLOCK_ROWS, HEAD_DIM, COMPUTE_DTYPE,
                SOFTWARE_BF16, ALIGN)
            dwk1 += d1
            dwk2 += d2
    if COMPUTE_DW:  # partials: (2, n_programs, HEAD_DIM), q's then k's
        cols = tl.arange(0, HALF)
        q_partial = DW_PARTIAL + program.to(tl.int64) * HEAD_DIM
        k_partial = q_partial + n_programs.to(tl.int64) * HEAD_DIM
        tl.store(q_partial + cols, tl.sum(dwq1, axis=0))
        tl.store(q_partial + HALF + cols, tl.sum(dwq2, axis=0))
        tl.store(k_partial + cols, tl.sum(dwk1, axis=0))
        tl.store(k_partial + HALF + cols, tl.sum(dwk2, axis=0))


@triton.jit
def dw_pair_reduce_kernel(
    DW_PARTIAL, DQ_W, DK_W, n_partials,
    HEAD_DIM: tl.constexpr,
    BLOCK_PARTIALS: tl.constexpr,  # >= n_partials: all partials in one tile
    BLOCK_COLS: tl.constexpr,  # divides HEAD_DIM
):
    # Column sums of the q and of the k partials, in one launch: programs first
    # cover q's columns, then k's. tl.sum's tree order is fixed: same bits.
    blocks: tl.constexpr = HEAD_DIM // BLOCK_COLS
    which = tl.program_id(0) // blocks  # 0: q's weight, 1: k's
    cols = (tl.program_id(0) % blocks) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    parts = tl.arange(0, BLOCK_PARTIALS)
    rows = (which * n_partials + parts).to(tl.int64)
    block = tl.load(DW_PARTIAL + rows[:, None] * HEAD_DIM + cols[None, :],
                    mask=(parts < n_partials)[:, None], other=0.0)
    dw = tl.sum(block, axis=0)
    if which == 0:
        tl.store(DQ_W + cols, dw.to(DQ_W.dtype.element_ty))
    else:
        tl.store(DK_W + cols, dw.to(DK_W.dtype.element_ty))


@dataclasses.dataclass(frozen=True)
class TileConfig:
    """How one direction's kernel is launched."""

    block_rows: int  # head rows per tile (a power of two)
    num_warps: int  # a power of two
    programs_per_sm: int = 1  # backward: resident programs of the persistent grid

    def __post_init__(self):
        powers = (self.block_rows, self.num_warps)
        if not all(isinstance(v, int) and v >= 1 and v & (v - 1) == 0 for v in powers):
            raise ValueError(f"block_rows and num_warps must be powers of two, got "
                             f"{powers}")
        if not (isinstance(self.programs_per_sm, int) and self.programs_per_sm >= 1):
            raise ValueError("programs_per_sm must be a positive int, got "
                             f"{self.programs_per_sm!r}")


def launch_configs(head_dim: int, dtype: torch.dtype) -> tuple[TileConfig, TileConfig]:
    """(forward, backward) configs for heads of head_dim values of dtype.

    A tile holds 4 KiB of q or k (16 rows of 128 bf16 values). The warps and
    programs per SM are the H200 sweep's best at Qwen3-8B's heads (Hq=32, Hkv=8,
    B=4, T=4096; docs/data/h200/diag-fusion-sweep-dafb9f6.log): forward 16 rows,
    2 warps (91.6 µs; 16 rows, 4 warps: 94.2); backward 16 rows, 4 warps, 4
    programs per SM (162.9 µs; the first guess, 8 rows, 4 warps, 8 per SM:
    176.4). Pure Python: no device query.
    """
    rows = max(1, 4096 // (head_dim * dtype.itemsize))  # powers of two
    return TileConfig(rows, 2), TileConfig(rows, 4, 4)


_TL_DTYPES = {torch.float16: tl.float16, torch.bfloat16: tl.bfloat16,
              torch.float32: tl.float32, torch.float64: tl.float64}


def _check_tensor(name, t, device):
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"qk_norm_rope expects a tensor for {name}, got "
                        f"{type(t).__name__}")
    if t.dtype not in _TL_DTYPES:
        raise TypeError(f"qk_norm_rope supports float16/bfloat16/float32/float64, "
                        f"got {name}={t.dtype}")
    check_backend_device(name, t)
    if device is not None and t.device != device:
        raise ValueError(f"q is on {device} but {name} is on {t.device}")


def check_qk_norm_rope_inputs(q, k, q_weight, k_weight, cos, sin, eps) -> None:
    """Reject what the kernels would get wrong, with a message naming the problem."""
    _check_tensor("q", q, None)
    for name, t in (("k", k), ("q_weight", q_weight), ("k_weight", k_weight),
                    ("cos", cos), ("sin", sin)):
        _check_tensor(name, t, q.device)
    pairs = ((q, k, "q and k"), (q_weight, k_weight, "q_weight and k_weight"),
             (cos, sin, "cos and sin"))
    for a, b, names in pairs:
        if a.dtype != b.dtype:
            raise TypeError(f"{names} must have the same dtype; got {a.dtype} and "
                            f"{b.dtype}")
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError("q and k must be (batch, seq_len, heads, head_dim); got "
                         f"shapes {tuple(q.shape)} and {tuple(k.shape)}")
    batch, seq_len, _, head_dim = q.shape
    if (k.shape[0], k.shape[1], k.shape[3]) != (batch, seq_len, head_dim):
        raise ValueError(f"q {tuple(q.shape)} and k {tuple(k.shape)} must agree in "
                         "batch, seq_len and head_dim")
    if head_dim not in (16, 32, 64, 128, 256):
        raise ValueError("head_dim must be a power of two from 16 to 256 (Qwen3: "
                         f"128); got {head_dim}")
    for name, w in (("q_weight", q_weight), ("k_weight", k_weight)):
        if tuple(w.shape) != (head_dim,):
            raise ValueError(f"{name} must have shape ({head_dim},) (head_dim); got "
                             f"{tuple(w.shape)}")
    for name, t in (("cos", cos), ("sin", sin)):
        if t.dim() != 3 or t.shape[0] not in (1, batch) or tuple(t.shape[1:]) != (
                seq_len, head_dim):
            raise ValueError(f"{name} must have shape ({batch} or 1, {seq_len}, "
                             f"{head_dim}) (batch, seq_len, head_dim); got "
                             f"{tuple(t.shape)}")
    if not (isinstance(eps, (int, float)) and 0 < eps < math.inf):
        raise ValueError(f"eps must be a positive finite float, got {eps!r}")


def _unit_last_stride(t: torch.Tensor) -> torch.Tensor:
    # The kernels read rows of contiguous values (weights: one row); any other
    # row stride is fine.
    return t if t.stride(-1) == 1 else t.contiguous()


def _strides(t: torch.Tensor, *dims: int) -> list[int]:
    # Element strides of dims; 0 for a dim of size 1 (its only index is 0).
    return [t.stride(d) if t.shape[d] > 1 else 0 for d in dims]


def _hf_layout(batch, seq_len, heads, head_dim, dtype, device) -> torch.Tensor:
    # (B, H, T, D) stored as (B, T, H, D), as HF's elementwise ops leave it. With
    # T == 1 or H == 1 both orders are one memory layout, and HF's strides are
    # the contiguous (B, H, T, D) ones.
    if seq_len == 1 or heads == 1:
        return torch.empty((batch, heads, seq_len, head_dim), dtype=dtype,
                           device=device)
    return torch.empty((batch, seq_len, heads, head_dim), dtype=dtype,
                       device=device).transpose(1, 2)


def qk_norm_rope_forward(q, k, q_weight, k_weight, cos, sin, eps: float = 1e-6,
                         config: TileConfig | None = None):
    """Returns (q_out, k_out, rstd).

    q: (B, T, Hq, D) and k: (B, T, Hkv, D), any row strides; cos, sin:
    (B or 1, T, D). q_out: (B, Hq, T, D) and k_out: (B, Hkv, T, D), stored as
    (B, T, H, D) like HF's. rstd: one per head row, q's rows then k's.
    ``config`` overrides launch_configs' forward config.
    """
    check_qk_norm_rope_inputs(q, k, q_weight, k_weight, cos, sin, eps)
    q, k, q_weight, k_weight, cos, sin = (
        _unit_last_stride(t) for t in (q, k, q_weight, k_weight, cos, sin))
    batch, seq_len, n_q_heads, head_dim = q.shape
    head_dim = operator.index(head_dim)  # torch.compile: a constant, as configs need
    n_k_heads = k.shape[2]
    norm_dtype = torch.promote_types(q.dtype, q_weight.dtype)
    out_dtype = torch.promote_types(norm_dtype, cos.dtype)
    q_out, k_out = (_hf_layout(batch, seq_len, heads, head_dim, out_dtype, q.device)
                    for heads in (n_q_heads, n_k_heads))
    n_q_rows, n_k_rows = batch * seq_len * n_q_heads, batch * seq_len * n_k_heads
    compute = compute_dtype(q, q_weight, cos, sin)
    rstd = torch.empty(n_q_rows + n_k_rows, dtype=_stats_dtype(compute),
                       device=q.device)
    if rstd.numel() == 0:
        return q_out, k_out, rstd
    config = config or launch_configs(head_dim, q.dtype)[0]
    n_q_tiles = triton.cdiv(n_q_rows, config.block_rows)
    n_tiles = n_q_tiles + triton.cdiv(n_k_rows, config.block_rows)
    row_strides = (_strides(q, 0, 1, 2) + _strides(k, 0, 1, 2)
                   + _strides(cos, 0, 1) + _strides(sin, 0, 1))
    eps, eps_low = split_eps(eps, compute)
    qk_norm_rope_fwd_kernel[(n_tiles,)](
        q, k, q_weight, k_weight, cos, sin, q_out, k_out, rstd,
        n_q_rows, n_k_rows, n_q_heads, n_k_heads, seq_len, n_q_tiles, eps, eps_low,
        *row_strides, BLOCK_ROWS=config.block_rows, HEAD_DIM=head_dim,
        COMPUTE_DTYPE=compute, NORM_DTYPE=_TL_DTYPES[norm_dtype],
        SOFTWARE_BF16=_interpreted(), ALIGN=row_alignment(head_dim, *row_strides),
        num_warps=config.num_warps, **COMPILE_OPTIONS)
    return q_out, k_out, rstd


def qk_norm_rope_backward(dq_out, dk_out, q, k, q_weight, k_weight, cos, sin, rstd,
                          compute_dw: bool = True, config: TileConfig | None = None):
    """Returns (dq, dk, dq_weight, dk_weight); the dW pair is None when not
    compute_dw. dq_out: (B, Hq, T, D), dk_out: (B, Hkv, T, D), in any layout.
    dq, dk: contiguous (B, T, H, D), q's and k's shapes. ``rstd``: what
    qk_norm_rope_forward saved; ``config`` overrides the backward config.
    """
    batch, seq_len, n_q_heads, head_dim = q.shape
    head_dim = operator.index(head_dim)
    n_k_heads = k.shape[2]
    for name, grad, heads in (("grad of q_out", dq_out, n_q_heads),
                              ("grad of k_out", dk_out, n_k_heads)):
        if tuple(grad.shape) != (batch, heads, seq_len, head_dim):
            raise ValueError(f"{name} has shape {tuple(grad.shape)}, expected "
                             f"{(batch, heads, seq_len, head_dim)}")
    n_q_rows, n_k_rows = batch * seq_len * n_q_heads, batch * seq_len * n_k_heads
    if rstd.numel() != n_q_rows + n_k_rows:
        raise ValueError(f"rstd has {rstd.numel()} values for "
                         f"{n_q_rows + n_k_rows} head rows")
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    if rstd.numel() == 0:  # no rows: dW is a sum over nothing
        zeros = (torch.zeros_like(q_weight), torch.zeros_like(k_weight))
        return dq, dk, *(zeros if compute_dw else (None, None))
    q, k, q_weight, k_weight, cos, sin, dq_out, dk_out = (
        _unit_last_stride(t)
        for t in (q, k, q_weight, k_weight, cos, sin, dq_out, dk_out))
    config = config or launch_configs(head_dim, q.dtype)[1]
    n_q_tiles = triton.cdiv(n_q_rows, config.block_rows)
    n_tiles = n_q_tiles + triton.cdiv(n_k_rows, config.block_rows)
    n_programs = max(1, min(n_tiles, sm_count(q.device) * config.programs_per_sm))
    compute = compute_dtype(q, q_weight, cos, sin)
    dw_partial = (torch.empty((2, n_programs, head_dim), dtype=_stats_dtype(compute),
                              device=q.device) if compute_dw else dq)  # dq: unused
    # (b, t, h) strides of each; the grads are (B, H, T, D)
    row_strides = (_strides(q, 0, 1, 2) + _strides(k, 0, 1, 2)
                   + _strides(dq_out, 0, 2, 1) + _strides(dk_out, 0, 2, 1))
    cos_strides = _strides(cos, 0, 1) + _strides(sin, 0, 1)
    qk_norm_rope_bwd_kernel[(n_programs,)](
        dq_out, dk_out, q, k, q_weight, k_weight, cos, sin, rstd, dq, dk, dw_partial,
        n_q_rows, n_k_rows, n_q_heads, n_k_heads, seq_len, n_q_tiles,
        triton.cdiv(n_tiles, n_programs), *row_strides, *cos_strides,
        BLOCK_ROWS=config.block_rows, HEAD_DIM=head_dim, COMPUTE_DTYPE=compute,
        COMPUTE_DW=compute_dw, SOFTWARE_BF16=_interpreted(),
        ALIGN=row_alignment(head_dim, *row_strides, *cos_strides),
        num_warps=config.num_warps, **COMPILE_OPTIONS)
    if not compute_dw:
        return dq, dk, None, None
    dq_weight, dk_weight = torch.empty_like(q_weight), torch.empty_like(k_weight)
    block_partials = triton.next_power_of_2(n_programs)
    block_cols = max(1, min(head_dim, 8192 // block_partials))
    dw_pair_reduce_kernel[(2 * head_dim // block_cols,)](
        dw_partial, dq_weight, dk_weight, n_programs, HEAD_DIM=head_dim,
        BLOCK_PARTIALS=block_partials, BLOCK_COLS=block_cols, num_warps=4,
        **COMPILE_OPTIONS)
    return dq, dk, dq_weight, dk_weight


class QKNormRopeFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, q_weight, k_weight, cos, sin, eps):
        q_out, k_out, rstd = qk_norm_rope_forward(q, k, q_weight, k_weight, cos,
                                                  sin, eps)
        ctx.save_for_backward(q, k, q_weight, k_weight, cos, sin, rstd)
        return q_out, k_out

    @staticmethod
    def backward(ctx, dq_out, dk_out):
        if torch.is_grad_enabled():
            raise NotImplementedError("double backward (create_graph=True) is not "
                                      "implemented for qk_norm_rope")
        q, k, q_weight, k_weight, cos, sin, rstd = ctx.saved_tensors
        needs = ctx.needs_input_grad
        dq, dk, dq_weight, dk_weight = qk_norm_rope_backward(
            dq_out, dk_out, q, k, q_weight, k_weight, cos, sin, rstd,
            compute_dw=needs[2] or needs[3])
        return (dq if needs[0] else None, dk if needs[1] else None,
                dq_weight if needs[2] else None, dk_weight if needs[3] else None,
                None, None, None)


def qk_norm_rope(q, k, q_weight, k_weight, cos, sin, eps: float = 1e-6):
    """HF Qwen3Attention's q_norm/k_norm, transpose(1, 2) and apply_rotary_pos_emb.

    q: (B, T, Hq, D), k: (B, T, Hkv, D): the projections' outputs viewed per
    head; cos, sin: (B or 1, T, D) from the rotary embedding. Returns
    (q_out, k_out) of shapes (B, Hq, T, D) and (B, Hkv, T, D), as HF's.
    """
    if getattr(cos, "requires_grad", False) or getattr(sin, "requires_grad", False):
        raise ValueError("cos and sin get no gradient here: compute them under "
                         "torch.no_grad() or detach them (HF's rotary embedding does)")
    return QKNormRopeFunction.apply(q, k, q_weight, k_weight, cos, sin, eps)


if __name__ == "__main__":
    # --8<-- [start:tile_imports]
    from qk_norm_rope import _head_rows, _load_halves, _product, _round, _store_halves
    # --8<-- [end:tile_imports]

    from transformers.models.qwen3.modeling_qwen3 import (
        Qwen3RMSNorm, Qwen3RotaryEmbedding, apply_rotary_pos_emb)

    from qwen3_configs import tiny_qwen3_config

    device = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: TRITON_INTERPRET=1
    config = tiny_qwen3_config()  # head_dim 16, 4 q heads, 2 kv heads
    dtype, batch, seq_len, head_dim = torch.bfloat16, 2, 10, config.head_dim
    gen = torch.Generator().manual_seed(0)
    # q and k as views of one fused qkv projection output, as in a fused model
    qkv = torch.randn(batch, seq_len, 8 * head_dim, generator=gen).to(dtype).to(device)
    q = qkv[..., :4 * head_dim].view(batch, seq_len, 4, head_dim)
    k = qkv[..., 4 * head_dim:6 * head_dim].view(batch, seq_len, 2, head_dim)
    q_norm, k_norm = (Qwen3RMSNorm(head_dim, config.rms_norm_eps).to(device, dtype)
                      for _ in range(2))
    with torch.no_grad():
        for norm in (q_norm, k_norm):
            norm.weight.copy_(torch.rand(head_dim, generator=gen) + 0.5)
    # packed sequences: positions restart at each sequence's start
    position_ids = torch.cat([torch.arange(n) for n in (4, 6)]).expand(batch, -1)
    cos, sin = Qwen3RotaryEmbedding(config).to(device)(qkv, position_ids.to(device))

    grads = [torch.randn(batch, h, seq_len, head_dim, generator=gen).to(dtype)
             .to(device) for h in (4, 2)]
    results = []
    for fused in (False, True):
        q_, k_ = (t.detach().requires_grad_() for t in (q, k))
        for norm in (q_norm, k_norm):
            norm.weight.grad = None
        if fused:
            outs = qk_norm_rope(q_, k_, q_norm.weight, k_norm.weight, cos, sin,
                                config.rms_norm_eps)
        else:
            outs = apply_rotary_pos_emb(q_norm(q_).transpose(1, 2),
                                        k_norm(k_).transpose(1, 2), cos, sin)
        torch.autograd.backward(outs, grads)
        results.append([*outs, q_.grad, k_.grad, q_norm.weight.grad,
                        k_norm.weight.grad])
    # forward: HF's bits; backward: close, not equal (HF's autograd rounds each
    # step to bf16, the kernel keeps fp32 until the stores)
    names = ("q_out", "k_out", "dq", "dk", "dq_weight", "dk_weight")
    for name, hf, ours in zip(names, *results):
        error = (ours.float() - hf.float()).abs().max() / hf.float().abs().max()
        print(f"{name}: max error {error.item():.2g} of max |{name}| "
              f"(bitwise equal: {torch.equal(ours, hf)})")
