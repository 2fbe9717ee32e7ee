"""The register backward that reads each row tile twice (``LaunchConfig.reread``,
``rms_norm_bwd_reread_kernel``): the row's dot from the first read, dx and dW from the
second. With and without the fused add's ds, saved or recomputed rstd, every tile of
every slot of the persistent grid, and the launch rules that pick it.
"""
import pytest
import torch

import rmsnorm_triton
from helpers import REL_TOL, fp64_reference, poisoned_allocations, random_inputs, rel_err
from rmsnorm_triton import LaunchConfig, rms_norm_backward, rms_norm_forward, sm_count


def register(block, tail, warps=4, per_sm=1):
    return LaunchConfig(1, block, tail, warps, per_sm, reread=True)


CONFIGS = [
    (300, register(256, 64)),  # column_blocks' split
    (300, register(512, 0)),  # one padded block
    (256, register(128, 128)),  # two equal halves
    (1000, register(512, 512, per_sm=2)),  # a masked tail, 2 programs per SM
]


def slots_inputs(n_cols, dtype, device, seed):
    # 3 tiles per program and a partial last one: every tile of every slot
    n_rows = 3 * sm_count(torch.device(device)) * 2 + 1
    return random_inputs((n_rows, n_cols), dtype, device, seed)


@pytest.mark.parametrize("n_cols, config", CONFIGS, ids=str)
def test_reread_backward_matches_fp64(n_cols, config, device):
    x, w, dy = slots_inputs(n_cols, torch.float64, device, seed=n_cols + config.tail_cols)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    with poisoned_allocations():
        dx, dw = rms_norm_backward(dy, x, w, rstd, config=config)
        dx_r, dw_r = rms_norm_backward(dy, x, w, None, eps=1e-6, config=config)
    _, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
    for name, got, ref in (("dx", dx, ref_dx), ("dw", dw, ref_dw),
                           ("dx, rstd recomputed", dx_r, ref_dx), ("dw, rstd recomputed", dw_r, ref_dw)):
        assert rel_err(got, ref) < 1e-12, name


@pytest.mark.parametrize("n_cols, config", CONFIGS, ids=str)
def test_reread_backward_adds_ds(n_cols, config, device):
    """The fused add's backward: dx + ds, dW unchanged; without dW, dx is the same within fp64
    rounding (the two are compiled apart: Triton 3.9 contracts their FMAs differently, so they
    can differ in the last bits, as they did on the H200)."""
    x, w, dy = slots_inputs(n_cols, torch.float64, device, seed=n_cols + 7)
    ds = torch.randn_like(dy)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    with poisoned_allocations():
        dx, dw = rms_norm_backward(dy, x, w, rstd, config=config, ds=ds)
        dx_only, no_dw = rms_norm_backward(dy, x, w, rstd, compute_dw=False, config=config, ds=ds)
    _, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
    assert rel_err(dx, ref_dx + ds) < 1e-12 and rel_err(dw, ref_dw) < 1e-12
    assert no_dw is None and rel_err(dx_only, dx) < 1e-14


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32], ids=str)
@pytest.mark.parametrize("n_cols, config", [CONFIGS[0], CONFIGS[3]], ids=str)
def test_reread_backward_matches_the_shipped_one_in_16_bit(n_cols, config, dtype, device):
    """Same formula as the register backward, summed in another order: within rounding."""
    x, w, dy = slots_inputs(n_cols, dtype, device, seed=n_cols + 11)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    dx, dw = rms_norm_backward(dy, x, w, rstd, config=config)
    _, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
    assert rel_err(dx, ref_dx) < REL_TOL[dtype] and rel_err(dw, ref_dw) < REL_TOL[dtype]
    dx_shipped, dw_shipped = rms_norm_backward(dy, x, w, rstd)
    assert rel_err(dx, dx_shipped) < REL_TOL[dtype] and rel_err(dw, dw_shipped) < REL_TOL[dtype]
    again = rms_norm_backward(dy, x, w, rstd, config=config)
    assert torch.equal(again[0], dx) and torch.equal(again[1], dw)  # deterministic


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_reread_dw_is_the_register_backwards_bits(dtype, device):
    """dW takes HF's cast order (x_hat rounded to the input dtype before the product) in
    the same per-program order as the register backward: the same bits. dx differs only
    in how the row's dot is rounded."""
    x, w, dy = slots_inputs(300, dtype, device, seed=12)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    _, dw = rms_norm_backward(dy, x, w, rstd, config=register(256, 64))
    _, dw_register = rms_norm_backward(dy, x, w, rstd, config=LaunchConfig(1, 256, 64, 4, 1, prefetch=False))
    assert torch.equal(dw, dw_register)


