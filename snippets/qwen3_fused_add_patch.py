"""Fuse every residual add of a Qwen3 into the RMSNorm that follows it.

HF's Qwen3 adds a residual and then normalises the sum, 2 * num_hidden_layers
times per forward: attention output + residual -> post_attention_layernorm,
MLP output + residual -> the next layer's input_layernorm (after the last
layer: the final norm). patch_qwen3_fused_add_rmsnorm() makes each such pair
one fused_add_rms_norm call. It patches three forwards of transformers'
modeling_qwen3 at class level, so it works for models built before or after
the call, and swaps no module: parameters and state_dict keys stay HF's.
Tested with transformers 5.17 and 5.24 (TESTED_VERSIONS); between them the
Qwen3 forwards renamed their KV-cache argument from past_key_values to cache.

* Qwen3RMSNorm.forward(h, residual=None): no residual -> the Triton norm
  (q_norm, k_norm, layer 0's input norm); else (norm(h + residual), h + residual).
* Qwen3DecoderLayer.forward(h, residual=None) returns (mlp_out, residual)
  un-added; the next layer's input norm (or the final norm) adds them.
* Qwen3Model.forward: HF's, passing the pair along and fusing the last add.

Not supported (clear errors): output_hidden_states (a layer's output is
un-added), norms swapped for another class (e.g. by patch_qwen3_rmsnorm).
"""
import inspect

import torch
import transformers
import transformers.models.qwen3.modeling_qwen3 as modeling_qwen3
from packaging.version import Version

from rmsnorm_fused_add import fused_add_rms_norm
from rmsnorm_triton import rms_norm

TESTED_VERSIONS = ("5.17", "5.24")  # the oldest and newest series the tests run on
# HF names the patched forwards use; patching checks they are all there.
REQUIRED = ("Qwen3RMSNorm", "Qwen3DecoderLayer", "Qwen3Model", "DynamicCache",
            "create_causal_mask", "create_sliding_window_causal_mask",
            "BaseModelOutputWithPast", "merge_with_config_defaults", "capture_outputs")


def hf_signatures(cache: str) -> dict[str, list[str]]:
    """The HF forwards' parameters, with the KV cache named ``cache``."""
    return {
        "Qwen3RMSNorm": ["self", "hidden_states"],
        "Qwen3DecoderLayer": ["self", "hidden_states", "attention_mask", "position_ids",
                              cache, "use_cache", "position_embeddings", "kwargs"],
        "Qwen3Model": ["self", "input_ids", "attention_mask", "position_ids", cache,
                       "inputs_embeds", "use_cache", "kwargs"],
    }


def cache_kwarg() -> str:
    """What this transformers' Qwen3 calls the KV cache: past_key_values (5.17),
    cache (5.24, with past_key_values an alias until 5.40)."""
    forward = modeling_qwen3.Qwen3Model.__dict__.get("forward")
    names = inspect.signature(forward).parameters if forward is not None else ()
    return "cache" if "cache" in names else "past_key_values"


CACHE = cache_kwarg()
# --8<-- [start:norm_forward]
def fused_norm_forward(self, hidden_states, residual=None):
    """Qwen3RMSNorm(h); with a residual: (Qwen3RMSNorm(h + residual), h + residual)."""
    if residual is None:
        return rms_norm(hidden_states, self.weight, self.variance_epsilon)
    return fused_add_rms_norm(hidden_states, residual, self.weight,
                              self.variance_epsilon)
# --8<-- [end:norm_forward]


# --8<-- [start:layer_forward]
def fused_layer_forward(self, hidden_states, residual=None, **kwargs):
    """HF's decoder layer with its adds moved into the norms.

    Takes and returns the residual stream as an un-added pair (delta, residual);
    layer 0 gets (embeddings, None). The mask, positions and KV cache in
    ``kwargs`` go to the attention as HF's layer passes them.
    """
    if residual is None:  # layer 0: nothing to add yet
        residual = hidden_states
        hidden_states = self.input_layernorm(hidden_states)
    else:  # previous layer's MLP output + residual, then this layer's input norm
        hidden_states, residual = self.input_layernorm(hidden_states, residual)
    hidden_states, _ = self.self_attn(hidden_states=hidden_states, **kwargs)
    # attention output + residual, then the post-attention norm: one call
    hidden_states, residual = self.post_attention_layernorm(hidden_states, residual)
    hidden_states = self.mlp(hidden_states)
    return hidden_states, residual  # the add happens in the next norm
# --8<-- [end:layer_forward]


