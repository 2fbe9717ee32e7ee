# SPDX-License-Identifier: Apache-2.0
"""Swap every Qwen3RMSNorm of a Qwen3 model for the Triton version.

Two ways, both covering input/post-attention norms, q_norm, k_norm and the
final norm (4 * num_hidden_layers + 1 modules):
* patch_qwen3_rmsnorm(): before the model is built (from_config / from_pretrained);
* replace_rmsnorm_modules(model): on a model that already exists, in place.
Both refuse a transformers whose Qwen3RMSNorm is not code the tests ran on
(qwen3_mirrored_code.py): the Triton norm reproduces its arithmetic.
"""
# --8<-- [start:imports]
import torch
import transformers.models.qwen3.modeling_qwen3 as modeling_qwen3

from qwen3_mirrored_code import check_transformers
from rmsnorm_triton import TritonQwen3RMSNorm

HF_QWEN3_RMSNORM = modeling_qwen3.Qwen3RMSNorm  # the original class, kept for undo
# --8<-- [end:imports]


# --8<-- [start:patch]
def patch_qwen3_rmsnorm(norm_cls=TritonQwen3RMSNorm):
    """Make modeling_qwen3 build ``norm_cls`` wherever it builds Qwen3RMSNorm; call
    it before constructing the model. Returns undo(). ``norm_cls`` keeps "RMSNorm" in
    its name: transformers' _init_weights finds norms by class name (weight = ones)."""
    check_transformers("qwen3_patch", pieces=("Qwen3RMSNorm",))
    previous = modeling_qwen3.Qwen3RMSNorm  # undo restores this, for nested patches
    modeling_qwen3.Qwen3RMSNorm = norm_cls

    def undo():
        modeling_qwen3.Qwen3RMSNorm = previous

    return undo


def unpatch_qwen3_rmsnorm():
    modeling_qwen3.Qwen3RMSNorm = HF_QWEN3_RMSNORM
# --8<-- [end:patch]


# --8<-- [start:replace_in_place]
def replace_rmsnorm_modules(model: torch.nn.Module, norm_cls=TritonQwen3RMSNorm) -> int:
    """Swap every HF Qwen3RMSNorm inside ``model`` for ``norm_cls``; returns the count.

    The new module shares the old weight Parameter, so device, dtype, loaded
    values and any optimizer already holding that Parameter stay valid.
    """
    check_transformers("qwen3_patch", pieces=("Qwen3RMSNorm",))
    replaced = 0
    for parent in model.modules():
        for name, child in list(parent.named_children()):
            if type(child) is HF_QWEN3_RMSNORM:  # not a subclass (another patch's)
                new = norm_cls(child.weight.shape[0], eps=child.variance_epsilon)
                new.weight = child.weight
                setattr(parent, name, new)
                replaced += 1
    return replaced


def count_modules(model: torch.nn.Module, cls) -> int:
    return sum(isinstance(module, cls) for module in model.modules())
# --8<-- [end:replace_in_place]


if __name__ == "__main__":
    from transformers import Qwen3ForCausalLM

    from qwen3_configs import qwen3_config

    # Qwen3-8B's real geometry on the meta device: no memory, no download.
    config = qwen3_config("8B")
    undo = patch_qwen3_rmsnorm()
    with torch.device("meta"):
        model = Qwen3ForCausalLM(config)
    undo()
    print(f"{config.num_hidden_layers} layers -> "
          f"{count_modules(model, TritonQwen3RMSNorm)} Triton RMSNorm modules")
