# SPDX-License-Identifier: Apache-2.0
"""Fuse every residual add of a Qwen3 into the RMSNorm that follows it.

HF's Qwen3 adds a residual and then normalises the sum, 2 * num_hidden_layers
times per forward: attention output + residual -> post_attention_layernorm,
MLP output + residual -> the next layer's input_layernorm (after the last
layer: the final norm). Here each such pair is one fused_add_rms_norm call.

Three subclasses of transformers' Qwen3 classes, with HF's class names:

* Qwen3RMSNorm.forward(h, residual=None): no residual -> the Triton norm
  (q_norm, k_norm, layer 0's input norm); else (norm(h + residual), h + residual).
* Qwen3DecoderLayer.forward(h, residual=None) returns (mlp_out, residual)
  un-added; the next layer's input norm (or the final norm) adds them.
* Qwen3Model.forward: HF's, passing the pair along and fusing the last add.
  Into a layer that activation checkpointing runs, it passes the sum instead:
  the checkpoint keeps a layer's inputs, and a pair would be one more
  batch x seq x hidden tensor per layer. That add is then not fused.

Subclasses, not forwards assigned to HF's classes: since transformers 5.23,
GradientCheckpointingLayer wraps a layer class's forward when the class is
created, so a forward assigned later runs without checkpointing. A subclass is
wrapped like HF's own layer (and on older versions, checkpointing wraps
__call__). HF's class names stay, because HF and FSDP find layers by name
(_no_split_modules); parameters and state_dict keys are HF's.

Two ways in: patch_qwen3_fused_add_rmsnorm() before the model is built, or
apply_fused_add_rmsnorm(model) on a built one. Both keep checkpointing, the KV
cache and generate, output_attentions and output_hidden_states, and refuse a
transformers whose mirrored code the tests never ran on (qwen3_mirrored_code.py).
"""
import inspect
import sys

# --8<-- [start:imports]
import torch
import transformers.models.qwen3.modeling_qwen3 as modeling_qwen3

from qwen3_mirrored_code import check_transformers
from rmsnorm_fused_add import fused_add_rms_norm
from rmsnorm_triton import rms_norm

# transformers' own classes, subclassed below and kept for undo
HF_NORM = modeling_qwen3.Qwen3RMSNorm
HF_LAYER = modeling_qwen3.Qwen3DecoderLayer
HF_MODEL = modeling_qwen3.Qwen3Model
# --8<-- [end:imports]
# The transformers code this patch mirrors or leans on (qwen3_mirrored_code.PIECES).
MIRRORED = ("Qwen3RMSNorm", "Qwen3DecoderLayer", "Qwen3Model",
            "GradientCheckpointingLayer", "capture_outputs",
            "install_output_capuring_hook", "_CanRecordRegistry",
            "merge_with_config_defaults")
for _hf in (HF_NORM, HF_LAYER, HF_MODEL):
    if _hf.__module__ != modeling_qwen3.__name__:
        raise ImportError(f"modeling_qwen3.{_hf.__name__} comes from {_hf.__module__}: "
                          "import qwen3_fused_add_patch before other patches")


def cache_kwarg() -> str:
    """What this transformers' Qwen3 calls the KV cache: past_key_values (5.17 to
    5.23), cache (5.24 on, with past_key_values an alias until 5.40)."""
    names = inspect.signature(HF_MODEL.forward).parameters
    return "cache" if "cache" in names else "past_key_values"


CACHE = cache_kwarg()


# --8<-- [start:norm]
class Qwen3RMSNorm(HF_NORM):
    """HF's norm; given a residual, returns (norm(h + residual), h + residual)."""

    # transformers' kernel switch (use_kernels, on by default from 5.25) swaps the
    # forward of every module whose class has a hub kernel name, inherited or not:
    # this condition makes it leave this class alone.
    kernel_condition = staticmethod(lambda module: False)

    def forward(self, hidden_states, residual=None):
        if residual is None:
            return rms_norm(hidden_states, self.weight, self.variance_epsilon)
        return fused_add_rms_norm(hidden_states, residual, self.weight,
                                  self.variance_epsilon)
# --8<-- [end:norm]


