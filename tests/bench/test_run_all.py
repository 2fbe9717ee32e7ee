"""bench/run_all.py, the one entry point of the measuring side: it finds the experiments, runs the
named ones, saves each record (a failed save stops the run) and starts an experiment's workers."""
from __future__ import annotations

import json
import types

import pytest

from bench import ROOT, run_all
from bench.harness import record


def test_every_experiment_is_found_by_its_file_name():
    found = run_all.experiments()
    assert sorted(found) == sorted(p.stem.removeprefix("exp_") for p in (ROOT / "bench").glob("exp_*.py"))
    for name, module in found.items():
        assert module.__name__ == f"bench.exp_{name}" and callable(module.run)


def _fake(name, run):
    return types.SimpleNamespace(NAME=name, run=run, worker=lambda argv: len(argv))


@pytest.fixture
def fakes(monkeypatch):
    """Two experiments: ``good`` returns a record, ``bad`` raises."""
    calls = []

    def good(args):
        calls.append(("good", args.quick, args.out))
        return {"config": {"rows": 1}, "results": {"ok": True}}

    def bad(args):
        calls.append(("bad", args.quick, args.out))
        raise RuntimeError("needs a GPU")

    monkeypatch.setattr(run_all, "experiments", lambda: {"bad": _fake("bad", bad), "good": _fake("good", good)})
    return calls


def test_a_failed_run_is_reported_and_the_others_still_run(fakes, tmp_path, capsys):
    assert run_all.main(["--out", str(tmp_path)]) == 1
    assert [c[0] for c in fakes] == ["bad", "good"]
    saved = json.loads((tmp_path / "good.json").read_text(encoding="utf-8"))
    assert saved["experiment"] == "good" and saved["config"] == {"rows": 1, "quick": False}
    assert {"git_commit", "gpu", "torch"} <= set(saved["environment"])
    assert not (tmp_path / "bad.json").exists() and "bad FAILED" in capsys.readouterr().out


def test_a_subset_by_name_and_quick_runs_write_elsewhere(fakes, monkeypatch, tmp_path):
    monkeypatch.setattr(run_all, "QUICK_OUT", tmp_path / "quick")  # artifacts/quick/ in the checkout
    assert run_all.main(["good", "--quick"]) == 0
    assert fakes == [("good", True, run_all.QUICK_OUT)]
    assert json.loads((run_all.QUICK_OUT / "good.json").read_text(encoding="utf-8"))["config"]["quick"] is True
    with pytest.raises(SystemExit, match="unknown experiments"):
        run_all.main(["nope"])


def test_a_failed_save_is_an_error(fakes, monkeypatch, tmp_path):
    def broken(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(record, "save", broken)
    with pytest.raises(OSError, match="disk full"):
        run_all.main(["good", "--out", str(tmp_path)])


def test_worker_hands_the_rest_of_the_command_line_to_the_experiment(fakes):
    assert run_all.main(["--worker", "good", "--out", "x", "--quick"]) == 3
    assert record.worker_args("step", "--contender", "eager") == ["-m", "bench.run_all", "--worker", "step",
                                                                  "--contender", "eager"]
    with pytest.raises(SystemExit, match="NAME"):
        run_all.main(["--worker"])


def test_save_names_the_file_after_the_experiment_or_a_stem_with_the_commit(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_COMMIT", "0123456789abcdef")
    path = record.save("explore_widths", {"config": {}, "results": []}, tmp_path, stem="explore-widths-{commit}")
    assert path == tmp_path / "explore-widths-0123456.json"
    saved = json.loads(path.read_text(encoding="utf-8"))
    assert list(saved) == ["experiment", "environment", "config", "results"]
    assert saved["environment"]["git_commit"] == "0123456789abcdef"
    assert record.save("rmsnorm", {"config": {}, "results": {}}, tmp_path) == tmp_path / "rmsnorm.json"
