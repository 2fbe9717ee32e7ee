"""snippets/survey_imports.py: the library entry points of 篇2 §二.

Libraries that are not installed are skipped with the reason; flash-attn's
absence is itself checked (transformers must refuse, not silently fall back).
"""
import importlib.util
import os
import pathlib
import subprocess
import sys

import pytest
import torch
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

import survey_imports
from qwen3_configs import tiny_qwen3_config


def has(module):
    return importlib.util.find_spec(module) is not None


def test_installed_report_matches_find_spec():
    assert survey_imports.installed() == {name: has(module) for name, module in survey_imports.THIRD_PARTY.items()}


@pytest.mark.skipif(has("flash_attn"), reason="flash-attn is installed: covered by the GPU test")
def test_flash_attention_2_requires_the_package():
    with pytest.raises(ImportError, match="FlashAttention2"):
        survey_imports.qwen3_with_flash_attention(tiny_qwen3_config())


@pytest.mark.gpu
@pytest.mark.skipif(not has("flash_attn"), reason="flash-attn is not installed")
def test_flash_attention_2_matches_sdpa():  # pragma: gpu only
    config = tiny_qwen3_config()
    torch.manual_seed(0)
    model = survey_imports.qwen3_with_flash_attention(config).cuda()
    reference = type(model)(tiny_qwen3_config(attn_implementation="sdpa")).to("cuda", torch.bfloat16)
    reference.load_state_dict(model.state_dict())
    ids = torch.randint(0, config.vocab_size, (2, 32), device="cuda")
    torch.testing.assert_close(model(ids).logits, reference(ids).logits, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not has("xformers"), reason="xFormers is not installed")
