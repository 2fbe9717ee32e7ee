"""Run every GPU experiment and write its JSON; then render tables and plots.

    python -m bench.run_all                 # all experiments -> docs/data/<gpu>/
    python -m bench.run_all rmsnorm step    # a subset, by NAME
    python -m bench.run_all --out $OUT      # write the JSON somewhere else (device jobs)
    python -m bench.run_all step --quick    # CPU smoke test -> artifacts/quick/, never docs/data/

Each experiment is sized to finish well inside 10 minutes on an H200.
"""
from __future__ import annotations

import argparse
import importlib
import pathlib
import time
import traceback

from bench import ROOT
from bench.harness import record

QUICK_OUT = ROOT / "artifacts" / "quick"


def experiment_modules():
    """Every ``bench/exp_<name>.py``, in name order."""
    for path in sorted((ROOT / "bench").glob("exp_*.py")):
        yield importlib.import_module(f"bench.{path.stem}")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="experiment NAMEs to run (default: all)")
    parser.add_argument("--out", type=pathlib.Path, default=None, help="folder for the JSON files")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    args = parser.parse_args(argv)
    if args.quick and args.out is None:
        args.out = QUICK_OUT  # quick data must never land in docs/data/<gpu>/
    modules = [m for m in experiment_modules() if not args.names or m.NAME in args.names]
    failures = 0
    for index, module in enumerate(modules, 1):
        start = time.perf_counter()
        print(f"[{index}/{len(modules)}] {module.NAME} ...", flush=True)
        try:
            payload = module.run(args)
        except Exception:
            failures += 1
            traceback.print_exc()
            print(f"[{index}/{len(modules)}] {module.NAME} FAILED", flush=True)
            continue
        payload["config"]["quick"] = bool(args.quick)
        path = record.save(module.NAME, payload, args.out)
        print(f"[{index}/{len(modules)}] {module.NAME} done in {time.perf_counter() - start:.0f} s -> {path}", flush=True)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
