# SPDX-License-Identifier: Apache-2.0
"""Qwen3 RMSNorm in Triton, forward and backward, for training.

Computes exactly what HF's ``Qwen3RMSNorm`` computes, in HF's cast order:
statistics in fp32 (fp64 for fp64 inputs), x_hat rounded back to the input
dtype, then multiplied by the weight. The output dtype follows torch's type
promotion of (input, weight), as HF's does.

* Forward: a tile of BLOCK_ROWS x BLOCK_COLS per program, so 128-wide q/k-norm
  rows are handled many per program. Saves one rstd per row for the backward.
* Backward: a persistent grid. Each program walks a strided set of row tiles,
  writes dX, and keeps its dW partial sum in registers; a second tiny kernel
  adds the partials in a fixed order. Deterministic, no atomics.
* Non-power-of-two rows: a power-of-two block + a smaller tail (2560 = 2048 + 512).
  Strided views with up to three leading dims (transposed q/k grads) need no copy.
  Rows wider than MAX_COLS: the chunked kernels (two passes forward, two steps back).
  Rows whose x, dy and dW accumulator outgrow the registers (12288 < n_cols <=
  MAX_COLS on the H200): the backward reads each tile twice (the reread kernel).
* One kernel family for the fused residual add too (rmsnorm_fused_add.py): with
  HAS_RESIDUAL the forward normalizes s = x + residual and stores s; with HAS_DS
  the backward adds s's own gradient ds to dx.

Launch configs come from the ladders in rmsnorm_config.py. Run on CPU under the
interpreter with TRITON_INTERPRET=1 set before importing triton.
"""
import operator
import os

# --8<-- [start:imports]
import torch
import triton
import triton.language as tl
# --8<-- [end:imports]

from rmsnorm_config import (MAX_COLS, LaunchConfig, cached_outside_compile, candidates,
                            ladders_for, pick)


