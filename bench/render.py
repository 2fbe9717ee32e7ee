"""Regenerate every table and plot under docs/generated/ from docs/data/<gpu>/*.json.

    python -m bench.render            # write the artifacts
    python -m bench.render --check    # fail if a committed artifact differs

Each ``bench/exp_<name>.py`` module renders its own data file (see bench/common.py).
"""
from __future__ import annotations

import argparse
import importlib
import pathlib
import sys

from bench import common


def experiment_modules():
    for path in sorted((common.ROOT / "bench").glob("exp_*.py")):
        yield importlib.import_module(f"bench.{path.stem}")


def render_all(gpu: str = common.DEFAULT_GPU) -> dict[pathlib.Path, str]:
    """Map of output path -> expected content, for every experiment with data."""
    artifacts: dict[pathlib.Path, str] = {}
    for module in experiment_modules():
        if not common.data_path(module.NAME, gpu).exists():
            continue
        for rel, text in module.render(common.load(module.NAME, gpu)).items():
            path = common.GENERATED_DIR / rel
            if path in artifacts:
                raise RuntimeError(f"two experiments render {rel}")
            artifacts[path] = text
    load = lambda name: common.load(name, gpu)  # noqa: E731  (raises FileNotFoundError when missing)
    for path in sorted((common.ROOT / "bench").glob("summary_*.py")):
        try:
            rendered = importlib.import_module(f"bench.{path.stem}").render_summary(load)
        except FileNotFoundError:  # a data file the summary needs is missing
            continue
        for rel, text in rendered.items():
            if common.GENERATED_DIR / rel in artifacts:
                raise RuntimeError(f"two modules render {rel}")
            artifacts[common.GENERATED_DIR / rel] = text
    return artifacts


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    parser.add_argument("--gpu", default=common.DEFAULT_GPU)
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
            print(f"wrote {path.relative_to(common.ROOT)}")
    if stale:
        print("stale or hand-edited artifacts (run `python -m bench.render`):", file=sys.stderr)
        for path in stale:
            print(f"  {path.relative_to(common.ROOT)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
