"""Residual add + Qwen3 RMSNorm in one Triton kernel, forward and backward.

HF's Qwen3 decoder layer does ``s = residual + x`` and then ``y = norm(s)``: two
kernels, and s travels through memory three times. Here one forward kernel reads
x, residual and w and writes s (the next residual), y and one rstd per row; one
backward kernel reads dy, ds (s's own gradient from later layers), s, rstd and w
and writes dx, which is the gradient of both x and residual, plus dW partials.

Arithmetic, exactly HF's: s is rounded to the input dtype as torch rounds
``residual + x`` (16-bit inputs add in fp32, then round once); statistics in
fp32 (fp64 for fp64 inputs); x_hat rounded to the input dtype, then times the
weight; y's dtype is torch's promotion of (input, weight).

Bytes for R rows of H bf16 values (rstd's 4 bytes per row aside):
forward reads x, r, writes s, y: 4*R*H*2; backward reads dy, ds, s, writes dx:
4*R*H*2. Separately (torch's add, then the plain RMSNorm kernels) it is 3 + 2
passes forward and 3 + 3 backward (the norm's dx, then autograd adds ds to it):
11 passes over R*H values instead of 8.

Run on CPU under the interpreter with TRITON_INTERPRET=1 set before importing triton.
"""
import os

# --8<-- [start:imports]
import torch
import triton
import triton.language as tl

from rmsnorm_triton import (MAX_COLS, LaunchConfig, _inv_rms, check_config,
                            check_inputs, column_blocks, compute_dtype,
                            reduce_dw_partials, sm_count, split_eps)
# --8<-- [end:imports]


# --8<-- [start:fwd_kernel]
@triton.jit
def _tile(rows, cols, n_rows, n_cols):
    # Offsets and mask of a (rows, cols) tile of a contiguous (n_rows, n_cols) tensor.
    offsets = rows.to(tl.int64)[:, None] * n_cols + cols[None, :]
    return offsets, (rows < n_rows)[:, None] & (cols < n_cols)[None, :]


@triton.jit
def _add_store(S, x, r, offsets, mask, COMPUTE_DTYPE: tl.constexpr):
    # torch's residual + x: 16-bit inputs add in fp32, fp64 in fp64; round once.
    if x.dtype == tl.float64:
        s = (x + r).to(S.dtype.element_ty)
    else:
        s = (x.to(tl.float32) + r.to(tl.float32)).to(S.dtype.element_ty)
    tl.store(S + offsets, s, mask=mask)
    return s.to(COMPUTE_DTYPE)  # the rounded s, as HF's norm reads it


