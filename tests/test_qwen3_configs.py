"""snippets/qwen3_configs.py: the Qwen3 geometries and the shapes the benchmarks name once."""
import runpy

import pytest
import torch
from transformers import Qwen3ForCausalLM
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

import qwen3_configs
from qwen3_configs import (HEAD_DIM, K_NORM_ROWS, Q_NORM_ROWS, QWEN3_SIZES, RMSNORM_SHAPES,
                           qwen3_config, rmsnorm_count, tiny_qwen3_config)


@pytest.mark.parametrize("size", list(QWEN3_SIZES))
def test_config_has_the_published_geometry(size):
    hidden, intermediate, layers, heads = QWEN3_SIZES[size]
    config = qwen3_config(size)
    assert (config.hidden_size, config.intermediate_size, config.num_hidden_layers,
            config.num_attention_heads) == (hidden, intermediate, layers, heads)
    assert config.head_dim == HEAD_DIM and config.num_key_value_heads == 8
    assert config.rms_norm_eps == 1e-6 and config.vocab_size == 151936
    assert config.tie_word_embeddings == (size in ("0.6B", "1.7B", "4B"))


def test_overrides_win():
    assert qwen3_config("8B", num_hidden_layers=3).num_hidden_layers == 3
    assert tiny_qwen3_config(hidden_size=32).hidden_size == 32


@pytest.mark.parametrize("layers", [1, 2, 3])
def test_rmsnorm_count_matches_a_built_model(layers):
    config = tiny_qwen3_config(num_hidden_layers=layers)
    with torch.device("meta"):
        model = Qwen3ForCausalLM(config)
    built = sum(isinstance(m, Qwen3RMSNorm) for m in model.modules())
    assert rmsnorm_count(config) == built == 4 * layers + 1
    assert rmsnorm_count(qwen3_config("8B")) == 145


def test_benchmark_shapes():
    assert Q_NORM_ROWS == 16384 * 32 and K_NORM_ROWS == 16384 * 8
    assert RMSNORM_SHAPES["q_norm"] == (Q_NORM_ROWS, 128)
    assert RMSNORM_SHAPES["k_norm"] == (K_NORM_ROWS, 128)
    assert {name for name in RMSNORM_SHAPES if name.startswith("H=")} == {
        "H=1024", "H=2048", "H=2560", "H=4096", "H=5120"}
    assert all(rows == 16384 for name, (rows, _) in RMSNORM_SHAPES.items() if name.startswith("H="))


def test_script_lists_every_size(capsys):
    runpy.run_path(qwen3_configs.__file__, run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in lines] == list(QWEN3_SIZES)
