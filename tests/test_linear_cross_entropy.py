"""Correctness of the fused lm_head + cross-entropy (snippets/linear_cross_entropy.py).

Against an fp64 reference and against HF's ForCausalLMLoss(lm_head(h)) in HF's cast
order (logits in the model's dtype, then fp32), with fresh random inputs and
NaN-poisoned allocations. CPU: the Triton interpreter, small shapes and several chunks
per call. CUDA: also Qwen3's vocabulary, inductor, and a chunk of more than 2^31 logits.
"""
import pathlib
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from transformers.loss.loss_utils import ForCausalLMLoss

import linear_cross_entropy as lce
from helpers import REL_TOL, ReportsSecondDevice, poisoned_allocations, rel_err
from linear_cross_entropy import CrossEntropyConfig, causal_lm_loss, linear_cross_entropy

SNIPPETS = pathlib.Path(__file__).resolve().parents[1] / "snippets"
DTYPES = [torch.bfloat16, torch.float16, torch.float32, torch.float64]
# Several chunks, a last chunk shorter than the others (64 tokens = 48 + 16), a
# vocabulary that is no multiple of the block (1000 = 512 + 488), two blocks a row.
SMALL = CrossEntropyConfig(chunk_tokens=48, block=512, num_warps=4)


def random_case(device, dtype, batch=2, seq=32, hidden_size=64, vocab=1000, seed=0,
                ignored=0.25):
    """hidden (B, T, H) ~ N(0, 1), weight scaled so logits ~ N(0, 2^2) (a loss well
    above and below ln V across rows), labels with a fraction set to -100."""
    gen = torch.Generator().manual_seed(seed)
    hidden = torch.randn(batch, seq, hidden_size, generator=gen, dtype=torch.float64)
    weight = torch.randn(vocab, hidden_size, generator=gen, dtype=torch.float64)
    weight *= 2 / hidden_size**0.5
    labels = torch.randint(0, vocab, (batch, seq), generator=gen)
    labels[torch.rand(batch, seq, generator=gen) < ignored] = -100
    return (hidden.to(dtype).to(device), weight.to(dtype).to(device), labels.to(device))


def fp64_reference(hidden, weight, labels, num_items_in_batch=None, shift_labels=None):
    """loss, d_hidden, d_weight in fp64 from HF's formula with no rounding anywhere
    (ForCausalLMLoss itself would compute in fp32)."""
    h = hidden.detach().double().requires_grad_()
    w = weight.detach().double().requires_grad_()
    if shift_labels is None:
        shift_labels = F.pad(labels, (0, 1), value=-100)[..., 1:]
    logits = (h @ w.t()).reshape(-1, w.shape[0])
    if num_items_in_batch is None:
        loss = F.cross_entropy(logits, shift_labels.reshape(-1))
    else:
        loss = F.cross_entropy(logits, shift_labels.reshape(-1), reduction="sum")
        loss = loss / num_items_in_batch
    return (loss.detach(), *torch.autograd.grad(loss, (h, w)))


def fp64_reference_by_blocks(hidden, weight, labels, rows=2048):
    """fp64_reference's loss (the mean over the counted tokens) and gradients, a block of ``rows`` tokens at a
    time: softmax - one-hot, over the count, for the counted rows. The same sums without holding every fp64 logit
    at once (16,384 x 151,936 of them are 18.6 GiB)."""
    h = hidden.detach().double().reshape(-1, hidden.shape[-1])
    w = weight.detach().double()
    targets = F.pad(labels, (0, 1), value=-100)[..., 1:].reshape(-1)
    count = (targets != -100).sum().double()
    loss = torch.zeros((), dtype=torch.float64, device=h.device)
    d_h, d_w = torch.empty_like(h), torch.zeros_like(w)
    for start in range(0, h.shape[0], rows):
        block, t = h[start:start + rows], targets[start:start + rows]
        counted = t != -100
        logits = block @ w.t()
        lse = torch.logsumexp(logits, dim=-1)
        picked = logits.gather(1, t.clamp(min=0)[:, None])[:, 0]
        loss += (lse - picked)[counted].sum()
        grad = torch.softmax(logits, dim=-1)
        grad[torch.arange(len(t), device=h.device), t.clamp(min=0)] -= 1
        grad = grad * (counted.double() / count)[:, None]
        d_h[start:start + rows] = grad @ w
        d_w += grad.t() @ block
    return loss / count, d_h.reshape(hidden.shape), d_w


