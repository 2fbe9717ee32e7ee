"""The fused residual add + RMSNorm patch: every add->norm pair fused, Qwen3 trains like HF."""

import pytest
import torch
import transformers.models.qwen3.modeling_qwen3 as modeling_qwen3
from transformers import Qwen3ForCausalLM

import qwen3_fused_add_patch
from qwen3_configs import tiny_qwen3_config
from qwen3_fused_add_patch import patch_qwen3_fused_add_rmsnorm
from qwen3_patch import patch_qwen3_rmsnorm

PATCHED = (modeling_qwen3.Qwen3RMSNorm, modeling_qwen3.Qwen3DecoderLayer, modeling_qwen3.Qwen3Model)
HF_FORWARDS = {cls: cls.__dict__["forward"] for cls in PATCHED}


@pytest.fixture(autouse=True)
def restore_hf():
    yield
    for cls, forward in HF_FORWARDS.items():
        cls.forward = forward


def tiny_model(device, dtype=torch.float32, layers=2, **overrides):
    """A tiny HF Qwen3 with non-trivial norm weights (a wrong weight path would show)."""
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(tiny_qwen3_config(num_hidden_layers=layers, **overrides))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    return model.to(device=device, dtype=dtype)


def batch(model, device, shape=(2, 16), seed=1):
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.config.vocab_size, shape, generator=gen).to(device)


def loss_and_grads(model, ids):
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach().double(), {n: p.grad.double() for n, p in model.named_parameters()}


def rel_err(got, ref):
    return ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def counting(monkeypatch, name):
    """Count the calls the patch makes to qwen3_fused_add_patch.<name>."""
    calls = []
    inner = getattr(qwen3_fused_add_patch, name)

    def wrapper(*args, **kwargs):
        calls.append(args[0].shape)
        return inner(*args, **kwargs)

    monkeypatch.setattr(qwen3_fused_add_patch, name, wrapper)
    return calls


@pytest.mark.parametrize("layers", [2, 3])
def test_every_add_norm_pair_is_one_fused_call(device, monkeypatch, layers):
    model = tiny_model(device, layers=layers)
    ids = batch(model, device)
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    fused, plain = counting(monkeypatch, "fused_add_rms_norm"), counting(monkeypatch, "rms_norm")
    undo = patch_qwen3_fused_add_rmsnorm()
    with torch.no_grad():
        logits = model(input_ids=ids).logits
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
    undo = patch_qwen3_fused_add_rmsnorm()
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


def test_gradient_checkpointing_passes_the_pair(device):
    model = tiny_model(device)
    model.gradient_checkpointing_enable()
    model.train()
    ids = batch(model, device)
    hf_loss, hf_grads = loss_and_grads(model, ids)
    undo = patch_qwen3_fused_add_rmsnorm()
    loss, grads = loss_and_grads(model, ids)
    undo()
    torch.testing.assert_close(loss, hf_loss, rtol=1e-6, atol=0)
    for name, grad in grads.items():
        assert rel_err(grad, hf_grads[name]) < 1e-5, name


def test_undo_restores_hf_bit_for_bit(device):
    model = tiny_model(device)
    ids = batch(model, device)
    before_loss, before_grads = loss_and_grads(model, ids)
    undo = patch_qwen3_fused_add_rmsnorm()
    assert all(cls.forward is not HF_FORWARDS[cls] for cls in PATCHED)
    loss_and_grads(model, ids)
    undo()
    assert all(cls.__dict__["forward"] is HF_FORWARDS[cls] for cls in PATCHED)
    after_loss, after_grads = loss_and_grads(model, ids)
    assert torch.equal(after_loss, before_loss)
    assert all(torch.equal(after_grads[n], g) for n, g in before_grads.items())
    undo()  # a second undo changes nothing
    assert all(cls.__dict__["forward"] is HF_FORWARDS[cls] for cls in PATCHED)


def test_patching_twice_raises_and_keeps_the_first_patch():
    undo = patch_qwen3_fused_add_rmsnorm()
    patched = {cls: cls.__dict__["forward"] for cls in PATCHED}
    with pytest.raises(RuntimeError, match="already patched"):
        patch_qwen3_fused_add_rmsnorm()
    assert {cls: cls.__dict__["forward"] for cls in PATCHED} == patched
    undo()
    patch_qwen3_fused_add_rmsnorm()()  # patch, undo: fine again