# --8<-- [start:tile]
@triton.jit
def _row_offsets(rows, size1, size2, stride0, stride1, stride2, ALIGN: tl.constexpr):
    # Row index -> element offset for a (d0, d1, d2, n_cols) view with strides.
    # ALIGN divides every stride: telling Triton lets it issue 16-byte loads.
    rows = rows.to(tl.int64)
    i2 = rows % size2
    i1 = (rows // size2) % size1
    i0 = rows // (size2 * size1)
    return tl.multiple_of(i0 * stride0 + i1 * stride1 + i2 * stride2, ALIGN)


@triton.jit
def _load_tile(X, offsets, cols, row_mask, n_cols, EVICT: tl.constexpr = None):
    # A (rows, cols) tile in its own dtype, padding read as 0; EVICT: an L2 hint.
    return tl.load(X + offsets[:, None] + cols[None, :], eviction_policy=EVICT,
                   mask=row_mask[:, None] & (cols < n_cols)[None, :], other=0.0)


@triton.jit
def _store_tile(Y, values, rows, cols, row_mask, n_cols, ALIGN: tl.constexpr):
    # A tile of a contiguous (n_rows, n_cols) output, in the output's dtype.
    offsets = tl.multiple_of(rows.to(tl.int64) * n_cols, ALIGN)
    tl.store(Y + offsets[:, None] + cols[None, :], values.to(Y.dtype.element_ty),
             mask=row_mask[:, None] & (cols < n_cols)[None, :])


@triton.jit
def _inv_rms(mean_square, eps, eps_low, COMPUTE_DTYPE: tl.constexpr):
    # Triton passes Python floats as fp32, torch.compile as fp64: the casts keep
    # the row math in COMPUTE_DTYPE. fp32: the hardware rsqrt that torch.rsqrt
    # uses; fp64 (gradcheck): eps in two fp32 parts, and an exact division.
    eps = tl.cast(eps, COMPUTE_DTYPE) + tl.cast(eps_low, COMPUTE_DTYPE)
    if COMPUTE_DTYPE == tl.float64:
        return 1.0 / tl.sqrt(mean_square + eps)
    else:
        return tl.rsqrt(mean_square + eps)
# --8<-- [end:tile]


# --8<-- [start:fwd_kernel]
@triton.jit
def _normalize_store(X, Y, S, x, w, rstd, rows, cols, row_mask, n_cols,
                     ALIGN: tl.constexpr, STORE_S: tl.constexpr):
    # HF rounds x_hat to the input dtype before the weight multiply.
    x_hat = (x * rstd[:, None]).to(X.dtype.element_ty).to(x.dtype)
    _store_tile(Y, x_hat * w[None, :], rows, cols, row_mask, n_cols, ALIGN)
    if STORE_S:  # the fused add: s = x + residual, the next layer's residual
        _store_tile(S, x, rows, cols, row_mask, n_cols, ALIGN)


@triton.jit
def rms_norm_fwd_kernel(
    X, W, Y, RSTD, R, S,  # R, S: the fused add's residual in and s = x + residual out
    n_rows, n_cols, eps, eps_low,
    size1, size2, x_stride0, x_stride1, x_stride2,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,  # a power of two; the whole row if TAIL_COLS == 0
    TAIL_COLS: tl.constexpr,  # 0, or a smaller power of two for columns past BLOCK_COLS
    COMPUTE_DTYPE: tl.constexpr,
    ALIGN: tl.constexpr,  # a power of two dividing n_cols and the row strides
    HAS_RESIDUAL: tl.constexpr,  # the fused add (R has X's layout)
):
    n_cols = n_cols // ALIGN * ALIGN  # the same value: tells Triton ALIGN divides it
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = rows < n_rows
    x_offsets = _row_offsets(rows, size1, size2, x_stride0, x_stride1, x_stride2, ALIGN)

    # All loads are issued before the row reduction waits on them.
    cols = tl.arange(0, BLOCK_COLS)
    x = _load_tile(X, x_offsets, cols, row_mask, n_cols)
    if HAS_RESIDUAL:
        x = _add_residual(x, _load_tile(R, x_offsets, cols, row_mask, n_cols))
    x = x.to(COMPUTE_DTYPE)
    w = tl.load(W + cols, mask=cols < n_cols, other=0.0).to(COMPUTE_DTYPE)
    if TAIL_COLS > 0:  # e.g. 2560 = 2048 + 512 instead of one 4096-wide block
        tail_cols = BLOCK_COLS + tl.arange(0, TAIL_COLS)
        x_tail = _load_tile(X, x_offsets, tail_cols, row_mask, n_cols)
        if HAS_RESIDUAL:
            x_tail = _add_residual(
                x_tail, _load_tile(R, x_offsets, tail_cols, row_mask, n_cols))
        x_tail = x_tail.to(COMPUTE_DTYPE)
        w_tail = tl.load(W + tail_cols, mask=tail_cols < n_cols,
                         other=0.0).to(COMPUTE_DTYPE)

    sum_squares = tl.sum(x * x, axis=1)
    if TAIL_COLS > 0:
        sum_squares += tl.sum(x_tail * x_tail, axis=1)
    rstd = _inv_rms(sum_squares / n_cols, eps, eps_low, COMPUTE_DTYPE)

    _normalize_store(X, Y, S, x, w, rstd, rows, cols, row_mask, n_cols, ALIGN,
                     HAS_RESIDUAL)
    if TAIL_COLS > 0:
        _normalize_store(X, Y, S, x_tail, w_tail, rstd, rows, tail_cols, row_mask,
                         n_cols, ALIGN, HAS_RESIDUAL)
    tl.store(RSTD + rows, rstd, mask=row_mask)
# --8<-- [end:fwd_kernel]


# --8<-- [start:fused_helpers]
@triton.jit
def _add_residual(x, residual):
    # The fused add's forward: s = x + residual as torch adds them (16-bit
    # inputs in fp32, rounded once to the input dtype); the norm reads this s.
    if x.dtype == tl.float64:
        return x + residual
    else:
        return (x.to(tl.float32) + residual.to(tl.float32)).to(x.dtype)


@triton.jit
def _load_ds(DS, rows, cols, row_mask, n_cols, ALIGN: tl.constexpr,
             HAS_DS: tl.constexpr):
    # The fused add's backward: ds, the gradient that s gets from later layers
    # (contiguous), is added to dx. Without it: a zero that the compiler drops.
    if HAS_DS:
        offsets = tl.multiple_of(rows.to(tl.int64) * n_cols, ALIGN)
        return tl.load(DS + offsets[:, None] + cols[None, :],
                       mask=row_mask[:, None] & (cols < n_cols)[None, :], other=0.0)
    else:
        return tl.zeros([1, 1], dtype=DS.dtype.element_ty)
# --8<-- [end:fused_helpers]


# --8<-- [start:bwd_tile]
@triton.jit
def _load_grad_tile(X, DY, DS, rows, cols, n_rows, n_cols, size1, size2, strides,
                    ALIGN: tl.constexpr, HAS_DS: tl.constexpr):
    # x, dy (and ds) of one column block of a row tile, in their own dtypes.
    row_mask = rows < n_rows
    x_offsets = _row_offsets(rows, size1, size2, strides[0], strides[1], strides[2],
                             ALIGN)
    dy_offsets = _row_offsets(rows, size1, size2, strides[3], strides[4], strides[5],
                              ALIGN)
    return (_load_tile(X, x_offsets, cols, row_mask, n_cols),
            _load_tile(DY, dy_offsets, cols, row_mask, n_cols),
            _load_ds(DS, rows, cols, row_mask, n_cols, ALIGN, HAS_DS))


@triton.jit
def _dx_store(DX, x_hat, wdy, c, rstd, ds, rows, cols, row_mask, n_cols,
              ALIGN: tl.constexpr, HAS_DS: tl.constexpr):
    dx = (wdy - x_hat * c[:, None]) * rstd[:, None]
    if HAS_DS:
        dx += ds
    _store_tile(DX, dx, rows, cols, row_mask, n_cols, ALIGN)
# --8<-- [end:bwd_tile]


# --8<-- [start:bwd_kernel]
@triton.jit
def rms_norm_bwd_kernel(
    DY, X, W, RSTD, DX, DW_PARTIAL, DS,  # DS: the fused add's ds (HAS_DS)
    n_rows, n_cols, eps, eps_low, tiles_per_program,
    size1, size2, x_stride0, x_stride1, x_stride2, dy_stride0, dy_stride1, dy_stride2,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    TAIL_COLS: tl.constexpr,
    COMPUTE_DTYPE: tl.constexpr,
    COMPUTE_DW: tl.constexpr,
    RECOMPUTE_RSTD: tl.constexpr,
    ALIGN: tl.constexpr,
    HAS_DS: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    n_cols = n_cols // ALIGN * ALIGN  # the same value: tells Triton ALIGN divides it
    program = tl.program_id(0)
    n_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_COLS)
    w = tl.load(W + cols, mask=cols < n_cols, other=0.0).to(COMPUTE_DTYPE)
    # dW accumulates element-wise per (row slot, column); the sum over row slots
    # happens once at the end, not once per tile (no cross-warp reduction in the loop).
    dw_acc = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=COMPUTE_DTYPE)
    if TAIL_COLS > 0:
        tail_cols = BLOCK_COLS + tl.arange(0, TAIL_COLS)
        w_tail = tl.load(W + tail_cols, mask=tail_cols < n_cols,
                         other=0.0).to(COMPUTE_DTYPE)
        dw_acc_tail = tl.zeros([BLOCK_ROWS, TAIL_COLS], dtype=COMPUTE_DTYPE)

    # Persistent loop over tiles program, program + n_programs, ... With PREFETCH
    # the next tile's loads are issued before the current tile's math, so each
    # program keeps two tiles of memory traffic in flight; wide rows may need
    # the registers more.
    strides = (x_stride0, x_stride1, x_stride2, dy_stride0, dy_stride1, dy_stride2)
    rows_next = program * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    if PREFETCH:
        x_next, dy_next, ds_next = _load_grad_tile(
            X, DY, DS, rows_next, cols, n_rows, n_cols, size1, size2, strides, ALIGN,
            HAS_DS)
        if TAIL_COLS > 0:
            x_tail_next, dy_tail_next, ds_tail_next = _load_grad_tile(
                X, DY, DS, rows_next, tail_cols, n_rows, n_cols, size1, size2,
                strides, ALIGN, HAS_DS)
    for _ in range(tiles_per_program):
        rows = rows_next
        rows_next = rows + n_programs * BLOCK_ROWS
        if not PREFETCH:  # this tile's loads, then its math
            x_next, dy_next, ds_next = _load_grad_tile(
                X, DY, DS, rows, cols, n_rows, n_cols, size1, size2, strides, ALIGN,
                HAS_DS)
            if TAIL_COLS > 0:
                x_tail_next, dy_tail_next, ds_tail_next = _load_grad_tile(
                    X, DY, DS, rows, tail_cols, n_rows, n_cols, size1, size2,
                    strides, ALIGN, HAS_DS)
        if TAIL_COLS > 0 or not PREFETCH:
            # Two-block rows: converting this tile before issuing the next tile's loads
            # was the faster schedule on the H200 (measured both ways).
            x, dy, ds = (x_next.to(COMPUTE_DTYPE), dy_next.to(COMPUTE_DTYPE),
                         ds_next.to(COMPUTE_DTYPE))
            if TAIL_COLS > 0:
                x_tail, dy_tail, ds_tail = (x_tail_next.to(COMPUTE_DTYPE),
                                            dy_tail_next.to(COMPUTE_DTYPE),
                                            ds_tail_next.to(COMPUTE_DTYPE))
        else:
            x_raw, dy_raw, ds_raw = x_next, dy_next, ds_next
        if PREFETCH:
            x_next, dy_next, ds_next = _load_grad_tile(
                X, DY, DS, rows_next, cols, n_rows, n_cols, size1, size2, strides,
                ALIGN, HAS_DS)
            if TAIL_COLS > 0:
                x_tail_next, dy_tail_next, ds_tail_next = _load_grad_tile(
                    X, DY, DS, rows_next, tail_cols, n_rows, n_cols, size1, size2,
                    strides, ALIGN, HAS_DS)
            else:  # one-block rows: the next loads are in flight before we wait
                x, dy, ds = (x_raw.to(COMPUTE_DTYPE), dy_raw.to(COMPUTE_DTYPE),
                             ds_raw.to(COMPUTE_DTYPE))

        row_mask = rows < n_rows
        if RECOMPUTE_RSTD:  # costs a row reduction; saves 4 bytes per row of memory
            sum_squares = tl.sum(x * x, axis=1)
            if TAIL_COLS > 0:
                sum_squares += tl.sum(x_tail * x_tail, axis=1)
            rstd = _inv_rms(sum_squares / n_cols, eps, eps_low, COMPUTE_DTYPE)
        else:
            rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0).to(COMPUTE_DTYPE)

        # dx = rstd * (w*dy - x_hat * mean(w*dy * x_hat)), the mean over the whole row
        x_hat = x * rstd[:, None]
        wdy = w[None, :] * dy
        dot = tl.sum(wdy * x_hat, axis=1)
        if TAIL_COLS > 0:
            x_hat_tail = x_tail * rstd[:, None]
            wdy_tail = w_tail[None, :] * dy_tail
            dot += tl.sum(wdy_tail * x_hat_tail, axis=1)
        c = dot / n_cols
        _dx_store(DX, x_hat, wdy, c, rstd, ds, rows, cols, row_mask, n_cols, ALIGN,
                  HAS_DS)
        if TAIL_COLS > 0:
            _dx_store(DX, x_hat_tail, wdy_tail, c, rstd, ds_tail, rows, tail_cols,
                      row_mask, n_cols, ALIGN, HAS_DS)

        if COMPUTE_DW:
            # HF multiplies the weight by x_hat *after* rounding it to the input dtype.
            # Masked rows add zeros.
            dw_acc += dy * x_hat.to(X.dtype.element_ty).to(COMPUTE_DTYPE)
            if TAIL_COLS > 0:
                dw_acc_tail += (dy_tail
                                * x_hat_tail.to(X.dtype.element_ty).to(COMPUTE_DTYPE))

    if COMPUTE_DW:
        partial = DW_PARTIAL + program.to(tl.int64) * n_cols
        tl.store(partial + cols, tl.sum(dw_acc, axis=0), mask=cols < n_cols)
        if TAIL_COLS > 0:
            tl.store(partial + tail_cols, tl.sum(dw_acc_tail, axis=0),
                     mask=tail_cols < n_cols)
