# SPDX-License-Identifier: Apache-2.0
"""Residual add + Qwen3 RMSNorm, fused: one Triton kernel each way.

HF's Qwen3 decoder layer does ``s = residual + x`` and then ``y = norm(s)``: two
kernels, and s travels through memory three times. Fused, the forward reads x,
residual and w and writes s (the next residual), y and one rstd per row; the
backward reads dy, ds (s's own gradient from later layers), s, rstd and w and
writes dx, which is the gradient of both x and residual, plus dW partials.

The kernels are rmsnorm_triton.py's, with HAS_RESIDUAL in the forward and HAS_DS
in the backward (``_add_residual`` and ``_load_ds`` there): the same tiles, the
same persistent backward and dW partials, the same chunked path for rows wider
than MAX_COLS. Only the launch configs differ (the fused ladders of
rmsnorm_config.py: three tensors per element in the backward instead of two).

Arithmetic, exactly HF's: s is rounded to the input dtype as torch rounds
``residual + x`` (16-bit inputs add in fp32, then round once); statistics in
fp32 (fp64 for fp64 inputs); x_hat rounded to the input dtype, then times the
weight; y's dtype is torch's promotion of (input, weight).

Bytes for R rows of H bf16 values (rstd's 4 bytes per row aside): forward reads
x, r, writes s, y: 4*R*H*2; backward reads dy, ds, s, writes dx: 4*R*H*2.
Separately (torch's add, then the plain RMSNorm kernels) it is 3 + 2 passes
forward and 3 + 3 backward: 11 passes over R*H values instead of 8.

Run on CPU under the interpreter with TRITON_INTERPRET=1 set before importing triton.
"""
# --8<-- [start:imports]
import torch

from rmsnorm_triton import LaunchConfig, planned_forward, rms_norm_backward
# --8<-- [end:imports]


# --8<-- [start:autograd]
def fused_add_rms_norm_forward(x, residual, weight, eps=1e-6, *,
                               config: LaunchConfig | None = None):
    """Returns (y, s, rstd): y = Qwen3RMSNorm(s) and s = residual + x, both with
    x's shape; rstd has one value per row. Non-contiguous inputs are copied first.

    ``config`` overrides the launch config; None takes the fused forward ladder's.
    """
    if residual is None:  # planned_forward's None means the plain norm
        raise TypeError("fused_add_rms_norm_forward needs a residual tensor")
    y, rstd, s = planned_forward(x, weight, eps, residual, config)
    return y, s, rstd


def fused_add_rms_norm_backward(dy, ds, s, weight, rstd, compute_dw=True, *,
                                config: LaunchConfig | None = None):
    """Returns (dx, dw). dx is the gradient of x and of residual; dw is None when
    compute_dw is False. ds, the gradient that reaches s from later layers, may be
    None. dy and ds are never written.

    ``config`` overrides the launch config; None takes the fused backward ladder's
    (the plain one without ds: then it is the plain backward).
    """
    return rms_norm_backward(dy, s, weight, rstd, compute_dw, config=config, ds=ds)


class FusedAddRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, residual, weight, eps):
        y, s, rstd = fused_add_rms_norm_forward(x, residual, weight, eps)
        ctx.save_for_backward(s, weight, rstd)  # neither x nor residual is kept
        ctx.set_materialize_grads(False)  # no gradient for s: None, not zeros
        return y, s

    @staticmethod
    def backward(ctx, dy, ds):
        if torch.is_grad_enabled():
            raise NotImplementedError("double backward (create_graph=True) is not "
                                      "implemented for the fused add + RMSNorm")
        s, weight, rstd = ctx.saved_tensors
        compute_dw = ctx.needs_input_grad[2]
        if dy is None:  # only s was used: the add passes ds through
            return ds, ds, torch.zeros_like(weight) if compute_dw else None, None
        dx, dw = fused_add_rms_norm_backward(dy, ds, s, weight, rstd, compute_dw)
        # x and residual have the same gradient: one tensor for both. Autograd
        # accumulates in place only into a tensor nothing else references,
        # so the two uses never see each other's sums.
        return dx, dx, dw, None


def fused_add_rms_norm(x, residual, weight, eps=1e-6):
    """(Qwen3RMSNorm(residual + x), residual + x) with one Triton kernel each way.

    Mixed dtypes add in the promoted dtype, as torch's ``residual + x`` does (under
    autocast: an fp32 residual stream plus a bf16 sublayer output); the cast is a
    copy, outside the kernels.
    """
    if isinstance(x, torch.Tensor) and isinstance(residual, torch.Tensor):
        dtype = torch.promote_types(x.dtype, residual.dtype)
        x, residual = x.to(dtype), residual.to(dtype)
    return FusedAddRMSNormFunction.apply(x, residual, weight, eps)
# --8<-- [end:autograd]


# --8<-- [start:module]
class TritonQwen3FusedAddRMSNorm(torch.nn.Module):
    """Qwen3RMSNorm(hidden_size, eps) that first adds the residual; same weights."""

    def __init__(self, hidden_size: int, eps: float = 1e-6) -> None:
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.variance_epsilon = eps

    def forward(self, hidden_states, residual):
        """(normed, new_residual): norm(residual + hidden_states), the sum."""
        return fused_add_rms_norm(hidden_states, residual, self.weight,
                                  self.variance_epsilon)

    def extra_repr(self) -> str:
        return f"{tuple(self.weight.shape)}, eps={self.variance_epsilon}"
# --8<-- [end:module]


if __name__ == "__main__":
    # --8<-- [start:usage]
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    device = "cuda" if torch.cuda.is_available() else "cpu"  # CPU: TRITON_INTERPRET=1
    shape, dtype = (2, 8, 2560), torch.bfloat16  # 2560: Qwen3-4B's hidden size
    x, residual, dy, ds = (torch.randn(shape, device=device).to(dtype)
                           for _ in range(4))
    fused, hf = TritonQwen3FusedAddRMSNorm(2560), Qwen3RMSNorm(2560)
    with torch.no_grad():
        hf.weight.uniform_(0.5, 1.5)
    fused.load_state_dict(hf.state_dict())
    results = []
    for module in (fused.to(device, dtype), hf.to(device, dtype)):
        x_, r_ = x.clone().requires_grad_(), residual.clone().requires_grad_()
        if module is hf:  # HF's decoder layer: the add, then the norm
            s = r_ + x_
            y = module(s)
        else:
            y, s = module(x_, r_)
        torch.autograd.backward((y, s), (dy, ds))
        results.append((y, s, x_.grad, r_.grad, module.weight.grad))
    # On a GPU s is bit-identical; the CPU interpreter truncates fp32 -> bf16.
    for name, ours, theirs in zip(("y", "s", "dx", "dresidual", "dw"), *results):
        same = (ours == theirs).float().mean().item()
        print(f"{name:9s} bit-identical to HF's two ops: {same:7.2%}  "
              f"max |diff| {(ours.float() - theirs.float()).abs().max().item():.3g}")
    # --8<-- [end:usage]