def test_the_block_reference_is_the_reference():
    """The block-wise fp64 reference equals autograd's on a case that spans several blocks."""
    hidden, weight, labels = random_case("cpu", torch.float32, batch=2, seq=9, hidden_size=8, vocab=40)
    labels[0, 3] = -100
    for whole, blocks in zip(fp64_reference(hidden, weight, labels),
                             fp64_reference_by_blocks(hidden, weight, labels, rows=4)):
        torch.testing.assert_close(blocks, whole, rtol=1e-12, atol=1e-14)


def hf_run(hidden, weight, labels, **loss_kwargs):
    """HF's arithmetic: logits = lm_head(h) in the dtype, then ForCausalLMLoss."""
    h = hidden.detach().clone().requires_grad_()
    w = weight.detach().clone().requires_grad_()
    loss = ForCausalLMLoss(F.linear(h, w), labels, w.shape[0], **loss_kwargs)
    return (loss.detach(), *torch.autograd.grad(loss, (h, w)))


def ours_run(hidden, weight, labels, config=SMALL, **loss_kwargs):
    h = hidden.detach().clone().requires_grad_()
    w = weight.detach().clone().requires_grad_()
    with poisoned_allocations():
        loss = causal_lm_loss(h, w, labels, config=config, **loss_kwargs)
        grads = torch.autograd.grad(loss, (h, w))
    return (loss.detach(), *grads)