# --8<-- [end:bwd_kernel]


@triton.jit
def _reread_dot(X, DY, W, rows, cols, n_rows, n_cols, size1, size2, strides,
                ALIGN: tl.constexpr, COMPUTE_DTYPE: tl.constexpr):
    # The first read of one column block: sum(w*dy*x) and sum(x*x) per row.
    x, dy, _ = _load_grad_tile(X, DY, DY, rows, cols, n_rows, n_cols, size1, size2,
                               strides, ALIGN, False)
    x, dy = x.to(COMPUTE_DTYPE), dy.to(COMPUTE_DTYPE)
    w = tl.load(W + cols, mask=cols < n_cols, other=0.0).to(COMPUTE_DTYPE)
    return tl.sum(w[None, :] * dy * x, axis=1), tl.sum(x * x, axis=1)


@triton.jit
def _reread_dx(X, DY, W, DX, ds, dw_acc, c, rstd, rows, cols, n_rows, n_cols, size1,
               size2, strides, ALIGN: tl.constexpr, COMPUTE_DTYPE: tl.constexpr,
               COMPUTE_DW: tl.constexpr, HAS_DS: tl.constexpr):
    # The second read of the block (from L1/L2: it was read a moment ago): dx, dW.
    # evict_first: a different load from the first read, so the compiler keeps it.
    # ds was loaded before the row reduction: its latency hides behind it.
    row_mask = rows < n_rows
    mask = row_mask[:, None] & (cols < n_cols)[None, :]
    x_offsets = _row_offsets(rows, size1, size2, strides[0], strides[1], strides[2],
                             ALIGN)
    dy_offsets = _row_offsets(rows, size1, size2, strides[3], strides[4], strides[5],
                              ALIGN)
    x = tl.load(X + x_offsets[:, None] + cols[None, :], mask=mask, other=0.0,
                eviction_policy="evict_first").to(COMPUTE_DTYPE)
    dy = tl.load(DY + dy_offsets[:, None] + cols[None, :], mask=mask, other=0.0,
                 eviction_policy="evict_first").to(COMPUTE_DTYPE)
    w = tl.load(W + cols, mask=cols < n_cols, other=0.0).to(COMPUTE_DTYPE)
    x_hat = x * rstd[:, None]
    _dx_store(DX, x_hat, w[None, :] * dy, c, rstd, ds.to(COMPUTE_DTYPE), rows, cols,
              row_mask, n_cols, ALIGN, HAS_DS)
    if COMPUTE_DW:
        dw_acc += dy * x_hat.to(X.dtype.element_ty).to(COMPUTE_DTYPE)
    return dw_acc


@triton.jit
def rms_norm_bwd_reread_kernel(
    DY, X, W, RSTD, DX, DW_PARTIAL, DS,
    n_rows, n_cols, eps, eps_low, tiles_per_program,
    size1, size2, x_stride0, x_stride1, x_stride2, dy_stride0, dy_stride1, dy_stride2,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    TAIL_COLS: tl.constexpr,
    COMPUTE_DTYPE: tl.constexpr,
    COMPUTE_DW: tl.constexpr,
    RECOMPUTE_RSTD: tl.constexpr,
    ALIGN: tl.constexpr,
    HAS_DS: tl.constexpr,
):
    # The register backward for rows whose x, dy and dW accumulator together
    # outgrow the registers (12288 < n_cols <= MAX_COLS on the H200): each tile
    # is read twice, the row's dot from the first read, dx and dW from the
    # second, which hits the cache. Across the row reduction only the dW
    # accumulator (and ds, 16-bit) stays in registers: no spills, and DRAM
    # still sees each element once.
    n_cols = n_cols // ALIGN * ALIGN  # the same value: tells Triton ALIGN divides it
    program = tl.program_id(0)
    n_programs = tl.num_programs(0)
    strides = (x_stride0, x_stride1, x_stride2, dy_stride0, dy_stride1, dy_stride2)
    cols = tl.arange(0, BLOCK_COLS)
    dw_acc = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=COMPUTE_DTYPE)
    if TAIL_COLS > 0:
        tail_cols = BLOCK_COLS + tl.arange(0, TAIL_COLS)
        dw_acc_tail = tl.zeros([BLOCK_ROWS, TAIL_COLS], dtype=COMPUTE_DTYPE)
    for tile in range(tiles_per_program):
        rows = (program + tile * n_programs) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        row_mask = rows < n_rows
        ds = _load_ds(DS, rows, cols, row_mask, n_cols, ALIGN, HAS_DS)
        dot, sum_squares = _reread_dot(X, DY, W, rows, cols, n_rows, n_cols, size1,
                                       size2, strides, ALIGN, COMPUTE_DTYPE)
        if TAIL_COLS > 0:
            ds_tail = _load_ds(DS, rows, tail_cols, row_mask, n_cols, ALIGN, HAS_DS)
            dot_tail, squares_tail = _reread_dot(X, DY, W, rows, tail_cols, n_rows,
                                                 n_cols, size1, size2, strides, ALIGN,
                                                 COMPUTE_DTYPE)
            dot += dot_tail
            sum_squares += squares_tail
        if RECOMPUTE_RSTD:
            rstd = _inv_rms(sum_squares / n_cols, eps, eps_low, COMPUTE_DTYPE)
        else:
            rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0).to(COMPUTE_DTYPE)
        c = dot * rstd / n_cols  # mean(w*dy * x_hat)
        dw_acc = _reread_dx(X, DY, W, DX, ds, dw_acc, c, rstd, rows, cols, n_rows,
                            n_cols, size1, size2, strides, ALIGN, COMPUTE_DTYPE,
                            COMPUTE_DW, HAS_DS)
        if TAIL_COLS > 0:
            dw_acc_tail = _reread_dx(X, DY, W, DX, ds_tail, dw_acc_tail, c, rstd, rows,
                                     tail_cols, n_rows, n_cols, size1, size2, strides,
                                     ALIGN, COMPUTE_DTYPE, COMPUTE_DW, HAS_DS)
    if COMPUTE_DW:
        partial = DW_PARTIAL + program.to(tl.int64) * n_cols
        tl.store(partial + cols, tl.sum(dw_acc, axis=0), mask=cols < n_cols)
        if TAIL_COLS > 0:
            tl.store(partial + tail_cols, tl.sum(dw_acc_tail, axis=0),
                     mask=tail_cols < n_cols)


