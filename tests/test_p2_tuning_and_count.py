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


@pytest.mark.gpu
@pytest.mark.parametrize("rows, width", [(4096, 4096), (16384, 128), (1000, 2560)])
def test_autotuned_forward_matches_shipped(rows, width):  # pragma: gpu only
    from rmsnorm_triton import rms_norm_forward

    x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
    weight = torch.rand(width, device="cuda", dtype=torch.bfloat16) + 0.5
    y, best = rmsnorm_autotune.rms_norm_forward_autotuned(x, weight)
    assert isinstance(best, triton.Config)
    assert best.kwargs["BLOCK_ROWS"] * triton.next_power_of_2(width) <= rmsnorm_autotune.MAX_TILE
    torch.testing.assert_close(y, rms_norm_forward(x, weight)[0], rtol=0, atol=0)


@pytest.mark.gpu
def test_autotune_usage_script(capsys):  # pragma: gpu only
    runpy.run_path(rmsnorm_autotune.__file__, run_name="__main__")
    assert "autotune picked" in capsys.readouterr().out
