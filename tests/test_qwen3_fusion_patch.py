"""apply_qwen3_fusion: the whole fusion set through one entry point, each part switchable, and
everything HF's Qwen3 does still works: loss and gradients (the fused loss: HF's loss options,
tied embeddings, logits in eval mode), gradient checkpointing (it still
recomputes the fused calls), the KV cache and generate, output_attentions and
output_hidden_states, parameters and state_dict, exact undo, clear refusals. Both ways in:
on a built model (in place) and before the model is built. Runs on every transformers the
suite runs (.ci/test.sh: tests/test_qwen3_*.py)."""
import warnings

import pytest
import torch
import transformers.models.qwen3.modeling_qwen3 as modeling_qwen3
from transformers import Qwen3ForCausalLM

import qwen3_fusion_patch
import qwen3_mirrored_code
import swiglu
from helpers import batch, loss_and_grads, rel_err, tiny_model
from qwen3_fusion_patch import (HF_ATTENTION, HF_CAUSAL_LM, HF_CAUSAL_LM_FORWARD, HF_MLP,
                                apply_qwen3_fusion)
from qwen3_fused_add_patch import HF_LAYER, HF_MODEL, HF_NORM
from rmsnorm_triton import TritonQwen3RMSNorm

HF = {"Qwen3RMSNorm": HF_NORM, "Qwen3DecoderLayer": HF_LAYER, "Qwen3Model": HF_MODEL,
      "Qwen3Attention": HF_ATTENTION, "Qwen3MLP": HF_MLP}
WAYS = ("apply", "patch")
ALL = dict(rms_norm=True, fused_add=True, qk_norm_rope=True, swiglu=True, loss=True)
# The loss part alone: its tests check HF's loss semantics, with HF's layers (no interpreted kernels).
LOSS_ONLY = dict(rms_norm=False, fused_add=False, qk_norm_rope=False, swiglu=False, loss=True)


@pytest.fixture(autouse=True)
def restore_hf():
    yield
    for name, cls in HF.items():
        setattr(modeling_qwen3, name, cls)
    HF_CAUSAL_LM.forward = HF_CAUSAL_LM_FORWARD


def module_globals():
    return {name: getattr(modeling_qwen3, name) for name in HF}




def fused(model, way, **parts):
    """(model fused as a reader would, undo). "apply": in place; "patch": a new model built
    under the build-time patch, loaded with the weights (the loss part patches the causal
    LM's forward: it lasts until undo)."""
    parts = ALL | parts
    if way == "apply":
        return model, apply_qwen3_fusion(model, **parts)
    undo_patch = apply_qwen3_fusion(**parts)
    built = Qwen3ForCausalLM(model.config)
    built.load_state_dict(model.state_dict())
    parameter = next(model.parameters())
    built.train(model.training)
    return built.to(device=parameter.device, dtype=parameter.dtype), undo_patch








