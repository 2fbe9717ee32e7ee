"""Gradient checkpointing still recomputes every layer under both Qwen3 patches.

transformers 5.23 moved the checkpointing of decoder layers into the class: a layer class's
forward is wrapped when the class is created. A patch that assigns a new forward to the class
afterwards loses checkpointing with no error. The evidence here is a count: through one
forward and loss.backward(), every Qwen3MLP.forward runs once without checkpointing and twice
with it (the backward recomputes the layer). Run on every transformers the suite runs
(.ci/test.sh), with both use_reentrant settings and each API this transformers has.
"""
import inspect
import warnings

import pytest
import torch
import transformers
import transformers.models.qwen3.modeling_qwen3 as modeling_qwen3
from transformers import Qwen3ForCausalLM

from qwen3_configs import tiny_qwen3_config
from qwen3_fused_add_patch import (HF_LAYER, HF_MODEL, HF_NORM, apply_fused_add_rmsnorm,
                                   patch_qwen3_fused_add_rmsnorm)
from qwen3_patch import patch_qwen3_rmsnorm

LAYERS = 2
PATCHES = ("hf", "plain", "fused_in_place", "fused_built")
APIS = ("gradient_checkpointing_enable", "activation_checkpointing_enable")


@pytest.fixture(autouse=True)
def restore_hf():
    yield
    modeling_qwen3.Qwen3RMSNorm, modeling_qwen3.Qwen3DecoderLayer = HF_NORM, HF_LAYER
    modeling_qwen3.Qwen3Model = HF_MODEL


def build(patch, device, layers=LAYERS):
    """A tiny Qwen3 in training mode, under ``patch``."""
    torch.manual_seed(0)
    config = tiny_qwen3_config(num_hidden_layers=layers)
    undo = {"plain": patch_qwen3_rmsnorm, "fused_built": patch_qwen3_fused_add_rmsnorm}.get(
        patch, lambda: (lambda: None))()
    model = Qwen3ForCausalLM(config)
    undo()
    if patch == "fused_in_place":
        apply_fused_add_rmsnorm(model)
    return model.to(device).train()


@pytest.fixture
def mlp_calls(monkeypatch):
    """The number of Qwen3MLP.forward calls so far (Qwen3MLP is no checkpointing layer)."""
    calls = []
    forward = modeling_qwen3.Qwen3MLP.forward

    def counted(self, *args, **kwargs):
        calls.append(self)
        return forward(self, *args, **kwargs)

    monkeypatch.setattr(modeling_qwen3.Qwen3MLP, "forward", counted)
    return calls


def enable(model, api, use_reentrant, **options):
    if not hasattr(model, api):
        pytest.skip(f"transformers {transformers.__version__} has no {api}")
    kwargs_name = ("activation_checkpointing_kwargs" if api.startswith("activation")
                   else "gradient_checkpointing_kwargs")
    with warnings.catch_warnings():  # from 5.23 the older name warns (FutureWarning)
        warnings.simplefilter("ignore", FutureWarning)
        getattr(model, api)(**{kwargs_name: {"use_reentrant": use_reentrant}}, **options)


def step(model, device):
    """The loss of one batch (gradients zeroed first)."""
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, model.config.vocab_size, (2, 16), generator=gen).to(device)
    model.zero_grad(set_to_none=True)
    return model(input_ids=ids, labels=ids).loss


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("use_reentrant", [True, False], ids=["reentrant", "non_reentrant"])
@pytest.mark.parametrize("patch", PATCHES)
def test_checkpointing_recomputes_every_layer(patch, use_reentrant, api, device, mlp_calls):
    plain = build(patch, device)
    loss = step(plain, device)
    forward_calls = len(mlp_calls)
    loss.backward()
    assert (forward_calls, len(mlp_calls)) == (LAYERS, LAYERS)  # no checkpointing: no recompute
    grads = {n: p.grad.clone() for n, p in plain.named_parameters()}

    model = build(patch, device)
    enable(model, api, use_reentrant)
    mlp_calls.clear()
    checkpointed = step(model, device)
    forward_calls = len(mlp_calls)
    checkpointed.backward()
    assert (forward_calls, len(mlp_calls)) == (LAYERS, 2 * LAYERS), (
        f"{patch}: the backward recomputed {len(mlp_calls) - forward_calls} of {LAYERS} layers")
    torch.testing.assert_close(checkpointed, loss, rtol=1e-6, atol=0)
    for name, param in model.named_parameters():
        torch.testing.assert_close(param.grad, grads[name], rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.parametrize("patch", PATCHES)
def test_every_n_layers_recomputes_every_nth_layer(patch, device, mlp_calls):
    """activation_checkpointing_enable(every_n_layers=2) where this transformers has it."""
    model = build(patch, device, layers=4)
    api = getattr(model, "activation_checkpointing_enable", None)
    if api is None or "every_n_layers" not in inspect.signature(api).parameters:
        pytest.skip(f"transformers {transformers.__version__} has no every_n_layers")
    api(activation_checkpointing_kwargs={"use_reentrant": False}, every_n_layers=2)
    mlp_calls.clear()
    step(model, device).backward()
    assert len(mlp_calls) == 4 + 2  # layers 0 and 2 recomputed


def test_the_count_sees_a_patch_that_loses_checkpointing(device, mlp_calls, monkeypatch):
    """The failure this file guards against, reproduced: a forward assigned to the layer
    class after its creation. On transformers >= 5.23 the backward then recomputes nothing;
    before 5.23 checkpointing wrapped __call__, so the assignment kept it."""
    wraps_forward = "__init_subclass__" in vars(modeling_qwen3.GradientCheckpointingLayer)
    monkeypatch.setattr(HF_LAYER, "forward", HF_LAYER.forward.__wrapped__
                        if wraps_forward else HF_LAYER.forward)
    model = build("hf", device)
    enable(model, "gradient_checkpointing_enable", False)
    mlp_calls.clear()
    step(model, device).backward()
    assert len(mlp_calls) == (LAYERS if wraps_forward else 2 * LAYERS)
