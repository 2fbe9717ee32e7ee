"""tests/tools/interpreter_speed.py: under the interpreter the shortcut is installed, helpers called
inside a kernel still run, and the launch leaves triton.language as it found it."""
import os

import pytest
import torch
import triton
import triton.language as tl

pytestmark = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1", reason="the interpreter only")


@triton.jit
def _twice(x):
    return x * 2


@triton.jit
def _twice_kernel(x_ptr, y_ptr, N: tl.constexpr):
    offsets = tl.arange(0, N)
    tl.store(y_ptr + offsets, _twice(tl.load(x_ptr + offsets)))


def test_helpers_run_and_the_language_is_restored():
    from triton.runtime import interpreter

    assert getattr(interpreter._patch_lang, "skips_redundant_patching", False)
    load, tensor_repr = tl.load, tl.core.tensor.__repr__
    x = torch.arange(8.0)
    y = torch.full_like(x, float("nan"))
    _twice_kernel[(1,)](x, y, 8)
    assert torch.equal(y, x * 2)
    assert tl.load is load and tl.core.tensor.__repr__ is tensor_repr
    with pytest.raises(Exception):  # an error inside a launch still restores the language
        _twice_kernel[(1,)](x, y, 6)  # tl.arange needs a power of two
    assert tl.load is load