@triton.jit
def rms_norm_fwd_chunked_kernel(
    X, W, Y, RSTD, R, S,
    n_rows, n_cols, eps, eps_low,
    size1, size2, x_stride0, x_stride1, x_stride2,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,  # the chunk: rows of any width are walked chunk by chunk
    COMPUTE_DTYPE: tl.constexpr,
    ALIGN: tl.constexpr,
    HAS_RESIDUAL: tl.constexpr,
    WIDTH: tl.constexpr,  # n_cols as a compile-time constant, or 0 (the fused add)
):
    # For rows too wide for registers. Pass 1 sums squares chunk by chunk; pass 2
    # reads the row again, so most of it comes from L2. The plain norm, as Inductor
    # compiles it: a constant width (fixed trip counts and masks), and L2 hints that
    # keep x from pass 1 to pass 2 and then let it go. The fused add stores s in
    # pass 1 and reads it back last chunk first, without hints (they measured slower).
    if WIDTH > 0:
        n_cols = WIDTH
    else:  # the same value: tells Triton ALIGN divides it
        n_cols = n_cols // ALIGN * ALIGN
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = rows < n_rows
    x_offsets = _row_offsets(rows, size1, size2, x_stride0, x_stride1, x_stride2, ALIGN)
    n_chunks = tl.cdiv(n_cols, BLOCK_COLS)
    squares = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=COMPUTE_DTYPE)
    for chunk in range(n_chunks):
        cols = chunk * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
        if HAS_RESIDUAL:
            x = _add_residual(_load_tile(X, x_offsets, cols, row_mask, n_cols),
                              _load_tile(R, x_offsets, cols, row_mask, n_cols))
            _store_tile(S, x, rows, cols, row_mask, n_cols, ALIGN)
        else:
            x = _load_tile(X, x_offsets, cols, row_mask, n_cols, "evict_last")
        x = x.to(COMPUTE_DTYPE)
        squares += x * x
    rstd = _inv_rms(tl.sum(squares, axis=1) / n_cols, eps, eps_low, COMPUTE_DTYPE)
    for chunk in range(n_chunks):
        if HAS_RESIDUAL:  # S has X's (contiguous) layout
            cols = (n_chunks - 1 - chunk) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
            x = _load_tile(S, x_offsets, cols, row_mask, n_cols).to(COMPUTE_DTYPE)
            w = tl.load(W + cols, mask=cols < n_cols, other=0.0)
        else:
            cols = chunk * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
            x = _load_tile(X, x_offsets, cols, row_mask, n_cols, "evict_first")
            w = tl.load(W + cols, mask=cols < n_cols, other=0.0,
                        eviction_policy="evict_last")
            x = x.to(COMPUTE_DTYPE)
        _normalize_store(X, Y, S, x, w.to(COMPUTE_DTYPE), rstd, rows, cols, row_mask,
                         n_cols, ALIGN, False)
    tl.store(RSTD + rows, rstd, mask=row_mask)


@triton.jit
def rms_norm_bwd_row_stats_kernel(
    DY, X, W, RSTD, ROW_STATS,
    n_rows, n_cols, eps, eps_low,
    size1, size2, x_stride0, x_stride1, x_stride2, dy_stride0, dy_stride1, dy_stride2,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    COMPUTE_DTYPE: tl.constexpr,
    RECOMPUTE_RSTD: tl.constexpr,
    ALIGN: tl.constexpr,
):
    # Step 1 of the chunked backward: the two numbers per row that every column
    # chunk needs, rstd and c = mean(w*dy * x_hat). Whole rows, chunk by chunk in
    # a fixed order: the same bits on every run.
    n_cols = n_cols // ALIGN * ALIGN  # the same value: tells Triton ALIGN divides it
    rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
    row_mask = rows < n_rows
    strides = (x_stride0, x_stride1, x_stride2, dy_stride0, dy_stride1, dy_stride2)
    wdy_x = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=COMPUTE_DTYPE)
    squares = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=COMPUTE_DTYPE)
    for chunk in range(tl.cdiv(n_cols, BLOCK_COLS)):
        cols = chunk * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
        x, dy, _ = _load_grad_tile(X, DY, DY, rows, cols, n_rows, n_cols, size1, size2,
                                   strides, ALIGN, False)
        x, dy = x.to(COMPUTE_DTYPE), dy.to(COMPUTE_DTYPE)
        w = tl.load(W + cols, mask=cols < n_cols, other=0.0).to(COMPUTE_DTYPE)
        wdy_x += w[None, :] * dy * x
        if RECOMPUTE_RSTD:
            squares += x * x
    if RECOMPUTE_RSTD:
        rstd = _inv_rms(tl.sum(squares, axis=1) / n_cols, eps, eps_low, COMPUTE_DTYPE)
    else:
        rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0).to(COMPUTE_DTYPE)
    tl.store(ROW_STATS + rows, rstd, mask=row_mask)
    tl.store(ROW_STATS + n_rows + rows, tl.sum(wdy_x, axis=1) * rstd / n_cols,
             mask=row_mask)


@triton.jit
def rms_norm_bwd_chunked_kernel(
    DY, X, W, ROW_STATS, DX, DW_PARTIAL, DS,
    n_rows, n_cols, tiles_per_program,
    size1, size2, x_stride0, x_stride1, x_stride2, dy_stride0, dy_stride1, dy_stride2,
    BLOCK_ROWS: tl.constexpr,
    BLOCK_COLS: tl.constexpr,
    COMPUTE_DTYPE: tl.constexpr,
    COMPUTE_DW: tl.constexpr,
    ALIGN: tl.constexpr,
    HAS_DS: tl.constexpr,
):
    # Step 2: a 2-D persistent grid. Program (slot, part) walks the row tiles
    # slot, slot + n_slots, ... and owns the columns of chunk `part`: it reads
    # x and dy (and ds) of its chunk once, writes dX there, and keeps its dW
    # partial in registers.
    n_cols = n_cols // ALIGN * ALIGN  # the same value: tells Triton ALIGN divides it
    slot = tl.program_id(0)
    n_slots = tl.num_programs(0)
    cols = tl.program_id(1) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    strides = (x_stride0, x_stride1, x_stride2, dy_stride0, dy_stride1, dy_stride2)
    w = tl.load(W + cols, mask=cols < n_cols, other=0.0).to(COMPUTE_DTYPE)
    dw_acc = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=COMPUTE_DTYPE)
    for tile in range(tiles_per_program):
        rows = (slot + tile * n_slots) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        row_mask = rows < n_rows
        rstd = tl.load(ROW_STATS + rows, mask=row_mask, other=0.0)
        c = tl.load(ROW_STATS + n_rows + rows, mask=row_mask, other=0.0)
        x, dy, ds = _load_grad_tile(X, DY, DS, rows, cols, n_rows, n_cols, size1, size2,
                                    strides, ALIGN, HAS_DS)
        x, dy, ds = x.to(COMPUTE_DTYPE), dy.to(COMPUTE_DTYPE), ds.to(COMPUTE_DTYPE)
        x_hat = x * rstd[:, None]
        _dx_store(DX, x_hat, w[None, :] * dy, c, rstd, ds, rows, cols, row_mask, n_cols,
                  ALIGN, HAS_DS)
        if COMPUTE_DW:
            dw_acc += dy * x_hat.to(X.dtype.element_ty).to(COMPUTE_DTYPE)
    if COMPUTE_DW:
        partial = DW_PARTIAL + slot.to(tl.int64) * n_cols
        tl.store(partial + cols, tl.sum(dw_acc, axis=0), mask=cols < n_cols)


# --8<-- [start:dw_reduce_kernel]
@triton.jit
def dw_reduce_kernel(
    DW_PARTIAL, DW, n_partials, n_cols,
    BLOCK_PARTIALS: tl.constexpr,  # >= n_partials: all partials in one tile
    BLOCK_COLS: tl.constexpr,
):
    # Sum the per-program partials of a few columns. The tree order of tl.sum is
    # fixed for a given grid, so the result is the same bits on every run.
    cols = tl.program_id(0) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
    parts = tl.arange(0, BLOCK_PARTIALS)
    mask = (parts < n_partials)[:, None] & (cols < n_cols)[None, :]
    block = tl.load(DW_PARTIAL + parts.to(tl.int64)[:, None] * n_cols + cols[None, :],
                    mask=mask, other=0.0)
    tl.store(DW + cols, tl.sum(block, axis=0).to(DW.dtype.element_ty),
             mask=cols < n_cols)


# Compile options of every launch below. FMA contraction (a * b + c, rounded once) stays
# on: as every figure on this site was measured, and as Inductor compiles its own
# kernels. Triton 3.10 turns its default off, so it is set here, not inherited.
COMPILE_OPTIONS = {"enable_fp_fusion": True}


