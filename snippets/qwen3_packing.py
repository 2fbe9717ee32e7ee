# SPDX-License-Identifier: Apache-2.0
"""Padding-free packing, as TRL's SFTTrainer trains, with apply_qwen3_fusion.

With ``packing=True`` (best-fit packing, its default strategy), TRL's SFTTrainer
trains padding-free: a batch is one row of concatenated sequences, shape
(1, total tokens), no attention mask, ``position_ids`` that restart at 0 for
each sequence, and -100 as the label of each sequence's first token, so that no
token learns to predict across a boundary. transformers'
DataCollatorWithFlattening makes the same batch, and Trainer counts
``num_items_in_batch`` over it as over any other.

HF's Qwen3 turns the restarting position_ids into a causal mask that keeps each
sequence to itself (sdpa and eager) and into each sequence's own RoPE angles.
The fused attention takes the same mask and the same cos and sin; the fused loss
shifts the flat labels as HF's loss does. The demo trains a tiny Qwen3 on
packed batches with gradient accumulation, HF's and fused, and compares.
On CPU, set TRITON_INTERPRET=1 before triton is imported.
"""
# --8<-- [start:packing]
import torch
from transformers import DataCollatorWithFlattening


def sequences(vocab_size, lengths, seed=0):
    """Sequences of random tokens, unpadded: {"input_ids": [...]} each."""
    generator = torch.Generator().manual_seed(seed)
    return [{"input_ids": torch.randint(0, vocab_size, (n,),
                                        generator=generator).tolist()}
            for n in lengths]


pack = DataCollatorWithFlattening()  # input_ids, labels, position_ids: (1, total)


def without_cache(model):
    """No KV cache in training, as SFTTrainer asks: then HF finds the sequences."""
    model.config.use_cache = False
    return model
# --8<-- [end:packing]


if __name__ == "__main__":
    # --8<-- [start:demo]
    from transformers import AutoModelForCausalLM

    from qwen3_configs import tiny_qwen3_config
    from qwen3_fusion_patch import apply_qwen3_fusion
    from qwen3_trainer import train

    def tiny_qwen3():
        torch.manual_seed(0)  # the same weights each time
        return without_cache(AutoModelForCausalLM.from_config(tiny_qwen3_config()))

    data = sequences(tiny_qwen3_config().vocab_size, lengths=[5, 3, 6, 4, 2, 3])
    batch = pack(data[:3])
    print("position_ids:", batch["position_ids"].tolist())
    print("labels == -100 at:", (batch["labels"] == -100).nonzero()[:, 1].tolist())

    # 3 sequences per packed micro-batch, 2 micro-batches per optimizer step
    hf_losses, hf_grads = train(tiny_qwen3(), data, collator=pack, batch_size=3)
    model = tiny_qwen3()
    undo = apply_qwen3_fusion(model, loss=True)
    losses, grads = train(model, data, collator=pack, batch_size=3)
    undo()
    print(f"loss: HF {hf_losses[0]:.6f}, fused {losses[0]:.6f}")
    error = max(((grads[0][n] - g).norm() / g.norm()).item()
                for n, g in hf_grads[0].items())
    print(f"{len(grads[0])} gradients: largest relative error {error:.1e}")
    # --8<-- [end:demo]
