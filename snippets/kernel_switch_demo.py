# SPDX-License-Identifier: Apache-2.0
"""This site's RMSNorm through transformers' kernel switch: a local kernels repository
(qwen3_kernels_layer.py) selected with KernelConfig, applied after model.train().

KernelConfig maps accelerators (cuda, rocm, ...): on "cpu" it raises ValueError.
"""
import tempfile

import torch
from transformers import AutoModelForCausalLM, KernelConfig

from qwen3_configs import tiny_qwen3_config
from qwen3_kernels_layer import write_local_repository

device = "cuda" if torch.cuda.is_available() else "cpu"
torch.manual_seed(0)
folder = tempfile.mkdtemp()
AutoModelForCausalLM.from_config(tiny_qwen3_config()).save_pretrained(folder)
repository = write_local_repository(tempfile.mkdtemp())

model = AutoModelForCausalLM.from_pretrained(folder).to(device).train()
# After train(): KernelConfig maps the mode the model is in when it is applied.
model.set_use_kernels(True, kernel_config=KernelConfig(
    {"RMSNorm": f"{repository}:TritonRMSNorm"}, use_local_kernel=True))
norm = model.model.layers[0].input_layernorm
print("input_layernorm runs:", norm.forward.__qualname__)
ids = torch.randint(0, model.config.vocab_size, (2, 16), device=device)
print(f"loss: {model(input_ids=ids, labels=ids).loss.item():.6f}")