def dw_reduce_launch(dw_partial, dw, n_partials: int, block_cols: int):
    """dw_reduce_kernel's grid, arguments by name and launch options."""
    block_partials = triton.next_power_of_2(n_partials)
    reduce_cols = max(1, min(block_cols, 8192 // block_partials))
    args = dict(DW_PARTIAL=dw_partial, DW=dw, n_partials=n_partials, n_cols=dw.numel(),
                BLOCK_PARTIALS=block_partials, BLOCK_COLS=reduce_cols)
    grid = (triton.cdiv(dw.numel(), reduce_cols),)
    return grid, args, dict(num_warps=4, **COMPILE_OPTIONS)


def reduce_dw_partials(dw_partial, dw, n_partials: int, block_cols: int) -> None:
    """dw = the column sums of dw_partial's first n_partials rows, in a fixed order."""
    grid, args, options = dw_reduce_launch(dw_partial, dw, n_partials, block_cols)
    dw_reduce_kernel[grid](**args, **options)
# --8<-- [end:dw_reduce_kernel]


# --8<-- [start:column_blocks]
def column_blocks(n_cols: int) -> tuple[int, int]:
    """(BLOCK_COLS, TAIL_COLS): how a row is split into power-of-two blocks.

    Triton blocks are powers of two. Padding 2560 to 4096 leaves 37.5% of the
    lanes (and their registers) idle, so such a row is a block plus a smaller
    tail block: 2560 = 2048 + 512, 5120 = 4096 + 1024. The split is used only when
    it saves at least a quarter of the lanes.
    """
    block_cols = triton.next_power_of_2(n_cols)
    head = block_cols // 2
    tail = triton.next_power_of_2(max(n_cols - head, 1))
    if block_cols > 256 and n_cols != block_cols and tail <= head // 2:
        return head, tail
    return block_cols, 0
# --8<-- [end:column_blocks]


def _device(device) -> torch.device:
    if device is None:
        return torch.device("cpu" if _interpreted() else "cuda")
    return torch.device(device)


@cached_outside_compile
def _ladder_config(kind: str, n_cols: int, device: torch.device) -> LaunchConfig:
    return pick(getattr(ladders_for(device), kind), n_cols, *column_blocks(n_cols))


def forward_config(n_cols: int, device=None, fused: bool = False) -> LaunchConfig:
    """The forward's launch config on ``device``'s GPU (rmsnorm_config's ladders);
    ``fused``: the fused residual add's."""
    return _ladder_config("fused_forward" if fused else "forward", n_cols,
                          _device(device))


def backward_config(n_cols: int, device=None, fused: bool = False) -> LaunchConfig:
    """The backward's launch config; ``fused``: with the fused add's ds."""
    return _ladder_config("fused_backward" if fused else "backward", n_cols,
                          _device(device))


def candidate_configs(n_cols: int, direction: str) -> list[LaunchConfig]:
    """The configs the H200 sweeps time for rows of n_cols (篇2 §七), in sweep order."""
    return candidates(direction, n_cols, *column_blocks(n_cols))


@cached_outside_compile
def sm_count(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 2  # the interpreter runs programs one after another: keep the grid small


_FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def check_backend_device(name: str, tensor: torch.Tensor) -> None:
    """A tensor on the device Triton runs on: CUDA, or the CPU under the interpreter."""
    expected = "cpu" if _interpreted() else "cuda"
    if tensor.device.type != expected:
        mode = ("TRITON_INTERPRET=1 (CPU interpreter)" if _interpreted()
                else "the CUDA backend")
        raise ValueError(f"{name} is on {tensor.device}, but Triton runs under "
                         f"{mode}: expected a {expected} tensor")


def check_inputs(x: torch.Tensor, weight: torch.Tensor, eps: float) -> None:
    """Reject what the kernels would get wrong, with a message naming the problem."""
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor):
        raise TypeError("rms_norm expects tensors for x and weight")
    if x.dtype not in _FLOAT_DTYPES or weight.dtype not in _FLOAT_DTYPES:
        raise TypeError("rms_norm supports float16/bfloat16/float32/float64, "
                        f"got x={x.dtype}, weight={weight.dtype}")
    if x.dim() == 0:
        raise ValueError("rms_norm needs at least one dimension; got a 0-dim tensor")
    if weight.dim() != 1 or weight.shape[0] != x.shape[-1]:
        raise ValueError(f"weight must have shape ({x.shape[-1]},) to match x's last "
                         f"dim; got {tuple(weight.shape)}")
    if not (isinstance(eps, (int, float)) and eps > 0 and eps != float("inf")):
        raise ValueError(f"eps must be a positive finite float, got {eps!r}")
    for name, tensor in (("x", x), ("weight", weight)):
        check_backend_device(name, tensor)
    if x.device != weight.device:
        raise ValueError(f"x is on {x.device} but weight is on {weight.device}")


def check_pair(x: torch.Tensor, residual: torch.Tensor) -> None:
    """x and residual are added element by element: same shape, dtype and device."""
    if not isinstance(x, torch.Tensor) or not isinstance(residual, torch.Tensor):
        raise TypeError("fused_add_rms_norm expects tensors for x and residual")
    for what in ("shape", "dtype", "device"):
        if getattr(x, what) != getattr(residual, what):
            raise ValueError(f"x and residual must have the same {what}; got "
                             f"{getattr(x, what)} and {getattr(residual, what)}")


def _power_of_two(value) -> bool:
    return isinstance(value, int) and value >= 1 and value & (value - 1) == 0


def check_config(config: LaunchConfig, n_cols: int) -> None:
    """Reject a launch config that the kernels cannot run on rows of n_cols."""
    if not isinstance(config, LaunchConfig):
        raise TypeError(f"config must be a LaunchConfig, got {type(config).__name__}")

    split = column_blocks(n_cols)
    if config.chunked:
        if config.reread:
            raise ValueError("reread is the register backward's: a chunked config "
                             "cannot take it")
        if config.tail_cols != 0 or not _power_of_two(config.block_cols):
            raise ValueError("a chunked config needs a power-of-two block_cols (the "
                             f"chunk) and tail_cols=0, got {config.block_cols}, "
                             f"{config.tail_cols}")
    elif n_cols > MAX_COLS:
        raise ValueError(f"rows of {n_cols} are wider than MAX_COLS={MAX_COLS}: "
                         "only a chunked config can run them")
    elif config.reread and not _covers(config, n_cols):
        raise ValueError(f"config has (block_cols, tail_cols) = "
                         f"{(config.block_cols, config.tail_cols)}: two power-of-two "
                         f"blocks that cover rows of {n_cols} without an empty tail")
    elif not config.reread and (config.block_cols, config.tail_cols) != split:
        raise ValueError(f"config has (block_cols, tail_cols) = "
                         f"{(config.block_cols, config.tail_cols)}; rows of {n_cols} "
                         f"need column_blocks' power-of-two split {split}")

    if not _power_of_two(config.block_rows):
        raise ValueError(
            f"config.block_rows must be a power of two, got {config.block_rows!r}")
    if not (_power_of_two(config.num_warps) and config.num_warps <= 32):
        raise ValueError(f"config.num_warps must be 1, 2, 4, 8, 16 or 32, "
                         f"got {config.num_warps!r}")
    if not (isinstance(config.programs_per_sm, int) and config.programs_per_sm >= 1):
        raise ValueError("config.programs_per_sm must be a positive int, "
                         f"got {config.programs_per_sm!r}")


def _covers(config: LaunchConfig, n_cols: int) -> bool:
    """A block and a tail, powers of two (the tail may be 0), that hold the row and
    leave the tail some columns (the reread backward takes e.g. 16384 = 8192 + 8192)."""
    block, tail = config.block_cols, config.tail_cols
    return (_power_of_two(block) and (tail == 0 or _power_of_two(tail))
            and block + tail >= n_cols and (tail == 0 or block < n_cols))


def split_eps(eps: float, compute) -> tuple[float, float]:
    """Triton passes Python floats as fp32. For fp64 math, send eps as a high part
    that fp32 holds exactly + the remainder, whose fp64 sum is eps to ~1e-16.

    Plain float arithmetic (Veltkamp's split to 24 bits), not struct: torch.compile
    makes eps symbolic when a second value is seen (or with dynamic=True), and
    Dynamo cannot trace struct.pack on a symbolic float.
    """
    if compute != tl.float64:
        return eps, 0.0  # Triton rounds it to fp32, as the math needs
    scaled = eps * 536870913.0  # 2**29 + 1: keeps 53 - 29 = 24 significant bits
    high = scaled - (scaled - eps)
    return high, eps - high


def row_alignment(n_cols: int, *row_strides: int) -> int:
    """The largest power of two, up to 16, that divides n_cols and every row stride.

    Every row then starts at a multiple of it (in elements), which the kernels pass
    to Triton with tl.multiple_of: rows of 1000 bf16 values (2000 bytes) are
    16-byte aligned, but only a hint lets Triton issue 16-byte loads for them.
    """
    align = 16
    for value in (n_cols, *row_strides):
        if value:
            align = min(align, value & -value)
    return align


def compute_dtype(*tensors):
    """The kernels' COMPUTE_DTYPE: fp64 math for fp64 inputs, else fp32."""
    return tl.float64 if any(t.dtype == torch.float64 for t in tensors) else tl.float32


def rows_layout(*tensors):
    """Fold the leading dims of same-shape tensors into at most three row dims.

    Returns the tensors (copied only if a last dim is strided or more than three
    leading dims cannot be folded), (size1, size2) and each tensor's three row strides.
    """
    if all(t.is_contiguous() for t in tensors):  # the common case, fast
        n_cols = tensors[0].shape[-1]
        return (list(tensors), (1, tensors[0].numel() // max(n_cols, 1)),
                [(0, 0, n_cols)] * len(tensors))
    tensors = [t if t.stride(-1) == 1 else t.contiguous() for t in tensors]
    sizes, strides = [], [[] for _ in tensors]
    for dim, size in enumerate(tensors[0].shape[:-1]):
        if size == 1:
            continue
        if sizes and all(s[-1] == t.stride(dim) * size
                         for s, t in zip(strides, tensors)):
            sizes[-1] *= size  # the previous dim folds into this one for every tensor
            for s, t in zip(strides, tensors):
                s[-1] = t.stride(dim)
        else:
            sizes.append(size)
            for s, t in zip(strides, tensors):
                s.append(t.stride(dim))
    if len(sizes) > 3:
        return rows_layout(*[t.contiguous() for t in tensors])
    pad = 3 - len(sizes)
    sizes = [1] * pad + sizes
    strides = [[0] * pad + s for s in strides]
    return tensors, (sizes[1], sizes[2]), strides


def _stats_dtype(compute):
    return torch.float64 if compute == tl.float64 else torch.float32


# --8<-- [start:launch_plan]
# Triton versions whose launch path (JITFunction.run) KernelLaunch repeats, tested on a
# GPU. Any other version launches the usual way: the same kernels, more host time.
FAST_LAUNCH_TRITON = ("3.6.",)


def _launch(kernel, grid, args: dict, options: dict, record: bool):
    """Launches kernel[grid](**args, **options); ``record``: returns a KernelLaunch."""
    if record and isinstance(kernel, triton.runtime.KernelInterface):  # not a wrapper
        return KernelLaunch(kernel, grid, args, options)
    kernel[grid](**args, **options)
    return None


class KernelLaunch:
    """One launch of a compiled kernel, its grid and non-tensor arguments bound.

    ``kernel[grid](...)`` binds every argument, works out their specialization and
    looks the binary up on every call: 20-40 µs of host time on the H200's host,
    three times per forward + backward. The first call goes that way and returns
    the binary; later calls hand the tensors straight to its launcher, as Triton's
    own launch does. Valid only under the key that chose it (_plan_key: shapes,
    strides, dtypes, 16-byte alignment, device). The tensors must come first in
    the kernel's signature; none is kept alive.
    """

    def __init__(self, kernel, grid, args: dict, options: dict):
        self.kernel, self.options = kernel, options
        self.compiled = kernel[grid](**args, **options)
        self.grid = (*grid, 1, 1)[:3]
        values = [args[name] for name in kernel.arg_names]
        n_tensors = sum(isinstance(value, torch.Tensor) for value in values)
        if not all(isinstance(value, torch.Tensor) for value in values[:n_tensors]):
            raise TypeError(f"{kernel.fn.__name__}: tensors must come first")
        self.fixed = values[n_tensors:]

    def __call__(self, *tensors: torch.Tensor) -> None:
        hooks = triton.knobs.runtime
        if _hooked(hooks.launch_enter_hook) or _hooked(hooks.launch_exit_hook):
            self.kernel[self.grid](*tensors, *self.fixed, **self.options)  # profilers
            return
        driver = triton.runtime.driver.active
        stream = driver.get_current_stream(driver.get_current_device())
        binary = self.compiled
        binary.run(*self.grid, stream, binary.function, binary.packed_metadata, None,
                   None, None, *tensors, *self.fixed)


def _hooked(hook) -> bool:
    """A launch hook is set: a profiler's (proton) function, or a non-empty chain."""
    return hook is not None and bool(getattr(hook, "calls", True))


_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter)
_PLAN_DEVICE = "cuda"
_PLANS: dict = {}
MAX_PLANS = 512  # shapes x strides x dtypes seen; past it, the cache starts over


def _plan_key(*items):
    """What decides every launch argument of a call: each tensor's shape, strides,
    dtype, device and 16-byte alignment (Triton specializes on it), the other
    arguments, COMPILE_OPTIONS, and the current CUDA device (Triton loads the
    binary into it and launches on its stream). None when calls take the usual
    path: under torch.compile (Inductor launches the kernels), the interpreter,
    another Triton, a tensor subclass, an argument of another type (its error is
    the usual path's to raise)."""
    if torch.compiler.is_compiling() or not _FAST_LAUNCH:
        return None
    key = [tuple(COMPILE_OPTIONS.values())]
    for item in items:
        if isinstance(item, torch.Tensor):
            if type(item) not in _PLAIN_TENSORS or item.device.type != _PLAN_DEVICE:
                return None
            item = (item.shape, item.stride(), item.dtype, item.device,
                    item.data_ptr() % 16 == 0)
        elif item is not None and type(item) not in (bool, int, float, str):
            return None
        key.append(item)
    key.append(_current_device())
    return tuple(key)


def _current_device():
    return torch.cuda.current_device() if _PLAN_DEVICE == "cuda" else None


def _remember(key, plan) -> None:
    if len(_PLANS) >= MAX_PLANS:
        _PLANS.clear()
    _PLANS[key] = plan


_FAST_LAUNCH = (not _interpreted() and hasattr(triton, "knobs")
                and triton.__version__.startswith(FAST_LAUNCH_TRITON))
# --8<-- [end:launch_plan]


def forward_arguments(x: torch.Tensor, weight: torch.Tensor, eps: float,
                      residual: torch.Tensor | None = None):
    """Checks the inputs and allocates y and rstd. Returns (y, rstd, args): args are
    the forward kernel's arguments by name, all but the launch config (None when
    there are no elements to normalize). With a residual (the fused add), args["S"]
    receives s = residual + x; x and residual are then made contiguous."""
    check_inputs(x, weight, eps)
    weight = weight.contiguous()  # the kernels read w[i] at W + i
    if residual is not None:
        check_pair(x, residual)
        x, residual = x.contiguous(), residual.contiguous()
    n_cols = operator.index(x.shape[-1])  # torch.compile: a constant, as configs need
    n_rows = x.numel() // n_cols if n_cols else 0
    compute = compute_dtype(x, weight)
    y = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype),
                    device=x.device)
    rstd = torch.empty(n_rows, dtype=_stats_dtype(compute), device=x.device)
    if y.numel() == 0:
        return y, rstd, None
    (x,), (size1, size2), (x_strides,) = rows_layout(x)
    eps, eps_low = split_eps(eps, compute)
    s = y if residual is None else torch.empty(x.shape, dtype=x.dtype, device=x.device)
    return y, rstd, dict(
        X=x, W=weight, Y=y, RSTD=rstd, R=x if residual is None else residual, S=s,
        n_rows=n_rows, n_cols=n_cols, eps=eps, eps_low=eps_low, size1=size1,
        size2=size2, x_stride0=x_strides[0], x_stride1=x_strides[1],
        x_stride2=x_strides[2], COMPUTE_DTYPE=compute,
        ALIGN=row_alignment(n_cols, *x_strides), HAS_RESIDUAL=residual is not None)