# --8<-- [start:layer]
class Qwen3DecoderLayer(HF_LAYER):
    """HF's decoder layer with its adds moved into the norms."""

    def forward(self, hidden_states, residual=None, return_sum=False, **kwargs):
        """Takes and returns the residual stream as an un-added pair (delta,
        residual); layer 0 gets (embeddings, None). ``return_sum``: return HF's
        output (residual + delta, None), as output_hidden_states records it. The
        mask, positions and KV cache in ``kwargs`` go to the attention as in HF."""
        if residual is None:  # layer 0, or the previous layer returned its sum
            residual = hidden_states
            hidden_states = self.input_layernorm(hidden_states)
        else:  # previous layer's MLP output + residual, then this layer's norm
            hidden_states, residual = self.input_layernorm(hidden_states, residual)
        hidden_states, _ = self.self_attn(hidden_states=hidden_states, **kwargs)
        # attention output + residual, then the post-attention norm: one call
        hidden_states, residual = self.post_attention_layernorm(hidden_states,
                                                                residual)
        hidden_states = self.mlp(hidden_states)
        if return_sum:
            return residual + hidden_states, None
        return hidden_states, residual  # the add happens in the next norm
# --8<-- [end:layer]


# --8<-- [start:model]
class Qwen3Model(HF_MODEL):
    """HF's Qwen3Model; only the layer loop and the final norm differ."""

    def __init__(self, config):
        super().__init__(config)
        check_norms([self], norm=Qwen3RMSNorm)  # built under another norm patch?

    @modeling_qwen3.merge_with_config_defaults  # HF's: config defaults (use_cache)
    @modeling_qwen3.capture_outputs  # HF's: output_attentions, output_hidden_states
    def forward(self, input_ids=None, attention_mask=None, position_ids=None,
                cache=None, inputs_embeds=None, use_cache=None, **kwargs):
        cache = kwargs.pop("past_key_values", cache)  # either name, as HF takes
        if (input_ids is None) ^ (inputs_embeds is not None):
            raise ValueError(
                "You must specify exactly one of input_ids or inputs_embeds")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        if use_cache and cache is None:
            cache = modeling_qwen3.DynamicCache(config=self.config)
        if position_ids is None:
            past_seen = 0 if cache is None else cache.get_seq_length()
            position_ids = torch.arange(inputs_embeds.shape[1],
                                        device=inputs_embeds.device)
            position_ids = (position_ids + past_seen).unsqueeze(0)
        if not isinstance(causal_mask_mapping := attention_mask, dict):
            mask_kwargs = {
                "config": self.config,
                "inputs_embeds": inputs_embeds,
                "attention_mask": attention_mask,
                CACHE: cache,
                "position_ids": position_ids,
            }
            causal_mask_mapping = {
                "full_attention": modeling_qwen3.create_causal_mask(**mask_kwargs)}
            if self.has_sliding_layers:
                causal_mask_mapping["sliding_attention"] = (
                    modeling_qwen3.create_sliding_window_causal_mask(**mask_kwargs))

        # Recording hidden states needs each layer's sum: the layers then return it.
        wanted = kwargs.get("output_hidden_states", self.config.output_hidden_states)
        record_sums = wanted is not None and wanted is not False
        layers = self.layers[: self.config.num_hidden_layers]
        hidden_states, residual = inputs_embeds, None
        position_embeddings = self.rotary_emb(hidden_states, position_ids)
        for i, decoder_layer in enumerate(layers):
            # A checkpointed layer keeps its inputs until the backward: handing
            # it the un-added pair would keep two tensors where HF keeps one.
            # So the layer before it returns the sum (its add is not fused).
            next_keeps_inputs = i + 1 < len(layers) and checkpointed(layers[i + 1])
            hidden_states, residual = decoder_layer(
                hidden_states,  # positional: checkpointing's inputs
                residual,
                attention_mask=causal_mask_mapping[self.config.layer_types[i]],
                position_embeddings=position_embeddings,
                position_ids=position_ids,
                use_cache=use_cache,
                return_sum=record_sums or next_keeps_inputs,
                **{CACHE: cache},
                **kwargs,
            )
        if residual is None:  # no layers, or the last one returned its sum
            hidden_states = self.norm(hidden_states)
        else:  # last MLP output + residual, then the final norm
            hidden_states, _ = self.norm(hidden_states, residual)
        return modeling_qwen3.BaseModelOutputWithPast(
            last_hidden_state=hidden_states, **{CACHE: cache if use_cache else None})