@triton.jit
def _norm_store(S, Y, s, w, rstd, offsets, mask, COMPUTE_DTYPE: tl.constexpr):
    # HF rounds x_hat to the input dtype before the weight multiply.
    x_hat = (s * rstd[:, None]).to(S.dtype.element_ty).to(COMPUTE_DTYPE)
    tl.store(Y + offsets, (x_hat * w[None, :]).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def fused_add_rms_norm_fwd_kernel(
    X, R, W, S, Y, RSTD,
    n_rows, n_cols, eps, eps_low,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,  # a power of two; the whole row if TAIL_COLS == 0
    TAIL_COLS: tl.constexpr,  # 0, or a smaller power of two for columns past BLOCK_COLS
    COMPUTE_DTYPE: tl.constexpr,
):
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    # Every load is issued before the first add waits on one.
    cols = tl.arange(0, BLOCK_COLS)
    offsets, mask = _tile(rows, cols, n_rows, n_cols)
    x = tl.load(X + offsets, mask=mask, other=0.0)
    r = tl.load(R + offsets, mask=mask, other=0.0)
    w = tl.load(W + cols, mask=cols < n_cols, other=0.0).to(COMPUTE_DTYPE)
    if TAIL_COLS > 0:  # e.g. 2560 = 2048 + 512 instead of one 4096-wide block
        tail_cols = BLOCK_COLS + tl.arange(0, TAIL_COLS)
        tail_offsets, tail_mask = _tile(rows, tail_cols, n_rows, n_cols)
        x_tail = tl.load(X + tail_offsets, mask=tail_mask, other=0.0)
        r_tail = tl.load(R + tail_offsets, mask=tail_mask, other=0.0)
        w_tail = tl.load(W + tail_cols, mask=tail_cols < n_cols,
                         other=0.0).to(COMPUTE_DTYPE)

    s = _add_store(S, x, r, offsets, mask, COMPUTE_DTYPE)
    sum_squares = tl.sum(s * s, axis=1)
    if TAIL_COLS > 0:
        s_tail = _add_store(S, x_tail, r_tail, tail_offsets, tail_mask, COMPUTE_DTYPE)
        sum_squares += tl.sum(s_tail * s_tail, axis=1)
    rstd = _inv_rms(sum_squares / n_cols + eps + eps_low, COMPUTE_DTYPE)

    _norm_store(S, Y, s, w, rstd, offsets, mask, COMPUTE_DTYPE)
    if TAIL_COLS > 0:
        _norm_store(S, Y, s_tail, w_tail, rstd, tail_offsets, tail_mask, COMPUTE_DTYPE)
    tl.store(RSTD + rows, rstd, mask=rows < n_rows)
# --8<-- [end:fwd_kernel]


# --8<-- [start:bwd_kernel]
@triton.jit
def _load_grads(DY, DS, S, rows, cols, n_rows, n_cols, HAS_DS: tl.constexpr):
    # dy, s and ds of one column block of a row tile, in their own dtypes.
    offsets, mask = _tile(rows, cols, n_rows, n_cols)
    dy = tl.load(DY + offsets, mask=mask, other=0.0)
    s = tl.load(S + offsets, mask=mask, other=0.0)
    if HAS_DS:
        ds = tl.load(DS + offsets, mask=mask, other=0.0)
    else:
        ds = s  # a placeholder, never read
    return dy, s, ds


@triton.jit
def _dx_store(DX, x_hat, wdy, ds, c, rstd, rows, cols, n_rows, n_cols,
              HAS_DS: tl.constexpr):
    # d(x) = d(residual) = rstd * (w*dy - x_hat * c) + ds, rounded once
    dx = (wdy - x_hat * c[:, None]) * rstd[:, None]
    if HAS_DS:
        dx += ds
    offsets, mask = _tile(rows, cols, n_rows, n_cols)
    tl.store(DX + offsets, dx.to(DX.dtype.element_ty), mask=mask)


@triton.jit
def fused_add_rms_norm_bwd_kernel(
    DY, DS, S, W, RSTD, DX, DW_PARTIAL,
    n_rows, n_cols, tiles_per_program,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    TAIL_COLS: tl.constexpr,
    COMPUTE_DTYPE: tl.constexpr,
    HAS_DS: tl.constexpr,  # False when s has no later use (the final norm)
    COMPUTE_DW: tl.constexpr,
):
    program = tl.program_id(0)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_COLS)
    w = tl.load(W + cols, mask=cols < n_cols, other=0.0).to(COMPUTE_DTYPE)
    # dW accumulates per (row slot, column); rows are summed once, at the end.
    dw_acc = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=COMPUTE_DTYPE)
    if TAIL_COLS > 0:
        tail_cols = BLOCK_COLS + tl.arange(0, TAIL_COLS)
        w_tail = tl.load(W + tail_cols, mask=tail_cols < n_cols,
                         other=0.0).to(COMPUTE_DTYPE)
        dw_acc_tail = tl.zeros([BLOCK_ROWS, TAIL_COLS], dtype=COMPUTE_DTYPE)

    # Persistent loop over tiles program, program + n_programs, ...; the next
    # tile's loads are issued before the current tile's math (prefetch).
    rows_next = program * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    dy_next, s_next, ds_next = _load_grads(DY, DS, S, rows_next, cols,
                                           n_rows, n_cols, HAS_DS)
    if TAIL_COLS > 0:
        dy_tail_next, s_tail_next, ds_tail_next = _load_grads(
            DY, DS, S, rows_next, tail_cols, n_rows, n_cols, HAS_DS)
    for _ in range(tiles_per_program):
        rows = rows_next
        if TAIL_COLS > 0:  # two-block rows: convert, then prefetch (as in rms_norm)
            dy, s, ds = (dy_next.to(COMPUTE_DTYPE), s_next.to(COMPUTE_DTYPE),
                         ds_next.to(COMPUTE_DTYPE))
            dy_tail, s_tail, ds_tail = (dy_tail_next.to(COMPUTE_DTYPE),
                                        s_tail_next.to(COMPUTE_DTYPE),
                                        ds_tail_next.to(COMPUTE_DTYPE))
        else:
            dy_raw, s_raw, ds_raw = dy_next, s_next, ds_next
        rows_next = rows + n_programs * BLOCK_ROWS
        dy_next, s_next, ds_next = _load_grads(DY, DS, S, rows_next, cols,
                                               n_rows, n_cols, HAS_DS)
        if TAIL_COLS > 0:
            dy_tail_next, s_tail_next, ds_tail_next = _load_grads(
                DY, DS, S, rows_next, tail_cols, n_rows, n_cols, HAS_DS)
        else:  # one-block rows: the next loads are in flight before we wait
            dy, s, ds = (dy_raw.to(COMPUTE_DTYPE), s_raw.to(COMPUTE_DTYPE),
                         ds_raw.to(COMPUTE_DTYPE))

        rstd = tl.load(RSTD + rows, mask=rows < n_rows, other=0.0).to(COMPUTE_DTYPE)
        # c = mean(w*dy * x_hat) over the whole row
        x_hat = s * rstd[:, None]
        wdy = w[None, :] * dy
        dot = tl.sum(wdy * x_hat, axis=1)
        if TAIL_COLS > 0:
            x_hat_tail = s_tail * rstd[:, None]
            wdy_tail = w_tail[None, :] * dy_tail
            dot += tl.sum(wdy_tail * x_hat_tail, axis=1)
        c = dot / n_cols
        _dx_store(DX, x_hat, wdy, ds, c, rstd, rows, cols, n_rows, n_cols, HAS_DS)
        if TAIL_COLS > 0:
            _dx_store(DX, x_hat_tail, wdy_tail, ds_tail, c, rstd, rows, tail_cols,
                      n_rows, n_cols, HAS_DS)

        if COMPUTE_DW:  # HF's order: dW sums dy * x_hat rounded to the input dtype
            dw_acc += dy * x_hat.to(S.dtype.element_ty).to(COMPUTE_DTYPE)
            if TAIL_COLS > 0:
                dw_acc_tail += (dy_tail
                                * x_hat_tail.to(S.dtype.element_ty).to(COMPUTE_DTYPE))

    if COMPUTE_DW:  # one partial row per program; dw_reduce_kernel adds them
        partial = DW_PARTIAL + program.to(tl.int64) * n_cols
        tl.store(partial + cols, tl.sum(dw_acc, axis=0), mask=cols < n_cols)
        if TAIL_COLS > 0:
            tl.store(partial + tail_cols, tl.sum(dw_acc_tail, axis=0),
                     mask=tail_cols < n_cols)
