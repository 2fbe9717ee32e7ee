"""triton.autotune on the production RMSNorm forward kernel (篇2 §七).

The autotuner times every surviving candidate on the GPU the first time it sees
a new key (here: the row width and the tensor dtypes) and caches the winner.
CUDA only: under TRITON_INTERPRET=1 there is no GPU driver to time with.
"""
# --8<-- [start:autotune]
import functools

import torch
import triton
import triton.language as tl

from rmsnorm_triton import (check_inputs, column_blocks, compute_dtype,
                            rms_norm_fwd_kernel, rows_layout, split_eps)

MAX_TILE = 16384  # values per program held in registers


def candidate_configs():
    return [triton.Config({"BLOCK_ROWS": rows}, num_warps=warps)
            for rows in (1, 2, 4, 8, 16, 32, 64) for warps in (2, 4, 8, 16)]


def keep_small_tiles(configs, named_args, **kwargs):
    # A BLOCK_ROWS x BLOCK_COLS tile lives in registers: drop tiles that would spill.
    return [c for c in configs
            if c.kwargs["BLOCK_ROWS"] * kwargs["BLOCK_COLS"] <= MAX_TILE]


@functools.cache
def autotuned_fwd_kernel():
    return triton.autotune(
        configs=candidate_configs(),
        key=["n_cols"],  # re-tune per row width (tensor dtypes are part of the key too)
        prune_configs_by={"early_config_prune": keep_small_tiles},
    )(rms_norm_fwd_kernel)


def rms_norm_forward_autotuned(x, weight, eps=1e-6):
    check_inputs(x, weight, eps)
    n_cols = x.shape[-1]
    n_rows = x.numel() // n_cols
    compute = compute_dtype(x, weight)
    y = torch.empty(x.shape, dtype=torch.promote_types(x.dtype, weight.dtype),
                    device=x.device)
    rstd = torch.empty(n_rows,
                       dtype=torch.float64 if compute == tl.float64 else torch.float32,
                       device=x.device)
    (x,), (size1, size2), (strides,) = rows_layout(x)
    block_cols, tail_cols = column_blocks(n_cols)
    kernel = autotuned_fwd_kernel()
    kernel[lambda meta: (triton.cdiv(n_rows, meta["BLOCK_ROWS"]),)](
        x, weight, y, rstd, n_rows, n_cols, *split_eps(eps, compute),
        size1, size2, *strides,
        BLOCK_COLS=block_cols, TAIL_COLS=tail_cols, COMPUTE_DTYPE=compute,
    )
    return y, kernel.best_config
# --8<-- [end:autotune]


if __name__ == "__main__":
    # --8<-- [start:usage]
    import torch
    from rmsnorm_autotune import rms_norm_forward_autotuned
    from rmsnorm_triton import forward_config, rms_norm_forward

    for rows, width in [(16384, 4096), (16384 * 32, 128)]:  # hidden rows, q_norm rows
        x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
        weight = torch.rand(width, device="cuda", dtype=torch.bfloat16) + 0.5
        y, best = rms_norm_forward_autotuned(x, weight)
        # The reduction order may differ: close, not bit-identical.
        torch.testing.assert_close(y, rms_norm_forward(x, weight)[0])
        block_rows, _, num_warps = forward_config(width)
        print(f"H={width}: autotune picked BLOCK_ROWS={best.kwargs['BLOCK_ROWS']}, "
              f"num_warps={best.num_warps}; "
              f"shipped heuristic: BLOCK_ROWS={block_rows}, num_warps={num_warps}")
    # --8<-- [end:usage]
