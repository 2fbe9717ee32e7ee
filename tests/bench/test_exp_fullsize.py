"""bench/harness/fullsize_job.py (experiments fullsize and fullsize_loss): the model-FLOPs count, the patches each contender installs, the summary, the quick run."""
import pytest

from bench import exp_fullsize_loss
from bench.harness import fullsize_job
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
    for contender in fullsize_job.NEEDS_GPU:
        with pytest.raises(fullsize_job.ContenderSkipped):
            fullsize_job.install_patch(contender, on_gpu=False)
    with pytest.raises(ValueError, match="unknown"):
        fullsize_job.install_patch("fast", on_gpu=True)


def test_summary():
    cfg = {"batch": 2, "seq_len": 4}
    record = {"status": "ok", "step_ms": [100.0, 110.0, 90.0], "flops_per_token": 1e12}
    out = fullsize_job.summarise(record, cfg, ceiling=800.0)
    assert out["median_ms"] == 100.0 and out["tokens_per_s"] == pytest.approx(80.0)
    assert out["model_tflops"] == pytest.approx(80.0) and out["mfu"] == pytest.approx(0.1)
    lo, hi = out["ci95_ms"]
    assert 90.0 <= lo <= 100.0 <= hi <= 110.0
    assert out["tokens_per_s_ci95"][0] <= out["tokens_per_s"] <= out["tokens_per_s_ci95"][1]
    assert fullsize_job.summarise({"status": "error"}, cfg, 800.0) == {"status": "error"}


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
        info = fullsize_job.install_patch(contender, on_gpu=False)
        layer = Qwen3ForCausalLM(tiny_qwen3_config()).model.layers[0]
        assert type(layer).__module__ == "qwen3_fused_add_patch"
        assert type(layer.self_attn).__module__ == type(layer.mlp).__module__ == "qwen3_fusion_patch"
        assert (HF_CAUSAL_LM.forward is fused_loss_forward) == (contender == "fusion_set_loss")
        assert info["fusion_parts"]["loss"] == (contender == "fusion_set_loss")


def test_fullsize_loss_runs_the_loss_comparison(monkeypatch):
    """Experiment fullsize_loss is the same job with the loss comparison's contenders, each a known one,
    and its children are started as its own workers; BENCH_FULLSIZE_CONTENDERS still overrides."""
    assert set(exp_fullsize_loss.CONTENDERS) <= set(fullsize_job.CONTENDERS)
    assert {"liger", "fusion_set_loss", "fusion_set_loss_compile"} <= set(exp_fullsize_loss.CONTENDERS)
    monkeypatch.delenv("BENCH_FULLSIZE_CONTENDERS", raising=False)
    assert fullsize_job.selected_contenders(exp_fullsize_loss.CONTENDERS) == list(exp_fullsize_loss.CONTENDERS)
    assert fullsize_job.selected_contenders() == list(fullsize_job.CONTENDERS)
    monkeypatch.setenv("BENCH_FULLSIZE_CONTENDERS", "eager, liger")
    assert fullsize_job.selected_contenders(exp_fullsize_loss.CONTENDERS) == ["eager", "liger"]
    started = []
    monkeypatch.setattr(fullsize_job, "run_contender_process",
                        lambda name, contender, *rest: started.append((name, contender)) or {"status": "error"})
    monkeypatch.setattr(fullsize_job, "gemm_ceiling_tflops", lambda device: None)
    monkeypatch.setenv("BENCH_FULLSIZE_CONTENDERS", "eager")
    import argparse
    exp_fullsize_loss.run(argparse.Namespace(quick=True, out=None))
    assert started == [("fullsize_loss", "eager")]