# --8<-- [end:bwd_kernel]


# --8<-- [start:launch_config]
def fused_forward_config(n_cols: int) -> LaunchConfig:
    """The fused forward's launch config, from an H200 sweep at Qwen3's widths.

    Narrow rows: several rows per program, a tile of 2048 elements. Rows of 2048
    and wider: one row per program; 2 warps were fastest up to 5120.
    """
    block_cols, tail_cols = column_blocks(n_cols)
    lanes = block_cols + tail_cols
    if lanes < 2048:
        return LaunchConfig(2048 // block_cols, block_cols, tail_cols, 4)
    warps = 2 if lanes <= 5120 else 4 if lanes <= 8192 else 8
    return LaunchConfig(1, block_cols, tail_cols, warps)


def fused_backward_config(n_cols: int) -> LaunchConfig:
    """The fused backward's launch config, from an H200 sweep at Qwen3's widths.

    It holds more per element than the plain backward (dy, s and ds of this tile,
    the prefetched tile, the dW accumulator): 1024 and 2048 want tiles of 4096
    elements, 4096 one row on 4 warps with 2 programs per SM, the two-block rows
    8 warps (2560) or 16 (5120).
    """
    block_cols, tail_cols = column_blocks(n_cols)
    lanes = block_cols + tail_cols
    if lanes <= 256:  # q/k-norm widths: 8 rows of 128 per tile
        rows, warps, per_sm = 1024 // block_cols, 4, 8
    elif lanes <= 2048:  # hidden 1024..2048: a tile of 4096 elements
        rows, warps, per_sm = max(1, 4096 // block_cols), 4, 2
    elif lanes > 8192:
        rows, warps, per_sm = 1, 32, 1
    elif tail_cols:  # 2560 = 2048 + 512: 8 warps; 5120 = 4096 + 1024: 16 warps
        rows, (warps, per_sm) = 1, ((8, 2) if lanes <= 2560 else (16, 1))
    else:
        rows, (warps, per_sm) = 1, ((4, 2) if lanes <= 4096 else (16, 1))
    return LaunchConfig(rows, block_cols, tail_cols, warps, per_sm)
# --8<-- [end:launch_config]


# --8<-- [start:checks]
def check_pair(x: torch.Tensor, residual: torch.Tensor) -> None:
    """x and residual are added element by element: same shape, dtype and device."""
    if not isinstance(x, torch.Tensor) or not isinstance(residual, torch.Tensor):
        raise TypeError("fused_add_rms_norm expects tensors for x and residual")
    for what in ("shape", "dtype", "device"):
        if getattr(x, what) != getattr(residual, what):
            raise ValueError(f"x and residual must have the same {what}; got "
                             f"{getattr(x, what)} and {getattr(residual, what)}")
    if x.dim() and x.shape[-1] > MAX_COLS:  # one row lives in registers
        raise ValueError(f"fused_add_rms_norm: rows wider than {MAX_COLS} are not "
                         f"supported (got {x.shape[-1]}); add, then use rms_norm")
# --8<-- [end:checks]


# --8<-- [start:fwd_wrapper]
def fused_add_rms_norm_forward(x, residual, weight, eps=1e-6, *,
                               config: LaunchConfig | None = None):
    """Returns (y, s, rstd): y = Qwen3RMSNorm(s) and s = residual + x, both with
    x's shape; rstd has one value per row. Non-contiguous inputs are copied first.

    ``config`` overrides the launch config; None takes ``fused_forward_config``'s.
    """
    check_pair(x, residual)
    check_inputs(x, weight, eps)
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols if n_cols else 0
    compute = compute_dtype(x, weight)
    s = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    y = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype),
                    device=x.device)
    rstd = torch.empty(n_rows,
                       dtype=torch.float64 if compute == tl.float64 else torch.float32,
                       device=x.device)
    if y.numel() == 0:
        return y, s, rstd
    if config is None:
        config = fused_forward_config(n_cols)
    else:
        check_config(config, n_cols)
    fused_add_rms_norm_fwd_kernel[(triton.cdiv(n_rows, config.block_rows),)](
        x.contiguous(), residual.contiguous(), weight, s, y, rstd,
        n_rows, n_cols, *split_eps(eps, compute), **config.constexprs(),
        COMPUTE_DTYPE=compute, num_warps=config.num_warps,
    )
    return y, s, rstd
