"""The measured data on disk: the one place where measuring and reporting meet.

``docs/data/<gpu>/<name>.json`` holds one record per experiment or exploration,
``{"experiment", "environment", "config", "results"}``: bench/harness/record.py writes
it (``python -m bench.run_all``, bench/explore_widths.py), bench/report/ reads it
(``python -m bench.render``). ``docs/data/<gpu>/logs.json`` says what each committed
run log is (``python -m bench.logs add``).

A record is never edited after its run. Where a run wrote a field wrongly (a commit it
was not told), ``docs/data/<gpu>/corrections.json`` sets it right beside the record:
``{"<name>.json": {"fields": {"environment.git_commit": {"was": ..., "is": ...}},
"why": "..."}}``. ``load`` applies it, checks that the record still holds the value
corrected (a correction never outlives its record) and keeps the reason in
``record["corrections"]``.
"""
from __future__ import annotations

import json
import pathlib
import re

from bench import ROOT

DATA_DIR = ROOT / "docs" / "data"
DEFAULT_GPU = "h200"
LOGS_FILE = "logs.json"  # the log index: not a record
CORRECTIONS_FILE = "corrections.json"  # fields set right beside the records: not a record


def gpu_slug(name: str) -> str:
    """'NVIDIA H200' -> 'h200'; 'NVIDIA H100 80GB HBM3' -> 'h100-80gb-hbm3'."""
    name = name.lower().replace("nvidia", "").strip()
    return re.sub(r"[^a-z0-9]+", "-", name).strip("-") or "unknown"


def gpu_folder(gpu: str = DEFAULT_GPU) -> pathlib.Path:
    return DATA_DIR / gpu


def data_path(name: str, gpu: str = DEFAULT_GPU) -> pathlib.Path:
    return gpu_folder(gpu) / f"{name}.json"


def read(path: pathlib.Path) -> dict:
    return json.loads(path.read_text(encoding="utf-8"))


def load(name: str, gpu: str = DEFAULT_GPU) -> dict:
    path = data_path(name, gpu)
    return corrected(read(path), load_corrections(gpu).get(path.name), path)


def load_corrections(gpu: str = DEFAULT_GPU) -> dict[str, dict]:
    path = gpu_folder(gpu) / CORRECTIONS_FILE
    return read(path) if path.is_file() else {}


def corrected(record: dict, correction: dict | None, path: pathlib.Path) -> dict:
    """``record`` with ``correction``'s fields set (none: unchanged); a field that no longer holds the value
    the correction was written for is an error."""
    if not correction:
        return record
    for dotted, change in correction["fields"].items():
        section, key = dotted.split(".")
        if record[section].get(key) != change["was"]:
            raise ValueError(f"{path}: {CORRECTIONS_FILE} corrects {dotted} = {change['was']!r}, but the record "
                             f"holds {record[section].get(key)!r}: a correction for another run")
        record[section][key] = change["is"]
    record["corrections"] = correction["why"]
    return record


def write(path: pathlib.Path, record: dict) -> pathlib.Path:
    """Write ``record`` as the data files are written: one-space indent, UTF-8 text, a final newline."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def logs_path(gpu: str = DEFAULT_GPU) -> pathlib.Path:
    return gpu_folder(gpu) / LOGS_FILE


def load_logs(gpu: str = DEFAULT_GPU) -> dict[str, dict]:
    """{log file name: {"kind", "note"}} of docs/data/<gpu>/logs.json; {} when there is none."""
    path = logs_path(gpu)
    return read(path) if path.is_file() else {}
