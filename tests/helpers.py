"""Helpers shared by the kernel tests: fp64 references, NaN-poisoned allocations,
fresh random inputs, and plausible wrong backwards that the tests must catch."""
import contextlib

import torch

# Relative L2 error allowed against the fp64 reference, per output dtype.
REL_TOL = {torch.bfloat16: 1.5e-2, torch.float16: 2e-3, torch.float32: 2e-5, torch.float64: 1e-10}


def rel_err(out, ref):
    out, ref = out.double(), ref.double().to(out.device)
    assert torch.isfinite(out).all(), "non-finite values (unwritten output?)"
    return ((out - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def tiny_model(device, dtype=torch.float32, layers=2, **overrides):
    """A tiny HF Qwen3 with non-trivial norm weights (a wrong weight path would show)."""
    from transformers import Qwen3ForCausalLM

    from qwen3_configs import tiny_qwen3_config

    torch.manual_seed(0)
    model = Qwen3ForCausalLM(tiny_qwen3_config(num_hidden_layers=layers, **overrides))
    with torch.no_grad():
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    return model.to(device=device, dtype=dtype)


def batch(model, device, shape=(2, 16), seed=1):
    """Random token ids for ``model``."""
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(0, model.config.vocab_size, shape, generator=gen).to(device)


def loss_and_grads(model, ids, labels=None):
    """The loss of one step (labels: ``ids`` unless given) and every parameter's gradient, in fp64."""
    model.zero_grad(set_to_none=True)
    loss = model(input_ids=ids, labels=ids if labels is None else labels).loss
    loss.backward()
    return loss.detach().double(), {n: p.grad.double() for n, p in model.named_parameters()}


QWEN3_CLASSES = ("Qwen3RMSNorm", "Qwen3DecoderLayer", "Qwen3Model", "Qwen3Attention", "Qwen3MLP")


@contextlib.contextmanager
def qwen3_patches_undone():
    """Puts back, on exit, what a patch replaced in modeling_qwen3: its classes and
    Qwen3ForCausalLM.forward (as they were on entry). Yields the classes by name."""
    import transformers.models.qwen3.modeling_qwen3 as modeling_qwen3

    classes = {name: getattr(modeling_qwen3, name) for name in QWEN3_CLASSES}
    forward = modeling_qwen3.Qwen3ForCausalLM.forward
    try:
        yield classes
    finally:
        for name, cls in classes.items():
            setattr(modeling_qwen3, name, cls)
        modeling_qwen3.Qwen3ForCausalLM.forward = forward


def fp64_reference(x, w, eps, dy):
    """y, dx, dw in fp64 from the exact formula (no intermediate rounding)."""
    x64 = x.detach().double().requires_grad_()
    w64 = w.detach().double().requires_grad_()
    y = w64 * (x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps))
    dx, dw = torch.autograd.grad(y, (x64, w64), dy.detach().double())
    return y.detach(), dx, dw


@contextlib.contextmanager
def poisoned_allocations():
    """Every torch.empty/empty_like in scope returns NaN-filled memory."""
    real_empty, real_empty_like = torch.empty, torch.empty_like

    def fill(t):
        if t.is_floating_point():
            t.fill_(float("nan"))
        return t

    torch.empty = lambda *a, **k: fill(real_empty(*a, **k))
    torch.empty_like = lambda *a, **k: fill(real_empty_like(*a, **k))
    try:
        yield
    finally:
        torch.empty, torch.empty_like = real_empty, real_empty_like


def random_inputs(shape, dtype, device, seed):
    gen = torch.Generator().manual_seed(seed)
    x = (torch.randn(shape, generator=gen, dtype=torch.float64) * 2 + 0.3).to(dtype).to(device)
    w = (torch.randn(shape[-1], generator=gen, dtype=torch.float64) * 0.5 + 1).to(dtype).to(device)
    dy = torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype).to(device)
    return x, w, dy

class MissingProjectionTerm(torch.autograd.Function):
    """dx = w * dy * rstd: forgets the -x_hat * mean(w * dy * x_hat) term."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return weight * (x * rstd)

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dw = (dy * x * rstd).reshape(-1, x.shape[-1]).sum(0)
        return weight * dy * rstd, dw, None


def cast_order_references(x, w, eps, dy=None):
    """fp64 references of the two cast orders: HF's (x_hat rounded to x's dtype, then
    times the weight) and weight-first (no rounding of x_hat). Returns (hf, weight_first)
    pairs of y in the output dtype and, with dy, dw in fp64 (dW = sum dy * x_hat)."""
    x64 = x.detach().double()
    x_hat = x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + eps)
    out_dtype = torch.promote_types(x.dtype, w.dtype)
    results = []
    for hat in (x_hat.to(x.dtype).double(), x_hat):
        y = (w.detach().double() * hat).to(out_dtype)
        dw = None if dy is None else (dy.detach().double() * hat).reshape(-1, x.shape[-1]).sum(0)
        results.append((y, dw))
    return results


class ReportsSecondDevice(torch.Tensor):
    """A tensor whose ``.device`` says index 1 of its device type; its data stay where they are.

    On a machine with one device (the CPU interpreter: torch has no second CPU device) this is what
    a weight on a second GPU looks like to the Python checks, so their refusal of x and weight on
    different devices is testable there. Make one with ``t.as_subclass(ReportsSecondDevice)``."""

    @property
    def device(self):
        return torch.device(torch.Tensor.device.__get__(self).type, 1)
