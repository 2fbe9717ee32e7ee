# SPDX-License-Identifier: Apache-2.0
"""How many modules does the RMSNorm patch replace? Count them on every Qwen3 dense
size (篇2 §6.1).

Each model is built on the meta device (shapes only: no memory, no download)
after patch_qwen3_rmsnorm(), then the Triton norms are counted. A decoder layer
has four: input_layernorm, post_attention_layernorm, self_attn.q_norm and
self_attn.k_norm (the last two act per head on head_dim = 128); plus the final norm.
"""
# --8<-- [start:count]
import torch
from transformers import Qwen3ForCausalLM
from transformers.models.qwen3 import modeling_qwen3

from qwen3_configs import qwen3_config
from qwen3_patch import count_modules, patch_qwen3_rmsnorm
from rmsnorm_triton import TritonQwen3RMSNorm


def count_replaced_norms(size: str) -> tuple[int, int, int]:
    """(layers, Triton norms, HF norms left) for a size, built on the meta device."""
    config = qwen3_config(size)
    undo = patch_qwen3_rmsnorm(TritonQwen3RMSNorm)  # before construction
    try:
        with torch.device("meta"):
            model = Qwen3ForCausalLM(config)
    finally:
        undo()
    hf_left = count_modules(model, modeling_qwen3.Qwen3RMSNorm)
    return config.num_hidden_layers, count_modules(model, TritonQwen3RMSNorm), hf_left
# --8<-- [end:count]


if __name__ == "__main__":
    # --8<-- [start:table]
    from qwen3_configs import QWEN3_SIZES
    from qwen3_norm_count import count_replaced_norms

    for size in QWEN3_SIZES:
        layers, triton_norms, hf_left = count_replaced_norms(size)
        print(f"Qwen3-{size:<5} {layers:2d} layers -> {triton_norms:3d} Triton RMSNorm "
              f"(4 x {layers} + 1), HF Qwen3RMSNorm left: {hf_left}")
    # --8<-- [end:table]
