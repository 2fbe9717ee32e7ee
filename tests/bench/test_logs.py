"""bench/logs.py and docs/data/<gpu>/logs.json: every committed log is described by data, and the
provenance table of 篇2 shows each with its note and the outcome read from the log."""
from __future__ import annotations

import json

import pytest

from bench import logs, store
from bench.report import summary_p2


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """An empty docs/data/ with an h200 folder holding one log."""
    monkeypatch.setattr(store, "DATA_DIR", tmp_path)
    (tmp_path / "h200").mkdir()
    (tmp_path / "h200" / "step-1a2b3c4.log").write_text("==== 3 passed in 1.00s ====\n", encoding="utf-8")
    return tmp_path


def test_every_committed_log_is_described_and_every_entry_has_its_log():
    gpu = store.DEFAULT_GPU
    described = store.load_logs(gpu)
    on_disk = {p.name for p in store.gpu_folder(gpu).glob("*.log")}
    assert set(described) == on_disk
    assert all(entry["kind"] in logs.KINDS and entry["note"] for entry in described.values())
    rows = dict(summary_p2.p2_logs(gpu))
    assert set(rows) == on_disk
    assert rows["gpu-kernel-tests-42f31f2.log"].startswith(described["gpu-kernel-tests-42f31f2.log"]["note"])
    assert "1 失败" in rows["gpu-kernel-tests-42f31f2.log"]  # the outcome, read from the log


def test_add_writes_the_entry_sorted(data_dir):
    log = data_dir / "h200" / "step-1a2b3c4.log"
    (data_dir / "h200" / "a.log").write_text("x", encoding="utf-8")
    assert logs.main(["add", str(log), "--kind", "experiment", "--note", "step.json 那次运行的日志"]) == 0
    logs.add(data_dir / "h200" / "a.log", "tests", "GPU 全套测试")
    written = json.loads((data_dir / "h200" / store.LOGS_FILE).read_text(encoding="utf-8"))
    assert list(written) == ["a.log", "step-1a2b3c4.log"]
    assert written["step-1a2b3c4.log"] == {"kind": "experiment", "note": "step.json 那次运行的日志"}
    assert dict(summary_p2.p2_logs("h200"))["step-1a2b3c4.log"] == "step.json 那次运行的日志（3 通过）"


def test_add_refuses_what_it_cannot_describe(data_dir, tmp_path_factory):
    log = data_dir / "h200" / "step-1a2b3c4.log"
    with pytest.raises(ValueError, match="unknown kind"):
        logs.add(log, "notes", "x")
    with pytest.raises(ValueError, match="needs a note"):
        logs.add(log, "tests", "  ")
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "x.log"
    elsewhere.write_text("x", encoding="utf-8")
    with pytest.raises(ValueError, match="not in a GPU folder"):
        logs.add(elsewhere, "tests", "x")
    with pytest.raises(ValueError, match="not a log file"):
        logs.add(data_dir / "h200" / "missing.log", "tests", "x")
    logs.add(log, "tests", "first")
    with pytest.raises(ValueError, match="described already"):
        logs.add(log, "tests", "second")
    logs.add(log, "tests", "second", replace=True)
    assert store.load_logs("h200")[log.name]["note"] == "second"
    assert logs.main(["add", str(log), "--kind", "tests", "--note", "third"]) == 2  # an error, said on stderr


def test_rendering_fails_on_a_log_without_an_entry_or_an_entry_without_a_log(data_dir):
    with pytest.raises(KeyError, match="python -m bench.logs add"):
        summary_p2.p2_logs("h200")
    logs.add(data_dir / "h200" / "step-1a2b3c4.log", "experiment", "x")
    (data_dir / "h200" / "step-1a2b3c4.log").unlink()
    with pytest.raises(KeyError, match="not there"):
        summary_p2.p2_logs("h200")


def test_list_names_the_undescribed(data_dir, capsys):
    assert logs.main(["list", "--gpu", "h200"]) == 0
    assert "step-1a2b3c4.log: NOT DESCRIBED" in capsys.readouterr().out
