"""The fusion set where readers train: HF Trainer with gradient accumulation
(snippets/qwen3_trainer.py), padding-free packing as TRL's SFTTrainer makes it
(qwen3_packing.py), FSDP2 wrapping by _no_split_modules names (qwen3_fsdp2.py), PEFT
LoRA with lm_head and the norms frozen (qwen3_lora.py).

Each run is compared with the same run without the patch: same weights, same data, same
seed, fp32, the tolerances of test_qwen3_fusion_patch.py. TRL is not in the test
requirements (it needs `datasets`, with pyarrow and pandas): the packing tests check the
batch its padding-free collator makes, through transformers' DataCollatorWithFlattening,
and the SFTTrainer test runs only where trl is installed. Trainer needs accelerate, LoRA
needs peft: each test skips, saying so, where its library is missing.
"""
import pytest
import torch
import transformers.models.qwen3.modeling_qwen3 as modeling_qwen3

import linear_cross_entropy
import qk_norm_rope
import qwen3_fused_add_patch
import qwen3_fusion_patch
import rmsnorm_fused_add
import rmsnorm_triton
from helpers import batch, loss_and_grads, qwen3_patches_undone, rel_err, tiny_model
from qwen3_fusion_patch import apply_qwen3_fusion


def needs(module, why):
    return pytest.importorskip(module, reason=f"{module} is not installed: {why}")


@pytest.fixture(autouse=True)
def hf_classes_back():
    with qwen3_patches_undone():
        yield


@pytest.fixture
def loss_calls(monkeypatch):
    """The keyword arguments of each call of the fused loss, as the patch makes it."""
    seen = []
    inner = qwen3_fusion_patch.causal_lm_loss

    def spy(*args, **kwargs):
        seen.append(kwargs)
        return inner(*args, **kwargs)

    monkeypatch.setattr(qwen3_fusion_patch, "causal_lm_loss", spy)
    return seen


def fused(model, way):
    """Every part, the loss included: "apply" converts ``model`` in place; "patch" builds a
    new model under the build-time patch, with ``model``'s weights. Returns (model, undo)."""
    if way == "apply":
        return model, apply_qwen3_fusion(model, loss=True)
    undo = apply_qwen3_fusion(loss=True)
    built = modeling_qwen3.Qwen3ForCausalLM(model.config)
    built.load_state_dict(model.state_dict())
    return built.to(next(model.parameters()).device), undo


def assert_same_training(got, expected):
    """Two train() results: the logged losses, then every gradient of every step."""
    (losses, steps), (ref_losses, ref_steps) = got, expected
    assert len(losses) == len(ref_losses) == len(steps) == len(ref_steps) == 1
    assert rel_err(torch.tensor(losses), torch.tensor(ref_losses)) < 1e-6
    for grads, ref_grads in zip(steps, ref_steps):
        assert grads.keys() == ref_grads.keys()
        worst = {name: rel_err(grads[name], ref_grads[name]) for name in ref_grads}
        assert max(worst.values()) < 1e-5, worst


# ------------------------------------------------------------ HF Trainer, accumulation

def test_trainer_with_gradient_accumulation_matches_hf(device, loss_calls):
    """Two micro-batches of unequal target counts per step: Trainer passes their total as
    num_items_in_batch to each fused loss call, and the step's loss and every gradient are
    HF's. HF's own step loss is the mean over all the step's targets (the count is live)."""
    needs("accelerate", "HF Trainer needs it")
    from qwen3_trainer import padded_rows, train

    # 7 + 4 + 6 + 2 = 19 targets: however the rows are shuffled, the two micro-batches hold
    # different counts. One layer: every part of the patch still runs (the layer's fused
    # add, the final norm's), at half the interpreted launches.
    rows = padded_rows(512, lengths=[8, 5, 7, 3], width=8)
    expected = train(tiny_model(device, layers=1), rows)
    model, undo = fused(tiny_model(device, layers=1), "apply")
    got = train(model, rows)
    undo()

    assert [int(call["num_items_in_batch"]) for call in loss_calls] == [19, 19]
    assert_same_training(got, expected)
    whole = {key: torch.stack([row[key] for row in rows]).to(device) for key in rows[0]}
    with torch.no_grad():
        one_batch = tiny_model(device, layers=1)(**whole).loss  # all 19 targets at once
    assert rel_err(torch.tensor(expected[0]), one_batch) < 1e-6


# ------------------------------------------------------------ TRL-style padding-free packing

