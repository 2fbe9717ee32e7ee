# SPDX-License-Identifier: Apache-2.0
"""Teaching version of a Qwen3 RMSNorm in Triton: one program per row.

Correct (HF cast order, output in the output tensor's own dtype, fp64 accumulation
for fp64 inputs) but deliberately simple: its backward writes one fp32 row of dW
partials per input row, which is why it is slow; rmsnorm_triton.py fixes that.
Contiguous input only.
"""
# --8<-- [start:imports]
import torch
import triton
import triton.language as tl
# --8<-- [end:imports]


# --8<-- [start:naive_fwd_kernel]
@triton.jit
def naive_rms_norm_fwd_kernel(
    X, Y, W, n_cols, eps,
    BLOCK_COLS: tl.constexpr,
    COMPUTE_DTYPE: tl.constexpr,  # tl.float32, or tl.float64 for fp64 inputs
):
    row = tl.program_id(0).to(tl.int64)  # one program = one row
    cols = tl.arange(0, BLOCK_COLS)
    mask = cols < n_cols
    x = tl.load(X + row * n_cols + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    w = tl.load(W + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    mean_square = tl.sum(x * x, axis=0) / n_cols
    rstd = 1.0 / tl.sqrt(mean_square + eps)
    # HF order: normalize in high precision, round to the input dtype, then scale.
    x_hat = (x * rstd).to(X.dtype.element_ty).to(COMPUTE_DTYPE)
    y = x_hat * w
    tl.store(Y + row * n_cols + cols, y.to(Y.dtype.element_ty), mask=mask)
# --8<-- [end:naive_fwd_kernel]


# --8<-- [start:naive_fwd_wrapper]
def naive_rms_norm_fwd(x, weight, eps=1e-6):
    n_cols = x.shape[-1]
    x2d = x.reshape(-1, n_cols).contiguous()
    out_dtype = torch.promote_types(x.dtype, weight.dtype)  # what HF returns
    y = torch.empty(x2d.shape, dtype=out_dtype, device=x.device)
    fp64 = torch.float64 in (x.dtype, weight.dtype)  # fp64 inputs: fp64 math
    naive_rms_norm_fwd_kernel[(x2d.shape[0],)](
        x2d, y, weight, n_cols, eps,
        BLOCK_COLS=triton.next_power_of_2(n_cols),
        COMPUTE_DTYPE=tl.float64 if fp64 else tl.float32,
        num_warps=4,
    )
    return y.reshape(x.shape)
# --8<-- [end:naive_fwd_wrapper]


# --8<-- [start:naive_bwd_kernel]
@triton.jit
def naive_rms_norm_bwd_kernel(
    DY, X, W, DX, DW_ROWS, n_cols, eps,
    BLOCK_COLS: tl.constexpr,
    COMPUTE_DTYPE: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_COLS)
    mask = cols < n_cols
    dy = tl.load(DY + row * n_cols + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    x = tl.load(X + row * n_cols + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    w = tl.load(W + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)  # recomputed
    x_hat = x * rstd
    wdy = w * dy
    c = tl.sum(wdy * x_hat, axis=0) / n_cols
    dx = (wdy - x_hat * c) * rstd
    tl.store(DX + row * n_cols + cols, dx.to(DX.dtype.element_ty), mask=mask)
    # dW needs a sum over all rows: write this row's share, reduce outside.
    x_hat_rounded = x_hat.to(X.dtype.element_ty).to(COMPUTE_DTYPE)
    tl.store(DW_ROWS + row * n_cols + cols, dy * x_hat_rounded, mask=mask)
# --8<-- [end:naive_bwd_kernel]


# --8<-- [start:naive_bwd_wrapper]
def naive_rms_norm_bwd(dy, x, weight, eps=1e-6, compute_dw=True):
    """(dx, dw); dw is None when compute_dw is False. dy is only read."""
    n_cols = x.shape[-1]
    x2d = x.reshape(-1, n_cols).contiguous()
    dy2d = dy.reshape(-1, n_cols).contiguous()
    dx = torch.empty_like(x2d)
    fp64 = torch.float64 in (x.dtype, weight.dtype)
    accum_dtype = torch.float64 if fp64 else torch.float32
    dw_rows = torch.empty(x2d.shape, dtype=accum_dtype, device=x.device)  # R x H!
    naive_rms_norm_bwd_kernel[(x2d.shape[0],)](
        dy2d, x2d, weight, dx, dw_rows, n_cols, eps,
        BLOCK_COLS=triton.next_power_of_2(n_cols),
        COMPUTE_DTYPE=tl.float64 if fp64 else tl.float32,
        num_warps=4,
    )
    # Without compute_dw the kernel still wrote the dW rows; they are just not summed.
    dw = dw_rows.sum(dim=0).to(weight.dtype) if compute_dw else None
    return dx.reshape(x.shape), dw
# --8<-- [end:naive_bwd_wrapper]


if __name__ == "__main__":
    # --8<-- [start:naive_fwd_check]
    import os

    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    # TRITON_INTERPRET=1 (set before triton is imported) runs Triton on the CPU
    device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    x = torch.randn(4, 16, 2560, device=device, dtype=torch.bfloat16)
    hf_norm = Qwen3RMSNorm(2560, eps=1e-6).to(device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        hf_norm.weight.normal_(1.0, 0.1)
        expected = hf_norm(x)
        y = naive_rms_norm_fwd(x, hf_norm.weight, 1e-6)
    # y and HF's output are a bf16 rounding or two apart.
    torch.testing.assert_close(y, expected, rtol=2e-2, atol=1e-5)
    print(f"naive forward matches Qwen3RMSNorm on bf16 {tuple(x.shape)}: "
          f"max |diff| {(y - expected).abs().max().item():.3g}, within bf16 rounding")
    # --8<-- [end:naive_fwd_check]
