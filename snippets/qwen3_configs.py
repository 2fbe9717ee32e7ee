"""Qwen3 dense model geometries, built from a config (no hub access needed).

Numbers are the published Qwen3 config.json values: head_dim 128,
8 KV heads, rms_norm_eps 1e-6, vocab 151936, tied embeddings for <= 4B.
"""
from transformers import Qwen3Config

# --8<-- [start:sizes]
QWEN3_SIZES = {
    #        hidden, intermediate, layers, heads
    "0.6B": (1024, 3072, 28, 16),
    "1.7B": (2048, 6144, 28, 16),
    "4B": (2560, 9728, 36, 32),
    "8B": (4096, 12288, 36, 32),
    "14B": (5120, 17408, 40, 40),
    "32B": (5120, 25600, 64, 64),
}


def qwen3_config(size: str = "8B", **overrides) -> Qwen3Config:
    """A Qwen3Config with the real geometry of ``size``; override any field."""
    hidden, intermediate, layers, heads = QWEN3_SIZES[size]
    fields = dict(
        vocab_size=151936,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=8,
        head_dim=128,
        rms_norm_eps=1e-6,
        max_position_embeddings=40960,
        rope_theta=1000000.0,
        tie_word_embeddings=size in ("0.6B", "1.7B", "4B"),
        attn_implementation="sdpa",
    )
    fields.update(overrides)
    return Qwen3Config(**fields)
# --8<-- [end:sizes]


# --8<-- [start:tiny]
def tiny_qwen3_config(**overrides) -> Qwen3Config:
    """A few-MB Qwen3 with the real block structure, for CPU tests and demos."""
    fields = dict(
        vocab_size=512,
        hidden_size=64,
        intermediate_size=192,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        rms_norm_eps=1e-6,
        max_position_embeddings=256,
        tie_word_embeddings=False,
        attn_implementation="sdpa",
    )
    fields.update(overrides)
    return Qwen3Config(**fields)
# --8<-- [end:tiny]


if __name__ == "__main__":
    for name in QWEN3_SIZES:
        config = qwen3_config(name)
        print(name, config.hidden_size, config.intermediate_size,
              config.num_hidden_layers)
