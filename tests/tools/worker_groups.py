"""The pytest-xdist work units of the CPU suite (tests/conftest.py's scheduler; .ci/test.sh runs
``pytest -n N``). Here, not in conftest.py, so that tests can import it: pytest names both conftest files
``conftest``, and which one ``import conftest`` finds depends on what was collected."""
from __future__ import annotations

import pathlib
import re

TESTS = pathlib.Path(__file__).resolve().parents[1]
# Files of many independent cases that share no costly fixture: their tests go to any worker.
SPLIT_FREELY = {"test_rmsnorm_triton.py", "test_rmsnorm_fused_add.py"}


# tests/bench/ files that read another experiment's --quick run than their name says
BENCH_RUN_OF = {"test_report_summary_p2.py": "fused_add"}
_BENCH_FILE = re.compile(r"test_(?:exp|report)_(\w+)\.py")
_PARAMETER = re.compile(r"\[(\w+)\]$")


def _bench_group(rel: pathlib.Path, nodeid: str) -> str:
    """tests/bench/: one work unit per experiment's --quick run (tests/bench/conftest.py), so that each
    run is made once and the runs spread over the workers: test_exp_NAME.py and test_report_NAME.py
    (BENCH_RUN_OF: a file that reads another run), and test_house.py's cases of ``[NAME]``. Every other
    bench test shares one unit."""
    found = _BENCH_FILE.fullmatch(rel.name)
    name = BENCH_RUN_OF.get(rel.name) or (found and found.group(1))
    if rel.name == "test_house.py":
        found = _PARAMETER.search(nodeid)
        name = found and found.group(1)
    return f"bench:{name}" if name else "bench"


def worker_group(path: pathlib.Path, nodeid: str = "") -> str | None:
    """The pytest-xdist work unit of a test (.ci/test.sh runs ``pytest -n N``): tests that share a
    costly session or module fixture go to one worker, so that it is built once.

    tests/bench/: one unit per experiment's --quick run (``_bench_group``); the browser and reader
    checks share one strict site build; every other file keeps its module fixtures; SPLIT_FREELY is split
    test by test (None).
    """
    rel = path.resolve().relative_to(TESTS)
    if rel.parts[0] == "bench":
        return _bench_group(rel, nodeid)
    if rel.name in ("test_browser.py", "test_docs_reader.py"):
        return "site"
    if rel.name in SPLIT_FREELY:
        return None
    return rel.as_posix()
