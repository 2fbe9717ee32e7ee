"""bench/explore_widths.py's shared-memory forwards (PERF_LOG run 19, Gluon attempts; copies by
cp.async or TMA): they compute what the shipped forward computes. Gluon cannot run under the interpreter, so this is GPU-only."""
from __future__ import annotations

import pytest
import torch

import rmsnorm_triton
from bench import explore_widths

EPS = 1e-6


@pytest.mark.gpu
@pytest.mark.parametrize("copy, width, chunk, slots, warps, per_sm", [
    ("cp.async", 20480, 4096, 5, 16, 1),     # one row in the ring
    ("cp.async", 20480, 4096, 10, 16, 2),    # two rows: the refill runs into the next row
    ("cp.async", 24576 + 8, 8192, 5, 16, 1),  # a partial last chunk
    ("cp.async", 65536, 4096, 27, 16, 1),    # the ring holds less than two rows
    ("tma", 20480, 4096, 5, 16, 1),
    ("tma", 20480, 4096, 7, 8, 2),  # the ring's phases do not line up with the rows
    ("tma", 65536, 8192, 12, 16, 1),
])
def test_smem_forward_matches_the_shipped_one(on_gpu, copy, width, chunk, slots, warps, per_sm):
    if not on_gpu:
        pytest.skip("Gluon needs a CUDA GPU; the interpreter cannot run it")
    if copy == "tma" and torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("TMA needs sm_90+")
    forward = {"cp.async": explore_widths.smem_forward, "tma": explore_widths.tma_forward}[copy]
    rows = 997  # not a multiple of the grid: some programs get one row fewer
    gen = torch.Generator(device="cuda").manual_seed(width + slots)
    x = torch.randn(rows, width, device="cuda", generator=gen).to(torch.bfloat16)
    w = (torch.rand(width, device="cuda", generator=gen) + 0.5).to(torch.bfloat16)
    y = torch.full_like(x, float("nan"))
    rstd = torch.full((rows,), float("nan"), device="cuda")
    forward(x, w, chunk, slots, warps, per_sm, out=(y, rstd))
    y0, rstd0 = rmsnorm_triton.rms_norm_forward(x, w, EPS)
    torch.testing.assert_close(rstd, rstd0, rtol=1e-6, atol=0)
    # the row sums are added in another order, and x-hat and y are each rounded to bf16:
    # at most 2 bf16 ulps apart
    ulp = torch.finfo(torch.bfloat16).eps * torch.maximum(y.float().abs(), y0.float().abs())
    assert bool(((y.float() - y0.float()).abs() <= 2 * ulp).all())
    assert bool(torch.isfinite(y).all())


@pytest.mark.parametrize("copy, shape, chunk, transpose, message", [
    ("cp.async", (4, 20484), 4096, False, "multiple of 8"),
    ("cp.async", (20480, 4), 4096, True, "contiguous"),
    ("tma", (4, 20480), 3072, False, "dividing the row"),
    ("tma", (4, 20480), 4096 + 8, False, "k x 256"),
])
def test_smem_forwards_refuse_rows_they_cannot_copy(copy, shape, chunk, transpose, message):
    forward = {"cp.async": explore_widths.smem_forward, "tma": explore_widths.tma_forward}[copy]
    x = torch.zeros(shape, dtype=torch.bfloat16)
    x = x.t() if transpose else x
    with pytest.raises(ValueError, match=message):
        forward(x, torch.ones(x.shape[1], dtype=torch.bfloat16), chunk, 5, 16, 1)