# --8<-- [start:model_forward]
def fused_model_forward(self, input_ids=None, attention_mask=None, position_ids=None,
                        cache=None, inputs_embeds=None, use_cache=None, **kwargs):
    """HF's Qwen3Model.forward (5.17 to 5.24); only the layer loop and final norm
    differ. The KV cache may come as ``cache`` or ``past_key_values``."""
    cache = kwargs.pop("past_key_values", cache)
    if kwargs.get("output_hidden_states", self.config.output_hidden_states):
        raise NotImplementedError(
            "output_hidden_states is not supported with the fused residual add: "
            "a patched layer returns its output un-added; undo the patch for it")
    check_norms(self)
    if (input_ids is None) ^ (inputs_embeds is not None):
        raise ValueError("You must specify exactly one of input_ids or inputs_embeds")
    if inputs_embeds is None:
        inputs_embeds = self.embed_tokens(input_ids)
    if use_cache and cache is None:
        cache = modeling_qwen3.DynamicCache(config=self.config)
    if position_ids is None:
        past_seen = 0 if cache is None else cache.get_seq_length()
        position_ids = torch.arange(inputs_embeds.shape[1], device=inputs_embeds.device)
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

    hidden_states, residual = inputs_embeds, None
    position_embeddings = self.rotary_emb(hidden_states, position_ids)
    for i, decoder_layer in enumerate(self.layers[: self.config.num_hidden_layers]):
        hidden_states, residual = decoder_layer(  # positional: gradient checkpointing
            hidden_states,
            residual,
            attention_mask=causal_mask_mapping[self.config.layer_types[i]],
            position_embeddings=position_embeddings,
            position_ids=position_ids,
            use_cache=use_cache,
            **{CACHE: cache},
            **kwargs,
        )
    if residual is None:  # no layers
        hidden_states = self.norm(hidden_states)
    else:  # last MLP output + residual, then the final norm
        hidden_states, _ = self.norm(hidden_states, residual)
    return modeling_qwen3.BaseModelOutputWithPast(
        last_hidden_state=hidden_states, **{CACHE: cache if use_cache else None})
# --8<-- [end:model_forward]


def check_norms(model) -> None:
    """The fused path calls HF's Qwen3RMSNorm modules with a residual."""
    norms = [model.norm] + [norm for layer in model.layers
                            for norm in (layer.input_layernorm,
                                         layer.post_attention_layernorm)]
    for norm in norms:
        if type(norm).forward is not fused_norm_forward:
            raise TypeError(
                f"fused residual add: found a {type(norm).__name__} norm, expected "
                "transformers' Qwen3RMSNorm (was the model built under another patch, "
                "e.g. patch_qwen3_rmsnorm?)")


def check_transformers() -> None:
    """Raise unless modeling_qwen3 is code of the tested range that the forwards
    above mirror (TESTED_VERSIONS, either KV-cache name)."""
    version = transformers.__version__
    oldest, newest = (Version(v).release[:2] for v in TESTED_VERSIONS)
    if not oldest <= Version(version).release[:2] <= newest:
        raise RuntimeError(
            f"qwen3_fused_add_patch is tested with transformers {TESTED_VERSIONS[0]} "
            f"to {TESTED_VERSIONS[1]} (it mirrors their Qwen3 forwards); found "
            f"{version}")
    missing = [name for name in REQUIRED if not hasattr(modeling_qwen3, name)]
    if missing:
        raise RuntimeError(f"transformers.models.qwen3.modeling_qwen3 lacks {missing}")
    for name, expected in hf_signatures(CACHE).items():
        cls = getattr(modeling_qwen3, name)
        if cls.__module__ != modeling_qwen3.__name__:
            raise RuntimeError(f"modeling_qwen3.{name} is {cls.__module__}."
                               f"{cls.__name__}, not HF's: undo the other patch first")
        found = list(inspect.signature(cls.forward).parameters)
        if found != expected:
            raise RuntimeError(f"{name}.forward takes {found}, expected {expected}")


# --8<-- [start:patch]
def patch_qwen3_fused_add_rmsnorm():
    """Patch modeling_qwen3 (models built before or after); returns undo()."""
    if modeling_qwen3.Qwen3RMSNorm.forward is fused_norm_forward:
        raise RuntimeError("Qwen3 is already patched for the fused residual add")
    check_transformers()
    new = {
        modeling_qwen3.Qwen3RMSNorm: fused_norm_forward,
        modeling_qwen3.Qwen3DecoderLayer: fused_layer_forward,
        # HF's decorators: config defaults (use_cache), output_attentions capture
        modeling_qwen3.Qwen3Model: modeling_qwen3.merge_with_config_defaults(
            modeling_qwen3.capture_outputs(fused_model_forward)),
    }
    old = {cls: cls.__dict__["forward"] for cls in new}
    for cls, forward in new.items():
        cls.forward = forward

    def undo():
        for cls, forward in old.items():
            cls.forward = forward

    return undo
# --8<-- [end:patch]

