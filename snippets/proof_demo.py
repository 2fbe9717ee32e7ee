# SPDX-License-Identifier: Apache-2.0
"""How this site checks a kernel: an fp64 reference and a strict comparison.

docs/how-we-test.md shows this file in parts; tests/test_proof_demo.py tests it.
Run it alone with ``python snippets/proof_demo.py``.
"""
# --8<-- [start:reference]
import torch


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor,
                       eps: float = 1e-6) -> torch.Tensor:
    """Qwen3RMSNorm in Hugging Face's cast order, normalised in float64.

    Normalise in high precision, cast back to x.dtype, and only then multiply by
    the weight (so a bf16 input with an fp32 weight gives an fp32 output).
    """
    if not (x.is_floating_point() and weight.is_floating_point()):
        raise TypeError("x and weight must be floating point, "
                        f"got {x.dtype} and {weight.dtype}")
    if weight.dim() != 1 or x.shape[-1] != weight.shape[0]:
        raise ValueError(f"weight must be 1-D of size x.shape[-1]={x.shape[-1]}, "
                         f"got {tuple(weight.shape)}")
    x64 = x.to(torch.float64)
    normed = x64 * torch.rsqrt(x64.pow(2).mean(dim=-1, keepdim=True) + eps)
    return weight * normed.to(x.dtype)
# --8<-- [end:reference]


# --8<-- [start:compare]
# Relative tolerance per output dtype: about 8 ulp of bf16 and fp16; looser
# for fp32 and fp64 (about 84 and 4,500 ulp).
TOLERANCE = {
    torch.float64: 1e-12,
    torch.float32: 1e-5,
    torch.float16: 8e-3,
    torch.bfloat16: 6e-2,
}


def max_error(candidate, reference, *inputs) -> float:
    """Largest |candidate - reference| over the inputs; AssertionError if too large.

    The candidate must match the reference's shape and dtype, produce only finite
    values (a kernel that skips a store leaves NaN in a poisoned buffer), and stay
    within the dtype's tolerance, scaled by the largest reference magnitude.
    """
    expected = reference(*inputs)
    actual = candidate(*inputs)
    if actual.shape != expected.shape or actual.dtype != expected.dtype:
        raise AssertionError(
            f"got {tuple(actual.shape)} {actual.dtype}, "
            f"expected {tuple(expected.shape)} {expected.dtype}"
        )
    if not torch.isfinite(actual).all():
        raise AssertionError(
            "candidate produced NaN or inf (an element was never written?)")
    error = (actual.double() - expected.double()).abs().max().item()
    scale = max(1.0, expected.double().abs().max().item())
    limit = TOLERANCE[expected.dtype] * scale
    if error > limit:
        raise AssertionError(
            f"max error {error:.3g} exceeds {limit:.3g} for {expected.dtype}")
    return error
# --8<-- [end:compare]


# --8<-- [start:poison]
def poisoned_like(tensor: torch.Tensor) -> torch.Tensor:
    """An output buffer full of NaN: any element a kernel forgets to write stays NaN."""
    return torch.full_like(tensor, float("nan"))
# --8<-- [end:poison]


def time_on_gpu(fn, *inputs) -> float:
    """Median time of fn(*inputs) in µs, with Triton's do_bench (CUDA only)."""
    import triton.testing

    return 1e3 * triton.testing.do_bench(lambda: fn(*inputs), warmup=25, rep=100,
                                         return_mode="median")


if __name__ == "__main__":
    # --8<-- [start:usage]
    import torch
    from proof_demo import max_error, rms_norm_reference

    torch.manual_seed(0)
    x = torch.randn(8, 256, dtype=torch.bfloat16)  # fresh random input, never zeros
    weight = torch.rand(256, dtype=torch.bfloat16) + 0.5


    def torch_rms_norm(x, weight):
        return torch.nn.functional.rms_norm(x, (x.shape[-1],), weight, eps=1e-6)


    error = max_error(torch_rms_norm, rms_norm_reference, x, weight)
    print("F.rms_norm matches the reference:", error < 0.1)
    # --8<-- [end:usage]

    if torch.cuda.is_available():
        # --8<-- [start:gpu_usage]
        import torch
        from proof_demo import rms_norm_reference, time_on_gpu

        x = torch.randn(16384, 4096, device="cuda", dtype=torch.bfloat16)
        weight = torch.rand(4096, device="cuda", dtype=torch.bfloat16) + 0.5
        print("fp64 reference, 16384 x 4096 bf16: "
              f"{time_on_gpu(rms_norm_reference, x, weight):.0f} us")
        # --8<-- [end:gpu_usage]
