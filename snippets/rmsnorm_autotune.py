# SPDX-License-Identifier: Apache-2.0
"""triton.autotune on the production RMSNorm forward kernel (篇2 §七).

The autotuner times every candidate on the GPU the first time it sees
a new key (here: the row width and the tensor dtypes) and caches the winner.
CUDA only: under TRITON_INTERPRET=1 there is no GPU driver to time with.
"""
# --8<-- [start:autotune]
import functools

import triton

from rmsnorm_triton import candidate_configs, forward_arguments, rms_norm_fwd_kernel


@functools.cache
def autotuned_fwd_kernel(n_cols):
    # The sweep's register candidates (the chunked ones launch another kernel)
    configs = [triton.Config(c.constexprs(), num_warps=c.num_warps)
               for c in candidate_configs(n_cols, "forward") if not c.chunked]
    return triton.autotune(configs=configs, key=["n_cols"])(rms_norm_fwd_kernel)


def rms_norm_forward_autotuned(x, weight, eps=1e-6):
    # The autotuner supplies BLOCK_ROWS, BLOCK_COLS, TAIL_COLS and num_warps.
    y, _, args = forward_arguments(x, weight, eps)
    kernel = autotuned_fwd_kernel(x.shape[-1])
    kernel[lambda meta: (triton.cdiv(args["n_rows"], meta["BLOCK_ROWS"]),)](**args)
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
        shipped = forward_config(width)
        print(f"H={width}: autotune picked BLOCK_ROWS={best.kwargs['BLOCK_ROWS']}, "
              f"num_warps={best.num_warps}; shipped heuristic: "
              f"BLOCK_ROWS={shipped.block_rows}, num_warps={shipped.num_warps}")
    # --8<-- [end:usage]
