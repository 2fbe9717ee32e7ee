"""bench/exp_step_fusion.py: the fusion-set step tiers. Each contender's patch builds the modules it names
(checked on CPU without running a step: the step machinery is exp_step's, tested there), and the experiment
is exp_step's run over its own contenders, baseline and pairs."""
import argparse

import pytest
import transformers.models.qwen3.modeling_qwen3 as modeling_qwen3
from transformers import Qwen3ForCausalLM

from bench import exp_step, exp_step_fusion
from bench.harness import step_runs
from bench.harness.training import ContenderSkipped
from helpers import QWEN3_CLASSES, qwen3_patches_undone
from qwen3_configs import tiny_qwen3_config

@pytest.fixture(autouse=True)
def restore_hf():
    with qwen3_patches_undone() as classes:
        yield classes


@pytest.mark.parametrize("contender, attention, mlp, norm", [
    ("triton_qk_rope", "qwen3_fusion_patch", "transformers", "TritonQwen3RMSNorm"),
    ("triton_swiglu", "transformers", "qwen3_fusion_patch", "TritonQwen3RMSNorm"),
    ("fusion_set", "qwen3_fusion_patch", "qwen3_fusion_patch", "Qwen3RMSNorm"),
])
def test_our_tiers_build_the_modules_they_name(contender, attention, mlp, norm):
    info = exp_step._install_patch(contender, on_gpu=False)
    model = Qwen3ForCausalLM(tiny_qwen3_config())
    layer = model.model.layers[0]
    assert type(layer.self_attn).__module__.split(".")[0] == attention
    assert type(layer.mlp).__module__.split(".")[0] == mlp
    assert info["norm_class"] == norm == type(layer.input_layernorm).__name__
    assert (type(layer).__module__ == "qwen3_fused_add_patch") == (contender == "fusion_set")


@pytest.mark.parametrize("contender", ["triton_liger_rope", "triton_liger_swiglu", "liger_no_loss"])
def test_liger_tiers_are_skipped_off_the_gpu_and_change_nothing(contender, restore_hf):
    with pytest.raises(ContenderSkipped):
        exp_step._install_patch(contender, on_gpu=False)
    assert {name: getattr(modeling_qwen3, name) for name in QWEN3_CLASSES} == restore_hf


def test_every_contender_and_pair_is_a_step_contender():
    assert set(exp_step_fusion.CONTENDERS) <= set(step_runs.CONTENDERS)
    assert set(exp_step_fusion.CONTENDERS).isdisjoint(step_runs.STEP_CONTENDERS[:3])
    assert {c for pair in exp_step_fusion.PAIRS for c in pair} <= set(exp_step_fusion.CONTENDERS)
    assert exp_step_fusion.BASELINE in exp_step_fusion.CONTENDERS


def test_run_is_exp_steps_over_its_own_contenders(monkeypatch):
    seen = {}

    def fake_run(args, *given):
        seen["args"] = given
        return {"config": {}, "results": {}}

    monkeypatch.setattr(exp_step_fusion, "run_rounds", fake_run)
    payload = exp_step_fusion.run(argparse.Namespace(quick=True, out=None))
    assert seen["args"] == ("step_fusion", exp_step_fusion.CONTENDERS, "triton", "fusion_set")
    assert payload["config"]["pairs"] == [list(p) for p in exp_step_fusion.PAIRS]
    monkeypatch.setenv("BENCH_STEP_CONTENDERS", "")
    assert step_runs.selected_contenders(exp_step_fusion.CONTENDERS) == exp_step_fusion.CONTENDERS
    assert step_runs.selected_contenders() == step_runs.STEP_CONTENDERS