def test_the_packed_batch_is_trls_padding_free_batch():
    """What TRL's padding-free collator makes (trl 1.13, DataCollatorForLanguageModeling
    with padding_free=True) and the fused model is given: one row, position_ids restarting
    at 0 per sequence, the label of each sequence's first token -100, no attention mask."""
    from qwen3_packing import pack, sequences

    data = sequences(512, lengths=[7, 5, 9])
    packed = pack(data)
    flat = torch.tensor([token for row in data for token in row["input_ids"]])
    assert sorted(packed) == ["input_ids", "labels", "position_ids"]
    assert torch.equal(packed["input_ids"], flat[None])
    assert torch.equal(packed["position_ids"][0], torch.cat([torch.arange(n) for n in (7, 5, 9)]))
    starts = packed["position_ids"] == 0
    assert torch.equal(packed["labels"], flat[None].masked_fill(starts, -100))


def test_hf_keeps_packed_sequences_apart_only_without_a_cache(device):
    """The baseline means what it should: without a KV cache (as SFTTrainer runs), HF's
    logits of the packed row are those of the sequences run one by one (its mask keeps
    each sequence to itself, its RoPE restarts). With the cache (the config's default),
    HF does not look for packed sequences: the later ones see the earlier ones."""
    from qwen3_packing import pack, sequences, without_cache

    model = tiny_model(device)
    data = sequences(512, lengths=[7, 5, 9])
    packed = {key: value.to(device) for key, value in pack(data).items()}
    with torch.no_grad():
        apart = torch.cat([model(input_ids=torch.tensor([row["input_ids"]], device=device)).logits
                           for row in data], dim=1)
        with_cache = model(**packed).logits
        whole = without_cache(model)(**packed).logits
    assert rel_err(whole, apart) < 1e-5
    assert rel_err(with_cache[:, :7], apart[:, :7]) < 1e-5  # the first sequence sees no other
    assert rel_err(with_cache[:, 7:], apart[:, 7:]) > 0.1


def test_trainer_on_packed_batches_matches_hf(device, loss_calls):
    """Padding-free packed micro-batches (3 sequences each, 2 per step) through Trainer:
    the fused model gets the restarting position_ids, num_items_in_batch counts the packed
    labels, and the step's loss and every gradient are HF's."""
    needs("accelerate", "HF Trainer needs it")
    from qwen3_packing import pack, sequences, without_cache
    from qwen3_trainer import train

    data = sequences(512, lengths=[5, 3, 6, 4, 2, 3])  # 4 + 2 + 5 + 3 + 1 + 2 = 17 targets
    expected = train(without_cache(tiny_model(device, layers=1)), data, collator=pack,
                     batch_size=3)
    model, undo = fused(without_cache(tiny_model(device, layers=1)), "apply")
    got = train(model, data, collator=pack, batch_size=3)
    undo()

    assert [int(call["num_items_in_batch"]) for call in loss_calls] == [17, 17]
    assert_same_training(got, expected)


@pytest.fixture
def sft_run(device):
    """TRL's SFTTrainer itself, where it is installed (pip install trl==1.13.0): packing
    (best-fit, so padding-free), 2 packed micro-batches per step, fp32, no clipping.
    Returns run(model, **config) -> (logged loss, the step's gradients)."""
    trl = needs("trl", "it needs datasets (pyarrow, pandas); the batch it makes is "
                       "checked above through DataCollatorWithFlattening")
    from datasets import Dataset
    from tokenizers import Tokenizer, models
    from transformers import PreTrainedTokenizerFast

    from qwen3_packing import sequences
    from qwen3_trainer import KeepGradients

    vocab = {f"t{i}": i for i in range(512)}
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(models.WordLevel(vocab, unk_token="t1")),
        pad_token="t0", eos_token="t2", unk_token="t1")
    data = Dataset.from_list(sequences(512, lengths=[7, 5, 9, 4, 6, 8, 3, 10]))

    def run(model, **config):
        keep = KeepGradients()
        args = trl.SFTConfig(
            output_dir="unused", packing=True, max_length=16, per_device_train_batch_size=2,
            gradient_accumulation_steps=2, max_steps=1, optim="sgd", max_grad_norm=0.0,
            bf16=False, logging_steps=1, report_to="none", save_strategy="no", seed=0,
            use_cpu=device == "cpu", **config)
        trainer = trl.SFTTrainer(model=model, args=args, train_dataset=data,
                                 processing_class=tokenizer, callbacks=[keep])
        trainer.train()
        return trainer.state.log_history[0]["loss"], keep.steps[0]

    return run


