# SPDX-License-Identifier: Apache-2.0
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
KV_HEADS = 8  # every size
HEAD_DIM = 128  # every size; q_norm and k_norm normalise rows of head_dim


def qwen3_config(size: str = "8B", **overrides) -> Qwen3Config:
    """A Qwen3Config with the real geometry of ``size``; override any field."""
    hidden, intermediate, layers, heads = QWEN3_SIZES[size]
    fields = dict(
        vocab_size=151936,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=KV_HEADS,
        head_dim=HEAD_DIM,
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


# The counts and shapes the benchmarks (bench/) and the tests use, named once.
NORMS_PER_LAYER = 4  # input_layernorm, post_attention_layernorm, q_norm, k_norm


def rmsnorm_count(config) -> int:
    """RMSNorm modules of a Qwen3: four per decoder layer, plus the final one (4L+1)."""
    return NORMS_PER_LAYER * config.num_hidden_layers + 1


# One training batch of the benchmarks: B=4 sequences of T=4096 tokens.
BENCH_BATCH, BENCH_SEQ_LEN = 4, 4096
BENCH_TOKENS = BENCH_BATCH * BENCH_SEQ_LEN  # 16384: rows of a hidden-size norm
HIDDEN_SIZES = sorted({hidden for hidden, *_ in QWEN3_SIZES.values()})
# q_norm and k_norm see one row per token and head: Qwen3-8B's 32 query, 8 KV heads.
Q_NORM_ROWS = BENCH_TOKENS * QWEN3_SIZES["8B"][3]  # 524288
K_NORM_ROWS = BENCH_TOKENS * KV_HEADS  # 131072
# Every RMSNorm input the benchmarks time, by name -> (rows, width).
RMSNORM_SHAPES = {
    **{f"H={hidden}": (BENCH_TOKENS, hidden) for hidden in HIDDEN_SIZES},
    "q_norm": (Q_NORM_ROWS, HEAD_DIM),
    "k_norm": (K_NORM_ROWS, HEAD_DIM),
}


if __name__ == "__main__":
    for name in QWEN3_SIZES:
        config = qwen3_config(name)
        print(name, config.hidden_size, config.intermediate_size,
              config.num_hidden_layers)
