"""Kernels that compile and never launch: worker processes fill Triton's on-disk cache with them, so that a
timing process only loads binaries (bench/exp_fused_add_sweep.py, bench/explore_widths.py)."""
from __future__ import annotations


class CompileOnly:
    """Stands in for a Triton kernel: ``kernel[grid](...)`` compiles it into the cache, never launches."""

    def __init__(self, kernel):
        self.kernel = kernel

    def __getitem__(self, grid):
        return lambda *args, **kwargs: self.kernel.warmup(*args, grid=grid, **kwargs)


def launched_kernels(module) -> list[str]:
    """The names of ``module``'s launched kernels: its public ``@triton.jit`` functions named ``*_kernel`` (a
    ``KernelInterface``: a JITFunction, or under the interpreter an InterpretedFunction). The
    ``_``-prefixed ``@triton.jit`` helpers are left alone: kernels find them by name when they compile."""
    import triton  # here, not at import: the reports and the site build never import triton

    return [name for name, value in vars(module).items()
            if isinstance(value, triton.runtime.jit.KernelInterface) and name.endswith("_kernel")
            and not name.startswith("_")]


def compile_only(module) -> list[str]:
    """In this process, every launched kernel of ``module`` compiles instead of running; their names."""
    names = launched_kernels(module)
    for name in names:
        setattr(module, name, CompileOnly(getattr(module, name)))
    return names