def test_sft_trainer_packed_matches_hf_with_the_loss_part_off(device, sft_run, loss_calls,
                                                              tmp_path, monkeypatch):
    """SFTTrainer with packing (trl 1.13.0): with loss=False the fused layers give HF's loss
    and gradients. Its default loss_type, chunked_nll, puts TRL's own chunked loss on the
    model instance, so the fused loss part would never run; with loss_type="nll" TRL reads
    outputs.logits for its metrics, which the fused loss does not make."""
    monkeypatch.chdir(tmp_path)  # output_dir
    expected = sft_run(tiny_model(device, layers=1))
    model = tiny_model(device, layers=1)
    apply_qwen3_fusion(model)  # loss=False
    got = sft_run(model)
    assert_same_training(([got[0]], [got[1]]), ([expected[0]], [expected[1]]))

    model = tiny_model(device, layers=1)
    apply_qwen3_fusion(model, loss=True)
    sft_run(model)  # chunked_nll: TRL's forward on the instance
    assert "forward" in model.__dict__ and loss_calls == []
    model = tiny_model(device, layers=1)
    apply_qwen3_fusion(model, loss=True)
    with pytest.raises(TypeError, match="'NoneType' object is not subscriptable"):
        sft_run(model, loss_type="nll")
    assert len(loss_calls) == 1


# ------------------------------------------------------------ FSDP2, wrapping by name

@pytest.fixture
def one_process_group(device, tmp_path):
    """A process group of one (gloo on CPU, NCCL on a GPU), as a launcher would make it."""
    import torch.distributed as dist

    if not dist.is_available():
        pytest.skip("this torch has no torch.distributed")
    dist.init_process_group("nccl" if device == "cuda" else "gloo",
                            init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("way", ["apply", "patch"])
def test_no_split_module_names_find_the_fused_layers(device, way):
    """_no_split_modules names the fused decoder layers, in place and under the build-time
    patch; accelerate's FSDP2 wrap policy, built from those names, picks exactly them."""
    from qwen3_fsdp2 import layers_by_name

    model, undo = fused(tiny_model(device), way)
    layers = list(model.model.layers)
    assert set(model._no_split_modules) == {"Qwen3DecoderLayer"}
    assert all(type(layer) is qwen3_fused_add_patch.Qwen3DecoderLayer for layer in layers)
    assert [id(m) for m in layers_by_name(model)] == [id(m) for m in layers]

    needs("accelerate", "its wrap policy is what HF Trainer's FSDP2 uses")
    from accelerate import FullyShardedDataParallelPlugin
    from accelerate.utils.dataclasses import get_module_class_from_name
    from accelerate.utils.fsdp_utils import fsdp2_prepare_auto_wrap_policy

    assert get_module_class_from_name(model, "Qwen3DecoderLayer") is type(layers[0])
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2,
                                            auto_wrap_policy="transformer_based_wrap")
    policy = fsdp2_prepare_auto_wrap_policy(plugin, model)
    assert [id(m) for m in model.modules() if policy(m)] == [id(m) for m in layers]
    undo()


def test_fully_shard_by_name_gives_hfs_loss_and_gradients(device, one_process_group, loss_calls):
    """A model built under the patch (as before from_pretrained), fully_shard on each layer
    found by name, then the root: the fused kernels run on the gathered parameters, and the
    loss and every (reduced) gradient are HF's. (In place, the classes are the same: the
    test above.)"""
    from torch.distributed.tensor import DTensor

    from qwen3_fsdp2 import shard_by_name

    model = tiny_model(device, layers=1)  # one layer: every part runs, half the launches
    ids = batch(model, device, (2, 8))
    ref_loss, ref_grads = loss_and_grads(model, ids)
    model, undo = fused(model, "patch")
    assert len(shard_by_name(model)) == 1
    loss, grads = loss_and_grads(model, ids)
    assert len(loss_calls) == 1  # the fused loss ran
    assert all(isinstance(p, DTensor) for p in model.parameters())
    grads = {name: grad.full_tensor() if isinstance(grad, DTensor) else grad
             for name, grad in grads.items()}
    assert rel_err(loss, ref_loss) < 1e-6
    assert grads.keys() == ref_grads.keys()
    worst = {name: rel_err(grads[name], ref_grads[name]) for name in grads}
    assert max(worst.values()) < 1e-5, worst
    undo()  # modeling_qwen3's classes; the sharded model keeps its own


