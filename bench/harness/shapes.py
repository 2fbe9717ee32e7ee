"""The shapes the benchmarks time, named once: one training batch of Qwen3 and the RMSNorm inputs it makes."""
from qwen3_configs import HEAD_DIM, KV_HEADS, QWEN3_SIZES

# One training batch of the benchmarks: B=4 sequences of T=4096 tokens.
BENCH_BATCH, BENCH_SEQ_LEN = 4, 4096
BENCH_TOKENS = BENCH_BATCH * BENCH_SEQ_LEN  # 16384: rows of a hidden-size norm
HIDDEN_SIZES = sorted({hidden for hidden, *_ in QWEN3_SIZES.values()})
# q_norm and k_norm see one row per token and head: Qwen3-8B's 32 query, 8 KV heads.
Q_HEADS = QWEN3_SIZES["8B"][3]
Q_NORM_ROWS = BENCH_TOKENS * Q_HEADS  # 524288
K_NORM_ROWS = BENCH_TOKENS * KV_HEADS  # 131072
# Every RMSNorm input the benchmarks time, by name -> (rows, width).
RMSNORM_SHAPES = {
    **{f"H={hidden}": (BENCH_TOKENS, hidden) for hidden in HIDDEN_SIZES},
    "q_norm": (Q_NORM_ROWS, HEAD_DIM),
    "k_norm": (K_NORM_ROWS, HEAD_DIM),
}
