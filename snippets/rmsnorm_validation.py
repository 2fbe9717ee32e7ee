# SPDX-License-Identifier: Apache-2.0
"""The three checks a hand-written backward must pass before it goes into training
(篇2 §5.6).

0. Forward, bf16: x_hat within one ulp of HF's Qwen3RMSNorm (same cast order).
1. gradcheck in float64: the analytic backward equals finite differences.
2. At the training dtype (bf16), against HF's Qwen3RMSNorm: y, dx and dw are
   no further from an fp64 reference than HF's own result is.
3. dW is deterministic: two backward passes give identical bits.

Small shapes on CPU (``TRITON_INTERPRET=1 python snippets/rmsnorm_validation.py``),
Qwen3-8B shapes on a CUDA GPU.
"""
# --8<-- [start:imports]
import torch
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

from rmsnorm_triton import rms_norm

EPS = 1e-6
# --8<-- [end:imports]


# --8<-- [start:forward_hf]
def bf16_ulp_distance(a, b):
    """|a - b| in bf16 units in the last place (bit patterns mapped to a monotone
    integer line)."""
    def line(t):
        bits = t.contiguous().view(torch.int16).to(torch.int32)
        return torch.where(bits < 0, -(bits & 0x7FFF), bits)

    return (line(a) - line(b)).abs()


def forward_vs_hf(shape, device, weight_std=0.1):
    """(max ulp distance, fraction of bit-identical outputs): Triton forward vs HF
    Qwen3RMSNorm, bf16.

    weight = 1 + weight_std * N(0, 1); weight_std=0 is Qwen3's initial weight of
    ones, where the output is x_hat itself. With other weights a 1-ulp difference in
    x_hat can become 2 ulp of y = x_hat * w when y falls into a lower binade than
    x_hat.
    """
    x = torch.randn(shape, device=device, dtype=torch.bfloat16)
    hf = Qwen3RMSNorm(shape[-1], eps=EPS).to(device=device, dtype=torch.bfloat16)
    with torch.no_grad():
        hf.weight.copy_(1 + weight_std * torch.randn(shape[-1], device=device))
        expected, ours = hf(x), rms_norm(x, hf.weight, EPS)
    assert ours.dtype == expected.dtype == torch.bfloat16
    distance = bf16_ulp_distance(ours, expected)
    return distance.max().item(), (distance == 0).float().mean().item()
# --8<-- [end:forward_hf]


# --8<-- [start:gradcheck]
def check_gradcheck(device, shapes=((2, 8), (2, 2, 16))):
    # Small shapes: the full Jacobian costs two forward passes per input element.
    for shape in shapes:
        x = torch.randn(shape, dtype=torch.float64, device=device, requires_grad=True)
        weight = torch.randn(shape[-1], dtype=torch.float64, device=device,
                             requires_grad=True)
        # fp64 end to end: the kernel accumulates in fp64 when its inputs are fp64.
        # Full Jacobian, not fast_mode: a random projection can miss an O(1/N) term.
        assert torch.autograd.gradcheck(lambda x, w: rms_norm(x, w, EPS), (x, weight))
# --8<-- [end:gradcheck]


# --8<-- [start:compare_hf]
def relative_error(value, reference):
    return ((value.double() - reference).norm() / reference.norm()).item()


def compare_with_hf(shape, device, dtype=torch.bfloat16):
    """Relative L2 error of (y, dx, dw) vs an fp64 reference: HF's Qwen3RMSNorm and
    ours."""
    x = torch.randn(shape, device=device).to(dtype)
    dy = torch.randn(shape, device=device).to(dtype)
    hf = Qwen3RMSNorm(shape[-1], eps=EPS).to(device=device, dtype=dtype)
    with torch.no_grad():
        hf.weight.copy_(1 + 0.1 * torch.randn(shape[-1], device=device))

    x64 = x.double().requires_grad_()
    w64 = hf.weight.detach().double().requires_grad_()
    y64 = w64 * (x64 * torch.rsqrt(x64.pow(2).mean(-1, keepdim=True) + EPS))
    reference = (y64.detach(), *torch.autograd.grad(y64, (x64, w64), dy.double()))

    errors = {}
    for name, norm in [("HF", hf), ("Triton", lambda t: rms_norm(t, hf.weight, EPS))]:
        hf.weight.grad = None
        x_in = x.clone().requires_grad_()
        y = norm(x_in)
        y.backward(dy)
        assert (y.dtype == dtype and x_in.grad.dtype == dtype
                and hf.weight.grad.dtype == dtype)
        errors[name] = [relative_error(t, r)
                        for t, r in zip((y, x_in.grad, hf.weight.grad), reference)]
    return errors  # {"HF": [err_y, err_dx, err_dw], "Triton": [...]}
