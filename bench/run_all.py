"""Run the experiments and save each record: the one entry point of the measuring side.

    python -m bench.run_all                 # every bench/exp_*.py -> docs/data/<gpu>/<NAME>.json
    python -m bench.run_all rmsnorm step    # a subset, by NAME
    python -m bench.run_all --out $OUT      # write the JSON somewhere else (device jobs)
    python -m bench.run_all step --quick    # CPU smoke test -> artifacts/quick/, never docs/data/

Each experiment is sized to finish well inside 10 minutes on an H200. A failed run is reported
and the others still run (the exit status says that one failed); a record that cannot be saved
stops everything. ``python -m bench.render`` then turns the records into docs/generated/.

``python -m bench.run_all --worker NAME ARGS...`` is how an experiment starts its own child
processes (bench/harness/record.py ``worker_args``): it hands ARGS to that experiment's ``worker(argv)``.
"""
from __future__ import annotations

import argparse
import importlib
import pathlib
import sys
import time
import traceback

from bench import ROOT
from bench.harness import record

QUICK_OUT = ROOT / "artifacts" / "quick"


def experiments() -> dict:
    """NAME -> module of every ``bench/exp_<name>.py``, in file-name order."""
    modules = (importlib.import_module(f"bench.{path.stem}") for path in sorted((ROOT / "bench").glob("exp_*.py")))
    return {module.NAME: module for module in modules}


def run(names, out: pathlib.Path | None, quick: bool) -> int:
    """Run the named experiments (all when ``names`` is empty) and save each record; the number that failed."""
    known = experiments()
    unknown = sorted(set(names) - set(known))
    if unknown:
        raise SystemExit(f"unknown experiments {unknown}; choose from {sorted(known)}")
    modules = [m for name, m in known.items() if not names or name in names]
    args = argparse.Namespace(out=out, quick=quick)
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
        payload["config"]["quick"] = quick
        path = record.save(module.NAME, payload, out)  # raises: a measured record that is not written is lost
        print(f"[{index}/{len(modules)}] {module.NAME} done in {time.perf_counter() - start:.0f} s -> {path}", flush=True)
    return failures


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["--worker"]:
        if len(argv) < 2:
            raise SystemExit("--worker needs the experiment's NAME")
        return experiments()[argv[1]].worker(argv[2:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("names", nargs="*", help="experiment NAMEs to run (default: all)")
    parser.add_argument("--out", type=pathlib.Path, default=None, help="folder for the JSON files")
    parser.add_argument("--quick", action="store_true", help="tiny sizes, for a smoke test")
    args = parser.parse_args(argv)
    out = QUICK_OUT if args.quick and args.out is None else args.out  # quick data never lands in docs/data/
    return 1 if run(args.names, out, args.quick) else 0


if __name__ == "__main__":
    raise SystemExit(main())
