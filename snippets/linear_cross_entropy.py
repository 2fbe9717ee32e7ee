# SPDX-License-Identifier: Apache-2.0
"""lm_head + cross-entropy without the B x T x V logits, forward and backward.

HF's Qwen3ForCausalLM computes ``logits = lm_head(h)`` (B x T x V in the model's
dtype), then ForCausalLMLoss upcasts them to fp32 and runs cross_entropy: with
V = 151,936 and 16,384 tokens that is 5 GB of bf16 logits, 10 GB of fp32 copies,
and as much again for their gradients. Here the tokens go through in chunks:

    for each chunk of C tokens:
        logits = h_chunk @ W.T                   (C x V, cuBLAS, fp32 accumulation)
        one Triton kernel per row: log-sum-exp and the target's logit in fp32, the
            row's loss, then d_logits = (softmax - onehot) / divisor written over
            the logits, rounded to their dtype (HF's gradient is rounded there too)
        d_h_chunk = d_logits @ W                 (C x H)
        d_W += d_logits.T @ h_chunk              (V x H, cuBLAS, beta = 1)

Only one chunk of logits exists at a time. The gradients are computed in the
forward, since the loss is the end of the graph; the backward only scales them
by the incoming gradient (1 for ``loss.backward()``), in place. Without grad
(``torch.no_grad``, or no input requiring it) only the loss is computed.

What is HF's, what differs:

* The loss is HF's ForCausalLMLoss: labels shifted left with ``ignore_index``
  appended (or ``shift_labels`` as given), the sum over non-ignored tokens in
  fp32, divided by their count, or by ``num_items_in_batch`` when given (HF's
  gradient-accumulation path). All tokens ignored: NaN, with zero gradients, as
  HF's. The result is fp32 (fp64 for fp64 inputs).
* d_W accumulates across chunks in W's dtype: cuBLAS adds each chunk's product
  in fp32 and rounds the sum, once per chunk. HF's one GEMM rounds once; with a
  bf16 W the chunked sum carries a little more rounding (the tests bound it).
* Tied weights (Qwen3-0.6B, 1.7B, 4B tie lm_head to embed_tokens): d_W is this
  op's gradient of its weight input, which autograd adds to the embedding's.
* Memory: one chunk of logits (C x V, in place of B x T x V; a smaller
  ``chunk_tokens`` holds less and runs slower: ``launch_config``), the row losses, and
  the two gradients, which the op writes in the forward and autograd then hands
  on (d_W: V x H, as any lm_head's backward makes it). The backward keeps no
  reference to them, so that ``.backward()`` moves d_W into ``weight.grad``
  instead of copying it.
* Deterministic: fixed chunks, one program per row, no atomics.
* Under torch.compile the op is one opaque custom op (``torch.library``): the
  compiler neither traces the chunk loop nor reorders its in-place updates.

Bad targets. A target outside [0, V) that is not ignore_index raises ValueError
before any work is launched (``check_targets=True``, the default). The check reads one
flag back from the GPU: a host sync per call. With ``check_targets=False``, or while a
CUDA graph is being captured, the check is a device-side assert instead, as in HF's
cross_entropy on the GPU: a later CUDA call or sync (CUDA reports errors
asynchronously) fails with "device-side assert triggered", which leaves the process's
CUDA context unusable (the training process must restart). The kernel never reads
outside the row either way. Run on CPU under the interpreter with TRITON_INTERPRET=1
set before importing triton.
"""
import dataclasses
import operator

# --8<-- [start:imports]
import torch
import triton
import triton.language as tl

from rmsnorm_triton import (_FLOAT_DTYPES, COMPILE_OPTIONS, _interpreted,
                            check_backend_device, compute_dtype)
from swiglu import _rounded
# --8<-- [end:imports]


