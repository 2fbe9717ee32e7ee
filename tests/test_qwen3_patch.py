"""The monkey patch swaps all 4L+1 norms, and a patched Qwen3 trains like the original."""
import pytest
import torch
import transformers.models.qwen3.modeling_qwen3 as modeling_qwen3
from transformers import Qwen3ForCausalLM

from qwen3_configs import qwen3_config, rmsnorm_count, tiny_qwen3_config
from qwen3_patch import (
    HF_QWEN3_RMSNORM,
    count_modules,
    patch_qwen3_rmsnorm,
    replace_rmsnorm_modules,
    unpatch_qwen3_rmsnorm,
)
from rmsnorm_triton import TritonQwen3RMSNorm, TritonQwen3RMSNormFwdOnly


@pytest.fixture(autouse=True)
def restore_modeling_qwen3():
    yield
    unpatch_qwen3_rmsnorm()


@pytest.mark.parametrize("size, layers", [("8B", 36), ("0.6B", 28), ("14B", 40)])
def test_patch_replaces_every_norm_of_real_geometries(size, layers):
    undo = patch_qwen3_rmsnorm()
    with torch.device("meta"):
        model = Qwen3ForCausalLM(qwen3_config(size))
    undo()
    assert modeling_qwen3.Qwen3RMSNorm is HF_QWEN3_RMSNORM
    assert count_modules(model, TritonQwen3RMSNorm) == 4 * layers + 1
    assert count_modules(model, HF_QWEN3_RMSNORM) == 0
    layer = model.model.layers[0]
    for module in (layer.input_layernorm, layer.post_attention_layernorm, layer.self_attn.q_norm,
                   layer.self_attn.k_norm, model.model.norm):
        assert isinstance(module, TritonQwen3RMSNorm)
    assert layer.self_attn.q_norm.weight.shape == (128,)


def build_pair(device, dtype):
    torch.manual_seed(0)
    config = tiny_qwen3_config()
    reference = Qwen3ForCausalLM(config).to(device=device, dtype=dtype)
    with torch.no_grad():  # non-trivial norm weights, so a wrong weight path would show
        for module in reference.modules():
            if isinstance(module, HF_QWEN3_RMSNORM):
                module.weight.uniform_(0.5, 1.5)
    undo = patch_qwen3_rmsnorm()
    patched = Qwen3ForCausalLM(config).to(device=device, dtype=dtype)
    undo()
    patched.load_state_dict(reference.state_dict())
    return config, reference, patched


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_patched_tiny_qwen3_matches_loss_and_grads(device, dtype):
    config, reference, patched = build_pair(device, dtype)
    assert count_modules(patched, TritonQwen3RMSNorm) == rmsnorm_count(config)
    gen = torch.Generator().manual_seed(1)
    ids = torch.randint(0, config.vocab_size, (2, 16), generator=gen).to(device)
    losses = []
    for model in (reference, patched):
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        losses.append(loss.detach().float())
    tol = 1e-5 if dtype == torch.float32 else 2e-2
    torch.testing.assert_close(losses[1], losses[0], rtol=tol, atol=0)
    ref_grads = dict(reference.named_parameters())
    for name, param in patched.named_parameters():
        ref = ref_grads[name].grad.double()
        err = ((param.grad.double() - ref).norm() / ref.norm().clamp_min(1e-12)).item()
        assert err < (1e-4 if dtype == torch.float32 else 6e-2), (name, err)


def test_replace_in_place_keeps_parameters(device):
    torch.manual_seed(0)
    config = tiny_qwen3_config()
    model = Qwen3ForCausalLM(config).to(device)
    ids = torch.randint(0, config.vocab_size, (1, 8), device=device)
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    params_before = {id(p) for p in model.parameters()}
    assert replace_rmsnorm_modules(model) == rmsnorm_count(config)
    assert {id(p) for p in model.parameters()} == params_before  # optimizer state stays valid
    assert count_modules(model, HF_QWEN3_RMSNORM) == 0
    with torch.no_grad():
        torch.testing.assert_close(model(input_ids=ids).logits, expected, rtol=1e-4, atol=1e-4)
    assert replace_rmsnorm_modules(model) == 0  # idempotent


