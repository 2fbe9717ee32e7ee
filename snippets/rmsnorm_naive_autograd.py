# SPDX-License-Identifier: Apache-2.0
"""The teaching kernels of rmsnorm_naive.py as a torch.autograd.Function (篇2 §五).

The same contract as the production TritonRMSNormFunction: inputs saved with
save_for_backward, no gradient for eps, no dW sum for a frozen weight, dy only
read, and an explicit error under create_graph=True.
"""
# --8<-- [start:autograd]
import torch

from rmsnorm_naive import naive_rms_norm_bwd, naive_rms_norm_fwd


class NaiveRMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, eps):
        ctx.save_for_backward(x, weight)
        ctx.eps = eps
        return naive_rms_norm_fwd(x, weight, eps)

    @staticmethod
    def backward(ctx, dy):
        # create_graph=True would need a backward of this backward.
        if torch.is_grad_enabled():
            raise NotImplementedError("double backward (create_graph=True) is not "
                                      "implemented for NaiveRMSNorm")
        x, weight = ctx.saved_tensors
        dx, dw = naive_rms_norm_bwd(dy, x, weight, ctx.eps,
                                    compute_dw=ctx.needs_input_grad[1])
        return dx, dw, None  # eps is not a tensor: no gradient


def naive_rms_norm(x, weight, eps=1e-6):
    return NaiveRMSNormFunction.apply(x, weight, eps)
# --8<-- [end:autograd]


if __name__ == "__main__":
    # --8<-- [start:usage]
    import os

    # TRITON_INTERPRET=1 (set before triton is imported) runs Triton on the CPU
    device = "cpu" if os.environ.get("TRITON_INTERPRET") == "1" else "cuda"
    x = torch.randn(8, 2560, device=device, requires_grad=True)
    weight = torch.randn(2560, device=device, requires_grad=True)
    dy = torch.randn(8, 2560, device=device)
    naive_rms_norm(x, weight).backward(dy)
    # the same function in torch ops, differentiated by autograd
    x_ref, w_ref = x.detach().requires_grad_(), weight.detach().requires_grad_()
    (w_ref * x_ref
     * torch.rsqrt(x_ref.pow(2).mean(-1, keepdim=True) + 1e-6)).backward(dy)
    print(f"max |dx - autograd| {(x.grad - x_ref.grad).abs().max().item():.1e}, "
          f"max |dw - autograd| {(weight.grad - w_ref.grad).abs().max().item():.1e}")
    # --8<-- [end:usage]
