"""Describe a run log as it is committed: docs/data/<gpu>/logs.json says what each log is.

    python -m bench.logs add docs/data/h200/step-1a2b3c4.log --kind experiment \\
        --note "step.json 那次运行的日志（单卡 H200）"
    python -m bench.logs list [--gpu h200]

Every ``*.log`` under docs/data/<gpu>/ has one entry, ``{"kind": KIND, "note": "..."}``: the note is
the Chinese description that 篇2's provenance table shows next to the file (bench/report/summary_p2.py
adds the outcome it reads from the log itself), so committing a log needs no edit of a renderer.
``python -m bench.render`` fails while a log has no entry or an entry has no log.
"""
from __future__ import annotations

import argparse
import pathlib
import sys

from bench import store

KINDS = {
    "tests": "a run of the test suite on a GPU, or of part of it",
    "experiment": "the console log of an experiment's run (python -m bench.run_all ...)",
    "diagnostic": "the output of a diagnostic script (python -m bench.profile_rmsnorm ...)",
    "mutation": "a mutation check: a deliberately broken kernel that the tests must catch",
}


def add(log: pathlib.Path, kind: str, note: str, replace: bool = False) -> pathlib.Path:
    """Describe ``log`` (a file in docs/data/<gpu>/) in that folder's logs.json; return logs.json's path."""
    log = pathlib.Path(log).resolve()
    if kind not in KINDS:
        raise ValueError(f"unknown kind {kind!r}; choose from {sorted(KINDS)}")
    if not note.strip():
        raise ValueError("a log needs a note: what it is, in a sentence of the provenance table")
    if log.suffix != ".log" or not log.is_file():
        raise ValueError(f"{log} is not a log file")
    if log.parent.parent != store.DATA_DIR.resolve():
        raise ValueError(f"{log} is not in a GPU folder of {store.DATA_DIR} (docs/data/<gpu>/)")
    gpu = log.parent.name
    logs = store.load_logs(gpu)
    if log.name in logs and not replace:
        raise ValueError(f"{log.name} is described already (--replace to change its entry)")
    logs[log.name] = {"kind": kind, "note": note.strip()}
    return store.write(store.logs_path(gpu), dict(sorted(logs.items())))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", required=True)
    adding = commands.add_parser("add", help="describe a committed log")
    adding.add_argument("log", type=pathlib.Path, help="the log, in docs/data/<gpu>/")
    adding.add_argument("--kind", required=True, choices=sorted(KINDS),
                        help="; ".join(f"{k}: {v}" for k, v in KINDS.items()))
    adding.add_argument("--note", required=True, help="what the log is, in Chinese, as the provenance table says it")
    adding.add_argument("--replace", action="store_true", help="change the entry of a log described already")
    listing = commands.add_parser("list", help="every log of a GPU folder and its entry")
    listing.add_argument("--gpu", default=store.DEFAULT_GPU)
    args = parser.parse_args(argv)
    if args.command == "add":
        try:
            print(f"wrote {add(args.log, args.kind, args.note, args.replace)}")
        except ValueError as error:
            print(f"error: {error}", file=sys.stderr)
            return 2
        return 0
    logs = store.load_logs(args.gpu)
    for path in sorted(store.gpu_folder(args.gpu).glob("*.log")):
        entry = logs.get(path.name)
        print(f"{path.name}: " + (f"[{entry['kind']}] {entry['note']}" if entry else "NOT DESCRIBED"))
    for name in sorted(set(logs) - {p.name for p in store.gpu_folder(args.gpu).glob('*.log')}):
        print(f"{name}: described, but no such log")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
