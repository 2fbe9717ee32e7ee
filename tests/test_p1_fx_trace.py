"""snippets/p1_fx_trace.py (篇1 §二.3): what fx can trace, ATen op kinds, fusable patterns."""
import pytest
import torch
import torch.fx
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm, apply_rotary_pos_emb

from p1_fx_trace import (PATTERNS, count_pattern, count_patterns, describe_failure, export_decoder_layer, export_model,
                         op_kinds, qwen3_parts, try_symbolic_trace)
from p1_static_read import build_qwen3
from qwen3_configs import tiny_qwen3_config


@pytest.fixture(scope="module")
def tiny():
    torch.manual_seed(0)
    return build_qwen3(tiny_qwen3_config(), device="cpu").eval()


def test_rmsnorm_and_mlp_trace_and_still_compute_the_same(tiny):
    parts = qwen3_parts(tiny)
    x = torch.randn(3, 5, tiny.config.hidden_size)
    for name in ("Qwen3RMSNorm", "Qwen3MLP"):
        graph, error = try_symbolic_trace(parts[name])
        assert error is None, error
        torch.testing.assert_close(graph(x), parts[name](x), rtol=0, atol=0)
    norm_kinds = op_kinds(try_symbolic_trace(parts["Qwen3RMSNorm"])[0])
    assert {k: norm_kinds[k] for k in ("pow", "mean", "add", "rsqrt", "mul", "to")} == {
        "pow": 1, "mean": 1, "add": 1, "rsqrt": 1, "mul": 2, "to": 2}
    assert op_kinds(try_symbolic_trace(parts["Qwen3MLP"])[0]) == {"Linear": 3, "silu": 1, "mul": 1}


def test_attention_and_above_do_not_trace_in_this_transformers(tiny):
    """The article says so; if a transformers upgrade makes them traceable, this fails and the text must change."""
    parts = qwen3_parts(tiny)
    for name in ("Qwen3ForCausalLM", "Qwen3DecoderLayer", "Qwen3Attention"):
        graph, error = try_symbolic_trace(parts[name])
        assert graph is None and error
    _, attention_error = try_symbolic_trace(parts["Qwen3Attention"])
    assert "modeling_qwen3.py" in attention_error and "hidden_shape" in attention_error


def test_describe_failure_names_the_model_line():
    def model_code():
        raise ValueError("first line. second sentence\nmore")

    try:
        model_code()
    except ValueError as error:
        text = describe_failure(error)
    assert text.startswith("ValueError: first line")
    assert "second sentence" not in text


def test_describe_failure_finds_model_code_in_a_venv_named_torch():
    """Model code under e.g. /opt/torch/.venv/.../transformers is not torch's own code."""
    namespace = {}
    exec(compile("def forward():\n    raise TypeError('cannot iterate')\n",
                 "/opt/torch/.venv/lib/site-packages/transformers/modeling_fake.py", "exec"), namespace)
    try:
        namespace["forward"]()
    except TypeError as error:
        text = describe_failure(error)
    assert "modeling_fake.py:2" in text


@pytest.mark.parametrize("layers", [1, 3])
def test_exported_model_holds_one_pattern_per_module(layers):
    torch.manual_seed(0)
    model = build_qwen3(tiny_qwen3_config(num_hidden_layers=layers), device="cpu")
    graph = export_model(model, torch.randint(0, model.config.vocab_size, (1, 6)))
    assert count_patterns(graph) == {"RMSNorm": 4 * layers + 1, "RoPE rotate_half": 2 * layers, "SwiGLU": layers}
    kinds = op_kinds(graph)
    assert kinds["linear"] == 7 * layers + 1  # q k v o gate up down per layer + lm_head
    assert kinds["scaled_dot_product_attention"] == layers
    assert not any(k.startswith("_assert") for k in kinds)


def test_exported_decoder_layer_op_kinds(tiny):
    kinds = op_kinds(export_decoder_layer(tiny))
    assert kinds["linear"] == 7
    assert kinds["rsqrt"] == kinds["pow"] == kinds["mean"] == 4  # input, post-attention, q_norm, k_norm
    assert kinds["silu"] == 1 and kinds["scaled_dot_product_attention"] == 1
    assert kinds["neg"] == kinds["cat"] == 2  # rotate_half on q and on k


def test_pattern_matcher_needs_the_whole_chain():
    def variance_part(x):
        return torch.rsqrt(x.pow(2).mean(-1) + 1e-6)

    def no_square(x):
        return torch.rsqrt(x.mean(-1) + 1e-6)

    def two_norms(x):
        return variance_part(x) + variance_part(2 * x)

    chain = PATTERNS["RMSNorm"]
    assert count_pattern(torch.fx.symbolic_trace(variance_part), chain) == 1
    assert count_pattern(torch.fx.symbolic_trace(no_square), chain) == 0
    assert count_pattern(torch.fx.symbolic_trace(two_norms), chain) == 2


def test_rope_pattern_on_hf_rotary():
    q, k = torch.randn(1, 4, 6, 16), torch.randn(1, 2, 6, 16)
    cos, sin = torch.randn(1, 6, 16), torch.randn(1, 6, 16)
    graph = torch.export.export(_Rope(), (q, k, cos, sin)).graph_module
    assert count_patterns(graph)["RoPE rotate_half"] == 2
    kinds = op_kinds(graph)
    assert (kinds["mul"], kinds["neg"], kinds["cat"], kinds["add"]) == (4, 2, 2, 2)


class _Rope(torch.nn.Module):
    def forward(self, q, k, cos, sin):
        return apply_rotary_pos_emb(q, k, cos, sin)


def test_rmsnorm_op_count_matches_hf_source():
    kinds = op_kinds(try_symbolic_trace(Qwen3RMSNorm(32))[0])
    assert sum(kinds[k] for k in ("to", "pow", "mean", "add", "rsqrt", "mul")) == 8
