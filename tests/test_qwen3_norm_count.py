"""snippets/qwen3_norm_count.py (篇2 §6.1): how many norms the patch replaces."""
import runpy

import pytest

import qwen3_norm_count
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