# --8<-- [end:compare_hf]


# --8<-- [start:determinism]
def check_dw_determinism(shape, device, dtype=torch.bfloat16):
    x = torch.randn(shape, device=device, dtype=dtype)
    weight = torch.randn(shape[-1], device=device, dtype=dtype, requires_grad=True)
    dy = torch.randn(shape, device=device, dtype=dtype)
    grads = []
    for _ in range(2):
        weight.grad = None
        rms_norm(x, weight, EPS).backward(dy)
        grads.append(weight.grad.clone())
    # Fixed reduction order (per-program partials, then an ordered sum): the same
    # bits every time.
    assert torch.equal(grads[0], grads[1])
# --8<-- [end:determinism]


def check_double_backward_raises(device):
    x = torch.randn(4, 64, dtype=torch.float64, device=device, requires_grad=True)
    weight = torch.randn(64, dtype=torch.float64, device=device, requires_grad=True)
    (dx,) = torch.autograd.grad(rms_norm(x, weight, EPS).sum(), x, create_graph=False)
    try:
        torch.autograd.grad(rms_norm(x, weight, EPS).sum(), x, create_graph=True)
    except NotImplementedError:
        return dx
    raise AssertionError("create_graph=True should raise NotImplementedError")


if __name__ == "__main__":
    # --8<-- [start:run]
    import torch
    from rmsnorm_validation import (
        check_double_backward_raises, check_dw_determinism, check_gradcheck,
        compare_with_hf, forward_vs_hf)

    device = "cuda" if torch.cuda.is_available() else "cpu"
    on_gpu = device == "cuda"
    # Same cast order as HF. On a GPU: x_hat (unit weight) at most 1 ulp apart,
    # y = x_hat * w at most 2; the CPU interpreter truncates fp32 -> bf16 instead of
    # rounding: one ulp more.
    for weight_std, max_allowed in ((0.0, 1), (0.1, 2)):
        max_ulp, identical = forward_vs_hf((4, 2048, 4096) if on_gpu else (4, 8, 256),
                                           device, weight_std)
        assert (max_ulp <= max_allowed + (0 if on_gpu else 1)
                and (identical > 0.999 or not on_gpu))
        print(f"forward vs HF, weight 1 + {weight_std} N(0,1): max {max_ulp} ulp, "
              f"{100 * identical:.2f}% bit-identical")
    check_gradcheck(device, [(3, 5, 64), (70, 128), (3, 4096)] if on_gpu
                    else [(2, 8), (2, 2, 16)])
    # The interpreter truncates fp32 -> bf16 instead of rounding: more slack on CPU.
    slack = 1.5 if on_gpu else 3.0
    shapes = ([(4, 2048, 4096), (4, 2048, 32, 128)] if on_gpu
              else [(4, 8, 256), (2, 4, 4, 128)])
    for shape in shapes:  # hidden-size rows, and q_norm rows (head_dim 128)
        errors = compare_with_hf(shape, device)
        for index, name in enumerate(["y", "dx", "dw"]):
            assert errors["Triton"][index] <= slack * errors["HF"][index], (
                shape, name, errors)
        print(shape, {name: [f"{e:.1e}" for e in errs]
                      for name, errs in errors.items()})
    check_dw_determinism((16384, 4096) if on_gpu else (64, 256), device)
    check_double_backward_raises(device)
    print("gradcheck, HF comparison, dW determinism, double backward: all passed")
    # --8<-- [end:run]
