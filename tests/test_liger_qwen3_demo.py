"""snippets/liger_qwen3_demo.py: Liger's Qwen3 patch builds (CPU) and trains (GPU) a tiny Qwen3 (篇2 §2.2)."""
import pathlib
import runpy

import pytest

pytest.importorskip("liger_kernel", reason="liger-kernel is not installed")

from transformers.models.qwen3 import modeling_qwen3  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
SNIPPET = ROOT / "snippets" / "liger_qwen3_demo.py"


def test_patch_swaps_every_norm_and_mlp_then_restores(capsys):
    original = (modeling_qwen3.Qwen3RMSNorm, modeling_qwen3.Qwen3MLP,
                modeling_qwen3.apply_rotary_pos_emb, modeling_qwen3.Qwen3ForCausalLM.forward)
    demo = runpy.run_path(str(SNIPPET), run_name="__main__")  # on CUDA: also fwd+bwd vs HF
    layers = demo["config"].num_hidden_layers
    assert demo["counts"] == {"LigerRMSNorm": 4 * layers + 1, "LigerSwiGLUMLP": layers}
    assert "modules by class" in capsys.readouterr().out
    restored = (modeling_qwen3.Qwen3RMSNorm, modeling_qwen3.Qwen3MLP,
                modeling_qwen3.apply_rotary_pos_emb, modeling_qwen3.Qwen3ForCausalLM.forward)
    assert restored == original


@pytest.mark.gpu
def test_liger_training_step_matches_hf(capsys):
    runpy.run_path(str(SNIPPET), run_name="__main__")
    assert "gradients match" in capsys.readouterr().out
