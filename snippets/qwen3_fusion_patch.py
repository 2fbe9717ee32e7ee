# SPDX-License-Identifier: Apache-2.0
"""One entry point for Qwen3's fusion set: apply_qwen3_fusion(model=None, ...).

Each part is switchable:

* rms_norm: every Qwen3RMSNorm -> the Triton RMSNorm (rmsnorm_triton.py);
* fused_add: every residual add fused into the norm after it
  (qwen3_fused_add_patch.py; needs rms_norm);
* qk_norm_rope: Qwen3Attention's q_norm, k_norm, transposes and RoPE -> one
  qk_norm_rope call (qk_norm_rope.py);
* swiglu: Qwen3MLP's silu(gate) * up -> the fused SwiGLU (swiglu.py);
* loss (opt-in until its GPU run): Qwen3ForCausalLM's lm_head + loss -> linear +
  cross-entropy without the logits (linear_cross_entropy.py), when it trains with
  labels. Then the output's ``logits`` is None (they are never made); in eval
  mode or without labels the forward is HF's own, logits included (generate,
  evaluation metrics). Before the model is built, this part replaces the forward
  on HF's Qwen3ForCausalLM class itself (the class callers hold): every
  Qwen3ForCausalLM, built before or after, until undo().

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
from linear_cross_entropy import causal_lm_loss
from qk_norm_rope import qk_norm_rope
from qwen3_mirrored_code import check_transformers
from rmsnorm_triton import TritonQwen3RMSNorm
from swiglu import qwen3_mlp_forward

# transformers' own classes, subclassed below and kept for undo
HF_ATTENTION = modeling_qwen3.Qwen3Attention
HF_MLP = modeling_qwen3.Qwen3MLP
HF_NORM = qwen3_fused_add_patch.HF_NORM
HF_CAUSAL_LM = modeling_qwen3.Qwen3ForCausalLM
HF_CAUSAL_LM_FORWARD = HF_CAUSAL_LM.forward
# --8<-- [end:imports]
if HF_CAUSAL_LM.forward.__module__ != modeling_qwen3.__name__:
    raise ImportError("Qwen3ForCausalLM.forward is not transformers' own: import "
                      "qwen3_fusion_patch before other patches")
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
    "loss": ("Qwen3ForCausalLM", "ForCausalLMLoss", "fixed_cross_entropy",
             "slice_logits_to_keep", "can_return_tuple"),
}
# The norms whose weight and eps the fused attention may read in their place.
QK_NORMS = (HF_NORM, TritonQwen3RMSNorm, qwen3_fused_add_patch.Qwen3RMSNorm)
# 5.24 renamed the attention's KV cache argument and passes its kwargs to update().
CACHE = "cache" if "cache" in inspect.signature(HF_ATTENTION.forward).parameters \
    else "past_key_values"
# and the model's and its outputs' field (before 5.24: past_key_values)
_OUTPUT_FIELDS = modeling_qwen3.CausalLMOutputWithPast.__dataclass_fields__
CACHE_FIELD = "cache" if "cache" in _OUTPUT_FIELDS else "past_key_values"


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


# --8<-- [start:causal_lm]
def fused_loss_forward(self, input_ids=None, attention_mask=None, position_ids=None,
                       cache=None, inputs_embeds=None, labels=None, use_cache=None,
                       logits_to_keep=0, **kwargs):
    """Qwen3ForCausalLM.forward (HF's parameters, in HF's order). Training with
    labels: HF's loss from the hidden states and lm_head.weight, no logits made
    (the output's logits is None). Otherwise: HF's own forward."""
    cache = kwargs.pop("past_key_values", cache)  # either name, as HF takes
    if labels is None or not self.training:
        return HF_CAUSAL_LM_FORWARD(
            self, input_ids=input_ids, attention_mask=attention_mask,
            position_ids=position_ids, inputs_embeds=inputs_embeds, labels=labels,
            use_cache=use_cache, logits_to_keep=logits_to_keep, **{CACHE: cache},
            **kwargs)
    return_dict = kwargs.pop("return_dict", self.config.return_dict)  # as HF pops it
    return_dict = self.config.return_dict if return_dict is None else return_dict
    outputs = self.model(input_ids=input_ids, attention_mask=attention_mask,
                         position_ids=position_ids, inputs_embeds=inputs_embeds,
                         use_cache=use_cache, **{CACHE: cache}, **kwargs)
    hidden_states = _slice_logits_to_keep(outputs.last_hidden_state, logits_to_keep)
    check_lm_head(self)
    loss = causal_lm_loss(hidden_states, self.lm_head.weight, labels,
                          ignore_index=kwargs.get("ignore_index", -100),
                          num_items_in_batch=kwargs.get("num_items_in_batch"),
                          shift_labels=kwargs.get("shift_labels"))
    output = modeling_qwen3.CausalLMOutputWithPast(
        loss=loss, logits=None, hidden_states=outputs.hidden_states,
        attentions=outputs.attentions, **{CACHE_FIELD: getattr(outputs, CACHE_FIELD)})
    return output if return_dict else output.to_tuple()
# --8<-- [end:causal_lm]


def _slice_logits_to_keep(hidden_states, logits_to_keep):
    """The positions HF makes logits for: its slice_logits_to_keep (5.22+), or the
    slice that 5.17 writes inline."""
    if hasattr(modeling_qwen3, "slice_logits_to_keep"):
        return modeling_qwen3.slice_logits_to_keep(hidden_states, logits_to_keep)
    if isinstance(logits_to_keep, int):
        logits_to_keep = slice(-logits_to_keep, None)
    return hidden_states[:, logits_to_keep, :]


class Qwen3ForCausalLM(HF_CAUSAL_LM):
    """HF's causal LM whose training loss makes no logits (in-place conversion)."""

    forward = fused_loss_forward


def check_causal_lm_forward() -> None:
    """Refuse a Qwen3ForCausalLM.forward that another patch (Liger's, say) replaced."""
    forward = HF_CAUSAL_LM.forward
    if forward is not HF_CAUSAL_LM_FORWARD:
        raise RuntimeError(f"Qwen3ForCausalLM.forward is already {forward.__module__}."
                           f"{forward.__qualname__}, not transformers' own: undo the "
                           "other patch first")


def check_lm_head(model) -> None:
    """The fused loss computes ForCausalLMLoss with lm_head's whole weight and no
    bias: refuse anything else, with what to do instead."""
    from transformers.loss.loss_utils import ForCausalLMLoss

    if model.loss_function is not ForCausalLMLoss:
        raise ValueError(f"the fused loss computes HF's ForCausalLMLoss; this model's "
                         f"loss_function is {model.loss_function!r}: use loss=False")
    head = model.lm_head
    if not isinstance(head, torch.nn.Linear) or head.bias is not None:
        raise ValueError(f"the fused loss takes a bias-free nn.Linear lm_head; found "
                         f"{head!r}: use loss=False")
    if type(head.weight) not in (torch.nn.Parameter, torch.Tensor):
        raise TypeError(f"lm_head.weight is a {type(head.weight).__name__} (a sharded "
                        "lm_head?): the fused loss reads the whole weight without "
                        "lm_head's forward; shard lm_head with its parent, or use "
                        "loss=False")
    if head.weight.shape[0] != model.config.vocab_size:
        raise ValueError(f"lm_head has {head.weight.shape[0]} outputs, the config's "
                         f"vocab_size is {model.config.vocab_size}")


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
                       fused_add=True, qk_norm_rope=True, swiglu=True, loss=False):
    """Fuse the chosen parts of Qwen3. No model: patch modeling_qwen3 before the
    model is built. A model: convert its Qwen3 modules in place. Returns undo()."""
    parts = {"rms_norm": rms_norm, "fused_add": fused_add,
             "qk_norm_rope": qk_norm_rope, "swiglu": swiglu, "loss": loss}
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
    if parts["loss"]:
        # The causal LM class is what callers hold (AutoModelForCausalLM resolves
        # it too): its forward is replaced on HF's class itself.
        check_causal_lm_forward()
        HF_CAUSAL_LM.forward = fused_loss_forward
        undos.append(lambda: setattr(HF_CAUSAL_LM, "forward", HF_CAUSAL_LM_FORWARD))


