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


@triton.jit
def _row_sums_kernel(x_ptr, y_ptr, ROWS: tl.constexpr, N: tl.constexpr):
    cols = tl.arange(0, N)
    total = tl.zeros((N,), dtype=tl.float32)
    for row in range(ROWS):  # Triton's own helpers (tl.sum, tl.zeros) called again and again
        values = tl.load(x_ptr + row * N + cols)
        total += values * tl.sum(values, axis=0) + tl.zeros((N,), dtype=tl.float32)
    tl.store(y_ptr + cols, total)


def test_triton_helpers_patch_the_core_module_once_per_launch(monkeypatch):
    """tl.sum and tl.zeros live in a module that sees triton.language.core, which the launch of a
    kernel that sees only triton.language does not patch: the first such helper patches it, and
    no later one walks it again, so a launch walks as many modules with 2 rows as with 8. That is
    only sound while Triton leaves a helper's patch in place."""
    from triton.runtime import interpreter

    walked = []  # every module Triton's _patch_lang walks for builtins
    patch_builtin = interpreter._patch_builtin
    monkeypatch.setattr(interpreter, "_patch_builtin",
                        lambda pkg, *args: walked.append(pkg) or patch_builtin(pkg, *args))
    walks = {}
    # 2 * rows + 1 calls of Triton's helpers. The first launch in a process walks fewer modules
    # than the later ones (seen on triton 3.6: 7, then 10), so it is left out.
    for rows in (1, 2, 8):
        walked.clear()
        x = torch.randn(rows, 8)
        y = torch.full((8,), float("nan"))
        _row_sums_kernel[(1,)](x, y, rows, 8)
        torch.testing.assert_close(y, (x * x.sum(1, keepdim=True)).sum(0), rtol=1e-5, atol=1e-5)
        walks[rows] = len(walked)
    assert walks[2] == walks[8], walks
    # Triton 3.6 never restores a helper's patch: tl.core's builtins stay wrapped after the launch.
    assert not tl.core.is_builtin(tl.core.reshape), "Triton now restores a helper's patch: revisit the shortcut"