def launch_forward(args: dict, config: LaunchConfig, record: bool = False):
    """The forward kernel (register or chunked) over forward_arguments' args;
    with ``record``, returns the KernelLaunch that repeats it."""
    grid = (triton.cdiv(args["n_rows"], config.block_rows),)
    options = dict(num_warps=config.num_warps, **COMPILE_OPTIONS)
    if config.chunked:  # the plain norm compiles one binary per width (WIDTH)
        width = 0 if args["HAS_RESIDUAL"] else args["n_cols"]
        return _launch(rms_norm_fwd_chunked_kernel, grid,
                       args | config.constexprs() | {"WIDTH": width}, options, record)
    return _launch(rms_norm_fwd_kernel, grid, args | config.constexprs(), options,
                   record)


class ForwardPlan:
    """rms_norm_forward (or the fused add's) for one _plan_key: allocate, launch."""

    def __init__(self, launch: KernelLaunch, args: dict, y: torch.Tensor):
        self.launch, self.y_dtype = launch, y.dtype
        self.n_rows, self.stats_dtype = args["n_rows"], args["RSTD"].dtype
        self.residual = args["HAS_RESIDUAL"]

    def __call__(self, x, weight, residual=None):
        y = torch.empty(x.shape, dtype=self.y_dtype, device=x.device)
        rstd = torch.empty(self.n_rows, dtype=self.stats_dtype, device=x.device)
        s = torch.empty(x.shape, dtype=x.dtype, device=x.device) if self.residual else y
        self.launch(x, weight, y, rstd, x if residual is None else residual, s)
        return y, rstd, s


