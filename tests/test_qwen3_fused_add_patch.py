"""The fused residual add + RMSNorm patch: every add->norm pair fused, and everything HF's
Qwen3 does still works: loss and gradients, the model's own eps, the KV cache and generate,
output_attentions, output_hidden_states, return_dict, parameters and state_dict, undo.
Both ways in are tested: apply_fused_add_rmsnorm(model) on a built model, and a model built
under patch_qwen3_fused_add_rmsnorm(). Checkpointing: tests/test_qwen3_checkpointing.py."""

import pytest
import torch
import transformers.models.qwen3.modeling_qwen3 as modeling_qwen3
from transformers import Qwen3ForCausalLM

import qwen3_fused_add_patch
import qwen3_mirrored_code
from helpers import batch, loss_and_grads, rel_err, tiny_model
from qwen3_configs import tiny_qwen3_config
from qwen3_fused_add_patch import (HF_LAYER, HF_MODEL, HF_NORM, apply_fused_add_rmsnorm,
                                   patch_qwen3_fused_add_rmsnorm)
from qwen3_patch import patch_qwen3_rmsnorm

HF = {"Qwen3RMSNorm": HF_NORM, "Qwen3DecoderLayer": HF_LAYER, "Qwen3Model": HF_MODEL}
WAYS = ("apply", "patch")


@pytest.fixture(autouse=True)
def restore_hf():
    yield
    for name, cls in HF.items():
        setattr(modeling_qwen3, name, cls)


def module_globals():
    return {name: getattr(modeling_qwen3, name) for name in HF}




def fused_copy(model, way):
    """(the model fused as a reader would, undo). "apply": this model, in place;
    "patch": a new model built under the build-time patch, loaded with its weights."""
    if way == "apply":
        return model, apply_fused_add_rmsnorm(model)
    undo_patch = patch_qwen3_fused_add_rmsnorm()
    fused = Qwen3ForCausalLM(model.config)
    undo_patch()
    fused.load_state_dict(model.state_dict())
    parameter = next(model.parameters())
    return fused.to(device=parameter.device, dtype=parameter.dtype), lambda: None








def counting(monkeypatch, name):
    """Count the calls the patch makes to qwen3_fused_add_patch.<name>."""
    calls = []
    inner = getattr(qwen3_fused_add_patch, name)

    def wrapper(*args, **kwargs):
        calls.append(args[0].shape)
        return inner(*args, **kwargs)

    monkeypatch.setattr(qwen3_fused_add_patch, name, wrapper)
    return calls


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("layers", [2, 3])
def test_every_add_norm_pair_is_one_fused_call(device, monkeypatch, layers, way):
    model = tiny_model(device, layers=layers)
    ids = batch(model, device)
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    fused_model, undo = fused_copy(model, way)
    fused, plain = counting(monkeypatch, "fused_add_rms_norm"), counting(monkeypatch, "rms_norm")
    with torch.no_grad():
        logits = fused_model(input_ids=ids).logits
    undo()
    # Two adds per layer, each fused into the norm after it (the last one into model.norm);
    # plain: layer 0's input norm, and q_norm, k_norm of every layer: 4L+1 norms in all.
    assert len(fused) == 2 * layers
    assert len(plain) == 1 + 2 * layers
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_loss_and_every_grad_match_hf(device, dtype):
    """fp32: HF and the patch agree to rounding. bf16: both are compared with an fp64 run of
    HF; the patch's error may be at most twice HF's own bf16 error (plus a floor for
    near-exact parameters): the residual sums round exactly as HF's, only the norm's fp32
    reduction order differs, which can flip a bf16 rounding of x_hat."""
    model = tiny_model(device, dtype)
    ids = batch(model, device)
    hf_loss, hf_grads = loss_and_grads(model, ids)
    undo = apply_fused_add_rmsnorm(model)
    loss, grads = loss_and_grads(model, ids)
    undo()
    assert grads.keys() == hf_grads.keys() and len(grads) == len(list(model.parameters()))
    if dtype == torch.float32:
        torch.testing.assert_close(loss, hf_loss, rtol=1e-6, atol=0)
        for name, grad in grads.items():
            assert rel_err(grad, hf_grads[name]) < 1e-5, name
        return
    exact_loss, exact_grads = loss_and_grads(model.double(), ids)  # HF in fp64: the truth
    hf_err = abs(hf_loss - exact_loss).item()
    assert abs(loss - exact_loss).item() <= 2 * hf_err + 1e-3 * exact_loss.item()
    for name, grad in grads.items():
        ours, theirs = rel_err(grad, exact_grads[name]), rel_err(hf_grads[name], exact_grads[name])
        assert ours <= 2 * theirs + 1e-2, (name, ours, theirs)


