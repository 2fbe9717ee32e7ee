"""tests/tools/worker_groups.py, the units of tests/conftest.py's scheduler. Each experiment's --quick
run is a session fixture, made once per worker that asks for it: a bench test file that reads a run must
be in that run's unit, or the run is made twice (on two workers) and the CPU suite grows by its cost."""
from __future__ import annotations

import pathlib
import re

import worker_groups

BENCH = pathlib.Path(__file__).parent / "bench"
_FIXTURE_RUN = {"quick_p1_profile_dir": "p1_profile", "quick_p1_profile": "p1_profile"}


def quick_fixtures() -> dict[str, str]:
    """Each --quick fixture of tests/bench/conftest.py and the experiment it runs."""
    text = (BENCH / "conftest.py").read_text(encoding="utf-8")
    made = dict(re.findall(r"^(quick_\w+) = _session_run\(\"(\w+)\"\)", text, re.M))
    for name in re.findall(r"^def (quick_\w+)\(", text, re.M):
        made[name] = _FIXTURE_RUN.get(name, name.removeprefix("quick_"))
    return made


def test_every_file_that_reads_a_quick_run_is_in_its_unit():
    fixtures = quick_fixtures()
    assert {"quick_rmsnorm", "quick_step", "quick_fsdp2", "quick_p1_profile_dir"} <= set(fixtures)
    wrong = []
    for path in sorted(BENCH.glob("test_*.py")):
        if path.name == "test_house.py":  # its cases are grouped by their [NAME] parameter
            continue
        group = worker_groups.worker_group(path, f"tests/bench/{path.name}::test")
        for fixture in sorted(set(re.findall(r"\b(quick_\w+)\b", path.read_text(encoding="utf-8")))):
            if fixture in fixtures and group != f"bench:{fixtures[fixture]}":
                wrong.append(f"{path.name} reads {fixture} but is in the unit {group}")
    assert not wrong, "\n".join(wrong)


def test_the_house_cases_join_their_experiment_and_other_tests_share_one_unit():
    house = BENCH / "test_house.py"
    assert worker_groups.worker_group(house, "tests/bench/test_house.py::test_x[p1_profile]") == \
        "bench:p1_profile"
    assert worker_groups.worker_group(house, "tests/bench/test_house.py::test_x") == "bench"
    assert worker_groups.worker_group(BENCH / "test_logs.py", "tests/bench/test_logs.py::t") == "bench"
    assert worker_groups.worker_group(BENCH / "test_report_summary_p2.py") == "bench:fused_add"