def test_forward_only_class_can_be_patched_in():
    undo = patch_qwen3_rmsnorm(TritonQwen3RMSNormFwdOnly)
    model = Qwen3ForCausalLM(tiny_qwen3_config())
    undo()
    assert count_modules(model, TritonQwen3RMSNormFwdOnly) == 4 * 2 + 1


def test_unpatch_restores_hf_after_nested_patches():
    patch_qwen3_rmsnorm()
    patch_qwen3_rmsnorm(TritonQwen3RMSNormFwdOnly)
    unpatch_qwen3_rmsnorm()
    assert modeling_qwen3.Qwen3RMSNorm is HF_QWEN3_RMSNORM
    with torch.device("meta"):
        model = Qwen3ForCausalLM(tiny_qwen3_config())
    assert count_modules(model, HF_QWEN3_RMSNORM) == 4 * 2 + 1


def test_each_undo_restores_the_class_it_replaced():
    """Nested patches unwind in order: the inner undo brings back the outer patch's class,
    not HF's."""
    undo_outer = patch_qwen3_rmsnorm()
    undo_inner = patch_qwen3_rmsnorm(TritonQwen3RMSNormFwdOnly)
    assert modeling_qwen3.Qwen3RMSNorm is TritonQwen3RMSNormFwdOnly
    undo_inner()
    assert modeling_qwen3.Qwen3RMSNorm is TritonQwen3RMSNorm
    with torch.device("meta"):
        model = Qwen3ForCausalLM(tiny_qwen3_config())
    assert count_modules(model, TritonQwen3RMSNorm) == 4 * 2 + 1
    assert count_modules(model, TritonQwen3RMSNormFwdOnly) == 0
    undo_outer()
    assert modeling_qwen3.Qwen3RMSNorm is HF_QWEN3_RMSNORM


def test_untested_qwen3_rmsnorm_code_is_refused(monkeypatch):
    """The Triton norm reproduces Qwen3RMSNorm's arithmetic: a transformers whose
    Qwen3RMSNorm is not a tested version's is refused by both ways in, and nothing changes;
    the other mirrored pieces are the fused patch's business."""
    import qwen3_mirrored_code

    real = qwen3_mirrored_code.fingerprint()
    monkeypatch.setattr(qwen3_mirrored_code, "fingerprint",
                        lambda: dict(real, Qwen3RMSNorm="0123456789ab"))
    model = Qwen3ForCausalLM(tiny_qwen3_config())
    for way in (patch_qwen3_rmsnorm, lambda: replace_rmsnorm_modules(model)):
        with pytest.raises(RuntimeError, match=r"differs from \S+ in Qwen3RMSNorm"):
            way()
    assert modeling_qwen3.Qwen3RMSNorm is HF_QWEN3_RMSNORM
    assert count_modules(model, HF_QWEN3_RMSNORM) == 4 * 2 + 1
    monkeypatch.setattr(qwen3_mirrored_code, "fingerprint",
                        lambda: dict(real, Qwen3Model="0123456789ab"))
    patch_qwen3_rmsnorm()()  # a change elsewhere does not concern this patch


def test_replace_in_place_leaves_other_patches_norms_alone(device):
    """Only HF's own Qwen3RMSNorm modules are swapped: not a subclass such as the fused
    patch's norm, whose layers hand it a residual."""
    from qwen3_fused_add_patch import apply_fused_add_rmsnorm

    model = Qwen3ForCausalLM(tiny_qwen3_config()).to(device)
    undo = apply_fused_add_rmsnorm(model)
    assert replace_rmsnorm_modules(model) == 0
    undo()