# --8<-- [end:fwd_wrapper]


# --8<-- [start:bwd_wrapper]
def fused_add_rms_norm_backward(dy, ds, s, weight, rstd, compute_dw=True, *,
                                config: LaunchConfig | None = None):
    """Returns (dx, dw). dx is the gradient of x and of residual; dw is None when
    compute_dw is False. ds, the gradient that reaches s from later layers, may be
    None. dy and ds are never written.

    ``config`` overrides the launch config; None takes ``fused_backward_config``'s.
    """
    for name, grad in (("dy", dy), ("ds", ds)):
        if grad is not None and grad.shape != s.shape:
            raise ValueError(f"{name} has shape {tuple(grad.shape)}, but s has "
                             f"{tuple(s.shape)}")
    n_cols = s.shape[-1]
    n_rows = s.numel() // n_cols if n_cols else 0
    if rstd.numel() != n_rows:
        raise ValueError(f"rstd has {rstd.numel()} values for {n_rows} rows")
    dx = torch.empty(s.shape, dtype=s.dtype, device=s.device)
    if dx.numel() == 0:  # no rows: dW is a sum over nothing
        return dx, torch.zeros_like(weight) if compute_dw else None
    if config is None:
        config = fused_backward_config(n_cols)
    else:
        check_config(config, n_cols)
    compute = compute_dtype(s, weight)
    n_tiles = triton.cdiv(n_rows, config.block_rows)
    # A fixed number of programs per GPU model: the same dW partials on every run.
    n_programs = max(1, min(n_tiles, sm_count(s.device) * config.programs_per_sm))
    dw = torch.empty_like(weight) if compute_dw else None
    dw_partial = (torch.empty((n_programs, n_cols), device=s.device,
                              dtype=torch.float64 if compute == tl.float64
                              else torch.float32)
                  if compute_dw else dx)
    dy = dy.contiguous()
    fused_add_rms_norm_bwd_kernel[(n_programs,)](
        dy, dy if ds is None else ds.contiguous(), s.contiguous(), weight, rstd,
        dx, dw_partial, n_rows, n_cols, triton.cdiv(n_tiles, n_programs),
        **config.constexprs(), COMPUTE_DTYPE=compute, HAS_DS=ds is not None,
        COMPUTE_DW=compute_dw, num_warps=config.num_warps,
    )
    if compute_dw:
        reduce_dw_partials(dw_partial, dw, n_programs, config.block_cols)
    return dx, dw
