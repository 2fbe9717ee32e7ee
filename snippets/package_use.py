# SPDX-License-Identifier: Apache-2.0
"""The fusion set from the site's wheel (downloads/qwen3_fusion-0.1.0-py3-none-any.whl).

The package ``qwen3_fusion`` holds the snippet files that apply_qwen3_fusion needs
(packaged imports, nothing else changed). This runs one training step of a tiny
Qwen3 with and without it, on the GPU, or on the CPU under TRITON_INTERPRET=1.
"""
import torch
from transformers import AutoModelForCausalLM

from qwen3_fusion.qwen3_configs import tiny_qwen3_config

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
model = AutoModelForCausalLM.from_config(tiny_qwen3_config()).to(device).train()
ids = torch.randint(0, model.config.vocab_size, (2, 16), device=device)
reference = model(input_ids=ids, labels=ids).loss.item()

# --8<-- [start:use]
from qwen3_fusion import apply_qwen3_fusion  # noqa: E402

undo = apply_qwen3_fusion(model)  # in place; or call it before from_pretrained
loss = model(input_ids=ids, labels=ids).loss
loss.backward()
# --8<-- [end:use]
print(f"loss: HF {reference:.6f}, qwen3_fusion {loss.item():.6f}")
undo()
