"""snippets/p1_static_read.py (篇1 §二.1–2.2): module counts, parameter counts, source location."""
import pathlib
import runpy
import sys

import pytest
import torch
import transformers
from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer, Qwen3RMSNorm

import p1_static_read
from p1_static_read import (build_qwen3, expected_rmsnorm_count, modeling_source, module_class_counts,
                            parameter_counts, source_of, torchinfo_report, torchinfo_summary)
from qwen3_configs import QWEN3_SIZES, qwen3_config, rmsnorm_count, tiny_qwen3_config

COMMITTED_TORCHINFO = pathlib.Path(__file__).resolve().parents[1] / "docs" / "generated" / "p1_torchinfo.txt"


@pytest.mark.parametrize("size", sorted(QWEN3_SIZES))
def test_every_real_size_has_4L_plus_1_rmsnorms(size):
    config = qwen3_config(size)
    model = build_qwen3(config, device="meta")
    counts = module_class_counts(model)
    layers = QWEN3_SIZES[size][2]
    # the page's function, the name bench/ and the tests use, and the formula by hand
    assert counts["Qwen3RMSNorm"] == expected_rmsnorm_count(config) == rmsnorm_count(config) == 4 * layers + 1
    # q, k, v, o, gate, up, down per layer, plus lm_head
    assert counts["Linear"] == 7 * layers + 1
    assert counts["Qwen3DecoderLayer"] == layers
    assert all(p.is_meta for p in model.parameters())  # nothing was allocated


def test_8b_has_145_norms_and_the_published_parameter_count():
    model = build_qwen3(qwen3_config("8B"), device="meta")
    assert module_class_counts(model)["Qwen3RMSNorm"] == 145
    total = sum(p.numel() for p in model.parameters())
    assert 8.0e9 < total < 8.3e9  # Qwen3-8B: 8.2 B parameters with the untied lm_head


@pytest.mark.parametrize("layers", [1, 2, 5])
def test_counts_follow_the_layer_count(layers):
    model = build_qwen3(tiny_qwen3_config(num_hidden_layers=layers), device="cpu")
    assert sum(isinstance(m, Qwen3RMSNorm) for m in model.modules()) == 4 * layers + 1
    assert module_class_counts(model)["Qwen3RMSNorm"] == 4 * layers + 1


def test_parameter_counts_add_up_to_the_model():
    model = build_qwen3(tiny_qwen3_config(), device="cpu")
    per_class = parameter_counts(model)
    assert sum(per_class.values()) == sum(p.numel() for p in model.parameters())
    config = model.config
    assert per_class["Qwen3RMSNorm"] == config.num_hidden_layers * (2 * config.hidden_size + 2 * config.head_dim) \
        + config.hidden_size
    assert per_class["Embedding"] == config.vocab_size * config.hidden_size


def test_modeling_source_is_this_environments_file():
    where = modeling_source()
    path = pathlib.Path(where["path"])
    assert path.is_file() and path.name == "modeling_qwen3.py"
    assert where["relative"] == "transformers/models/qwen3/modeling_qwen3.py"
    assert where["transformers"] == transformers.__version__
    assert f"/v{transformers.__version__}/src/transformers/models/qwen3/" in where["url"]


def test_source_of_points_at_the_real_lines():
    first_line, text = source_of(Qwen3DecoderLayer.forward)
    file_lines = pathlib.Path(modeling_source()["path"]).read_text(encoding="utf-8").splitlines()
    assert file_lines[first_line - 1].strip().startswith("def forward(")
    # the pre-norm residual structure the article explains
    order = [text.index(s) for s in ("self.input_layernorm", "self.self_attn(", "residual + hidden_states",
                                     "self.post_attention_layernorm", "self.mlp(")]
    assert order == sorted(order)


def test_torchinfo_shows_shapes_and_the_hidden_norms():
    torch.manual_seed(0)
    model = build_qwen3(tiny_qwen3_config(), device="cpu")
    summary = torchinfo_summary(model, seq_len=8)
    assert summary.total_params == sum(p.numel() for p in model.parameters())
    text = str(summary)
    assert "q_norm" in text and "k_norm" in text
    assert "[1, 8, 64]" in text  # hidden states: batch 1, 8 tokens, hidden 64


def test_committed_torchinfo_output_is_current():
    """docs/generated/p1_torchinfo.txt is what the usage prints for the tiny model today.

    Regenerate with: python snippets/p1_static_read.py --write docs/generated/p1_torchinfo.txt
    Under other torchinfo/transformers/torch versions (first line) only the parameter totals are compared.
    """
    regenerated = torchinfo_report()
    committed = COMMITTED_TORCHINFO.read_text(encoding="utf-8")
    if committed.splitlines()[0] == regenerated.splitlines()[0]:
        assert committed == regenerated
    else:
        def totals(text):
            return [line for line in text.splitlines() if line.startswith(("Total params", "Trainable params"))]
        assert totals(committed) == totals(regenerated)


def test_write_flag_writes_the_report(tmp_path, monkeypatch):
    target = tmp_path / "torchinfo.txt"
    monkeypatch.setattr(sys, "argv", [p1_static_read.__file__, "--write", str(target)])
    with pytest.raises(SystemExit) as exit_:
        runpy.run_path(p1_static_read.__file__, run_name="__main__")
    assert exit_.value.code is None
    assert target.read_text(encoding="utf-8") == torchinfo_report()
