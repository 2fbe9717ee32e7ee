"""snippets/qwen3_norm_count.py (篇2 §6.1) and snippets/rmsnorm_autotune.py (篇2 §七)."""
import runpy

import pytest
import torch
import triton

import qwen3_norm_count
import rmsnorm_autotune
from qwen3_configs import QWEN3_SIZES


@pytest.mark.parametrize("size", list(QWEN3_SIZES))
def test_patch_replaces_four_norms_per_layer_plus_final(size):
    layers, triton_norms, hf_left = qwen3_norm_count.count_replaced_norms(size)
    assert layers == QWEN3_SIZES[size][2]
    assert triton_norms == 4 * layers + 1
    assert hf_left == 0


def test_qwen3_8b_has_145_not_73():
    assert qwen3_norm_count.count_replaced_norms("8B")[1] == 145


def test_count_table_script(capsys):
    runpy.run_path(qwen3_norm_count.__file__, run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(QWEN3_SIZES)
    assert "Qwen3-8B    36 layers -> 145 Triton RMSNorm (4 x 36 + 1), HF Qwen3RMSNorm left: 0" in lines


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
