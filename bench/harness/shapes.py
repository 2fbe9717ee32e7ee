"""The shapes the benchmarks time, named once: one training batch of Qwen3 and the RMSNorm inputs it makes."""
import os

from qwen3_configs import HEAD_DIM, KV_HEADS, QWEN3_SIZES

# One training batch of the benchmarks: B=4 sequences of T=4096 tokens.
BENCH_BATCH, BENCH_SEQ_LEN = 4, 4096
BENCH_TOKENS = BENCH_BATCH * BENCH_SEQ_LEN  # 16384: rows of a hidden-size norm
HIDDEN_SIZES = sorted({hidden for hidden, *_ in QWEN3_SIZES.values()})
# q_norm and k_norm see one row per token and head: Qwen3-8B's 32 query, 8 KV heads.
Q_HEADS = QWEN3_SIZES["8B"][3]
Q_NORM_ROWS = BENCH_TOKENS * Q_HEADS  # 524288
K_NORM_ROWS = BENCH_TOKENS * KV_HEADS  # 131072


def sizes_with(*index: int) -> dict:
    """{value of field ``index`` of QWEN3_SIZES (a tuple of values for several fields): 'sizes that have it'}:
    one shape per distinct value, e.g. ``sizes_with(0)`` = {hidden: '0.6B', ..., 4096: '8B', ...}."""
    out: dict = {}
    for size, fields in QWEN3_SIZES.items():
        key = fields[index[0]] if len(index) == 1 else tuple(fields[i] for i in index)
        out.setdefault(key, []).append(size)
    return {value: "、".join(sizes) for value, sizes in out.items()}


# Every RMSNorm input the benchmarks time, by name -> (rows, width).
RMSNORM_SHAPES = {
    **{f"H={hidden}": (BENCH_TOKENS, hidden) for hidden in HIDDEN_SIZES},
    "q_norm": (Q_NORM_ROWS, HEAD_DIM),
    "k_norm": (K_NORM_ROWS, HEAD_DIM),
}

# Hidden sizes of open models: Qwen3 from snippets/qwen3_configs.py, the others are the default
# hidden_size of a text config class in the installed transformers 5.17 (file under
# transformers/models/; the model is the checkpoint that class's docstring names, or its family).
MODEL_WIDTHS = {
    **{hidden: "、".join(f"Qwen3-{s}" for s, (h, *_) in QWEN3_SIZES.items() if h == hidden)
       for hidden, *_ in QWEN3_SIZES.values()},
    2304: "Gemma 2",  # gemma2/configuration_gemma2.py Gemma2Config
    2880: "gpt-oss-20b",  # gpt_oss/configuration_gpt_oss.py GptOssConfig
    3072: "Gemma-7B、Phi-3-mini",  # gemma/configuration_gemma.py GemmaConfig, phi3/configuration_phi3.py
    3584: "Qwen2.5-Omni-7B",  # qwen2_5_omni/configuration_qwen2_5_omni.py Qwen2_5OmniTextConfig
    4544: "Falcon-7B",  # falcon/configuration_falcon.py FalconConfig
    6144: "GPT-NeoX-20B、LongCat-Flash",  # gpt_neox/configuration_gpt_neox.py, longcat_flash/configuration_longcat_flash.py
    7168: "DeepSeek-V3",  # deepseek_v3/configuration_deepseek_v3.py DeepseekV3Config
    8192: "Command R",  # cohere/configuration_cohere.py CohereConfig
}
MODEL_WIDTHS[4096] += "、Llama-2-7B、Mistral-7B"  # llama/configuration_llama.py, mistral/configuration_mistral.py
MODEL_WIDTHS[5120] += "、Llama-4-Scout"  # llama4/configuration_llama4.py Llama4TextConfig
SWEEP_WIDTHS = sorted({
    *MODEL_WIDTHS,
    256, 512, 16384,  # powers of two (with 1024 ... 8192 above)
    384, 640, 768, 896, 1152, 1280, 1536, 1792, 5376, 10240, 12288, 14336,  # multiples of 128
    300, 520, 1000, 1500, 2000, 3000, 5000, 6000, 7000, 10000, 12000, 16383,  # not multiples of 128
    24576, 32768, 65536,  # past MAX_COLS: one row no longer fits in registers
})


def selected_widths(default: list[int]) -> list[int]:
    """The comma-separated BENCH_WIDTHS (any positive widths: a subset to re-run), else ``default``."""
    wanted = os.environ.get("BENCH_WIDTHS")
    if not wanted:
        return list(default)
    widths = [int(w) for w in wanted.split(",") if w.strip()]
    if not widths or min(widths) < 1:
        raise ValueError(f"BENCH_WIDTHS must list positive widths, got {wanted!r}")
    return widths
