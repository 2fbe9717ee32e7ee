# SPDX-License-Identifier: Apache-2.0
"""PEFT LoRA over a fused Qwen3: lm_head and the norms stay frozen.

get_peft_model() freezes every weight of the model and adds trainable low-rank
adapters to the projections named in ``target_modules``. The fusion set leaves
those projections to HF's modules (the fused attention and MLP call q_proj,
gate_proj ... as HF's do), so the adapters run inside them. The fused loss
still replaces lm_head + cross-entropy; it computes only the gradients autograd
asks for: with lm_head frozen, d_hidden and no d_W (linear_cross_entropy.py).
The norm kernels likewise skip d_weight for their frozen weights. An adapter on
lm_head itself is refused: the fused loss reads lm_head.weight without calling
lm_head, so it would skip the adapter (use loss=False there).

The demo adapts the same tiny Qwen3 twice, HF's and fused, and compares the
adapters' gradients. On CPU, set TRITON_INTERPRET=1 before triton is imported.
"""
# --8<-- [start:lora]
import torch
from peft import LoraConfig, get_peft_model

PROJECTIONS = ["q_proj", "k_proj", "v_proj", "o_proj",
               "gate_proj", "up_proj", "down_proj"]


def with_lora(model, seed=0):
    """LoRA on every projection of every layer; lm_head, embeddings, norms frozen.
    lora_B starts random (PEFT starts it at 0), so lora_A gets a gradient too."""
    torch.manual_seed(seed)
    model = get_peft_model(model, LoraConfig(r=4, lora_alpha=8,
                                             target_modules=PROJECTIONS))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "lora_B" in name:
                param.normal_(std=0.02)
    return model
# --8<-- [end:lora]


if __name__ == "__main__":
    # --8<-- [start:demo]
    from transformers import AutoModelForCausalLM

    from qwen3_configs import tiny_qwen3_config
    from qwen3_fusion_patch import apply_qwen3_fusion

    device = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: TRITON_INTERPRET=1

    def tiny_qwen3():
        torch.manual_seed(0)  # the same weights each time
        return AutoModelForCausalLM.from_config(tiny_qwen3_config()).to(device)

    def lora_gradients(model):
        ids = torch.randint(0, model.config.vocab_size, (2, 8), device=device,
                            generator=torch.Generator(device).manual_seed(1))
        loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
        return loss.item(), {n: p.grad for n, p in model.named_parameters()
                             if p.requires_grad}

    hf_loss, hf_grads = lora_gradients(with_lora(tiny_qwen3()))
    base = tiny_qwen3()
    apply_qwen3_fusion(base, loss=True)  # fuse, then add the adapters
    model = with_lora(base)
    loss, grads = lora_gradients(model)
    print(f"loss: HF {hf_loss:.6f}, fused {loss:.6f}")
    error = max(((grads[n] - g).norm() / g.norm()).item() for n, g in hf_grads.items())
    print(f"{len(grads)} adapter gradients: largest relative error {error:.1e}")
    print("lm_head.weight.grad:", base.lm_head.weight.grad)
    # --8<-- [end:demo]