@pytest.mark.parametrize("way", WAYS)
def test_the_models_own_eps_is_used(device, way):
    """A model with rms_norm_eps=1e-5 (this test's activations make that differ from the
    default 1e-6 by far more than rounding): fused and plain norms use the module's eps."""
    model = tiny_model(device, rms_norm_eps=1e-5)
    ids = batch(model, device)
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        other_eps = tiny_model(device)  # the same weights (same seed), eps 1e-6
        eps_matters = (other_eps(input_ids=ids).logits - expected).abs().max().item()
        fused_model, undo = fused_copy(model, way)
        got = fused_model(input_ids=ids).logits
    undo()
    assert eps_matters > 1e-3  # the check below can tell the two eps apart
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


def test_undo_restores_hf_bit_for_bit(device):
    model = tiny_model(device)
    ids = batch(model, device)
    before_loss, before_grads = loss_and_grads(model, ids)
    classes = [type(m) for m in model.modules()]
    undo = apply_fused_add_rmsnorm(model)
    assert {type(m).__name__ for m in model.modules() if type(m) not in classes} == set(HF)
    loss_and_grads(model, ids)
    undo()
    assert [type(m) for m in model.modules()] == classes
    after_loss, after_grads = loss_and_grads(model, ids)
    assert torch.equal(after_loss, before_loss)
    assert all(torch.equal(after_grads[n], g) for n, g in before_grads.items())
    undo()  # a second undo changes nothing
    assert [type(m) for m in model.modules()] == classes


def test_the_build_time_patch_swaps_only_what_modeling_qwen3_builds():
    undo = patch_qwen3_fused_add_rmsnorm()
    assert {name: cls.__module__ for name, cls in module_globals().items()} == dict.fromkeys(
        HF, "qwen3_fused_add_patch")
    undo()
    assert module_globals() == HF
    undo()  # a second undo changes nothing
    assert module_globals() == HF


def test_patching_twice_raises_and_keeps_the_first_patch():
    undo = patch_qwen3_fused_add_rmsnorm()
    patched = module_globals()
    with pytest.raises(RuntimeError, match="already patched"):
        patch_qwen3_fused_add_rmsnorm()
    assert module_globals() == patched
    undo()
    patch_qwen3_fused_add_rmsnorm()()  # patch, undo: fine again
    assert module_globals() == HF


def test_fusing_a_model_twice_raises_and_changes_nothing(device):
    model = tiny_model(device)
    undo = apply_fused_add_rmsnorm(model)
    fused_classes = [type(m) for m in model.modules()]
    with pytest.raises(RuntimeError, match="already fused"):
        apply_fused_add_rmsnorm(model)
    assert [type(m) for m in model.modules()] == fused_classes
    undo()
    built = fused_copy(model, "patch")[0]  # built fused: applying again is refused too
    with pytest.raises(RuntimeError, match="already fused"):
        apply_fused_add_rmsnorm(built)


def test_models_built_under_the_patch_keep_hf_names_parameters_and_keys(device):
    reference = tiny_model(device)
    model, _ = fused_copy(reference, "patch")
    assert list(model.state_dict()) == list(reference.state_dict())
    # HF's class names: _no_split_modules, FSDP's and accelerate's layer lookups go by name
    names = {type(m).__name__ for m in model.modules()}
    assert set(model._no_split_modules) <= names and "Qwen3DecoderLayer" in names
    assert type(model.model.layers[0]).__module__ == "qwen3_fused_add_patch"
    ids = batch(model, device)
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, reference(input_ids=ids).logits,
                                   rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("way", WAYS)