def test_models_built_under_the_patch_keep_hf_parameters_and_keys(device):
    reference = tiny_model(device)
    undo = patch_qwen3_fused_add_rmsnorm()
    model = Qwen3ForCausalLM(reference.config).to(device)
    undo()
    assert list(model.state_dict()) == list(reference.state_dict())
    model.load_state_dict(reference.state_dict())  # an HF checkpoint loads as is
    ids = batch(model, device)
    with torch.no_grad():
        expected = reference(input_ids=ids).logits
        patch_qwen3_fused_add_rmsnorm()
        torch.testing.assert_close(model(input_ids=ids).logits, expected, rtol=1e-5, atol=1e-5)


def test_generate_with_cache_and_padding_matches_hf(device):
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
    undo = patch_qwen3_fused_add_rmsnorm()
    tokens = model.generate(ids, **options)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask).logits
    undo()
    assert torch.equal(tokens, expected)
    torch.testing.assert_close(logits, hf_logits, rtol=1e-5, atol=1e-5)


def test_output_hidden_states_raises_clearly(device):
    model = tiny_model(device)
    ids = batch(model, device)
    patch_qwen3_fused_add_rmsnorm()
    with pytest.raises(NotImplementedError, match="output_hidden_states"):
        model(input_ids=ids, output_hidden_states=True)


def test_attentions_and_return_dict_are_hfs(device):
    """HF's output capture (capture_outputs) still wraps the patched Qwen3Model.forward:
    output_attentions records every layer's attention weights, return_dict=False a tuple."""
    model = tiny_model(device, layers=3, attn_implementation="eager")
    ids = batch(model, device)
    with torch.no_grad():
        expected = model(input_ids=ids, output_attentions=True)
        expected_tuple = model.model(input_ids=ids, return_dict=False)
        undo = patch_qwen3_fused_add_rmsnorm()
        got = model(input_ids=ids, output_attentions=True)
        got_tuple = model.model(input_ids=ids, return_dict=False)
    undo()
    assert isinstance(got.attentions, tuple) and len(got.attentions) == 3
    for ours, theirs in zip(got.attentions, expected.attentions):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    assert isinstance(got_tuple, tuple) and len(got_tuple) == len(expected_tuple)
    torch.testing.assert_close(got_tuple[0], expected_tuple[0], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("name", ["past_key_values", "cache"])
def test_either_cache_name_is_accepted(device, name):
    """transformers 5.24 calls the KV cache `cache` (5.17: past_key_values; the old name is
    an alias until 5.40): the patched model takes either and returns HF's field."""
    model = tiny_model(device).eval()
    ids = batch(model, device, (1, 6))
    undo = patch_qwen3_fused_add_rmsnorm()
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


def test_refuses_versions_outside_the_tested_range(monkeypatch):
    # the module object the patch reads (transformers swaps its lazy module on first use)
    for version in ("5.16.2", "5.25.0", "6.0.0"):
        monkeypatch.setattr(qwen3_fused_add_patch.transformers, "__version__", version)
        with pytest.raises(RuntimeError, match=f"tested with transformers 5.17 to 5.24.*found {version}"):
            patch_qwen3_fused_add_rmsnorm()
    monkeypatch.setattr(qwen3_fused_add_patch.transformers, "__version__", "5.20.1")
    patch_qwen3_fused_add_rmsnorm()()  # inside the range: the forwards' signatures decide
    monkeypatch.undo()
    monkeypatch.delattr(modeling_qwen3, "create_causal_mask")
    with pytest.raises(RuntimeError, match="create_causal_mask"):
        patch_qwen3_fused_add_rmsnorm()
    monkeypatch.undo()
    monkeypatch.setattr(modeling_qwen3.Qwen3DecoderLayer, "forward", lambda self, x, mask: x)
    with pytest.raises(RuntimeError, match="Qwen3DecoderLayer.forward takes"):
        patch_qwen3_fused_add_rmsnorm()
    assert modeling_qwen3.Qwen3RMSNorm.forward is HF_FORWARDS[modeling_qwen3.Qwen3RMSNorm]


def test_refuses_other_norm_classes(device):
    undo_plain = patch_qwen3_rmsnorm()
    with pytest.raises(RuntimeError, match="undo the other patch"):
        patch_qwen3_fused_add_rmsnorm()
    model = Qwen3ForCausalLM(tiny_qwen3_config()).to(device)  # Triton norm modules
    undo_plain()
    patch_qwen3_fused_add_rmsnorm()
    with pytest.raises(TypeError, match="TritonQwen3RMSNorm"):
        model(input_ids=batch(model, device))