def test_reread_strided_views(device):
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(2, 4, 3, 200, generator=gen, dtype=torch.float64).transpose(1, 2).to(device)
    dy = torch.randn(2, 4, 3, 200, generator=gen, dtype=torch.float64).transpose(1, 2).to(device)
    w = torch.randn(200, generator=gen, dtype=torch.float64).to(device)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    _, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
    for config in (register(128, 128), register(256, 0)):
        dx, dw = rms_norm_backward(dy, x, w, rstd, config=config)
        assert rel_err(dx, ref_dx) < 1e-12 and rel_err(dw, ref_dw) < 1e-12, config


@pytest.mark.parametrize("block, tail, why", [
    (128, 64, "cover"),  # 192 lanes for rows of 300
    (512, 64, "empty tail"),  # the block alone holds the row
    (256, 48, "power-of-two"),
])
def test_a_reread_split_that_cannot_run_the_row_is_refused(block, tail, why, device):
    x, w, dy = random_inputs((2, 300), torch.float32, device, seed=1)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    with pytest.raises(ValueError, match="two power-of-two blocks that cover"):
        rms_norm_backward(dy, x, w, rstd, config=register(block, tail))


def test_a_plain_register_config_still_needs_column_blocks_split(device):
    x, w, dy = random_inputs((2, 256), torch.float32, device, seed=2)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    with pytest.raises(ValueError, match="column_blocks' power-of-two split"):
        rms_norm_backward(dy, x, w, rstd, config=LaunchConfig(1, 128, 128, 4))


def test_a_chunked_reread_config_is_refused(device):
    x, w, dy = random_inputs((2, 300), torch.float32, device, seed=4)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    with pytest.raises(ValueError, match="reread is the register backward's"):
        rms_norm_backward(dy, x, w, rstd, config=LaunchConfig(1, 128, 0, 4, chunked=True, reread=True))


def test_reread_configs_launch_the_reread_kernel(device, monkeypatch):
    """Which kernel each config launches (a spy on the backward kernels)."""
    launched = []
    for name in ("rms_norm_bwd_kernel", "rms_norm_bwd_reread_kernel", "rms_norm_bwd_row_stats_kernel",
                 "rms_norm_bwd_chunked_kernel"):
        kernel = getattr(rmsnorm_triton, name)

        class Spy:
            def __getitem__(self, grid, kernel=kernel, name=name):
                launched.append(name)
                return kernel[grid]
        monkeypatch.setattr(rmsnorm_triton, name, Spy())
    x, w, dy = random_inputs((5, 300), torch.float32, device, seed=3)
    _, rstd = rms_norm_forward(x, w, 1e-6)
    for config in (register(256, 64), LaunchConfig(1, 128, 0, 4, 1, chunked=True), LaunchConfig(1, 256, 64, 4)):
        rms_norm_backward(dy, x, w, rstd, config=config)
    assert launched == ["rms_norm_bwd_reread_kernel", "rms_norm_bwd_row_stats_kernel",
                        "rms_norm_bwd_chunked_kernel", "rms_norm_bwd_kernel"]


@pytest.mark.parametrize("fused", [False, True])
def test_the_h200_ladders_reread_rows_of_12288_to_16384_lanes(fused):
    """The rule the ladders implement (explore-widths-222b803-reread.json): rows of more than
    12288 and at most MAX_COLS lanes, 16-byte aligned, take the reread backward on 16 warps,
    one program per SM; narrower and wider rows, and rows without 16-byte loads, do not."""
    from rmsnorm_config import LADDERS, MAX_COLS, pick

    ladder = LADDERS["sm_90"].fused_backward if fused else LADDERS["sm_90"].backward
    for n_cols in (12296, 13000, 14336, 16000, MAX_COLS):
        config = pick(ladder, n_cols, *rmsnorm_triton.column_blocks(n_cols))
        assert config == LaunchConfig(1, 16384, 0, 16, 1, reread=True), n_cols
    for n_cols in (8192, 10000, 12288, 16383, MAX_COLS + 8, 32768):
        assert not pick(ladder, n_cols, *rmsnorm_triton.column_blocks(n_cols)).reread, n_cols