@pytest.fixture
def calls(monkeypatch):
    """Calls of the fused q/k, SwiGLU and loss functions, as the patch makes them."""
    seen = {"qk_norm_rope": 0, "swiglu": 0, "causal_lm_loss": 0}

    def counted(module, name):
        inner = getattr(module, name)

        def wrapper(*args, **kwargs):
            seen[name] += 1
            return inner(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    counted(qwen3_fusion_patch, "qk_norm_rope")
    counted(swiglu, "swiglu")  # qwen3_mlp_forward looks it up in swiglu's globals
    counted(qwen3_fusion_patch, "causal_lm_loss")
    return seen


@pytest.mark.parametrize("way", WAYS)
def test_loss_and_every_grad_match_hf(device, way, calls):
    model = tiny_model(device)
    ids = batch(model, device)
    ref_loss, ref_grads = loss_and_grads(model, ids)
    fused_model, undo = fused(model, way)
    loss, grads = loss_and_grads(fused_model, ids)
    undo()
    assert calls == {"qk_norm_rope": 2, "swiglu": 2, "causal_lm_loss": 1}  # per layer; once
    assert rel_err(loss, ref_loss) < 1e-6
    assert grads.keys() == ref_grads.keys()
    worst = {name: rel_err(grads[name], ref_grads[name]) for name in grads}
    assert max(worst.values()) < 1e-5, worst


@pytest.mark.parametrize("part", ["rms_norm", "qk_norm_rope", "swiglu", "loss"])
def test_each_part_switches_alone(device, part, calls):
    """One part on: only its modules change, the others stay HF's and run HF's code."""
    model = tiny_model(device)
    ids = batch(model, device)
    with torch.no_grad():
        expected = model(input_ids=ids).logits
        expected_loss = model(input_ids=ids, labels=ids).loss
    only = {name: name == part for name in ALL}
    undo = apply_qwen3_fusion(model, **only)
    kinds = {type(m) for m in model.modules()}
    with torch.no_grad():
        logits = model(input_ids=ids).logits
        loss = model(input_ids=ids, labels=ids).loss
    undo()
    assert (TritonQwen3RMSNorm in kinds) == (part == "rms_norm")
    assert (qwen3_fusion_patch.Qwen3Attention in kinds) == (part == "qk_norm_rope")
    assert (qwen3_fusion_patch.Qwen3MLP in kinds) == (part == "swiglu")
    assert (qwen3_fusion_patch.Qwen3ForCausalLM in kinds) == (part == "loss")
    assert calls == {"qk_norm_rope": 4 * (part == "qk_norm_rope"),
                     "swiglu": 4 * (part == "swiglu"), "causal_lm_loss": int(part == "loss")}
    torch.testing.assert_close(logits, expected, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(loss, expected_loss, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("way, use_reentrant", [("apply", True), ("patch", False)],
                         ids=["apply-reentrant", "patch-non_reentrant"])
def test_checkpointing_recomputes_the_fused_calls(device, way, use_reentrant, calls):
    """With checkpointing on, the backward recomputes each layer: every fused call runs twice
    per layer (once without), and the gradients still match HF's."""
    model = tiny_model(device)
    ids = batch(model, device)
    ref_loss, ref_grads = loss_and_grads(model, ids)
    fused_model, undo = fused(model, way)
    fused_model.train()
    loss_and_grads(fused_model, ids)
    assert calls == {"qk_norm_rope": 2, "swiglu": 2, "causal_lm_loss": 1}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        fused_model.gradient_checkpointing_enable(
            gradient_checkpointing_kwargs={"use_reentrant": use_reentrant})
    loss, grads = loss_and_grads(fused_model, ids)
    undo()
    assert calls == {"qk_norm_rope": 2 + 4, "swiglu": 2 + 4, "causal_lm_loss": 2}
    assert rel_err(loss, ref_loss) < 1e-6
    assert max(rel_err(grads[n], ref_grads[n]) for n in grads) < 1e-5


@pytest.mark.parametrize("way", WAYS)
def test_generate_with_cache_and_padding_matches_hf(device, way):
    model = tiny_model(device).eval()
    ids = batch(model, device, (2, 8))
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding in the first row
    options = dict(attention_mask=mask, max_new_tokens=5, do_sample=False, use_cache=True,
                   pad_token_id=0)
    expected = model.generate(ids, **options)
    fused_model, undo = fused(model, way)
    tokens = fused_model.eval().generate(ids, **options)
    undo()
    assert torch.equal(tokens, expected)


@pytest.mark.parametrize("name", ["past_key_values", "cache"])
def test_either_cache_name_reaches_the_fused_attention(device, name):
    """The KV cache under either name HF's Qwen3Model takes (5.24 on: `cache`, with
    past_key_values an alias; before: past_key_values only)."""
    import inspect

    if name not in inspect.signature(HF_MODEL.forward).parameters and name == "cache":
        pytest.skip("this transformers' Qwen3Model takes no `cache`")
    model = tiny_model(device).eval()
    ids = batch(model, device, (1, 6))
    with torch.no_grad():
        expected = model.model(input_ids=ids).last_hidden_state[:, 4:]
    undo = apply_qwen3_fusion(model, rms_norm=False, fused_add=False, swiglu=False)
    with torch.no_grad():
        cache = modeling_qwen3.DynamicCache(config=model.config)
        model.model(input_ids=ids[:, :4], use_cache=True, **{name: cache})
        step = model.model(input_ids=ids[:, 4:], use_cache=True, **{name: cache})
    undo()
    assert cache.get_seq_length() == 6
    torch.testing.assert_close(step.last_hidden_state, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("way", WAYS)
def test_attentions_and_hidden_states_are_hfs(device, way):
    model = tiny_model(device, layers=3, attn_implementation="eager")
    ids = batch(model, device)
    options = dict(output_attentions=True, output_hidden_states=True)
    with torch.no_grad():
        expected = model(input_ids=ids, **options)
        fused_model, undo = fused(model, way)
        got = fused_model(input_ids=ids, **options)
    undo()
    assert len(got.attentions) == len(got.hidden_states) - 1 == 3
    for ours, theirs in zip(got.attentions + got.hidden_states,
                            expected.attentions + expected.hidden_states):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-5)


def test_undo_is_exact(device):
    """Undo puts back the same module objects and classes: the model computes HF's bits."""
    model = tiny_model(device)
    ids = batch(model, device)
    before = [(name, m, type(m)) for name, m in model.named_modules()]
    parameters = dict(model.named_parameters())
    with torch.no_grad():
        expected = model(input_ids=ids).logits
    for parts in (ALL, ALL | {"fused_add": False}):
        undo = apply_qwen3_fusion(model, **parts)
        assert dict(model.named_parameters()).keys() == parameters.keys()
        assert all(p is parameters[n] for n, p in model.named_parameters())  # no copies
        undo()
        undo()  # a second undo changes nothing
        assert [(name, m, type(m)) for name, m in model.named_modules()] == before
    with torch.no_grad():
        assert torch.equal(model(input_ids=ids).logits, expected)


def test_a_model_built_under_the_patch_keeps_hf_names_and_keys(device):
    reference = tiny_model(device)
    model, undo = fused(reference, "patch")
    undo()
    assert list(model.state_dict()) == list(reference.state_dict())
    names = {type(m).__name__ for m in model.modules()}
    assert set(model._no_split_modules) <= names
    assert {"Qwen3Attention", "Qwen3MLP"} <= names
    assert type(model.model.layers[0].self_attn).__module__ == "qwen3_fusion_patch"
    assert module_globals() == HF  # undone
    assert HF_CAUSAL_LM.forward is HF_CAUSAL_LM_FORWARD


@pytest.mark.parametrize("way", WAYS)
def test_untested_transformers_code_is_refused_by_name(device, monkeypatch, way):
    real = qwen3_mirrored_code.fingerprint()
    monkeypatch.setattr(qwen3_mirrored_code, "fingerprint",
                        lambda: dict(real, Qwen3Attention="0123456789ab"))
    model = tiny_model(device)
    classes = [type(m) for m in model.modules()]
    with pytest.raises(RuntimeError, match=r"\(qk_norm_rope\).* in Qwen3Attention"):
        apply_qwen3_fusion(model if way == "apply" else None)
    assert module_globals() == HF and [type(m) for m in model.modules()] == classes
    apply_qwen3_fusion(model, qk_norm_rope=False)()  # the other parts do not mirror it


# What each part mirrors, written out here (not read from the patch): a piece dropped from
# the patch's own list is then a failing case below.
MIRRORS = {
    "rms_norm": ("Qwen3RMSNorm",),
    "fused_add": ("Qwen3RMSNorm", "Qwen3DecoderLayer", "Qwen3Model", "GradientCheckpointingLayer",
                  "capture_outputs", "install_output_capuring_hook", "_CanRecordRegistry",
                  "merge_with_config_defaults"),
    "qk_norm_rope": ("Qwen3RMSNorm", "Qwen3Attention", "rotate_half", "apply_rotary_pos_emb",
                     "Qwen3RotaryEmbedding"),
    "swiglu": ("Qwen3MLP",),
    "loss": ("Qwen3ForCausalLM", "ForCausalLMLoss", "fixed_cross_entropy", "slice_logits_to_keep",
             "can_return_tuple"),
}
NO_PARTS = dict(rms_norm=False, fused_add=False, qk_norm_rope=False, swiglu=False, loss=False)


@pytest.mark.parametrize("part, piece", [(part, piece) for part, pieces in MIRRORS.items()
                                         for piece in pieces])
def test_every_mirrored_piece_of_every_part_is_checked(monkeypatch, part, piece):
    """Each part alone refuses a transformers whose code differs in any piece it mirrors,
    naming that piece, and changes nothing."""
    real = qwen3_mirrored_code.fingerprint()
    monkeypatch.setattr(qwen3_mirrored_code, "fingerprint", lambda: dict(real, **{piece: "0123456789ab"}))
    parts = NO_PARTS | {part: True} | ({"rms_norm": True} if part == "fused_add" else {})
    with pytest.raises(RuntimeError, match=rf"\({part}|rms_norm\).* in (.*, )?{piece}\b"):
        apply_qwen3_fusion(**parts)
    assert module_globals() == HF and HF_CAUSAL_LM.forward is HF_CAUSAL_LM_FORWARD


def test_another_patch_is_refused_and_nothing_is_left_half_done(device):
    class OtherMLP(HF_MLP):
        pass

    modeling_qwen3.Qwen3MLP = OtherMLP
    with pytest.raises(RuntimeError, match="Qwen3MLP is already .*OtherMLP"):
        apply_qwen3_fusion()
    assert module_globals() == HF | {"Qwen3MLP": OtherMLP}  # norms and attention undone
    modeling_qwen3.Qwen3MLP = HF_MLP

    model = tiny_model(device)
    undo = apply_qwen3_fusion(model)
    with pytest.raises(RuntimeError, match="already fused"):
        apply_qwen3_fusion(model)
    undo()


def test_clear_errors_for_what_it_cannot_fuse(device):
    with pytest.raises(ValueError, match="no Qwen3Model"):
        apply_qwen3_fusion(torch.nn.Linear(4, 4))
    with pytest.raises(ValueError, match="fused_add needs rms_norm"):
        apply_qwen3_fusion(rms_norm=False)
    with pytest.raises(ValueError, match="no part chosen"):
        apply_qwen3_fusion(rms_norm=False, fused_add=False, qk_norm_rope=False, swiglu=False,
                           loss=False)
    model = tiny_model(device, hidden_act="gelu")
    with pytest.raises(ValueError, match="hidden_act is 'gelu'"):
        apply_qwen3_fusion(model)
    model = tiny_model(device)
    model.model.layers[1].self_attn.k_norm.variance_epsilon = 1e-5  # q_norm's is 1e-6
    classes = [type(m) for m in model.modules()]
    with pytest.raises(ValueError, match="takes one eps; q_norm and k_norm have 1e-06 and 1e-05"):
        apply_qwen3_fusion(model)
    assert [type(m) for m in model.modules()] == classes
    model = tiny_model(device)
    model.model.layers[1].self_attn.k_norm = torch.nn.RMSNorm(16)  # some other norm
    classes = [type(m) for m in model.modules()]
    with pytest.raises(TypeError, match="torch.nn.modules.normalization.RMSNorm"):
        apply_qwen3_fusion(model)
    assert [type(m) for m in model.modules()] == classes
    assert module_globals() == HF


def hf_and_fused_outputs(model, way, **call):
    """HF's output, then the fused loss's (the loss part alone), for one call (no_grad)."""
    with torch.no_grad():
        expected = model(**call)
        fused_model, undo = fused(model, way, **LOSS_ONLY)
        got = fused_model(**call)
    undo()
    return expected, got


@pytest.mark.parametrize("way", WAYS)
@pytest.mark.parametrize("case", ["ignored", "num_items", "shift_labels", "logits_to_keep",
                                  "keep_last", "tuple"])
def test_fused_loss_takes_hfs_loss_options(device, way, case):
    """Training with labels: HF's loss through the fused path (no logits made), with HF's
    options: ignore_index-heavy labels, num_items_in_batch, shift_labels, logits_to_keep,
    return_dict=False."""
    model = tiny_model(device)
    ids = batch(model, device, (3, 12))
    labels = ids.clone()
    labels[:, :7] = -100  # masked prompts
    labels[1] = -100  # a row with nothing to learn
    call = {"input_ids": ids, "labels": labels}
    if case == "num_items":
        call["num_items_in_batch"] = torch.tensor(40, device=device)
    if case == "shift_labels":
        call["shift_labels"] = labels  # not what HF's own shift would give
    if case == "logits_to_keep":
        call["logits_to_keep"] = 12  # all positions, as an int
    if case == "keep_last":  # the last 5 positions' logits, with their labels, as HF takes them
        call["logits_to_keep"], call["labels"] = 5, labels[:, -5:]
    if case == "tuple":
        call["return_dict"] = False
    expected, got = hf_and_fused_outputs(model, way, **call)
    if case == "tuple":  # (loss, ...): the None logits dropped, as to_tuple() drops them
        assert isinstance(got, tuple) and isinstance(expected, tuple)
        assert len(got) == len(expected) - 1 and got[0].dim() == 0
        torch.testing.assert_close(got[0], expected[0], rtol=1e-6, atol=1e-6)
        return
    assert got.logits is None
    torch.testing.assert_close(got.loss, expected.loss, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("way", WAYS)
def test_eval_mode_keeps_hfs_logits_and_loss(device, way):
    """Eval (or no labels): HF's own forward, logits included, as evaluation metrics and
    generate need them."""
    model = tiny_model(device).eval()
    ids = batch(model, device)
    expected, got = hf_and_fused_outputs(model, way, input_ids=ids, labels=ids)
    torch.testing.assert_close(got.logits, expected.logits, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(got.loss, expected.loss, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("way", WAYS)
def test_tied_embeddings_get_both_gradients(device, way):
    """Qwen3-0.6B/1.7B/4B tie lm_head to embed_tokens: the shared weight's gradient is the
    lookup's plus the fused loss's, as HF's."""
    model = tiny_model(device, tie_word_embeddings=True)
    assert model.lm_head.weight is model.model.embed_tokens.weight
    ids = batch(model, device)
    ref_loss, ref_grads = loss_and_grads(model, ids)
    fused_model, undo = fused(model, way, **LOSS_ONLY)
    assert fused_model.lm_head.weight is fused_model.model.embed_tokens.weight
    loss, grads = loss_and_grads(fused_model, ids)
    undo()
    assert "lm_head.weight" not in grads  # one parameter, named once
    assert rel_err(loss, ref_loss) < 1e-6
    assert rel_err(grads["model.embed_tokens.weight"],
                   ref_grads["model.embed_tokens.weight"]) < 1e-5


def test_fused_loss_refuses_what_it_does_not_compute(device):
    """No causal LM to fuse; another patch of its forward (Liger's replaces it on the class);
    a custom loss_function; a biased or resized lm_head."""
    model = tiny_model(device)
    with pytest.raises(ValueError, match="holds none: use loss=False"):
        apply_qwen3_fusion(model.model, loss=True)
    apply_qwen3_fusion(model.model)()  # the loss is opt-in

    def other_forward(self, *args, **kwargs):
        return HF_CAUSAL_LM_FORWARD(self, *args, **kwargs)

    HF_CAUSAL_LM.forward = other_forward
    classes = [type(m) for m in model.modules()]
    for target in (model, None):
        with pytest.raises(RuntimeError, match="already|patched already"):
            apply_qwen3_fusion(target, loss=True)
    assert [type(m) for m in model.modules()] == classes and module_globals() == HF
    HF_CAUSAL_LM.forward = HF_CAUSAL_LM_FORWARD

    ids = batch(model, device)
    undo = apply_qwen3_fusion(model, **LOSS_ONLY)
    model._loss_function = lambda **kwargs: torch.tensor(0.0)
    with pytest.raises(ValueError, match="ForCausalLMLoss"):
        model(input_ids=ids, labels=ids)
    del model._loss_function
    undo()
    model.lm_head.bias = torch.nn.Parameter(torch.zeros(model.config.vocab_size, device=device))
    with pytest.raises(ValueError, match="bias-free"):
        apply_qwen3_fusion(model, loss=True)


def test_untested_loss_code_is_refused_by_name(device, monkeypatch):
    real = qwen3_mirrored_code.fingerprint()
    monkeypatch.setattr(qwen3_mirrored_code, "fingerprint",
                        lambda: dict(real, ForCausalLMLoss="0123456789ab"))
    model = tiny_model(device)
    with pytest.raises(RuntimeError, match=r"\(loss\).* in ForCausalLMLoss"):
        apply_qwen3_fusion(model, loss=True)
    assert type(model) is HF_CAUSAL_LM
    apply_qwen3_fusion(model)()


def test_fused_loss_compiles_whole_model_fullgraph(device):
    """torch.compile of the whole model with the fused loss (fullgraph: no graph break in the
    rewritten forward), labels with ignore_index: HF's loss and gradients, no logits. CPU:
    aot_eager (AOTAutograd, the custom op's fake and autograd), the loss part alone; the GPU
    test below runs inductor with every part."""
    if device == "cuda":
        pytest.skip("the GPU runs test_compiled_fusion_set_with_loss_matches_hf")
    model = tiny_model(device)
    ids = batch(model, device)
    out, expected, expected_grads, ours = compiled_against_hf(
        model, ids, 5, LOSS_ONLY, lambda m: torch.compile(m, backend="aot_eager", fullgraph=True))
    assert not ours, [str(w.message) for w in ours]
    assert out.logits is None
    assert rel_err(out.loss.detach(), expected) < 1e-6
    worst = {n: rel_err(p.grad, expected_grads[n]) for n, p in model.named_parameters()}
    assert max(worst.values()) < 1e-5, worst


def compiled_against_hf(model, ids, prompt, parts, compile_model):
    """HF's eager loss and fp64 gradients with the first ``prompt`` labels of each row
    ignored, then the model fused with ``parts`` and run through ``compile_model(model)``
    (forward and backward; undone after). Returns (output, HF's loss, HF's gradients, the
    warnings raised from our code)."""
    labels = ids.clone()
    labels[:, :prompt] = -100
    expected, expected_grads = loss_and_grads(model, ids, labels)
    undo = apply_qwen3_fusion(model, **parts)
    torch._dynamo.reset()
    model.zero_grad(set_to_none=True)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            out = compile_model(model)(input_ids=ids, labels=labels)
            out.loss.backward()
    finally:
        undo()
    return out, expected, expected_grads, [w for w in caught if "snippets" in str(w.filename)]


@pytest.mark.gpu
@pytest.mark.parametrize("way", WAYS)
def test_bf16_loss_and_grads_stay_close_to_hf(way):  # pragma: gpu only
    model = tiny_model("cuda", dtype=torch.bfloat16, layers=3, hidden_size=256,
                       intermediate_size=768, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=64)
    ids = batch(model, "cuda", (4, 64))
    ref_loss, ref_grads = loss_and_grads(model, ids)
    fused_model, undo = fused(model, way)
    loss, grads = loss_and_grads(fused_model, ids)
    undo()
    assert rel_err(loss, ref_loss) < 2e-3
    worst = {n: rel_err(grads[n], ref_grads[n]) for n in grads}
    assert max(worst.values()) < 3e-2, worst


@pytest.mark.gpu
def test_regional_compile_is_fullgraph_without_breaks_or_warnings():  # pragma: gpu only
    """Each fused decoder layer compiles as one graph; the compiled model computes the
    eager fused model's loss."""
    import torch._dynamo

    model = tiny_model("cuda", dtype=torch.bfloat16)
    ids = batch(model, "cuda")
    apply_qwen3_fusion(model)
    eager_loss, _ = loss_and_grads(model, ids)
    torch._dynamo.reset()
    layer = model.model.layers[1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for layer_ in model.model.layers:
            layer_.compile(fullgraph=True)
        loss, grads = loss_and_grads(model, ids)
    ours = [w for w in caught if "snippets" in str(w.filename)]
    assert not ours, [str(w.message) for w in ours]
    assert all(g.isfinite().all() for g in grads.values())
    torch.testing.assert_close(loss, eager_loss, rtol=2e-2, atol=2e-2)
    assert layer._compiled_call_impl is not None


@pytest.mark.gpu
@pytest.mark.parametrize("compiled", ["whole", "regional"])
def test_compiled_fusion_set_with_loss_matches_hf(compiled):  # pragma: gpu only
    """Every part, the loss included, under inductor: the whole model compiled, or each
    decoder layer (the loss stays one opaque op). Labels with ignore_index (where Liger's
    compiled loss goes wrong): the loss and gradients stay close to HF's eager ones, and no
    warning comes from our code."""
    model = tiny_model("cuda", dtype=torch.bfloat16, layers=3, hidden_size=256,
                       intermediate_size=768, num_attention_heads=4, num_key_value_heads=2,
                       head_dim=64)
    ids = batch(model, "cuda", (4, 64))

    def compile_model(model):
        if compiled == "whole":
            return torch.compile(model, fullgraph=False)
        for layer in model.model.layers:
            layer.compile(fullgraph=True)
        return model

    out, expected, expected_grads, ours = compiled_against_hf(model, ids, 20, ALL, compile_model)
    assert not ours, [str(w.message) for w in ours]
    assert out.logits is None
    assert rel_err(out.loss.detach(), expected) < 2e-3
    worst = {n: rel_err(p.grad, expected_grads[n]) for n, p in model.named_parameters()}
    assert max(worst.values()) < 3e-2, worst


def test_the_demo_runs_and_matches_hf(capsys):
    """The module's demo, as a reader runs it: fused loss equal to HF's to 6 digits."""
    import runpy

    runpy.run_path(qwen3_fusion_patch.__file__, run_name="__main__")
    out = capsys.readouterr().out
    losses = [float(part.split()[-1]) for part in out.splitlines()[0].split(",")]
    assert out.startswith("loss: HF") and abs(losses[0] - losses[1]) < 1e-5, out
    assert ("fused modules: {'Qwen3Attention': 2, 'Qwen3DecoderLayer': 2, 'Qwen3MLP': 2, "
            "'Qwen3Model': 1, 'Qwen3RMSNorm': 9}") in out
    assert "after undo: transformers.models.qwen3.modeling_qwen3" in out
    assert module_globals() == HF and HF_CAUSAL_LM.forward is HF_CAUSAL_LM_FORWARD
