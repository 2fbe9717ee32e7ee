# SPDX-License-Identifier: Apache-2.0
"""One entry point for Qwen3's fusion set: apply_qwen3_fusion(model=None, ...).

Each part is switchable:

* rms_norm: every Qwen3RMSNorm -> the Triton RMSNorm (rmsnorm_triton.py);
* fused_add: every residual add fused into the norm after it
  (qwen3_fused_add_patch.py; needs rms_norm);
* qk_norm_rope: Qwen3Attention's q_norm, k_norm, transposes and RoPE -> one
  qk_norm_rope call (qk_norm_rope.py);
* swiglu: Qwen3MLP's silu(gate) * up -> the fused SwiGLU (swiglu.py).

apply_qwen3_fusion() with no model patches modeling_qwen3 before the model is
built (from_config, from_pretrained); apply_qwen3_fusion(model) converts a
built model in place. Both return undo(), which puts back exactly what was
there: the same classes, the same module objects, the same parameters.

The attention and MLP parts are subclasses with HF's class names, as in the
fused-add patch: checkpointing wraps the decoder layer (which holds them), and
HF, FSDP and output capture find modules by class or name. Parameters and
state_dict keys are HF's: the fused attention reads q_norm.weight and
k_norm.weight where HF's modules keep them. Every part refuses a transformers
whose mirrored code its tests did not run on (qwen3_mirrored_code.py), and a
model or module patched otherwise, before changing anything.
"""
import inspect

# --8<-- [start:imports]
# --8<-- [start:torch_import]
import torch
# --8<-- [end:torch_import]
import transformers.models.qwen3.modeling_qwen3 as modeling_qwen3

import qwen3_fused_add_patch
from qk_norm_rope import qk_norm_rope
from qwen3_mirrored_code import check_transformers
from rmsnorm_triton import TritonQwen3RMSNorm
from swiglu import qwen3_mlp_forward

# transformers' own classes, subclassed below and kept for undo
HF_ATTENTION = modeling_qwen3.Qwen3Attention
HF_MLP = modeling_qwen3.Qwen3MLP
HF_NORM = qwen3_fused_add_patch.HF_NORM
# --8<-- [end:imports]
for _hf in (HF_ATTENTION, HF_MLP):
    if _hf.__module__ != modeling_qwen3.__name__:
        raise ImportError(f"modeling_qwen3.{_hf.__name__} comes from {_hf.__module__}: "
                          "import qwen3_fusion_patch before other patches")

# What each part mirrors: it is accepted where these pieces are code its tests ran on.
PIECES = {
    "rms_norm": ("Qwen3RMSNorm",),
    "fused_add": qwen3_fused_add_patch.MIRRORED,
    "qk_norm_rope": ("Qwen3RMSNorm", "Qwen3Attention", "rotate_half",
                     "apply_rotary_pos_emb", "Qwen3RotaryEmbedding"),
    "swiglu": ("Qwen3MLP",),
}
# The norms whose weight and eps the fused attention may read in their place.
QK_NORMS = (HF_NORM, TritonQwen3RMSNorm, qwen3_fused_add_patch.Qwen3RMSNorm)
# 5.24 renamed the attention's KV cache argument and passes its kwargs to update().
CACHE = "cache" if "cache" in inspect.signature(HF_ATTENTION.forward).parameters \
    else "past_key_values"