def _swap_classes(modules, new_class, undos) -> None:
    undos.append(qwen3_fused_add_patch.swap_class(modules, new_class))


def _convert_in_place(model, parts, undos) -> None:
    ours = (Qwen3Attention, Qwen3MLP, Qwen3ForCausalLM, TritonQwen3RMSNorm,
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
    heads = [m for m in model.modules() if type(m) is HF_CAUSAL_LM]
    if parts["loss"]:
        if not heads:
            raise ValueError(f"the fused loss replaces Qwen3ForCausalLM's forward; "
                             f"{type(model).__name__} holds none: use loss=False")
        check_causal_lm_forward()
        for head in heads:
            check_lm_head(head)
    if parts["fused_add"]:
        undos.append(qwen3_fused_add_patch.apply_fused_add_rmsnorm(model))
    elif parts["rms_norm"]:
        _replace_norms(model, undos)
    if parts["qk_norm_rope"]:
        _swap_classes(attentions, Qwen3Attention, undos)
    if parts["swiglu"]:
        _swap_classes(mlps, Qwen3MLP, undos)
    if parts["loss"]:
        _swap_classes(heads, Qwen3ForCausalLM, undos)


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

    from transformers import AutoModelForCausalLM

    from qwen3_configs import tiny_qwen3_config

    device = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: TRITON_INTERPRET=1
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(tiny_qwen3_config()).to(device)
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