def planned_forward(x, weight, eps, residual=None, config=None):
    """(y, rstd, s) of the plain norm (s is y) or, with a residual, the fused add.

    From the call's plan when there is one; else the usual way, and the plan is
    remembered if the kernel read the caller's own tensors (no copy was needed).
    ``config`` (an override) never plans."""
    key = None if config is not None else _plan_key("forward", x, weight, eps, residual)
    plan = _PLANS.get(key) if key is not None else None
    if plan is not None:
        return plan(x, weight, residual)
    y, rstd, args = forward_arguments(x, weight, eps, residual)
    if args is None:
        s = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        return y, rstd, y if residual is None else s
    if config is None:
        config = forward_config(args["n_cols"], x.device, fused=residual is not None)
    else:
        check_config(config, args["n_cols"])
    own = (args["X"] is x and args["W"] is weight
           and (residual is None or args["R"] is residual))
    launch = launch_forward(args, config, record=key is not None and own)
    if launch is not None:
        _remember(key, ForwardPlan(launch, args, y))
    return y, rstd, args["S"]


def rms_norm_forward(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6,
                     config: LaunchConfig | None = None):
    """Returns (y, rstd). y is contiguous with x's shape; rstd has one value per row.

    ``config`` overrides the launch config; None takes ``forward_config``'s.
    """
    return planned_forward(x, weight, eps, config=config)[:2]