# --8<-- [start:attention]
class Qwen3Attention(HF_ATTENTION):
    """HF's attention with q_norm, k_norm, the transposes and RoPE in one call."""

    def forward(self, hidden_states, position_embeddings, attention_mask,
                *args, **kwargs):
        cache = args[0] if args else kwargs.pop(CACHE, None)
        cache = kwargs.pop("past_key_values", cache)  # either name, as HF takes
        input_shape = hidden_states.shape[:-1]
        hidden_shape = (*input_shape, -1, self.head_dim)

        cos, sin = position_embeddings
        query_states, key_states = qk_norm_rope(  # (B, T, H, D) in, (B, H, T, D) out
            self.q_proj(hidden_states).view(hidden_shape),
            self.k_proj(hidden_states).view(hidden_shape),
            self.q_norm.weight, self.k_norm.weight, cos, sin,
            self.q_norm.variance_epsilon)
        value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)

        if cache is not None:
            extra = {"kwargs": kwargs} if CACHE == "cache" else {}
            key_states, value_states = cache.update(key_states, value_states,
                                                    self.layer_idx, **extra)
        attention_interface = modeling_qwen3.ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, modeling_qwen3.eager_attention_forward)
        attn_output, attn_weights = attention_interface(
            self, query_states, key_states, value_states, attention_mask,
            dropout=0.0 if not self.training else self.attention_dropout,
            scaling=self.scaling, sliding_window=self.sliding_window, **kwargs)
        attn_output = attn_output.reshape(*input_shape, -1).contiguous()
        return self.o_proj(attn_output), attn_weights
# --8<-- [end:attention]

    def __init__(self, config, layer_idx):
        super().__init__(config, layer_idx)
        check_qk_norms(self)


# --8<-- [start:mlp]
class Qwen3MLP(HF_MLP):
    """HF's MLP with silu(gate) * up as one fused call, forward and backward."""

    def __init__(self, config):
        super().__init__(config)
        check_activation(self)

    def forward(self, x):
        return qwen3_mlp_forward(self, x)
# --8<-- [end:mlp]


def check_qk_norms(attention) -> None:
    """The fused attention computes q_norm and k_norm itself from their weight and
    eps: refuse norms of another kind (their forward may differ) or unequal eps."""
    for norm in (attention.q_norm, attention.k_norm):
        if type(norm) not in QK_NORMS:
            raise TypeError(
                f"qk_norm_rope computes q_norm and k_norm in HF's arithmetic; found "
                f"{type(norm).__module__}.{type(norm).__name__} (another patch?)")
    if attention.q_norm.variance_epsilon != attention.k_norm.variance_epsilon:
        raise ValueError("qk_norm_rope takes one eps; q_norm and k_norm have "
                         f"{attention.q_norm.variance_epsilon} and "
                         f"{attention.k_norm.variance_epsilon}")


def check_activation(mlp) -> None:
    if mlp.config.hidden_act not in ("silu", "swish"):
        raise ValueError(f"the fused SwiGLU computes SiLU; this MLP's hidden_act is "
                         f"{mlp.config.hidden_act!r}")


# --8<-- [start:entry]
def apply_qwen3_fusion(model: torch.nn.Module | None = None, *, rms_norm=True,
                       fused_add=True, qk_norm_rope=True, swiglu=True):
    """Fuse the chosen parts of Qwen3. No model: patch modeling_qwen3 before the
    model is built. A model: convert its Qwen3 modules in place. Returns undo()."""
    parts = {"rms_norm": rms_norm, "fused_add": fused_add,
             "qk_norm_rope": qk_norm_rope, "swiglu": swiglu}
    chosen = [part for part, wanted in parts.items() if wanted]
    if not chosen:
        raise ValueError("apply_qwen3_fusion: no part chosen")
    if fused_add and not rms_norm:
        raise ValueError("fused_add needs rms_norm: the fused norms are Triton norms")
    for part in chosen:  # every check before any change
        check_transformers(f"qwen3_fusion_patch ({part})", pieces=PIECES[part])
    undos = []

    def undo():
        while undos:
            undos.pop()()

    try:
        if model is None:
            _patch_classes(parts, undos)
        else:
            _convert_in_place(model, parts, undos)
    except BaseException:
        undo()  # nothing half applied
        raise
    return undo
# --8<-- [end:entry]


def _set_class_attribute(name, new, expected, undos) -> None:
    current = getattr(modeling_qwen3, name)
    if current is not expected:
        raise RuntimeError(f"modeling_qwen3.{name} is already "
                           f"{current.__module__}.{current.__qualname__}, not "
                           "transformers' own: undo the other patch first")
    setattr(modeling_qwen3, name, new)
    undos.append(lambda: setattr(modeling_qwen3, name, expected))


