"""bench/exp_step_loss.py: the whole set with its loss against Liger's full patch, eager and compiled. Each
contender's patch builds what it names (checked on CPU without running a step: the step machinery is
exp_step's, tested there), and the experiment is exp_step's run over its own contenders, baseline and pairs."""
import argparse

import pytest
import transformers.models.qwen3.modeling_qwen3 as modeling_qwen3
from transformers import Qwen3ForCausalLM

from bench import exp_step, exp_step_fusion, exp_step_loss
from bench.harness import step_runs
from bench.harness.training import ContenderSkipped
from helpers import QWEN3_CLASSES, qwen3_patches_undone
from qwen3_configs import tiny_qwen3_config
from qwen3_fusion_patch import HF_CAUSAL_LM, HF_CAUSAL_LM_FORWARD, fused_loss_forward

@pytest.fixture(autouse=True)
def restore_hf():
    with qwen3_patches_undone() as classes:
        yield classes


@pytest.mark.parametrize("contender", ["fusion_set_loss", "fusion_set_loss_compile"])
def test_our_set_with_its_loss_builds_every_part(contender):
    info = exp_step._install_patch(contender, on_gpu=False)
    model = Qwen3ForCausalLM(tiny_qwen3_config())
    layer = model.model.layers[0]
    assert type(layer).__module__ == "qwen3_fused_add_patch"
    assert type(layer.self_attn).__module__ == type(layer.mlp).__module__ == "qwen3_fusion_patch"
    assert type(model).forward is fused_loss_forward
    assert info["fusion_parts"] == dict.fromkeys(
        ("rms_norm", "fused_add", "qk_norm_rope", "swiglu", "loss"), True)
    assert (contender in exp_step.COMPILED) == contender.endswith("_compile")


@pytest.mark.parametrize("contender", ["liger", "liger_compile"])
def test_liger_contenders_are_skipped_off_the_gpu_and_change_nothing(contender, restore_hf):
    with pytest.raises(ContenderSkipped):
        exp_step._install_patch(contender, on_gpu=False)
    assert {name: getattr(modeling_qwen3, name) for name in QWEN3_CLASSES} == restore_hf
    assert HF_CAUSAL_LM.forward is HF_CAUSAL_LM_FORWARD


def test_compiled_contenders_are_gpu_only():
    for contender in ("liger_compile", "fusion_set_loss_compile"):
        with pytest.raises(ContenderSkipped, match="GPU only"):
            exp_step.measure_contender(contender, step_runs.step_config(True), "cpu")


def test_contenders_pairs_and_the_other_experiments():
    assert exp_step_loss.CONTENDERS == step_runs.LOSS_CONTENDERS
    assert set(exp_step_loss.CONTENDERS) <= set(step_runs.CONTENDERS)
    assert {c for pair in exp_step_loss.PAIRS for c in pair} <= set(exp_step_loss.CONTENDERS)
    assert exp_step_loss.BASELINE == "liger" and exp_step_loss.OURS == "fusion_set_loss"
    assert set(exp_step_fusion.CONTENDERS).isdisjoint({"fusion_set_loss", "liger_compile",
                                                        "fusion_set_loss_compile"})
    assert all(step_runs.CHILD_TIMEOUT_S[c] == 240 for c in exp_step_loss.CONTENDERS if "compile" in c)


def test_run_is_exp_steps_over_its_own_contenders(monkeypatch):
    seen = {}

    def fake_run(args, *given):
        seen["args"] = given
        return {"config": {}, "results": {}}

    monkeypatch.setattr(exp_step_loss, "run_rounds", fake_run)
    payload = exp_step_loss.run(argparse.Namespace(quick=True, out=None))
    assert seen["args"] == ("step_loss", exp_step_loss.CONTENDERS, "liger", "fusion_set_loss")
    assert payload["config"]["pairs"] == [list(p) for p in exp_step_loss.PAIRS]
    assert payload["config"]["eager_target"] == 0.92