def rms_norm_backward(dy, x, weight, rstd, compute_dw: bool = True,
                      eps: float | None = None, config: LaunchConfig | None = None,
                      ds: torch.Tensor | None = None):
    """Returns (dx, dw); dw is None when compute_dw is False. dy is never written.

    ``rstd`` is what rms_norm_forward saved; pass ``rstd=None`` and ``eps`` to
    recompute it. ``ds`` (the fused add, x is then s = residual + x): the gradient
    that x gets from its other uses, added to dx. ``config`` overrides the launch
    config; None takes ``backward_config``'s.
    """
    key = None if config is not None else _plan_key(
        "backward", dy, x, weight, rstd, ds, bool(compute_dw), eps)
    plan = _PLANS.get(key) if key is not None else None
    if plan is not None:
        return plan(dy, x, weight, rstd, ds)
    for name, grad in (("grad_output", dy), ("ds", ds)):
        if grad is not None and grad.shape != x.shape:
            raise ValueError(f"{name} shape {tuple(grad.shape)} does not match "
                             f"input shape {tuple(x.shape)}")
    n_cols = operator.index(x.shape[-1])  # torch.compile: a constant, as configs need
    n_rows = x.numel() // n_cols if n_cols else 0
    if rstd is None and eps is None:
        raise ValueError("pass either the saved rstd or eps to recompute it")
    if rstd is not None and rstd.numel() != n_rows:
        raise ValueError(f"rstd has {rstd.numel()} values for {n_rows} rows")
    compute = compute_dtype(x, weight)
    dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if dx.numel() == 0:  # no rows: dW is a sum over nothing
        return dx, torch.zeros_like(weight) if compute_dw else None
    dw = torch.empty_like(weight) if compute_dw else None
    if config is None:
        config = backward_config(n_cols, x.device, fused=ds is not None)
    else:
        check_config(config, n_cols)
    given = (dy, x, weight, ds)
    weight = weight.contiguous()  # the kernels read w[i] at W + i
    (x, dy), (size1, size2), (x_strides, dy_strides) = rows_layout(x, dy)
    ds = dx if ds is None else ds.contiguous()  # dx: a placeholder, never read
    # A plan repeats the launches only if they read the caller's tensors (no copies).
    record = key is not None and not config.chunked and all(
        a is b for a, b in zip(given, (dy, x, weight, None if ds is dx else ds)))
    n_tiles = triton.cdiv(n_rows, config.block_rows)
    # Row slots of the persistent grid; a chunked config also splits the columns
    # (each program owns one chunk). Each slot writes one row of dW partials.
    n_chunks = triton.cdiv(n_cols, config.block_cols) if config.chunked else 1
    resident = sm_count(x.device) * config.programs_per_sm
    n_slots = max(1, min(n_tiles, resident // n_chunks))
    grid = (n_slots, n_chunks) if config.chunked else (n_slots,)
    dw_partial = (torch.empty((n_slots, n_cols), dtype=_stats_dtype(compute),
                              device=x.device) if compute_dw else dx)
    eps_pair = split_eps(eps or 0.0, compute)
    layout = dict(n_rows=n_rows, n_cols=n_cols, size1=size1, size2=size2,
                  x_stride0=x_strides[0], x_stride1=x_strides[1],
                  x_stride2=x_strides[2], dy_stride0=dy_strides[0],
                  dy_stride1=dy_strides[1], dy_stride2=dy_strides[2],
                  ALIGN=row_alignment(n_cols, *x_strides, *dy_strides),
                  COMPUTE_DTYPE=compute, **config.constexprs("backward"))
    options = dict(num_warps=config.num_warps, **COMPILE_OPTIONS)
    if config.chunked:
        # Step 1 saves rstd and c of each row; step 2 reads them, chunk by chunk.
        row_stats = torch.empty((2, n_rows), dtype=_stats_dtype(compute),
                                device=x.device)
        rms_norm_bwd_row_stats_kernel[(n_tiles,)](
            dy, x, weight, row_stats if rstd is None else rstd, row_stats,
            eps=eps_pair[0], eps_low=eps_pair[1], RECOMPUTE_RSTD=rstd is None,
            **layout, **options)
        rms_norm_bwd_chunked_kernel[grid](
            dy, x, weight, row_stats, dx, dw_partial, ds,
            tiles_per_program=triton.cdiv(n_tiles, n_slots), COMPUTE_DW=compute_dw,
            HAS_DS=ds is not dx, **layout, **options)
        main = None
    else:
        kernel = rms_norm_bwd_reread_kernel if config.reread else rms_norm_bwd_kernel
        main = _launch(kernel, grid, dict(
            DY=dy, X=x, W=weight, RSTD=dx if rstd is None else rstd, DX=dx,
            DW_PARTIAL=dw_partial, DS=ds, eps=eps_pair[0], eps_low=eps_pair[1],
            tiles_per_program=triton.cdiv(n_tiles, n_slots), COMPUTE_DW=compute_dw,
            RECOMPUTE_RSTD=rstd is None, HAS_DS=ds is not dx, **layout), options,
            record)
    reduce = None
    if compute_dw:
        reduce = _launch(dw_reduce_kernel, *dw_reduce_launch(
            dw_partial, dw, n_slots, config.block_cols), record)
    if main is not None:
        _remember(key, BackwardPlan(main, reduce, dw_partial, dx))
    return dx, dw


class BackwardPlan:
    """rms_norm_backward's register path for one _plan_key: allocate, launch twice."""

    def __init__(self, main: KernelLaunch, reduce, dw_partial, dx):
        self.main, self.reduce = main, reduce
        self.partial_shape, self.stats_dtype = dw_partial.shape, dw_partial.dtype

    def __call__(self, dy, x, weight, rstd, ds):
        dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        dw_partial = dx if self.reduce is None else torch.empty(
            self.partial_shape, dtype=self.stats_dtype, device=x.device)
        self.main(dy, x, weight, dx if rstd is None else rstd, dx, dw_partial,
                  dx if ds is None else ds)  # dx: placeholders, never read
        if self.reduce is None:
            return dx, None
        dw = torch.empty_like(weight)
        self.reduce(dw_partial, dw)
        return dx, dw


# --8<-- [start:autograd]
class TritonRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        y, rstd = rms_norm_forward(x, weight, eps)
        ctx.save_for_backward(x, weight, rstd)  # rstd: 4 bytes per row
        return y

    @staticmethod
    def backward(ctx, dy):
        if torch.is_grad_enabled():
            raise NotImplementedError("double backward (create_graph=True) is not "
                                      "implemented for TritonRMSNorm")
        x, weight, rstd = ctx.saved_tensors
        dx, dw = rms_norm_backward(dy, x, weight, rstd,
                                   compute_dw=ctx.needs_input_grad[1])
        return dx, dw, None  # eps is not a tensor: no gradient


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    """Qwen3RMSNorm(x) with Triton forward and backward."""
    return TritonRMSNormFunction.apply(x, weight, eps)
# --8<-- [end:autograd]


# --8<-- [start:module]
class TritonQwen3RMSNorm(torch.nn.Module):
    """Drop-in replacement for transformers' Qwen3RMSNorm(hidden_size, eps)."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return rms_norm(hidden_states, self.weight, self.variance_epsilon)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"
# --8<-- [end:module]


# --8<-- [start:fwd_only]
def reference_rms_norm(x, weight, eps):
    """HF Qwen3RMSNorm's arithmetic in plain torch ops (autograd-friendly)."""
    x32 = x.to(torch.float32) if x.dtype != torch.float64 else x
    x_hat = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + eps)
    return weight * x_hat.to(x.dtype)


class TritonForwardOnlyFunction(torch.autograd.Function):
    """Strategy (a): Triton forward, backward by autograd through torch ops."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return rms_norm_forward(x, weight, eps)[0]

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        with torch.enable_grad():
            x_, w_ = x.detach().requires_grad_(), weight.detach().requires_grad_()
            dx, dw = torch.autograd.grad(reference_rms_norm(x_, w_, ctx.eps),
                                         (x_, w_), dy)
        return dx, dw, None


class TritonQwen3RMSNormFwdOnly(TritonQwen3RMSNorm):
    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return TritonForwardOnlyFunction.apply(hidden_states, self.weight,
                                               self.variance_epsilon)
# --8<-- [end:fwd_only]


if __name__ == "__main__":
    # --8<-- [start:fwd_imports]
    from rmsnorm_triton import _add_residual  # the fused add's (HAS_RESIDUAL)
    # --8<-- [end:fwd_imports]

    # --8<-- [start:bwd_imports]
    from rmsnorm_triton import (_add_residual, _dx_store, _inv_rms, _load_ds,
                                _load_grad_tile, _load_tile, _row_offsets, _store_tile)
    # --8<-- [end:bwd_imports]

    # --8<-- [start:bwd_launch]
    from rmsnorm_triton import (backward_config, reduce_dw_partials, row_alignment,
                                rows_layout, sm_count)

    def rms_norm_backward_registers(dy, x, weight, rstd):
        """dx and dw of rows that fit in registers, bf16/fp16/fp32 (the shipped
        rms_norm_backward adds the checks, wide rows, fp64 and the fused add)."""
        n_cols = x.shape[-1]
        n_rows = x.numel() // n_cols
        config = backward_config(n_cols, x.device)  # the GPU's ladder
        # q/k-norm dy arrives as a transposed view: strides instead of a copy
        (x, dy), (size1, size2), (x_strides, dy_strides) = rows_layout(x, dy)
        n_tiles = triton.cdiv(n_rows, config.block_rows)
        # the persistent grid: one program per row slot, each walking its tiles
        n_slots = min(n_tiles, sm_count(x.device) * config.programs_per_sm)
        dx = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        dw_partial = torch.empty((n_slots, n_cols), dtype=torch.float32,
                                 device=x.device)
        rms_norm_bwd_kernel[(n_slots,)](
            dy, x, weight, rstd, dx, dw_partial, dx,  # DS: unused without the add
            n_rows, n_cols, 0.0, 0.0, triton.cdiv(n_tiles, n_slots),
            size1, size2, *x_strides, *dy_strides,
            **config.constexprs("backward"), COMPUTE_DTYPE=tl.float32,
            COMPUTE_DW=True, RECOMPUTE_RSTD=False, HAS_DS=False,
            ALIGN=row_alignment(n_cols, *x_strides, *dy_strides),
            num_warps=config.num_warps,
        )
        dw = torch.empty_like(weight)
        reduce_dw_partials(dw_partial, dw, n_slots, config.block_cols)  # fixed order
        return dx, dw
    # --8<-- [end:bwd_launch]

    # --8<-- [start:bwd_check]
    device = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: TRITON_INTERPRET=1
    x = torch.randn(6, 5, 256, device=device).to(torch.bfloat16)
    dy = torch.randn(6, 5, 256, device=device).to(torch.bfloat16)
    weight = (torch.rand(256, device=device) + 0.5).to(torch.bfloat16)
    rstd = torch.rsqrt(x.float().pow(2).mean(-1) + 1e-6).reshape(-1)  # the forward's
    dx, dw = rms_norm_backward_registers(dy, x, weight, rstd)

    # torch autograd through HF's formula (x_hat rounded to bf16), in fp32
    x_ref = x.float().requires_grad_()
    w_ref = weight.float().requires_grad_()
    x_hat = x_ref * torch.rsqrt(x_ref.pow(2).mean(-1, keepdim=True) + 1e-6)
    (w_ref * x_hat.to(torch.bfloat16).float()).backward(dy.float())
    for name, ours, ref in (("dx", dx, x_ref.grad), ("dw", dw, w_ref.grad)):
        error = (ours.float() - ref).abs().max() / ref.abs().max()
        print(f"{name}: max error {error.item():.2g} of max |{name}|")
    # --8<-- [end:bwd_check]