def _patch_classes(parts, undos) -> None:
    if parts["fused_add"]:
        undos.append(qwen3_fused_add_patch.patch_qwen3_fused_add_rmsnorm())
    elif parts["rms_norm"]:
        _set_class_attribute("Qwen3RMSNorm", TritonQwen3RMSNorm, HF_NORM, undos)
    if parts["qk_norm_rope"]:
        _set_class_attribute("Qwen3Attention", Qwen3Attention, HF_ATTENTION, undos)
    if parts["swiglu"]:
        _set_class_attribute("Qwen3MLP", Qwen3MLP, HF_MLP, undos)


def _swap_classes(modules, hf_class, new_class, undos) -> None:
    for module in modules:
        module.__class__ = new_class
    undos.append(lambda: [setattr(m, "__class__", hf_class) for m in modules])


def _convert_in_place(model, parts, undos) -> None:
    ours = (Qwen3Attention, Qwen3MLP, TritonQwen3RMSNorm,
            *qwen3_fused_add_patch.FUSED.values())
    if not any(isinstance(m, qwen3_fused_add_patch.HF_MODEL) for m in model.modules()):
        raise ValueError(f"{type(model).__name__} holds no Qwen3Model")
    if any(type(m) in ours for m in model.modules()):
        raise RuntimeError("this model is already fused: undo first, or build it anew")
    attentions = [m for m in model.modules() if type(m) is HF_ATTENTION]
    mlps = [m for m in model.modules() if type(m) is HF_MLP]
    for attention in attentions if parts["qk_norm_rope"] else ():
        check_qk_norms(attention)  # before any norm is swapped
    for mlp in mlps if parts["swiglu"] else ():
        check_activation(mlp)
    if parts["fused_add"]:
        undos.append(qwen3_fused_add_patch.apply_fused_add_rmsnorm(model))
    elif parts["rms_norm"]:
        _replace_norms(model, undos)
    if parts["qk_norm_rope"]:
        _swap_classes(attentions, HF_ATTENTION, Qwen3Attention, undos)
    if parts["swiglu"]:
        _swap_classes(mlps, HF_MLP, Qwen3MLP, undos)


def _replace_norms(model, undos) -> None:
    """Every HF Qwen3RMSNorm -> a Triton one sharing its weight Parameter; undo puts
    the original module objects back."""
    replaced = []
    for parent in model.modules():
        for name, child in list(parent.named_children()):
            if type(child) is HF_NORM:
                new = TritonQwen3RMSNorm(child.weight.shape[0],
                                         eps=child.variance_epsilon)
                new.weight = child.weight
                setattr(parent, name, new)
                replaced.append((parent, name, child))
    undos.append(lambda: [setattr(p, n, c) for p, n, c in reversed(replaced)])


if __name__ == "__main__":
    # --8<-- [start:demo]
    from collections import Counter

    from transformers import Qwen3ForCausalLM

    from qwen3_configs import tiny_qwen3_config

    device = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: TRITON_INTERPRET=1
    torch.manual_seed(0)
    model = Qwen3ForCausalLM(tiny_qwen3_config()).to(device)
    ids = torch.randint(0, model.config.vocab_size, (2, 16), device=device)
    reference = model(input_ids=ids, labels=ids).loss

    undo = apply_qwen3_fusion(model)  # in place; apply_qwen3_fusion() before building
    model.gradient_checkpointing_enable()
    loss = model(input_ids=ids, labels=ids, use_cache=False).loss
    loss.backward()
    print(f"loss: HF {reference.item():.6f}, fused {loss.item():.6f}")
    ours = Counter(type(m).__name__ for m in model.modules()
                   if type(m).__module__.split(".")[0] not in ("torch", "transformers"))
    print("fused modules:", dict(sorted(ours.items())))
    undo()
    print("after undo:", type(model.model.layers[0].self_attn).__module__)
    # --8<-- [end:demo]
