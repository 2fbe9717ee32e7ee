# SPDX-License-Identifier: Apache-2.0
"""FSDP2 over a fused Qwen3: the layers to shard, found by class name.

accelerate's FSDP2 (and HF Trainer through it) shards each module whose class
is named in the model's ``_no_split_modules`` (Qwen3: "Qwen3DecoderLayer"),
found by ``type(module).__name__``, then the root. Every part of
apply_qwen3_fusion keeps HF's class names, so the name finds the fused decoder
layers, whether the model was converted in place or built under the patch.

``shard_by_name()`` does the same with ``torch.distributed.fsdp.fully_shard``.
The demo runs it in one process (world size 1: a gloo group on CPU, NCCL on a
GPU), so sharding is trivial, but each layer's parameters become DTensors that
FSDP gathers before the layer's forward and whose gradients it reduces after
its backward, as on many GPUs. On CPU, set TRITON_INTERPRET=1 before triton is
imported.
"""
# --8<-- [start:shard]
import torch
from torch.distributed.fsdp import fully_shard


def layers_by_name(model):
    """The modules whose class is named in ``model._no_split_modules``."""
    names = set(model._no_split_modules)
    return [module for module in model.modules() if type(module).__name__ in names]


def shard_by_name(model):
    """fully_shard each such layer, then the whole model (the root holds the
    embedding, the final norm and lm_head)."""
    layers = layers_by_name(model)
    for layer in layers:
        fully_shard(layer)
    fully_shard(model)
    return layers
# --8<-- [end:shard]


if __name__ == "__main__":
    # --8<-- [start:demo]
    import tempfile

    import torch.distributed as dist
    from transformers import AutoModelForCausalLM

    from qwen3_configs import tiny_qwen3_config
    from qwen3_fusion_patch import apply_qwen3_fusion

    device = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: TRITON_INTERPRET=1
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_qwen3_config()).to(device)
    ids = torch.randint(0, model.config.vocab_size, (2, 8), device=device)
    reference = model(input_ids=ids, labels=ids).loss.item()

    apply_qwen3_fusion(model, loss=True)  # in place, before sharding
    found = {f"{type(m).__module__}.{type(m).__name__}" for m in layers_by_name(model)}
    print("Qwen3DecoderLayer finds:", found)
    with tempfile.TemporaryDirectory() as folder:  # a one-process group
        dist.init_process_group("nccl" if device == "cuda" else "gloo",
                                init_method=f"file://{folder}/store",
                                rank=0, world_size=1)
        try:
            shard_by_name(model)
            loss = model(input_ids=ids, labels=ids).loss
            loss.backward()
        finally:
            dist.destroy_process_group()
    print(f"loss: HF {reference:.6f}, fused and sharded {loss.item():.6f}")
    grad = model.model.layers[0].self_attn.q_proj.weight.grad
    print("a layer's gradient is a", type(grad).__name__)
    # --8<-- [end:demo]