# --8<-- [end:bwd_wrapper]


# --8<-- [start:autograd]
class FusedAddRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, residual, weight, eps):
        y, s, rstd = fused_add_rms_norm_forward(x, residual, weight, eps)
        ctx.save_for_backward(s, weight, rstd)  # neither x nor residual is kept
        ctx.set_materialize_grads(False)  # no gradient for s: None, not zeros
        return y, s

    @staticmethod
    def backward(ctx, dy, ds):
        if torch.is_grad_enabled():
            raise NotImplementedError("double backward (create_graph=True) is not "
                                      "implemented for the fused add + RMSNorm")
        s, weight, rstd = ctx.saved_tensors
        compute_dw = ctx.needs_input_grad[2]
        if dy is None:  # only s was used: the add passes ds through
            return ds, ds, torch.zeros_like(weight) if compute_dw else None, None
        dx, dw = fused_add_rms_norm_backward(dy, ds, s, weight, rstd, compute_dw)
        # x and residual have the same gradient: one tensor for both. Autograd
        # accumulates in place only into a tensor nothing else references,
        # so the two uses never see each other's sums.
        return dx, dx, dw, None


def fused_add_rms_norm(x, residual, weight, eps=1e-6):
    """(Qwen3RMSNorm(residual + x), residual + x) with one Triton kernel each way.

    Mixed dtypes add in the promoted dtype, as torch's ``residual + x`` does (under
    autocast: an fp32 residual stream plus a bf16 sublayer output); the cast is a
    copy, outside the kernels.
    """
    if isinstance(x, torch.Tensor) and isinstance(residual, torch.Tensor):
        dtype = torch.promote_types(x.dtype, residual.dtype)
        x, residual = x.to(dtype), residual.to(dtype)
    return FusedAddRMSNormFunction.apply(x, residual, weight, eps)
# --8<-- [end:autograd]


# --8<-- [start:module]
class TritonQwen3FusedAddRMSNorm(torch.nn.Module):
    """Qwen3RMSNorm(hidden_size, eps) that first adds the residual; same weights."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states, residual):
        """(normed, new_residual): norm(residual + hidden_states), the sum."""
        return fused_add_rms_norm(hidden_states, residual, self.weight,
                                  self.variance_epsilon)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"
# --8<-- [end:module]


if __name__ == "__main__":
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    shape, dtype = (2, 8, 2560), torch.bfloat16  # 2560: Qwen3-4B's hidden size
    x, residual, dy, ds = (torch.randn(shape, device=device, dtype=dtype)
                           for _ in range(4))
    fused, hf = TritonQwen3FusedAddRMSNorm(2560), Qwen3RMSNorm(2560)
    with torch.no_grad():
        hf.weight.uniform_(0.5, 1.5)
    fused.load_state_dict(hf.state_dict())
    results = []
    for module in (fused.to(device, dtype), hf.to(device, dtype)):
        x_, r_ = x.clone().requires_grad_(), residual.clone().requires_grad_()
        if module is hf:  # HF's decoder layer: the add, then the norm
            s = r_ + x_
            y = module(s)
        else:
            y, s = module(x_, r_)
        torch.autograd.backward((y, s), (dy, ds))
        results.append((y, s, x_.grad, r_.grad, module.weight.grad))
    # On a GPU s is bit-identical; the CPU interpreter truncates fp32 -> bf16.
    for name, ours, theirs in zip(("y", "s", "dx", "dresidual", "dw"), *results):
        same = (ours == theirs).float().mean().item()
        print(f"{name:9s} bit-identical to HF's two ops: {same:7.2%}  "
              f"max |diff| {(ours.float() - theirs.float()).abs().max().item():.3g}")
