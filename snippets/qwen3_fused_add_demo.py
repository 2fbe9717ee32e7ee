# SPDX-License-Identifier: Apache-2.0
"""Train one step of a tiny Qwen3 with every residual add fused into its RMSNorm.

Builds the model, takes HF's loss, fuses it in place (qwen3_fused_add_patch.py),
takes the fused loss and its backward, then undoes the fusion. On CPU set
TRITON_INTERPRET=1 before running (the Triton kernels then run under the
interpreter).
"""
# --8<-- [start:usage]
import torch
from transformers import Qwen3ForCausalLM

from qwen3_configs import tiny_qwen3_config
from qwen3_fused_add_patch import apply_fused_add_rmsnorm

device = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: TRITON_INTERPRET=1
torch.manual_seed(0)
model = Qwen3ForCausalLM(tiny_qwen3_config()).to(device)
ids = torch.randint(0, model.config.vocab_size, (2, 16), device=device)
reference = model(input_ids=ids, labels=ids).loss

# a built model; before building: patch_qwen3_fused_add_rmsnorm()
undo = apply_fused_add_rmsnorm(model)
fused = model(input_ids=ids, labels=ids).loss
fused.backward()
undo()  # HF's classes are back
print(f"loss: HF {reference.item():.6f}, fused add + RMSNorm {fused.item():.6f}")
# --8<-- [end:usage]
