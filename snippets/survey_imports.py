# SPDX-License-Identifier: Apache-2.0
"""The smallest real use of each fused-kernel library surveyed in 篇2 §二.

Each function is one library's entry point applied to Qwen3. Third-party
libraries are imported inside the functions, so this file imports anywhere;
`python snippets/survey_imports.py` reports which of them this machine has.
Each section carries its own imports. flash-attn, Unsloth, xFormers and Apex need
CUDA builds; Liger's patch is undone and trained in snippets/liger_qwen3_demo.py.
"""
import importlib.util


# --8<-- [start:flash_attn]
import torch


def qwen3_with_flash_attention(config):
    # pip install flash-attn --no-build-isolation   (Ampere/Ada/Hopper, fp16/bf16)
    from transformers import AutoModelForCausalLM
    return AutoModelForCausalLM.from_config(
        config, attn_implementation="flash_attention_2", dtype=torch.bfloat16)
# --8<-- [end:flash_attn]


# --8<-- [start:liger]
def qwen3_with_liger(config):
    # Rebinds modeling_qwen3's names process-wide: call before building the model
    # (or pass a built one as model=); snippets/liger_qwen3_demo.py undoes it.
    from liger_kernel.transformers import apply_liger_kernel_to_qwen3
    from transformers import AutoModelForCausalLM

    apply_liger_kernel_to_qwen3(rope=True, rms_norm=True, swiglu=True,
                                fused_linear_cross_entropy=True)
    return AutoModelForCausalLM.from_config(config)
# --8<-- [end:liger]


# --8<-- [start:unsloth]
def qwen3_lora_with_unsloth(model_name="unsloth/Qwen3-8B"):
    # Import unsloth before transformers: it patches transformers.
    from unsloth import FastLanguageModel

    model, tokenizer = FastLanguageModel.from_pretrained(
        model_name=model_name, max_seq_length=4096, load_in_4bit=True)  # QLoRA base
    model = FastLanguageModel.get_peft_model(
        model, r=16, lora_alpha=16,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj",
                        "gate_proj", "up_proj", "down_proj"])
    return model, tokenizer
# --8<-- [end:unsloth]


# --8<-- [start:xformers]
def causal_attention_xformers(q, k, v):
    # q, k, v: (batch, seq_len, heads, head_dim), CUDA, fp16/bf16
    from xformers.ops import LowerTriangularMask, memory_efficient_attention

    return memory_efficient_attention(q, k, v, attn_bias=LowerTriangularMask())
# --8<-- [end:xformers]


# --8<-- [start:apex]
def apex_rms_norm(hidden_size, eps=1e-6):
    # Apex must be built from source with its CUDA extensions; CUDA tensors only
    from apex.normalization import FusedRMSNorm

    return FusedRMSNorm(hidden_size, eps=eps)
# --8<-- [end:apex]


# --8<-- [start:inductor]
def qwen3_with_inductor(model):
    # Regional, as in the step benchmark: each decoder layer and the final norm.
    for layer in model.model.layers:
        layer.compile()  # in place: Dynamo captures it, Inductor fuses it into Triton
    model.model.norm.compile()
# --8<-- [end:inductor]


# --8<-- [start:torch_rms_norm]
import torch.nn.functional as F


def torch_fused_rms_norm(x, weight, eps=1e-6):
    return F.rms_norm(x, (x.shape[-1],), weight, eps)
# --8<-- [end:torch_rms_norm]


THIRD_PARTY = {"flash-attn": "flash_attn", "unsloth": "unsloth", "xformers": "xformers",
               "apex": "apex", "liger-kernel": "liger_kernel"}


def installed() -> dict[str, bool]:
    return {name: importlib.util.find_spec(module) is not None
            for name, module in THIRD_PARTY.items()}


if __name__ == "__main__":
    for name, present in installed().items():
        print(f"{name:13s} {'installed' if present else 'not installed'}")
    x, weight = torch.randn(4, 64), torch.randn(64)
    print("F.rms_norm available:", torch_fused_rms_norm(x, weight).shape == x.shape)