def test_xformers_matches_sdpa():  # pragma: gpu only
    q, k, v = (torch.randn(2, 64, 4, 64, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    out = survey_imports.causal_attention_xformers(q, k, v)
    ref = torch.nn.functional.scaled_dot_product_attention(
        q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)
    torch.testing.assert_close(out, ref, rtol=2e-2, atol=2e-2)


@pytest.mark.gpu
@pytest.mark.skipif(not has("apex"), reason="NVIDIA Apex is not installed")
def test_apex_rms_norm_matches_hf():  # pragma: gpu only
    norm = survey_imports.apex_rms_norm(256).cuda()
    x = torch.randn(8, 256, device="cuda")
    reference = Qwen3RMSNorm(256).cuda()
    torch.testing.assert_close(norm(x), reference(x), rtol=1e-5, atol=1e-5)


def test_torch_rms_norm_matches_hf_fp32():
    x = torch.randn(16, 96, dtype=torch.float64).float() * 3
    weight = torch.randn(96)
    hf = Qwen3RMSNorm(96, eps=1e-6)
    hf.weight.data.copy_(weight)
    x1, x2 = x.clone().requires_grad_(), x.clone().requires_grad_()
    w1 = weight.clone().requires_grad_()
    y = survey_imports.torch_fused_rms_norm(x1, w1)
    y_ref = hf(x2)
    torch.testing.assert_close(y, y_ref, rtol=1e-5, atol=1e-6)
    dy = torch.randn_like(y)
    y.backward(dy)
    y_ref.backward(dy)
    torch.testing.assert_close(x1.grad, x2.grad, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(w1.grad, hf.weight.grad, rtol=1e-5, atol=1e-5)


def test_torch_rms_norm_bf16_is_close_to_hf():
    """F.rms_norm rounds once at the end, HF rounds x_hat before the weight: close, not bit-equal."""
    torch.manual_seed(0)
    x = torch.randn(64, 512, dtype=torch.bfloat16) * 3
    weight = torch.randn(512, dtype=torch.bfloat16)
    hf = Qwen3RMSNorm(512).to(torch.bfloat16)
    hf.weight.data.copy_(weight)
    y, y_ref = survey_imports.torch_fused_rms_norm(x, weight), hf(x).detach()
    torch.testing.assert_close(y, y_ref, rtol=1.6e-2, atol=1e-2)  # within about one bf16 ulp


@pytest.mark.gpu
def test_inductor_compiles_hf_rmsnorm_without_graph_breaks():  # pragma: gpu only
    norm = Qwen3RMSNorm(4096).cuda().to(torch.bfloat16)
    compiled = torch.compile(norm, fullgraph=True)
    x = torch.randn(64, 4096, device="cuda", dtype=torch.bfloat16)
    torch.testing.assert_close(compiled(x), norm(x), rtol=1.6e-2, atol=1e-2)


@pytest.mark.gpu
def test_regional_compile_of_a_qwen3_matches_eager():  # pragma: gpu only
    """The §2.6 tab compiles each decoder layer and the final norm; the model computes what eager does."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3ForCausalLM

    from qwen3_configs import tiny_qwen3_config

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(tiny_qwen3_config()).cuda()
    input_ids = torch.randint(0, model.config.vocab_size, (2, 16), device="cuda")
    with torch.no_grad():
        eager = model(input_ids=input_ids).logits
        survey_imports.qwen3_with_inductor(model)
        compiled = model(input_ids=input_ids).logits
    torch.testing.assert_close(compiled, eager, rtol=1e-3, atol=1e-3)


# ---- call shapes of the libraries this machine cannot install (stub modules, no real kernels) ----

def stub_module(monkeypatch, name, **attributes):
    import types

    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    monkeypatch.setitem(__import__("sys").modules, name, module)
    return module


def test_unsloth_call_shape(monkeypatch):
    calls = []

    class FastLanguageModel:
        @staticmethod
        def from_pretrained(**kwargs):
            calls.append(("from_pretrained", kwargs))
            return "model", "tokenizer"

        @staticmethod
        def get_peft_model(model, **kwargs):
            calls.append(("get_peft_model", kwargs))
            return f"peft({model})"

    stub_module(monkeypatch, "unsloth", FastLanguageModel=FastLanguageModel)
    assert survey_imports.qwen3_lora_with_unsloth() == ("peft(model)", "tokenizer")
    assert calls[0] == ("from_pretrained", {"model_name": "unsloth/Qwen3-8B", "max_seq_length": 4096,
                                            "load_in_4bit": True})
    assert calls[1][0] == "get_peft_model" and "q_proj" in calls[1][1]["target_modules"]


def test_xformers_call_shape(monkeypatch):
    class LowerTriangularMask:
        pass

    def memory_efficient_attention(q, k, v, attn_bias=None):
        assert isinstance(attn_bias, LowerTriangularMask)
        return torch.nn.functional.scaled_dot_product_attention(
            q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True).transpose(1, 2)

    stub_module(monkeypatch, "xformers")
    stub_module(monkeypatch, "xformers.ops", LowerTriangularMask=LowerTriangularMask,
                memory_efficient_attention=memory_efficient_attention)
    q, k, v = (torch.randn(1, 8, 2, 16) for _ in range(3))
    assert survey_imports.causal_attention_xformers(q, k, v).shape == q.shape


def test_apex_call_shape(monkeypatch):
    stub_module(monkeypatch, "apex")
    stub_module(monkeypatch, "apex.normalization", FusedRMSNorm=lambda hidden, eps: ("FusedRMSNorm", hidden, eps))
    assert survey_imports.apex_rms_norm(4096) == ("FusedRMSNorm", 4096, 1e-6)


def test_inductor_compiles_each_decoder_layer_and_the_final_norm_in_place():
    """What the §6.2 step benchmark compiles (bench/exp_step.py): regional, not torch.compile(model)."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3ForCausalLM

    from qwen3_configs import tiny_qwen3_config

    model = Qwen3ForCausalLM(tiny_qwen3_config())
    assert survey_imports.qwen3_with_inductor(model) is None  # in place; compilation happens at the first call
    regions = [*model.model.layers, model.model.norm]
    assert all(m._compiled_call_impl is not None for m in regions)
    assert model._compiled_call_impl is None and model.model._compiled_call_impl is None
    assert model.model.embed_tokens._compiled_call_impl is None and model.lm_head._compiled_call_impl is None


def test_liger_patch_builds_a_qwen3_of_liger_modules():
    pytest.importorskip("liger_kernel")
    from transformers.models.qwen3 import modeling_qwen3

    from qwen3_configs import tiny_qwen3_config

    names = ("Qwen3RMSNorm", "Qwen3MLP", "apply_rotary_pos_emb")
    saved = {name: getattr(modeling_qwen3, name) for name in names}
    saved_forward = modeling_qwen3.Qwen3ForCausalLM.forward
    try:
        model = survey_imports.qwen3_with_liger(tiny_qwen3_config())
        kinds = {type(m).__name__ for m in model.modules()}
        assert {"LigerRMSNorm", "LigerSwiGLUMLP"} <= kinds and "Qwen3RMSNorm" not in kinds
    finally:  # the patch is process-global
        for name, value in saved.items():
            setattr(modeling_qwen3, name, value)
        modeling_qwen3.Qwen3ForCausalLM.forward = saved_forward


def test_importing_the_survey_imports_no_transformers():
    """§2.4: Unsloth must be imported before transformers, so the file itself must not import it."""
    code = "import sys, survey_imports; print('transformers' in sys.modules)"
    env = {**os.environ, "PYTHONPATH": str(pathlib.Path(survey_imports.__file__).parent)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "False"
