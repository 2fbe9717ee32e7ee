"""bench/store.py's corrections: a field a run wrote wrongly is set right beside the record, never in it."""
from __future__ import annotations

import json

import pytest

from bench import store


def _folder(tmp_path, monkeypatch, record, corrections=None):
    folder = tmp_path / "h100"
    folder.mkdir()
    (folder / "loss.json").write_text(json.dumps(record), encoding="utf-8")
    if corrections is not None:
        (folder / store.CORRECTIONS_FILE).write_text(json.dumps(corrections), encoding="utf-8")
    monkeypatch.setattr(store, "DATA_DIR", tmp_path)
    return folder


def test_a_correction_sets_the_field_and_keeps_the_reason(tmp_path, monkeypatch):
    record = {"environment": {"git_commit": "PLACEHOLDER"}, "config": {}, "results": {}}
    fix = {"loss.json": {"fields": {"environment.git_commit": {"was": "PLACEHOLDER", "is": "abc1234"}},
                         "why": "the call named no commit"}}
    folder = _folder(tmp_path, monkeypatch, record, fix)
    loaded = store.load("loss", "h100")
    assert loaded["environment"]["git_commit"] == "abc1234"
    assert loaded["corrections"] == "the call named no commit"
    assert json.loads((folder / "loss.json").read_text())["environment"]["git_commit"] == "PLACEHOLDER"


def test_a_correction_for_another_run_is_an_error(tmp_path, monkeypatch):
    record = {"environment": {"git_commit": "def5678"}, "config": {}, "results": {}}
    fix = {"loss.json": {"fields": {"environment.git_commit": {"was": "PLACEHOLDER", "is": "abc1234"}},
                         "why": "x"}}
    _folder(tmp_path, monkeypatch, record, fix)
    with pytest.raises(ValueError, match="a correction for another run"):
        store.load("loss", "h100")


def test_without_corrections_a_record_loads_as_written(tmp_path, monkeypatch):
    record = {"environment": {"git_commit": "def5678"}, "config": {}, "results": {}}
    _folder(tmp_path, monkeypatch, record)
    assert store.load("loss", "h100") == record


def test_every_committed_correction_applies():
    """Each correction names a committed record that still holds the corrected value, and gives a reason."""
    for folder in sorted(p for p in store.DATA_DIR.iterdir() if (p / store.CORRECTIONS_FILE).is_file()):
        for name, fix in store.load_corrections(folder.name).items():
            assert (folder / name).is_file(), name
            assert fix["why"].strip()
            record = store.corrected(store.read(folder / name), fix, folder / name)
            for dotted, change in fix["fields"].items():
                section, key = dotted.split(".")
                assert record[section][key] == change["is"]