# --8<-- [start:kernel]
@triton.jit
def cross_entropy_rows_kernel(
    Logits, Targets, RowLoss, Scale,
    n_cols, row_stride, ignore_index,
    BLOCK: tl.constexpr,  # columns per step of the loops over a row
    COMPUTE_DTYPE: tl.constexpr,  # fp32, or fp64 for fp64 logits
    WRITE_GRAD: tl.constexpr,  # overwrite the row with d_loss/d_logits
    INTERPRETER: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    logits = Logits + row * row_stride
    target = tl.load(Targets + row)
    cols = tl.arange(0, BLOCK)

    # Pass 1: the row's log-sum-exp, online: a running max and the sum of
    # exp(z - max) rescaled whenever the max grows. One exp per logit.
    running_max = tl.full((), float("-inf"), COMPUTE_DTYPE)
    running_sum = tl.zeros((), COMPUTE_DTYPE)
    for start in range(0, n_cols, BLOCK):
        z = tl.load(logits + start + cols, mask=start + cols < n_cols,
                    other=float("-inf")).to(COMPUTE_DTYPE)
        new_max = tl.maximum(running_max, tl.max(z, axis=0))
        running_sum = (running_sum * tl.exp(running_max - new_max)
                       + tl.sum(tl.exp(z - new_max), axis=0))
        running_max = new_max
    lse = running_max + tl.log(running_sum)

    # The row's loss: lse - z[target]; 0 for an ignored row. A target outside
    # [0, n_cols) is never read (the launcher asserts there is none).
    counted = (target != ignore_index) & (target >= 0) & (target < n_cols)
    target_logit = tl.load(logits + tl.where(counted, target, 0)).to(COMPUTE_DTYPE)
    tl.store(RowLoss + row, tl.where(counted, lse - target_logit, 0.0))

    if WRITE_GRAD:
        # Pass 2: d_logits = (softmax - onehot(target)) * scale, scale = 1 / divisor,
        # rounded to the logits' dtype where HF's gradient is rounded; 0 if ignored.
        scale = tl.where(counted, tl.load(Scale).to(COMPUTE_DTYPE), 0.0)
        for start in range(0, n_cols, BLOCK):
            mask = start + cols < n_cols
            z = tl.load(logits + start + cols, mask=mask, other=0.0).to(COMPUTE_DTYPE)
            grad = tl.exp(z - lse) - tl.where(start + cols == target, 1.0, 0.0)
            grad = _rounded(grad * scale, Logits.dtype.element_ty, INTERPRETER)
            tl.store(logits + start + cols, grad.to(Logits.dtype.element_ty),
                     mask=mask)
# --8<-- [end:kernel]


# --8<-- [start:config]
@dataclasses.dataclass(frozen=True)
class CrossEntropyConfig:
    """How the op runs: tokens per chunk, and the row kernel's block and warps."""

    chunk_tokens: int
    block: int
    num_warps: int


def launch_config(n_tokens: int, hidden_size: int, itemsize: int,
                  device: torch.device) -> CrossEntropyConfig:
    """The default config: 2,048 tokens a chunk, from a sweep of 128 to 4,096 at every
    Qwen3 hidden size (16,384 tokens, V = 151,936, bf16, an H100), where 2,048 is the
    smallest chunk within 3 % of the fastest at each size. Larger chunks are faster
    (fewer passes over d_W, larger GEMMs) and hold more logits: C x V values, 0.58 GiB
    at 2,048 in bf16. The row kernel: 8 KB of logits per step, 8 warps.
    """
    return CrossEntropyConfig(min(2048, n_tokens), 8192 // itemsize, 8)
# --8<-- [end:config]


def check_config(config: CrossEntropyConfig) -> None:
    """Reject a config the op cannot run."""
    if not isinstance(config, CrossEntropyConfig):
        raise TypeError(f"config must be a CrossEntropyConfig, got "
                        f"{type(config).__name__}")
    chunk, block, warps = config.chunk_tokens, config.block, config.num_warps
    if not (isinstance(chunk, int) and chunk >= 1):
        raise ValueError(f"chunk_tokens must be a positive int, got {chunk!r}")
    if not (isinstance(block, int) and block >= 16 and block & (block - 1) == 0
            and block <= 2**16):
        raise ValueError(f"block must be a power of two in [16, 65536], got {block!r}")
    if warps not in (1, 2, 4, 8, 16, 32):
        raise ValueError(f"num_warps must be 1, 2, 4, 8, 16 or 32, got {warps!r}")


def check_inputs(hidden, weight, targets, divisor=None) -> None:
    """Reject what the op would get wrong, with a message naming the problem."""
    for name, tensor in (("hidden", hidden), ("weight", weight), ("targets", targets)):
        if not isinstance(tensor, torch.Tensor):
            raise TypeError(f"linear_cross_entropy expects tensors, {name} is a "
                            f"{type(tensor).__name__}")
        check_backend_device(name, tensor)
    if hidden.dtype not in _FLOAT_DTYPES:
        raise TypeError("linear_cross_entropy supports float16/bfloat16/float32/"
                        f"float64, hidden is {hidden.dtype}")
    if weight.dtype != hidden.dtype:
        raise TypeError(f"weight is {weight.dtype} but hidden is {hidden.dtype}: "
                        "one dtype (under autocast, call it inside the autocast "
                        "region: it casts both as F.linear would)")
    if hidden.dim() != 2 or weight.dim() != 2 or hidden.shape[1] != weight.shape[1]:
        raise ValueError(f"expected hidden (N, H) and weight (V, H); got "
                         f"{tuple(hidden.shape)} and {tuple(weight.shape)}")
    if targets.dtype != torch.int64 or targets.shape != hidden.shape[:1]:
        raise ValueError(f"targets must be int64 of shape ({hidden.shape[0]},), got "
                         f"{targets.dtype} {tuple(targets.shape)}")
    if hidden.shape[0] == 0 or weight.shape[0] == 0 or hidden.shape[1] == 0:
        raise ValueError(f"linear_cross_entropy needs tokens, a vocabulary and a "
                         f"hidden size; got hidden {tuple(hidden.shape)}, weight "
                         f"{tuple(weight.shape)}")
    for name, tensor in (("weight", weight), ("targets", targets)):
        if tensor.device != hidden.device:
            raise ValueError(f"{name} is on {tensor.device} but hidden is on "
                             f"{hidden.device}")
    if divisor is not None and (divisor.numel() != 1
                                or divisor.device != hidden.device):
        raise ValueError("the divisor (num_items_in_batch) must be one number on "
                         f"{hidden.device}; got shape {tuple(divisor.shape)} on "
                         f"{divisor.device}")


# --8<-- [start:forward_helpers]
def check_bad_targets(targets, counted, vocab, raise_here: bool) -> None:
    """A target outside [0, vocab) that is not ignore_index: ValueError now (one host
    sync), or, with ``raise_here`` False or during CUDA graph capture (no sync allowed
    there), a device-side assert that fails a later CUDA call or sync."""
    bad = counted & ((targets < 0) | (targets >= vocab))
    capturing = targets.is_cuda and torch.cuda.is_current_stream_capturing()
    if raise_here and not capturing:
        if bad.any():  # the sync
            first = targets[bad][0].item()
            raise ValueError(f"linear_cross_entropy: {int(bad.sum())} target(s) "
                             f"outside [0, {vocab}) that are not ignore_index (the "
                             f"first is {first}); check_targets=False skips this check")
    else:
        torch._assert_async(~bad.any(), "linear_cross_entropy: a target is outside "
                            "[0, vocab size) and is not ignore_index")


def _outputs(hidden, weight, grad_hidden_needed, grad_weight_needed, n_rows):
    """Row losses (fp32; fp64 for fp64 inputs) and the two gradients (empty where
    not needed): allocated alike by the op and by its fake for torch.compile."""
    stats = torch.float64 if hidden.dtype == torch.float64 else torch.float32
    return (torch.empty(n_rows, dtype=stats, device=hidden.device),
            torch.empty_like(hidden) if grad_hidden_needed else hidden.new_empty(0),
            torch.empty_like(weight) if grad_weight_needed else weight.new_empty(0))


# --8<-- [end:forward_helpers]


# The op is registered with torch.library: under torch.compile it stays one opaque call.
@torch.library.custom_op("qwen3_fusion::linear_cross_entropy", mutates_args=())
# --8<-- [start:forward]
def _linear_cross_entropy_op(
        hidden: torch.Tensor, weight: torch.Tensor, targets: torch.Tensor,
        divisor: torch.Tensor | None, ignore_index: int, chunk_tokens: int,
        block: int, num_warps: int, grad_hidden_needed: bool, grad_weight_needed: bool,
        check_targets: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(loss, d_loss/d_hidden, d_loss/d_weight); a gradient not needed is empty."""
    n_tokens, vocab = hidden.shape[0], weight.shape[0]
    counted = targets != ignore_index
    check_bad_targets(targets, counted, vocab, check_targets)
    row_loss, grad_hidden, grad_weight = _outputs(hidden, weight, grad_hidden_needed,
                                                  grad_weight_needed, n_tokens)
    stats = row_loss.dtype
    divisor = counted.sum().to(stats) if divisor is None else divisor.to(stats)
    scale = divisor.reciprocal()

    write_grad = grad_hidden_needed or grad_weight_needed
    logits_buffer = hidden.new_empty(min(chunk_tokens, n_tokens), vocab)
    with torch.autocast(hidden.device.type, enabled=False):  # the dtype given, always
        for start in range(0, n_tokens, chunk_tokens):
            end = min(start + chunk_tokens, n_tokens)
            chunk = hidden[start:end]
            logits = logits_buffer[:end - start]
            torch.mm(chunk, weight.t(), out=logits)
            cross_entropy_rows_kernel[(end - start,)](
                logits, targets[start:end], row_loss[start:end], scale, vocab,
                logits.stride(0), ignore_index, BLOCK=block,
                COMPUTE_DTYPE=compute_dtype(logits), WRITE_GRAD=write_grad,
                INTERPRETER=_interpreted(), num_warps=num_warps, **COMPILE_OPTIONS)
            if grad_hidden_needed:
                torch.mm(logits, weight, out=grad_hidden[start:end])
            if grad_weight_needed and start == 0:
                torch.mm(logits.t(), chunk, out=grad_weight)
            elif grad_weight_needed:
                grad_weight.addmm_(logits.t(), chunk)  # fp32 inside, rounded per chunk
    return row_loss.sum() / divisor, grad_hidden, grad_weight
# --8<-- [end:forward]


@_linear_cross_entropy_op.register_fake
def _(hidden, weight, targets, divisor, ignore_index, chunk_tokens, block, num_warps,
      grad_hidden_needed, grad_weight_needed, check_targets):
    loss, grad_hidden, grad_weight = _outputs(hidden, weight, grad_hidden_needed,
                                              grad_weight_needed, 0)
    return loss.new_empty(()), grad_hidden, grad_weight


# --8<-- [start:autograd]
def _setup_context(ctx, inputs, output):
    # The gradients are kept as attributes, not saved tensors: the backward scales
    # them in place and then drops them. No reference cycle: they are
    # non-differentiable outputs (no grad_fn). The inputs are saved (no copies) for a
    # second backward through a retained graph, which recomputes.
    hidden, weight, targets, divisor, *settings = inputs
    ctx.save_for_backward(hidden, weight, targets, divisor)
    ctx.settings = settings[:4]  # ignore_index, chunk_tokens, block, num_warps
    _, ctx.grad_hidden, ctx.grad_weight = output
    ctx.mark_non_differentiable(ctx.grad_hidden, ctx.grad_weight)
    ctx.set_materialize_grads(False)  # no zero V x H, N x H grads for those two


def _backward(ctx, grad_loss, _grad_hidden, _grad_weight):
    # The gradients were computed in the forward with d_loss = 1: scale them in place
    # and let go of them. They go back as fresh aliases (detach: same memory, new
    # tensor) that autograd moves into .grad; the forward's outputs may still be
    # referenced (on CUDA, torch 2.11, they were) and would be copied: one more V x H.
    # A further backward through a retained graph recomputes from the saved inputs.
    needed = ctx.needs_input_grad
    grad_hidden, grad_weight = ctx.grad_hidden, ctx.grad_weight
    ctx.grad_hidden = ctx.grad_weight = None
    if grad_loss is None:  # the loss got no gradient: nor do the inputs
        return (None,) * 11
    if grad_hidden is None:
        hidden, weight, targets, divisor = ctx.saved_tensors
        _, grad_hidden, grad_weight = _linear_cross_entropy_op(
            hidden, weight, targets, divisor, *ctx.settings, *needed[:2], False)
    return (grad_hidden.mul_(grad_loss).detach() if needed[0] else None,
            grad_weight.mul_(grad_loss).detach() if needed[1] else None,
            *[None] * 9)
# --8<-- [end:autograd]


_linear_cross_entropy_op.register_autograd(_backward, setup_context=_setup_context)


# --8<-- [start:api]
def linear_cross_entropy(hidden: torch.Tensor, weight: torch.Tensor,
                         targets: torch.Tensor, *, ignore_index: int = -100,
                         num_items_in_batch: torch.Tensor | int | None = None,
                         config: CrossEntropyConfig | None = None,
                         check_targets: bool = True) -> torch.Tensor:
    """cross_entropy(hidden @ weight.T, targets) without the logits.

    hidden (N, H), weight (V, H), targets (N,) int64. The mean over targets that
    are not ignore_index, or the sum divided by ``num_items_in_batch``. A target
    outside [0, V): ValueError (one host sync); check_targets=False makes it a
    device-side assert, as in F.cross_entropy (module docstring).
    """
    if torch.is_autocast_enabled(hidden.device.type):  # as F.linear under autocast
        dtype = torch.get_autocast_dtype(hidden.device.type)
        hidden, weight = hidden.to(dtype), weight.to(dtype)
    divisor = None
    if num_items_in_batch is not None:
        divisor = torch.as_tensor(num_items_in_batch, device=hidden.device)
    check_inputs(hidden, weight, targets, divisor)
    targets = targets.contiguous()  # the kernel reads one per row, densely
    if config is None:
        config = launch_config(operator.index(hidden.shape[0]),
                               operator.index(hidden.shape[1]), hidden.element_size(),
                               hidden.device)
    check_config(config)
    grad = torch.is_grad_enabled()
    loss, _, _ = _linear_cross_entropy_op(
        hidden, weight, targets, divisor, ignore_index, config.chunk_tokens,
        config.block, config.num_warps, grad and hidden.requires_grad,
        grad and weight.requires_grad, check_targets)
    return loss


def causal_lm_loss(hidden_states: torch.Tensor, lm_head_weight: torch.Tensor,
                   labels: torch.Tensor | None, *, ignore_index: int = -100,
                   num_items_in_batch: torch.Tensor | int | None = None,
                   shift_labels: torch.Tensor | None = None,
                   config: CrossEntropyConfig | None = None,
                   check_targets: bool = True) -> torch.Tensor:
    """HF's ForCausalLMLoss(lm_head(hidden_states), labels, ...) without the logits.

    Labels (B, T) are shifted as HF shifts them (the last position of each row
    gets ignore_index), unless ``shift_labels`` is given.
    """
    if shift_labels is None:
        labels = torch.nn.functional.pad(labels, (0, 1), value=ignore_index)
        shift_labels = labels[..., 1:]
    hidden = hidden_states.reshape(-1, hidden_states.shape[-1])
    targets = shift_labels.reshape(-1).to(hidden.device)
    return linear_cross_entropy(hidden, lm_head_weight, targets,
                                ignore_index=ignore_index,
                                num_items_in_batch=num_items_in_batch, config=config,
                                check_targets=check_targets)
# --8<-- [end:api]


if __name__ == "__main__":
    # --8<-- [start:demo]
    from transformers.loss.loss_utils import ForCausalLMLoss

    device = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: TRITON_INTERPRET=1
    torch.manual_seed(0)
    batch, seq, hidden_size, vocab = 2, 64, 64, 1000
    hidden = torch.randn(batch, seq, hidden_size, device=device, requires_grad=True)
    weight = torch.randn(vocab, hidden_size, device=device) / hidden_size**0.5
    weight.requires_grad_()
    labels = torch.randint(0, vocab, (batch, seq), device=device)
    labels[0, :20] = -100  # a masked prompt

    results = []
    for loss_fn in (lambda: ForCausalLMLoss(hidden @ weight.t(), labels, vocab),
                    lambda: causal_lm_loss(hidden, weight, labels,
                                           config=CrossEntropyConfig(48, 256, 4))):
        loss = loss_fn()
        results.append([loss, *torch.autograd.grad(loss, [hidden, weight])])
    for name, hf, ours in zip(["loss", "d hidden", "d weight"], *results):
        error = (ours - hf).abs().max() / hf.abs().max()
        print(f"{name}: max |ours - HF| = {error.item():.2g} of max |HF|")
    # --8<-- [end:demo]
