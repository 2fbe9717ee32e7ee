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
    """Stop every running coverage measurement for the block, then start them again.

    An xdist worker runs two: pytest-cov's own and the one its startup hook began in the new process;
    stopping only the newest would put the older tracer back.
    """
    try:
        import coverage
    except ImportError:  # coverage is not installed: nothing is measured anyway
        yield
        return
    stopped = []
    while (cov := coverage.Coverage.current()) is not None and cov not in stopped:
        cov.stop()
        stopped.append(cov)
    try:
        yield
    finally:
        for cov in reversed(stopped):
            cov.start()
