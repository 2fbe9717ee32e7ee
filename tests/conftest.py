"""Shared test setup.

The Triton backend is chosen *before* triton is imported: without a CUDA GPU,
kernels run under Triton's interpreter (TRITON_INTERPRET=1) on CPU tensors.
Tests import the snippet modules, ``bench`` and the tools of tests/tools/ at top level:
pyproject.toml's ``pythonpath`` puts ``snippets/``, the repository root and ``tests/tools/``
on ``sys.path``. tests/bench/ mirrors bench/: a test file per experiment and per report.
"""
import importlib.util
import os
import sys

if "triton" in sys.modules:  # pragma: no cover - guards the ordering contract
    raise RuntimeError("triton was imported before tests/conftest.py chose the backend")

import torch  # noqa: E402  (torch does not import triton eagerly)

if "TRITON_INTERPRET" not in os.environ and not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

INTERPRET = os.environ.get("TRITON_INTERPRET") == "1"
DEVICE = "cpu" if INTERPRET else "cuda"
ON_GPU = DEVICE == "cuda"

if INTERPRET:
    from interpreter_speed import skip_redundant_language_patching

    skip_redundant_language_patching()

import pytest  # noqa: E402

from worker_groups import worker_group  # noqa: E402  (tests/tools/worker_groups.py)


def pytest_report_header(config):
    return f"triton backend: {'interpreter (CPU)' if INTERPRET else 'CUDA'}; device={DEVICE}"


@pytest.fixture(scope="session")
def device() -> str:
    return DEVICE


@pytest.fixture(scope="session")
def on_gpu() -> bool:
    return ON_GPU


if importlib.util.find_spec("xdist") is not None:
    def pytest_xdist_make_scheduler(config, log):
        """Work units by :func:`worker_group`. (xdist's own ``--dist loadgroup`` marks do not group on
        pytest 9: xdist 3.8.0 renames ``item._nodeid``, which pytest 9 no longer reads.)"""
        from xdist.scheduler import LoadScopeScheduling

        class WorkerGroups(LoadScopeScheduling):
            def _split_scope(self, nodeid: str) -> str:
                group = worker_group(config.rootpath / nodeid.split("::", 1)[0], nodeid)
                return nodeid if group is None else group

        return WorkerGroups(config, log)


@pytest.fixture(autouse=True)
def no_launch_plans_from_other_tests(monkeypatch):
    """Each test starts with an empty launch-plan cache (snippets/rmsnorm_triton.py): a test that
    spies on the usual launch path sees it on each key's first call, whatever ran before."""
    module = sys.modules.get("rmsnorm_triton")
    if module is not None:
        monkeypatch.setattr(module, "_PLANS", {})


def pytest_collection_modifyitems(config, items):
    skip_gpu = pytest.mark.skip(reason="needs a CUDA GPU; CPU runs use the Triton interpreter")
    for item in items:
        if "gpu" in item.keywords and not ON_GPU:
            item.add_marker(skip_gpu)


def pytest_runtest_logreport(report):
    """With PYTEST_FAILURE_LOG=FILE, each failure's traceback is appended to FILE as it is reported
    (in the xdist controller too), so a run stopped by a time limit before pytest's summary still
    says why each test failed (the GPU suite runs under the device machine's limit)."""
    path = os.environ.get("PYTEST_FAILURE_LOG")
    if not path or report.outcome != "failed" or os.environ.get("PYTEST_XDIST_WORKER"):  # the controller writes
        return
    with open(path, "a", encoding="utf-8") as log:
        log.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext}\n")