def test_generate_with_cache_and_padding_matches_hf(device, way):
    """Inference path: prefill + decoding with a DynamicCache and a left-padded batch."""
    model = tiny_model(device).eval()
    ids = batch(model, device, (2, 8))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding in the first row
    options = dict(attention_mask=mask, max_new_tokens=5, do_sample=False, use_cache=True,
                   pad_token_id=0)
    expected = model.generate(ids, **options)
    with torch.no_grad():
        hf_logits = model(input_ids=ids, attention_mask=mask).logits
    fused_model, undo = fused_copy(model, way)
    tokens = fused_model.eval().generate(ids, **options)
    with torch.no_grad():
        logits = fused_model(input_ids=ids, attention_mask=mask).logits
    undo()
    assert torch.equal(tokens, expected)
    torch.testing.assert_close(logits, hf_logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("way", WAYS)
def test_output_hidden_states_are_hfs(device, way):
    """Every layer's output (residual + MLP output), the embeddings first and the final
    norm's output last, as HF records them; asked for in the call or in the config."""
    model = tiny_model(device, layers=3)
    ids = batch(model, device)
    with torch.no_grad():
        expected = model(input_ids=ids, output_hidden_states=True).hidden_states
    fused_model, undo = fused_copy(model, way)
    with torch.no_grad():
        got = fused_model(input_ids=ids, output_hidden_states=True).hidden_states
        fused_model.config.output_hidden_states = True
        from_config = fused_model.model(input_ids=ids).hidden_states
        fused_model.config.output_hidden_states = False
        without = fused_model(input_ids=ids).hidden_states
    undo()
    assert isinstance(got, tuple) and len(got) == len(expected) == 3 + 1
    for ours, theirs in zip(got, expected):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    assert len(from_config) == 4 and without is None
    torch.testing.assert_close(from_config[-1], expected[-1], rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("way", WAYS)
def test_attentions_and_return_dict_are_hfs(device, way):
    """HF's output capture (capture_outputs) still wraps the fused Qwen3Model.forward:
    output_attentions records every layer's attention weights, return_dict=False a tuple."""
    model = tiny_model(device, layers=3, attn_implementation="eager")
    ids = batch(model, device)
    with torch.no_grad():
        expected = model(input_ids=ids, output_attentions=True)
        expected_tuple = model.model(input_ids=ids, return_dict=False)
        fused_model, undo = fused_copy(model, way)
        got = fused_model(input_ids=ids, output_attentions=True)
        got_tuple = fused_model.model(input_ids=ids, return_dict=False)
    undo()
    assert isinstance(got.attentions, tuple) and len(got.attentions) == 3
    for ours, theirs in zip(got.attentions, expected.attentions):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    assert isinstance(got_tuple, tuple) and len(got_tuple) == len(expected_tuple)
    torch.testing.assert_close(got_tuple[0], expected_tuple[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["past_key_values", "cache"])
def test_either_cache_name_is_accepted(device, name):
    """transformers 5.24 calls the KV cache `cache` (5.17: past_key_values; the old name is
    an alias until 5.40): the fused model takes either and returns HF's field."""
    model = tiny_model(device).eval()
    ids = batch(model, device, (1, 6))
    undo = apply_fused_add_rmsnorm(model)
    with torch.no_grad():
        cache = modeling_qwen3.DynamicCache(config=model.config)
        out = model.model(input_ids=ids[:, :4], use_cache=True, **{name: cache})
        step = model.model(input_ids=ids[:, 4:], use_cache=True, **{name: cache})
    undo()
    field = qwen3_fused_add_patch.CACHE  # the installed version's output field
    assert getattr(out, field) is cache and getattr(step, field) is cache
    assert cache.get_seq_length() == 6
    with torch.no_grad():
        expected = model.model(input_ids=ids).last_hidden_state[:, 4:]
    torch.testing.assert_close(step.last_hidden_state, expected, rtol=1e-4, atol=1e-5)


def test_untested_transformers_code_is_refused_by_name(device, monkeypatch):
    """A transformers whose mirrored code is not a tested version's: both ways in refuse,
    name the piece that differs, and change nothing."""
    real = qwen3_mirrored_code.fingerprint()
    changed = dict(real, GradientCheckpointingLayer="0123456789ab")
    monkeypatch.setattr(qwen3_mirrored_code, "fingerprint", lambda: changed)
    model = tiny_model(device)
    classes = [type(m) for m in model.modules()]
    for way in (patch_qwen3_fused_add_rmsnorm, lambda: apply_fused_add_rmsnorm(model)):
        with pytest.raises(RuntimeError, match=r"differs from \S+ in GradientCheckpointingLayer"):
            way()
    assert module_globals() == HF and [type(m) for m in model.modules()] == classes


def test_refuses_other_norm_classes(device):
    undo_plain = patch_qwen3_rmsnorm()
    with pytest.raises(RuntimeError, match="undo the other patch"):
        patch_qwen3_fused_add_rmsnorm()
    model = Qwen3ForCausalLM(tiny_qwen3_config()).to(device)  # Triton norm modules
    undo_plain()
    classes = [type(m) for m in model.modules()]
    with pytest.raises(TypeError, match="TritonQwen3RMSNorm"):
        apply_fused_add_rmsnorm(model)
    assert [type(m) for m in model.modules()] == classes  # nothing half converted
    undo_fused = patch_qwen3_fused_add_rmsnorm()  # the other order: fused, then plain
    undo_plain = patch_qwen3_rmsnorm()
    with pytest.raises(TypeError, match="TritonQwen3RMSNorm"):
        Qwen3ForCausalLM(tiny_qwen3_config())  # its layers would hand Triton norms a residual
    undo_plain()
    undo_fused()
    assert module_globals() == HF


def test_refuses_a_model_without_qwen3():
    with pytest.raises(ValueError, match="no Qwen3Model"):
        apply_fused_add_rmsnorm(torch.nn.Linear(4, 4))
