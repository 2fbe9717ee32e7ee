# SPDX-License-Identifier: Apache-2.0
"""Triton in one minute: scale a vector, one block of elements per program.

The four ideas every Triton kernel is built from: program_id, arange + offsets
+ mask, load, store. Runs on a CUDA GPU, or on CPU as
``TRITON_INTERPRET=1 python snippets/triton_one_minute.py``.
"""
# --8<-- [start:kernel]
import torch
import triton
import triton.language as tl


@triton.jit
def scale_kernel(x_ptr, y_ptr, n_elements, factor, BLOCK_SIZE: tl.constexpr):
    # 1. program_id: which block this program instance owns (like CUDA's blockIdx.x)
    pid = tl.program_id(axis=0)
    # 2. arange + offsets + mask: the BLOCK_SIZE element indices of this block;
    #    the mask switches off the lanes past the end of the tensor
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements
    # 3. load: HBM -> registers, the whole block at once
    x = tl.load(x_ptr + offsets, mask=mask, other=0.0)
    # 4. store: registers -> HBM, masked the same way
    tl.store(y_ptr + offsets, x * factor, mask=mask)


def scale(x: torch.Tensor, factor: float, block_size: int = 256) -> torch.Tensor:
    if not x.is_contiguous():
        raise ValueError("scale() expects a contiguous tensor")
    y = torch.empty_like(x)
    n_elements = x.numel()
    grid = (triton.cdiv(n_elements, block_size),)  # number of program instances
    scale_kernel[grid](x, y, n_elements, factor, BLOCK_SIZE=block_size)
    return y
# --8<-- [end:kernel]


if __name__ == "__main__":
    # --8<-- [start:check]
    device = "cuda" if torch.cuda.is_available() else "cpu"
    # 1000 is not a multiple of 256: the mask matters.
    x = torch.randn(1000, device=device)
    y = scale(x, 2.5)
    torch.testing.assert_close(y, x * 2.5)
    print(f"blocks launched: {triton.cdiv(x.numel(), 256)}, "
          f"max |error|: {(y - x * 2.5).abs().max().item()}")
    # --8<-- [end:check]
