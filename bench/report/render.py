"""Regenerate every table and plot under docs/generated/ from docs/data/<gpu>/*.json.

    python -m bench.render            # write the artifacts
    python -m bench.render --check    # fail if a committed artifact differs

Each report module ``bench/report/<name>.py`` renders its own data file; each summary
``bench/report/summary_<article>.py`` renders what reads several (see bench/report/__init__.py).
"""
from __future__ import annotations

import argparse
import importlib
import json
import pathlib
import sys

from bench import ROOT, store

GENERATED_DIR = ROOT / "docs" / "generated"
REPORT_DIR = pathlib.Path(__file__).parent


def _modules():
    for path in sorted(REPORT_DIR.glob("*.py")):
        if path.stem != "__init__":
            yield importlib.import_module(f"bench.report.{path.stem}")


def report_modules():
    """The reports: modules with ``NAME`` and ``render(data)``."""
    return [m for m in _modules() if hasattr(m, "NAME") and hasattr(m, "render")]


def summary_modules():
    """The summaries: modules with ``render_summary(load)`` or ``summary_values(load)`` (they read several files)."""
    return [m for m in _modules() if hasattr(m, "render_summary") or hasattr(m, "summary_values")]


class MissingData(FileNotFoundError):
    """A data file that a summary needs is not committed for this GPU."""


def loader(gpu: str = store.DEFAULT_GPU):
    """load(name) -> data of docs/data/<gpu>/<name>.json, raising MissingData when it is absent."""
    def load(name: str) -> dict:
        if not store.data_path(name, gpu).exists():
            raise MissingData(store.data_path(name, gpu))
        return store.load(name, gpu)
    return load


def data_gpu(name: str, gpu: str = store.DEFAULT_GPU) -> str | None:
    """The GPU folder a report renders from: ``gpu``'s when it holds the record, else the one other
    folder that does (an experiment measured only there); None when no folder, or several, hold it."""
    if store.data_path(name, gpu).exists():
        return gpu
    others = sorted(p.parent.name for p in store.DATA_DIR.glob(f"*/{name}.json"))
    return others[0] if len(others) == 1 else None


def render_all(gpu: str = store.DEFAULT_GPU) -> dict[pathlib.Path, str]:
    """Map of output path -> expected content, for every report and summary with data."""
    artifacts: dict[pathlib.Path, str] = {}

    def add(rendered: dict[str, str], owner: str):
        for rel, text in rendered.items():
            path = GENERATED_DIR / rel
            if path in artifacts:
                raise RuntimeError(f"{owner} renders {rel}, which another module renders too")
            artifacts[path] = text

    load = loader(gpu)
    values = {}
    for module in report_modules():
        where = data_gpu(module.NAME, gpu)
        if where is not None:
            data = loader(where)(module.NAME)
            add(module.render(data), module.__name__)
            if hasattr(module, "values"):
                values[module.NAME] = module.values(data)
    for module in summary_modules():  # values that read several files: {namespace: {name: value}}
        if hasattr(module, "summary_values"):
            try:
                values.update(module.summary_values(load))
            except MissingData:
                pass
    if values:  # no data, no values (and no file)
        add({"values.json": json.dumps(values, indent=1, ensure_ascii=False, sort_keys=True) + "\n"}, "values")
    for module in summary_modules():
        if not hasattr(module, "render_summary"):
            continue
        try:
            rendered = module.render_summary(load)
        except MissingData:
            continue
        add(rendered, module.__name__)
    return artifacts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument("--gpu", default=store.DEFAULT_GPU)
    args = parser.parse_args(argv)
    artifacts = render_all(args.gpu)
    stale = []
    for path, text in artifacts.items():
        if args.check:
            if not path.exists() or path.read_text(encoding="utf-8") != text:
                stale.append(path)
        else:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    if stale:
        print("stale or hand-edited artifacts (run `python -m bench.render`):", file=sys.stderr)
        for path in stale:
            print(f"  {path.relative_to(ROOT)}", file=sys.stderr)
        return 1
    return 0
