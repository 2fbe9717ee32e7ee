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
import qwen3_fused_add_patch
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


def kept_for_backward(model, device) -> int:
    """Bytes of the distinct storages autograd keeps from one forward for the backward. Under
    checkpointing that is, per layer, what the checkpoint keeps: the layer's inputs."""
    sizes = {}

    def pack(tensor):
        storage = tensor.untyped_storage()
        sizes[storage.data_ptr()] = storage.nbytes()  # all alive until the backward: distinct addresses
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        loss = step(model, device)
    loss.backward()
    return sum(sizes.values())


@pytest.mark.parametrize("use_reentrant", [True, False], ids=["reentrant", "non_reentrant"])
def test_checkpointing_keeps_one_tensor_per_layer_boundary(use_reentrant, device, monkeypatch):
    """The fused add hands the next layer an un-added pair (delta, residual). A checkpointed layer keeps
    its inputs until the backward, so a pair would keep one more batch x seq x hidden tensor at each of
    the L - 1 boundaries between layers. The patch passes the sum into a checkpointed layer instead: it
    keeps exactly what the plain Triton norm keeps. Forcing the pair shows the cost the rule removes.
    (A model fused in place runs the same classes: test_checkpointing_recomputes_every_layer covers both.)"""
    layers = 3
    plain = build("plain", device, layers)
    enable(plain, "gradient_checkpointing_enable", use_reentrant)
    expected = kept_for_backward(plain, device)

    fused = build("fused_built", device, layers)
    enable(fused, "gradient_checkpointing_enable", use_reentrant)
    assert kept_for_backward(fused, device) == expected

    monkeypatch.setattr(qwen3_fused_add_patch, "checkpointed", lambda layer: False)  # pairs everywhere
    boundary = 2 * 16 * fused.config.hidden_size * 4  # batch x seq x hidden, fp32 (step's batch)
    assert kept_for_backward(fused, device) == expected + (layers - 1) * boundary


def test_checkpointing_still_fuses_the_add_inside_each_layer(device, monkeypatch):
    """With every layer checkpointed, each layer's post-attention add stays fused, and so does the last
    layer's add into the final norm (that norm is not checkpointed); the adds between layers are not."""
    layers = 3
    model = build("fused_built", device, layers)
    enable(model, "gradient_checkpointing_enable", False)
    calls = []
    fused = qwen3_fused_add_patch.fused_add_rms_norm
    monkeypatch.setattr(qwen3_fused_add_patch, "fused_add_rms_norm",
                        lambda *args, **kwargs: calls.append(1) or fused(*args, **kwargs))
    loss = step(model, device)
    assert len(calls) == layers + 1
    loss.backward()
