"""Coverage off for the suite's costliest runs on CPU.

Under coverage's C tracer (Python 3.11) every Python call pays a tracing hook, and the Triton
interpreter makes millions of small calls: the CPU loss-curve training took 163 s measured
against 67 s unmeasured. The runs wrapped here (the training in tests/test_loss_consistency.py,
the experiments' --quick runs, the tuning sweep) execute kernel and snippet lines that the kernel
tests and the snippets' own tests also execute, measured; the coverage floor (pyproject.toml)
is checked on those.
"""
from __future__ import annotations

import contextlib


@contextlib.contextmanager
def coverage_paused():
    """Stop the running coverage measurement (if any) for the block, then start it again."""
    try:
        import coverage
    except ImportError:  # coverage is not installed: nothing is measured anyway
        yield
        return
    cov = coverage.Coverage.current()
    if cov is None:
        yield
        return
    cov.stop()
    try:
        yield
    finally:
        cov.start()
