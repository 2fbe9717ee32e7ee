"""Plausible wrong RMSNorm backwards, in plain torch, shared by tests that must catch them."""
import torch


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
