"""bench/exp_fullsize.py: the model-FLOPs count, the patches each contender installs, the summary, the quick run."""
import pytest

from bench import exp_fullsize
from bench.harness import training
from qwen3_configs import qwen3_config


def test_model_flops_of_qwen3_8b():
    config = qwen3_config("8B")
    h, i, v, layers = 4096, 12288, 151936, 36
    q, kv = 32 * 128, 8 * 128
    matmul = layers * (h * q + 2 * h * kv + q * h + 3 * h * i) + h * v
    assert training.model_flops_per_token(config, 4096) == 6 * matmul + 6 * layers * 4096 * q
    # The matmul parameters are the model's minus the embedding and the norm weights.
    norms = layers * (2 * h + 2 * 128) + h
    assert matmul == 8_190_735_360 - v * h - norms


def test_gpu_only_contenders_are_skipped_on_cpu():
    for contender in exp_fullsize.NEEDS_GPU:
        with pytest.raises(exp_fullsize.ContenderSkipped):
            exp_fullsize.install_patch(contender, on_gpu=False)
    with pytest.raises(ValueError, match="unknown"):
        exp_fullsize.install_patch("fast", on_gpu=True)


def test_summary():
    cfg = {"batch": 2, "seq_len": 4}
    record = {"status": "ok", "step_ms": [100.0, 110.0, 90.0], "flops_per_token": 1e12}
    out = exp_fullsize.summarise(record, cfg, ceiling=800.0)
    assert out["median_ms"] == 100.0 and out["tokens_per_s"] == pytest.approx(80.0)
    assert out["model_tflops"] == pytest.approx(80.0) and out["mfu"] == pytest.approx(0.1)
    lo, hi = out["ci95_ms"]
    assert 90.0 <= lo <= 100.0 <= hi <= 110.0
    assert out["tokens_per_s_ci95"][0] <= out["tokens_per_s"] <= out["tokens_per_s_ci95"][1]
    assert exp_fullsize.summarise({"status": "error"}, cfg, 800.0) == {"status": "error"}


def test_quick_run(quick_fullsize, on_gpu):
    cfg, results = quick_fullsize["config"], quick_fullsize["results"]
    assert list(results) == ["triton_fused_add", "liger"]
    fused = results["triton_fused_add"]
    assert fused["status"] == "ok", fused
    assert fused["checkpointing"] is True and fused["norm_classes"] == ["Qwen3RMSNorm"]
    assert len(fused["step_ms"]) == len(fused["losses"]) == cfg["timed_steps"]
    assert fused["ci95_ms"][0] <= fused["median_ms"] <= fused["ci95_ms"][1]
    assert results["liger"]["status"] == ("ok" if on_gpu else "skipped"), results["liger"]


@pytest.mark.parametrize("contender", ["fusion_set", "fusion_set_loss"])
def test_fusion_set_contenders_patch_every_part(contender):
    from transformers import Qwen3ForCausalLM

    from helpers import qwen3_patches_undone
    from qwen3_configs import tiny_qwen3_config
    from qwen3_fusion_patch import HF_CAUSAL_LM, fused_loss_forward

    with qwen3_patches_undone():
        info = exp_fullsize.install_patch(contender, on_gpu=False)
        layer = Qwen3ForCausalLM(tiny_qwen3_config()).model.layers[0]
        assert type(layer).__module__ == "qwen3_fused_add_patch"
        assert type(layer.self_attn).__module__ == type(layer.mlp).__module__ == "qwen3_fusion_patch"
        assert (HF_CAUSAL_LM.forward is fused_loss_forward) == (contender == "fusion_set_loss")
        assert info["fusion_parts"]["loss"] == (contender == "fusion_set_loss")
