"""The house rules of bench/: measuring and reporting meet only in the JSON.

* No experiment imports another experiment or a report; no report imports an experiment, the
  harness or run_all; nothing imports a private name from another file; only run_all loads experiments.
* Each report renders from its JSON alone: rendered again with every constant of the experiments and
  of bench/harness/ set to other values, a committed record and a fresh --quick record render to the
  same bytes (a report whose experiment has no committed record yet: its --quick record). What a
  report falls back on for a file that predates a config key (its BEFORE_RECORDED) is exactly what
  that run used: the file with those keys filled in renders the same, and once the keys are there
  the fallback is never read.
* Every key a report would fall back on is one that its experiment records today.
"""
from __future__ import annotations

import ast
import copy
import importlib
import pathlib

import pytest

from bench import ROOT, store
from bench.report.render import report_modules

BENCH = ROOT / "bench"
EXPERIMENTS = sorted(p.stem for p in BENCH.glob("exp_*.py"))
REPORTS = {m.NAME: m for m in report_modules()}
HARNESS = sorted(p.stem for p in (BENCH / "harness").glob("*.py") if p.stem != "__init__")


def _imports(path: pathlib.Path) -> list[tuple[str, list[str]]]:
    """(module, names) of every import in the file; ``import a.b`` gives ("a.b", [])."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out += [(alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module:
            out.append((node.module, [alias.name for alias in node.names]))
    return out


def _reaches(path: pathlib.Path) -> set[str]:
    """The bench modules a file imports, as dotted names (``from bench import store`` -> bench.store)."""
    out = set()
    for module, names in _imports(path):
        if module == "bench" or module == "bench.report" or module == "bench.harness":
            out |= {f"{module}.{n}" for n in names}
        elif module.startswith("bench."):
            out.add(module)
    return out


def test_experiments_import_no_other_experiment_and_no_report():
    for name in EXPERIMENTS:
        bad = {m for m in _reaches(BENCH / f"{name}.py") if m.startswith(("bench.exp_", "bench.report"))}
        assert not bad, f"bench/{name}.py imports {sorted(bad)}"
    for name in HARNESS:
        bad = {m for m in _reaches(BENCH / "harness" / f"{name}.py") if m.startswith(("bench.exp_", "bench.report"))}
        assert not bad, f"bench/harness/{name}.py imports {sorted(bad)}"


def test_reports_import_no_experiment_and_no_part_of_the_measuring_side():
    for path in sorted((BENCH / "report").glob("*.py")):
        bad = {m for m in _reaches(path) if m.startswith(("bench.exp_", "bench.harness", "bench.run_all"))}
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"
        assert "torch" not in {module.split(".")[0] for module, _ in _imports(path)}, f"{path.name} imports torch"


def test_only_run_all_loads_the_experiments():
    for path in sorted(BENCH.rglob("*.py")):
        if path.name == "run_all.py":
            continue
        loaded = {m for m in _reaches(path) if m.startswith("bench.exp_")}
        assert not loaded, f"{path.relative_to(ROOT)} imports {sorted(loaded)}"
        assert 'glob("exp_' not in path.read_text(encoding="utf-8"), f"{path.relative_to(ROOT)} finds experiments"


def test_no_file_imports_a_private_name_from_another():
    for path in sorted(BENCH.rglob("*.py")):
        private = [(module, n) for module, names in _imports(path) for n in names if n.startswith("_")]
        assert not private, f"{path.relative_to(ROOT)} imports private names {private}"


class _Other:
    """A value no code expects: what a perturbed constant of an unknown type becomes."""


def other(value):
    """Another value of the same shape: numbers change, strings and lists gain an element, dicts keep their
    keys with other values (a report that read the constant would render something else, or fail)."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float)):
        return value * 3 + 7
    if isinstance(value, str):
        return value + "?"
    if isinstance(value, (list, tuple)):
        return type(value)([other(v) for v in reversed(value)] + ["?"])
    if isinstance(value, dict):
        return {k: other(v) for k, v in value.items()}
    if isinstance(value, (set, frozenset)):
        return type(value)({other(v) for v in value} | {"?"})
    return _Other()


