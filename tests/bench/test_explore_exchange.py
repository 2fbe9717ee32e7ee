"""bench/explore_widths.py's exchange kernels (PERF_LOG run 18, an attempt not shipped): they
compute what the shipped two-pass chunked kernels compute. Under the interpreter a row is one chunk (its programs
run one at a time, so several chunks of a row would wait for each other forever); on the GPU
a row is five chunks that exchange their partial sums."""
from __future__ import annotations

import pytest
import torch

import rmsnorm_fused_add
import rmsnorm_triton
from bench import explore_widths

EPS = 1e-6


@pytest.mark.parametrize("prefetch", [True, False])
def test_exchange_kernels_match_the_shipped_ones(device, on_gpu, prefetch):
    rows, width, chunk = (300, 20480, 4096) if on_gpu else (37, 1000, 1024)
    gen = torch.Generator().manual_seed(width + prefetch)
    x, residual, dy, ds = (torch.randn(rows, width, generator=gen).to(torch.bfloat16).to(device)
                           for _ in range(4))
    w = (torch.rand(width, generator=gen) + 0.5).to(torch.bfloat16).to(device)
    config = rmsnorm_triton.LaunchConfig(2, chunk, 0, 4, 2, chunked=True)
    assert explore_widths._exchange_grid(config, rows, width)[1] == (5 if on_gpu else 1)

    def same(got, expected):
        for g, e in zip(got, expected, strict=True):
            if on_gpu:  # the partial sums are added in another order: 1 bf16 ulp, and dW's grouping
                torch.testing.assert_close(g.float(), e.float(), rtol=2e-2, atol=2e-2)
            else:
                assert torch.equal(g, e)

    # against the shipped two-pass chunked kernels at the same config
    y, rstd = rmsnorm_triton.rms_norm_forward(x, w, EPS, config=config)
    same(explore_widths.exchange_forward(x, w, None, config, prefetch), (y, rstd))
    same(explore_widths.exchange_forward(x, w, residual, config, prefetch),
         rmsnorm_fused_add.fused_add_rms_norm_forward(x, residual, w, EPS, config=config))
    dx, dw = explore_widths.exchange_backward(dy, x, w, rstd, None, config, prefetch)
    assert not torch.equal(dx, explore_widths.exchange_backward(dy, x, w, rstd, ds, config,
                                                                prefetch)[0])
    same((dx, dw), rmsnorm_triton.rms_norm_backward(dy, x, w, rstd, config=config))
    same(explore_widths.exchange_backward(dy, x, w, rstd, ds, config, prefetch),
         rmsnorm_fused_add.fused_add_rms_norm_backward(dy, ds, x, w, rstd, config=config))