# --8<-- [end:model]


def checkpointed(layer) -> bool:
    """Whether HF's checkpointing runs this layer (as GradientCheckpointingLayer
    decides)."""
    return bool(getattr(layer, "gradient_checkpointing", False) and layer.training
                and torch.is_grad_enabled())


FUSED = {HF_NORM: Qwen3RMSNorm, HF_LAYER: Qwen3DecoderLayer, HF_MODEL: Qwen3Model}


# --8<-- [start:patch]
def patch_qwen3_fused_add_rmsnorm():
    """Make modeling_qwen3 build the fused classes; call it before building the
    model (from_config, from_pretrained). Returns undo()."""
    check_transformers("qwen3_fused_add_patch", pieces=MIRRORED)
    current = [getattr(modeling_qwen3, hf.__name__) for hf in FUSED]
    if current == list(FUSED.values()):
        raise RuntimeError("Qwen3 is already patched for the fused residual add")
    if current != list(FUSED):
        raise RuntimeError("modeling_qwen3 is patched otherwise (e.g. by "
                           "patch_qwen3_rmsnorm): undo the other patch first")
    for hf, fused in FUSED.items():
        setattr(modeling_qwen3, hf.__name__, fused)

    def undo():
        for hf in FUSED:
            setattr(modeling_qwen3, hf.__name__, hf)

    return undo


def apply_fused_add_rmsnorm(model: torch.nn.Module):
    """Turn the Qwen3 modules of a built model into the fused classes, in place
    (parameters, buffers and hooks stay). Returns undo()."""
    check_transformers("qwen3_fused_add_patch", pieces=MIRRORED)
    found = [m for m in model.modules() if isinstance(m, tuple(FUSED.values()))]
    if found:
        raise RuntimeError("this model's residual adds are already fused")
    hf_model = [m for m in model.modules() if isinstance(m, HF_MODEL)]
    if not hf_model:
        raise ValueError(f"{type(model).__name__} holds no Qwen3Model")
    check_norms(hf_model, norm=HF_NORM)
    undos = [swap_class([m for m in model.modules() if type(m) is hf], fused)
             for hf, fused in FUSED.items()]
    register_output_capture(Qwen3Model)

    def undo():
        while undos:
            undos.pop()()

    return undo
# --8<-- [end:patch]


def swap_class(modules, new_class):
    """Give each module ``new_class`` in place. A forward that transformers' kernel
    switch put on the instance (from_pretrained does, from 5.25) would still run
    instead of the class's: it is taken off, and undo() puts it back with the class."""
    kept = [(module, type(module), {key: module.__dict__.pop(key)
                                    for key in ("forward", "_kernel_repo")
                                    if key in module.__dict__})
            for module in modules]
    for module in modules:
        module.__class__ = new_class

    def undo():
        for module, old_class, attributes in kept:
            module.__class__ = old_class
            module.__dict__.update(attributes)
        kept.clear()

    return undo


def register_output_capture(cls) -> None:
    """HF's output capture finds what a model records by its class's name, which
    PreTrainedModel.__init__ registers; a model converted in place needs it too."""
    capturing = sys.modules[modeling_qwen3.capture_outputs.__module__]
    registry = capturing._CAN_RECORD_REGISTRY
    dict.__setitem__(registry, str(cls), HF_MODEL._can_record_outputs)


def check_norms(models, norm) -> None:
    """Where the fused path adds, the norms must be ``norm``: HF's (to be converted in
    place) or this module's (built under the patch). Not, e.g., another patch's norm,
    or FSDP's or compile's wrappers, which must come after the fusion."""
    for model in models:
        layer_class = HF_LAYER if norm is HF_NORM else Qwen3DecoderLayer
        expected = [(model.norm, norm)]
        for layer in model.layers:
            expected += [(layer, layer_class), (layer.input_layernorm, norm),
                         (layer.post_attention_layernorm, norm)]
        for module, cls in expected:
            if type(module) is not cls:
                raise TypeError(
                    f"fused residual add: found {type(module).__module__}."
                    f"{type(module).__name__} where {cls.__module__}.{cls.__name__} "
                    "was expected (another patch, or a wrapper applied before this?)")