def _constants(module):
    return [name for name, value in vars(module).items()
            if name.isupper() and not isinstance(value, type(importlib)) and not callable(value)]


def perturb_measuring_side(monkeypatch) -> int:
    """Every constant of every experiment and of bench/harness/ set to another value; how many."""
    count = 0
    modules = [importlib.import_module(f"bench.{n}") for n in EXPERIMENTS]
    modules += [importlib.import_module(f"bench.harness.{n}") for n in HARNESS]
    for module in modules:
        for name in _constants(module):
            monkeypatch.setattr(module, name, other(getattr(module, name)))
            count += 1
    return count


# Reports with a committed record (render() skips the others: their GPU run is still to come).
COMMITTED = sorted(n for n in REPORTS if store.data_path(n).exists())


@pytest.mark.usefixtures("data_dir_with_the_small_trace")
@pytest.mark.parametrize("name", COMMITTED)
def test_a_committed_record_renders_from_its_json_alone(name, monkeypatch):
    report = REPORTS[name]
    data = store.load(name)
    expected = report.render(copy.deepcopy(data))
    assert perturb_measuring_side(monkeypatch) > 50
    assert report.render(copy.deepcopy(data)) == expected


@pytest.mark.parametrize("name", sorted(n for n in COMMITTED if hasattr(REPORTS[n], "BEFORE_RECORDED")))
def test_the_fallback_is_what_the_run_used(name, monkeypatch):
    """The committed file with the fallback's keys filled in (as today's experiment writes them) renders the
    same; then the fallback is never read: set to other values, nothing changes."""
    report = REPORTS[name]
    data = store.load(name)
    expected = report.render(copy.deepcopy(data))
    filled = copy.deepcopy(data)
    filled["config"] = report.BEFORE_RECORDED | filled["config"]
    assert report.render(copy.deepcopy(filled)) == expected
    monkeypatch.setattr(report, "BEFORE_RECORDED", other(report.BEFORE_RECORDED))
    perturb_measuring_side(monkeypatch)
    assert report.render(copy.deepcopy(filled)) == expected


QUICK = ["rmsnorm", "width_sweep", "fused_add", "step", "loss_curve", "fsdp2", "p1_roofline", "p1_compile",
         "p1_profile", "fused_add_sweep", "compile", "fusion", "loss", "step_loss", "fullsize_loss"]


def test_every_report_is_checked_on_a_record():
    """A report without a committed record is still held to the rule, on its experiment's --quick record."""
    unchecked = set(REPORTS) - set(COMMITTED) - set(QUICK)
    assert not unchecked, f"reports checked on no record: {sorted(unchecked)} (add them to QUICK)"


@pytest.mark.parametrize("name", QUICK)
def test_a_fresh_quick_record_renders_from_its_json_alone(name, request, monkeypatch):
    """What today's experiment writes carries every key its report would fall back on; rendered with the
    fallback and every constant of the measuring side set to other values, it renders the same."""
    data = request.getfixturevalue(f"quick_{name}")
    if name == "p1_profile":  # its timeline reads the trace the run saved next to the record
        monkeypatch.setattr(store, "DATA_DIR", request.getfixturevalue("quick_p1_profile_dir"))
    report = REPORTS[name]
    missing = set(getattr(report, "BEFORE_RECORDED", {})) - set(data["config"])
    assert not missing, f"bench/exp_{name}.py does not record {sorted(missing)} in its config"
    expected = report.render(copy.deepcopy(data))
    if hasattr(report, "BEFORE_RECORDED"):
        monkeypatch.setattr(report, "BEFORE_RECORDED", other(report.BEFORE_RECORDED))
    perturb_measuring_side(monkeypatch)
    assert report.render(copy.deepcopy(data)) == expected
