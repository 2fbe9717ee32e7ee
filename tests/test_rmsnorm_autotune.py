"""snippets/rmsnorm_autotune.py (篇2 §七): the triton.autotune version of the forward."""
import runpy

import pytest
import torch
import triton

import rmsnorm_autotune


@pytest.mark.parametrize("block_cols", [128, 1024, 4096, 8192, 16384])
def test_pruning_keeps_register_sized_tiles(block_cols):
    kept = rmsnorm_autotune.keep_small_tiles(rmsnorm_autotune.candidate_configs(), {}, BLOCK_COLS=block_cols)
    assert kept, "pruning must leave at least one config"
    assert all(c.kwargs["BLOCK_ROWS"] * block_cols <= rmsnorm_autotune.MAX_TILE for c in kept)
    dropped = len(rmsnorm_autotune.candidate_configs()) - len(kept)
    assert dropped == sum(1 for c in rmsnorm_autotune.candidate_configs()
                          if c.kwargs["BLOCK_ROWS"] * block_cols > rmsnorm_autotune.MAX_TILE)


class FirstSurvivingConfig:
    """Stands in for the autotuner on CPU (the interpreter cannot time): prune, then launch the first config."""

    def __init__(self, kernel):
        self.kernel, self.best_config = kernel, None

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            config = rmsnorm_autotune.keep_small_tiles(rmsnorm_autotune.candidate_configs(), {}, **kwargs)[-1]
            meta = {**kwargs, **config.kwargs}
            self.kernel[grid(meta)](*args, **kwargs, **config.kwargs, num_warps=config.num_warps)
            self.best_config = config
        return launch


def test_autotuned_wrapper_passes_the_kernel_arguments_right(device, monkeypatch):
    """The wrapper's launch (argument order, eps split, strides, grid from meta) against the shipped forward."""
    from rmsnorm_triton import rms_norm_forward, rms_norm_fwd_kernel

    assert isinstance(rmsnorm_autotune.autotuned_fwd_kernel(), triton.runtime.Autotuner)
    monkeypatch.setattr(rmsnorm_autotune, "autotuned_fwd_kernel", lambda: FirstSurvivingConfig(rms_norm_fwd_kernel))
    for shape, dtype in [((40, 256), torch.bfloat16), ((2, 3, 5, 128), torch.float32), ((7, 96), torch.float64)]:
        x = torch.randn(shape, device=device, dtype=dtype)
        if len(shape) == 4:
            x = x.transpose(1, 2)  # a strided q_norm-like view
        weight = torch.rand(shape[-1], device=device, dtype=dtype) + 0.5
        y, best = rmsnorm_autotune.rms_norm_forward_autotuned(x, weight)
        assert best.kwargs["BLOCK_ROWS"] * triton.next_power_of_2(shape[-1]) <= rmsnorm_autotune.MAX_TILE
        torch.testing.assert_close(y, rms_norm_forward(x, weight)[0])


@pytest.mark.gpu
@pytest.mark.parametrize("rows, width", [(4096, 4096), (16384, 128), (1000, 2560)])
def test_autotuned_forward_matches_shipped(rows, width):  # pragma: gpu only
    from rmsnorm_triton import rms_norm_forward

    x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
    weight = torch.rand(width, device="cuda", dtype=torch.bfloat16) + 0.5
    y, best = rmsnorm_autotune.rms_norm_forward_autotuned(x, weight)
    assert isinstance(best, triton.Config)
    assert best.kwargs["BLOCK_ROWS"] * triton.next_power_of_2(width) <= rmsnorm_autotune.MAX_TILE
    torch.testing.assert_close(y, rms_norm_forward(x, weight)[0])  # reduction order may differ


@pytest.mark.gpu
def test_autotune_usage_script(capsys):  # pragma: gpu only
    runpy.run_path(rmsnorm_autotune.__file__, run_name="__main__")
    assert "autotune picked" in capsys.readouterr().out