def assert_close_to_reference(ours, hf, reference, dtype):
    """Each of loss, d_hidden, d_weight: within the dtype's tolerance of fp64, and
    (16-bit) no further from it than twice HF's own distance (d_weight: 3x, its
    chunked sum rounds once per chunk)."""
    for name, mine, theirs, exact, slack in zip(("loss", "d_hidden", "d_weight"), ours,
                                                hf, reference, (2, 2, 3)):
        error = rel_err(mine, exact)
        assert error < REL_TOL[dtype], (name, error)
        if dtype in (torch.bfloat16, torch.float16):
            assert error <= slack * rel_err(theirs, exact) + 1e-6, (name, error)


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_matches_fp64_reference_and_hf(device, dtype):
    hidden, weight, labels = random_case(device, dtype)
    ours = ours_run(hidden, weight, labels)
    assert ours[0].dtype == (torch.float64 if dtype == torch.float64 else torch.float32)
    assert_close_to_reference(ours, hf_run(hidden, weight, labels),
                              fp64_reference(hidden, weight, labels), dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_large_logits_stay_finite(device, dtype):
    """Logits up to about 400, where exp(z) overflows fp32 (beyond about 88): the
    log-sum-exp must subtract its running max. The loss and gradients are still
    those of the fp64 reference."""
    hidden, weight, labels = random_case(device, dtype, seq=16)
    weight = (weight.double() * 60).to(dtype)  # logits ~ N(0, 120^2), max about 400
    logits = hidden.double() @ weight.double().t()
    assert 300 < logits.abs().max() < 800
    ours, hf = ours_run(hidden, weight, labels), hf_run(hidden, weight, labels)
    assert all(torch.isfinite(tensor).all() for tensor in ours)
    reference = fp64_reference(hidden, weight, labels)
    if dtype == torch.float32:
        assert_close_to_reference(ours, hf, reference, dtype)
    else:  # bf16 logits of this size are a few units apart: HF's own error is large
        for name, mine, theirs, exact in zip(("loss", "d_hidden", "d_weight"), ours, hf,
                                             reference):
            assert rel_err(mine, exact) <= 2 * rel_err(theirs, exact) + 1e-6, name


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_the_custom_op_passes_opcheck(device, dtype):
    """torch.library.opcheck on 16-bit inputs: the schema, the autograd registration and
    the fake implementation torch.compile traces with (shape, dtype and device of every
    output against the real op's: a 0-d fp32 loss, d_hidden and d_weight like their
    inputs). Its AOT test is left out: it returns the gradient buffers to the caller,
    which the wrapper never does, and the backward scales them in place; the compile
    tests below cover AOT dispatch through the wrapper."""
    hidden, weight, labels = random_case(device, dtype, seq=20)
    targets = labels.reshape(-1)
    hidden = hidden.reshape(-1, 64).requires_grad_()
    weight.requires_grad_()
    for grads in ((True, True), (True, False), (False, False)):
        args = (hidden, weight, targets, None, -100, 16, 256, 4, *grads, True)
        result = torch.library.opcheck(lce._linear_cross_entropy_op, args, test_utils=(
            "test_schema", "test_autograd_registration", "test_faketensor"))
        assert set(result.values()) == {"SUCCESS"}, result


@pytest.mark.parametrize("case", ["mostly_ignored", "ignored_rows", "one_counted",
                                  "num_items_int", "num_items_tensor", "shift_labels"])
def test_hf_loss_options(device, case):
    """HF's loss semantics: ignore_index-heavy batches, whole rows ignored, the
    num_items_in_batch divisor (int and tensor), pre-shifted labels."""
    hidden, weight, labels = random_case(device, torch.float32, batch=3, seq=40,
                                         ignored=0.9 if case == "mostly_ignored" else 0.2)
    kwargs = {}
    if case == "ignored_rows":
        labels[0] = -100
        labels[2] = -100
    if case == "one_counted":
        labels[:] = -100
        labels[1, 7] = 3
    if case == "num_items_int":
        kwargs["num_items_in_batch"] = 77
    if case == "num_items_tensor":
        kwargs["num_items_in_batch"] = torch.tensor(77, device=device)
    if case == "shift_labels":
        kwargs["shift_labels"] = torch.roll(labels, 3, dims=1)
    ours = ours_run(hidden, weight, labels, **kwargs)
    assert_close_to_reference(ours, hf_run(hidden, weight, labels, **kwargs),
                              fp64_reference(hidden, weight, labels, **kwargs),
                              torch.float32)


def test_all_ignored_is_nan_with_zero_gradients_as_hf(device):
    hidden, weight, labels = random_case(device, torch.float32, seq=16)
    labels[:] = -100
    ours, hf = ours_run(hidden, weight, labels), hf_run(hidden, weight, labels)
    assert torch.isnan(hf[0]) and torch.isnan(ours[0])
    for mine, theirs in zip(ours[1:], hf[1:]):
        assert torch.equal(theirs, torch.zeros_like(theirs))
        assert torch.equal(mine, theirs)


@pytest.mark.parametrize("config", [CrossEntropyConfig(1, 64, 1),
                                    CrossEntropyConfig(7, 512, 2),
                                    CrossEntropyConfig(128, 2048, 8),
                                    CrossEntropyConfig(10**6, 64, 4)], ids=str)
def test_any_chunk_and_block(device, config):
    """One token per chunk, a chunk that divides nothing, one chunk for everything; a
    block wider than the vocabulary (one masked step) and a narrow one."""
    hidden, weight, labels = random_case(device, torch.float32, seq=24, vocab=997)
    ours = ours_run(hidden, weight, labels, config=config)
    assert_close_to_reference(ours, hf_run(hidden, weight, labels),
                              fp64_reference(hidden, weight, labels), torch.float32)


def test_deterministic(device):
    hidden, weight, labels = random_case(device, torch.bfloat16, seq=32, seed=5)
    first, second = ours_run(hidden, weight, labels), ours_run(hidden, weight, labels)
    for a, b in zip(first, second):
        assert torch.equal(a, b)


def test_gradcheck_fp64(device):
    """fast_mode: random projections of the Jacobian (the retained-graph test covers
    the repeated backwards that the full mode makes)."""
    hidden, weight, labels = random_case(device, torch.float64, batch=1, seq=6,
                                         hidden_size=4, vocab=37)
    labels[0, 2] = -100

    def loss(h, w):
        return causal_lm_loss(h, w, labels, config=CrossEntropyConfig(4, 16, 1))

    assert torch.autograd.gradcheck(loss, (hidden.requires_grad_(),
                                           weight.requires_grad_()), fast_mode=True)


def test_scales_by_the_incoming_gradient(device):
    """The gradients are computed in the forward for d_loss = 1; backward scales them."""
    hidden, weight, labels = random_case(device, torch.float32, seq=16)
    base = ours_run(hidden, weight, labels)
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    (causal_lm_loss(h, w, labels, config=SMALL) * -2.5).backward()
    torch.testing.assert_close(h.grad, base[1] * -2.5)
    torch.testing.assert_close(w.grad, base[2] * -2.5)


def test_retained_graph_backward_twice(device):
    """The first backward scales the gradients in place; a second one through a
    retained graph (gradcheck does this) recomputes, gives its own scale and leaves
    the first one's result alone; autograd still accumulates .grad; without
    retain_graph a second backward fails, as any op's with saved tensors."""
    hidden, weight, labels = random_case(device, torch.float32, seq=16)
    base = ours_run(hidden, weight, labels)
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss = causal_lm_loss(h, w, labels, config=SMALL)
    first = torch.autograd.grad(loss * 3, (h, w), retain_graph=True)
    for got, expected in zip(first, base[1:]):
        torch.testing.assert_close(got, expected * 3)
    second = torch.autograd.grad(loss * -0.5, (h, w), retain_graph=True)
    for got, expected, earlier in zip(second, base[1:], first):
        torch.testing.assert_close(got, expected * -0.5)
        torch.testing.assert_close(earlier, expected * 3)
    loss.backward(retain_graph=True)
    loss.backward()
    torch.testing.assert_close(h.grad, base[1] * 2)
    torch.testing.assert_close(w.grad, base[2] * 2)
    with pytest.raises(RuntimeError, match="second time"):
        loss.backward()


def test_backward_hands_its_gradient_buffers_on(device, monkeypatch):
    """``loss.backward()`` moves the weight gradient the forward computed into
    weight.grad and hands d_hidden to the layer below, with no copy: the op keeps no
    reference to either once its backward ran (a kept reference makes autograd clone
    d_W, one more V x H buffer at the peak)."""
    made = []

    def recording_outputs(*args):
        outputs = original(*args)
        made.append([tensor.data_ptr() for tensor in outputs])  # no reference kept
        return outputs

    original = lce._outputs
    monkeypatch.setattr(lce, "_outputs", recording_outputs)
    hidden, weight, labels = random_case(device, torch.float32, seq=16)
    w = weight.clone().requires_grad_()
    h = hidden.clone().requires_grad_()
    seen = []
    h_below = h * 1.0  # a layer below, whose backward receives d_hidden
    h_below.register_hook(lambda grad: seen.append(grad.data_ptr()))
    causal_lm_loss(h_below, w, labels, config=SMALL).backward()
    (_, grad_hidden, grad_weight), = made
    assert w.grad.data_ptr() == grad_weight
    assert seen == [grad_hidden]



class _NewTensors(TorchDispatchMode):
    """Records the bytes of every tensor an op makes (not a view of its inputs)."""

    def __init__(self):
        super().__init__()
        self.made = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        given = {t.untyped_storage().data_ptr() for t in tree_leaves((args, kwargs))
                 if isinstance(t, torch.Tensor)}
        self.made += [(str(func), t.untyped_storage().nbytes()) for t in tree_leaves(out)
                      if isinstance(t, torch.Tensor) and t.untyped_storage().data_ptr() not in given]
        return out


def test_backward_allocates_no_buffer(device):
    """The backward only scales the gradients the forward computed: it makes no
    tensor larger than the loss's. Autograd's default hands a custom function a zero
    tensor for each output that got no gradient (here d_hidden and d_W, V x H and
    N x H), which was the eager op's extra memory at the peak on the H100."""
    hidden, weight, labels = random_case(device, torch.bfloat16, seq=16)
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss = causal_lm_loss(h, w, labels, config=SMALL)
    recorder = _NewTensors()
    with recorder:
        loss.backward()
    assert max(size for _, size in recorder.made) <= loss.nbytes, recorder.made


def test_only_the_gradients_asked_for(device):
    """No grad mode: the loss alone (equal to the grad-mode loss); a frozen lm_head
    (LoRA) gets no weight gradient; a frozen hidden, none for hidden."""
    hidden, weight, labels = random_case(device, torch.float32, seq=16)
    ours = ours_run(hidden, weight, labels)
    with torch.no_grad():
        assert torch.equal(causal_lm_loss(hidden, weight, labels, config=SMALL), ours[0])
    h = hidden.clone().requires_grad_()
    causal_lm_loss(h, weight, labels, config=SMALL).backward()
    assert torch.equal(h.grad, ours[1]) and weight.grad is None
    w = weight.clone().requires_grad_()
    causal_lm_loss(hidden, w, labels, config=SMALL).backward()
    assert torch.equal(w.grad, ours[2])


def test_strided_inputs(device):
    """A hidden slice (logits_to_keep), a transposed weight's view, labels with strides."""
    hidden, weight, labels = random_case(device, torch.float32, seq=30)
    wide = torch.randn(2, 30, 3 * 64, device=device)
    wide[..., 64:128] = hidden
    strided_hidden = wide[..., 64:128]
    strided_weight = weight.t().contiguous().t()
    strided_labels = torch.stack([labels, labels], dim=-1)[..., 0]
    assert not strided_hidden.is_contiguous() and not strided_labels.is_contiguous()
    ours = ours_run(strided_hidden, strided_weight, strided_labels)
    for mine, theirs in zip(ours, ours_run(hidden, weight, labels)):
        torch.testing.assert_close(mine, theirs)


def test_tied_weights_add_up(device):
    """lm_head tied to the embedding: the loss's weight gradient adds to the lookup's."""
    hidden, weight, labels = random_case(device, torch.float32, seq=16)
    ids = labels.clamp_min(0)
    results = []
    for loss_fn in (lambda h, w: ForCausalLMLoss(h @ w.t(), labels, w.shape[0]),
                    lambda h, w: causal_lm_loss(h, w, labels, config=SMALL)):
        w = weight.clone().requires_grad_()
        loss_fn(hidden + F.embedding(ids, w), w).backward()
        results.append(w.grad)
    torch.testing.assert_close(results[1], results[0], rtol=1e-5, atol=1e-7)


def test_autocast_casts_like_f_linear(device):
    """Under autocast, fp32 weights and hidden states go in as the autocast dtype,
    as lm_head's F.linear would take them; the weight's gradient comes back fp32."""
    hidden, weight, labels = random_case(device, torch.float32)
    kind = torch.device(device).type
    results = []
    for loss_fn in (lambda h, w: ForCausalLMLoss(F.linear(h, w), labels, w.shape[0]),
                    lambda h, w: causal_lm_loss(h, w, labels, config=SMALL)):
        h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
        with torch.autocast(kind, dtype=torch.bfloat16):
            loss = loss_fn(h, w)
        results.append((loss, *torch.autograd.grad(loss, (h, w))))
    reference = fp64_reference(hidden.bfloat16(), weight.bfloat16(), labels)
    assert results[1][2].dtype == torch.float32
    assert_close_to_reference(results[1], results[0], reference, torch.bfloat16)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_torch_compile_with_ignored_targets(device, backend):
    """Compiled (fullgraph), with ignore_index among the targets (where Liger's fused
    loss goes wrong under compile): the loss and gradients of eager."""
    if backend == "inductor" and device == "cpu":
        pytest.skip("inductor runs on the GPU suite; the CPU suite compiles with aot_eager")
    hidden, weight, labels = random_case(device, torch.float32, seq=32)
    labels[:, :10] = -100
    eager = ours_run(hidden, weight, labels)
    torch._dynamo.reset()
    compiled = torch.compile(lambda h, w: causal_lm_loss(h, w, labels, config=SMALL),
                             fullgraph=True, backend=backend)
    h, w = hidden.clone().requires_grad_(), weight.clone().requires_grad_()
    loss = compiled(h, w)
    loss.backward()
    for mine, theirs in zip((loss.detach(), h.grad, w.grad), eager):
        torch.testing.assert_close(mine, theirs)


@pytest.mark.parametrize("problem", [
    "dtype_mismatch", "int_hidden", "int32_targets", "target_shape", "shape_mismatch",
    "empty_tokens", "empty_vocab", "weight_elsewhere", "divisor_shape", "bad_config",
    "target_out_of_range", "negative_target"])
def test_rejects_bad_input(device, problem):
    hidden, weight, labels = random_case(device, torch.float32, seq=8, vocab=50)
    h, w, t = hidden.reshape(-1, 64), weight, labels.reshape(-1)
    kwargs = {"config": SMALL}
    error, match = ValueError, None
    if problem == "dtype_mismatch":
        w, error, match = w.double(), TypeError, "one dtype"
    elif problem == "int_hidden":
        h, error, match = h.long(), TypeError, "supports"
    elif problem == "int32_targets":
        t, match = t.int(), "int64"
    elif problem == "target_shape":
        t, match = t[:-1], "targets must be"
    elif problem == "shape_mismatch":
        w, match = w[:, :32], r"\(V, H\)"
    elif problem == "empty_tokens":
        h, t, match = h[:0], t[:0], "needs tokens"
    elif problem == "empty_vocab":
        w, match = w[:0], "needs tokens"
    elif problem == "weight_elsewhere":
        w, match = w.as_subclass(ReportsSecondDevice), "is on"
    elif problem == "divisor_shape":
        kwargs["num_items_in_batch"], match = torch.ones(2, device=device), "one number"
    elif problem == "bad_config":
        kwargs["config"], match = CrossEntropyConfig(8, 100, 4), "power of two"
    elif problem in ("target_out_of_range", "negative_target"):
        t = t.clone()
        t[3] = 50 if problem == "target_out_of_range" else -7
        match = f"1 target\\(s\\) outside \\[0, 50\\).*the first is {t[3].item()}"
    with pytest.raises(error, match=match):
        linear_cross_entropy(h, w, t, **kwargs)
    if device == "cuda":  # no device-side assert was launched: the context still works
        torch.cuda.synchronize()
        assert torch.ones(4, device=device).sum().item() == 4


BAD_TARGET_CHILD = """
import sys, torch
sys.path.insert(0, {snippets!r})
from linear_cross_entropy import linear_cross_entropy
hidden = torch.randn(64, 32, device="cuda")
weight = torch.randn(50, 32, device="cuda")
targets = torch.randint(0, 50, (64,), device="cuda")
targets[5] = {bad}
loss = linear_cross_entropy(hidden, weight, targets, check_targets=False)
print("returned", flush=True)
torch.cuda.synchronize()
print("synchronized", flush=True)
"""


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs the GPU")
@pytest.mark.parametrize("bad", [50, -7])
def test_unchecked_bad_target_is_a_device_side_assert(bad):  # pragma: gpu only
    """check_targets=False: a device-side assert, as F.cross_entropy's, reported by a
    later CUDA call or sync (asynchronously: inside the loss call or at the sync after
    it), and the process never gets past the sync. In a child process: the assert leaves
    that process's CUDA context unusable, and this worker must keep its own."""
    import subprocess
    import sys

    child = subprocess.run([sys.executable, "-c", BAD_TARGET_CHILD.format(
        snippets=str(SNIPPETS), bad=bad)], capture_output=True, text=True, timeout=300)
    assert child.returncode != 0, child.stdout
    assert "synchronized" not in child.stdout, child.stdout
    assert "device-side assert" in child.stderr, child.stderr[-2000:]


def test_unchecked_bad_target_on_cpu_fails_at_once(device):
    """On CPU the device-side assert is an immediate RuntimeError."""
    if device != "cpu":
        pytest.skip("the GPU case runs in a child process (the test above)")
    hidden, weight, labels = random_case(device, torch.float32, seq=8, vocab=50)
    targets = labels.reshape(-1).clone()
    targets[3] = 50
    with pytest.raises(RuntimeError, match="outside"):
        linear_cross_entropy(hidden.reshape(-1, 64), weight, targets, config=SMALL,
                             check_targets=False)


def test_default_config():
    """2,048 tokens a chunk (never above the tokens); 8 KB of logits per step of the row
    kernel. tests/test_article_claims.py holds the chunk to the measured sweep."""
    cpu = torch.device("cpu")
    assert lce.launch_config(16384, 4096, 2, cpu) == CrossEntropyConfig(2048, 4096, 8)
    assert lce.launch_config(16384, 1024, 2, cpu).chunk_tokens == 2048
    assert lce.launch_config(16384, 8192, 4, cpu) == CrossEntropyConfig(2048, 2048, 8)
    assert lce.launch_config(100, 4096, 2, cpu).chunk_tokens == 100


def test_demo_runs(capsys):
    """The module's demo, as a reader runs it (in this process: the op is registered
    once, so the demo runs the module's code under the name it has here)."""
    source = (SNIPPETS / "linear_cross_entropy.py").read_text()
    demo = source.split("# --8<-- [start:demo]")[1].split("# --8<-- [end:demo]")[0]
    exec(textwrap.dedent(demo), vars(lce).copy())
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["loss", "d hidden", "d weight"]
    for line in lines:
        error = float(line.rsplit("=", 1)[1].split()[0])
        assert error < 1e-5, line


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs the GPU")
def test_qwen3_vocabulary_and_a_chunk_over_2_31_logits():  # pragma: gpu only
    """Qwen3's vocabulary (151,936) in bf16, one chunk of 16,384 tokens: 2.5e9 logits,
    offsets past 2^31."""
    hidden, weight, labels = random_case("cuda", torch.bfloat16, batch=4, seq=4096,
                                         hidden_size=256, vocab=151936)
    config = CrossEntropyConfig(16384, 4096, 8)
    ours = ours_run(hidden, weight, labels, config=config)
    assert_close_to_reference(ours, hf_run(hidden, weight, labels),  # the reference by blocks: it shares the card
                              fp64_reference_by_blocks(hidden, weight, labels), torch.bfloat16)


def test_the_page_check_runs(capsys):
    """snippets/fused_loss_check.py, the page's check against HF, as a reader runs it."""
    import runpy

    runpy.run_path(str(SNIPPETS / "fused_loss_check.py"), run_name="__main__")
    lines = capsys.readouterr().out.splitlines()
    assert [line.split(":")[0] for line in lines] == ["loss", "d hidden", "d weight"]
    for line in lines:
        assert float(line.rsplit("=", 1)[1].split()[0]) < 1e-5, line