def test_a_separately_sharded_lm_head_is_refused(device, one_process_group):
    """The fused loss reads lm_head.weight without calling lm_head, so FSDP never gathers
    an lm_head sharded on its own: the forward refuses its DTensor weight, saying what to
    do (shard lm_head with its parent, as wrapping by _no_split_modules does)."""
    from torch.distributed.fsdp import fully_shard

    model = tiny_model(device)
    apply_qwen3_fusion(model, rms_norm=False, fused_add=False, qk_norm_rope=False,
                       swiglu=False, loss=True)  # in place: the loss part is what refuses
    fully_shard(model.lm_head)
    fully_shard(model)
    ids = batch(model, device, (2, 8))
    with pytest.raises(TypeError, match="a sharded lm_head.*shard lm_head with its parent"):
        model(input_ids=ids, labels=ids)


# ------------------------------------------------------------ PEFT LoRA

@pytest.fixture
def dw_requests(monkeypatch):
    """Whether each fused backward was asked for its weight's gradient: the loss op
    (d_lm_head), the plain and fused-add norms, q_norm/k_norm inside qk_norm_rope."""
    seen = {"loss": [], "norm": [], "fused_add_norm": [], "qk_norm": []}

    def spy(module, name, kind, wanted):
        inner = getattr(module, name)

        def wrapper(*args, **kwargs):
            seen[kind].append(wanted(args, kwargs))
            return inner(*args, **kwargs)

        monkeypatch.setattr(module, name, wrapper)

    spy(linear_cross_entropy, "_linear_cross_entropy_op", "loss", lambda a, k: a[-2])
    spy(rmsnorm_triton, "rms_norm_backward", "norm", lambda a, k: k["compute_dw"])
    spy(rmsnorm_fused_add, "fused_add_rms_norm_backward", "fused_add_norm", lambda a, k: a[5])
    spy(qk_norm_rope, "qk_norm_rope_backward", "qk_norm", lambda a, k: k["compute_dw"])
    return seen


def test_lora_keeps_lm_head_and_norms_frozen_and_matches_hf(device, loss_calls, dw_requests):
    """LoRA on every projection, lm_head and the norms frozen: the fused loss runs once and
    is asked for d_hidden only, no norm kernel computes d_weight, every frozen weight's
    .grad stays None, and the loss and the adapters' gradients are HF's (the same PEFT
    model without the patch)."""
    needs("peft", "the LoRA tests use it")
    from qwen3_lora import with_lora

    reference = with_lora(tiny_model(device, layers=1))  # one layer: every part runs
    ids = batch(reference, device, (2, 8))
    ref_loss, ref_grads = loss_and_grads_of_trainable(reference, ids)
    base, undo = fused(tiny_model(device, layers=1), "apply")  # fuse, then add adapters
    model = with_lora(base)
    loss, grads = loss_and_grads_of_trainable(model, ids)

    assert len(loss_calls) == 1
    assert dw_requests["loss"] == [False]  # the op's grad_weight_needed: no d_lm_head
    assert dw_requests["norm"] == []  # the input norm: no backward (frozen embedding)
    assert dw_requests["fused_add_norm"] == [False] * 2  # post-attention, final norm
    assert dw_requests["qk_norm"] == [False]
    frozen = {n: p.grad for n, p in model.named_parameters() if not p.requires_grad}
    assert any("lm_head" in n for n in frozen) and sum("norm" in n for n in frozen) == 5
    assert all(grad is None for grad in frozen.values())
    assert rel_err(loss, ref_loss) < 1e-6
    assert grads.keys() == ref_grads.keys() and len(grads) == 14  # A and B, 7 projections
    worst = {name: rel_err(grads[name], ref_grads[name]) for name in grads}
    assert max(worst.values()) < 1e-5, worst
    undo()


def loss_and_grads_of_trainable(model, ids):
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=ids).loss
    loss.backward()
    return loss.detach().double(), {n: p.grad.double() for n, p in model.named_parameters()
                                    if p.requires_grad}


def test_an_adapter_on_lm_head_is_refused(device):
    """The fused loss reads lm_head.weight without calling lm_head: an adapter there would
    be skipped, so the fused forward refuses it and says what to do."""
    peft = needs("peft", "the LoRA tests use it")
    model = tiny_model(device)
    undo = apply_qwen3_fusion(model, rms_norm=False, fused_add=False, qk_norm_rope=False,
                              swiglu=False, loss=True)  # the loss part is what refuses
    model = peft.get_peft_model(model, peft.LoraConfig(r=4, target_modules=["lm_head"]))
    ids = batch(model, device, (2, 8))
    with pytest.raises(ValueError, match="(?s)bias-free nn.Linear lm_head.*use loss=False"):
        model(input_ids=ids, labels=ids)
    undo()
