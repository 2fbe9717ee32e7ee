"""A record's environment block, and saving a record: the one way measured data reaches docs/data/."""
from __future__ import annotations

import datetime as _dt
import os
import pathlib
import platform
import shlex
import subprocess
import sys

import torch

from bench import ROOT, store


def _git_commit() -> str:
    if os.environ.get("GIT_COMMIT"):
        return os.environ["GIT_COMMIT"]
    try:
        return subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True,
                                       stderr=subprocess.DEVNULL).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def _version(module_name: str) -> str | None:
    try:
        module = __import__(module_name)
    except Exception:  # not installed, or broken on this machine: the record says None
        return None
    return getattr(module, "__version__", None)


CPUINFO = pathlib.Path("/proc/cpuinfo")


def cpu_model(cpuinfo: pathlib.Path = CPUINFO) -> str | None:
    """The host CPU's model name: the first ``model name`` of /proc/cpuinfo (x86), else its ``Model`` or
    ``Hardware`` line (Arm), else what Python's platform module says; None when nothing names it."""
    try:
        text = cpuinfo.read_text(encoding="utf-8", errors="replace")
    except OSError:
        text = ""
    for key in ("model name", "Model", "Hardware"):
        for line in text.splitlines():
            name, sep, value = line.partition(":")
            if sep and name.strip() == key and value.strip():
                return " ".join(value.split())
    return platform.processor() or None


def cpu_environment() -> dict:
    """The host CPU: its model, the logical CPUs of the machine and those this process may run on (a
    container or ``taskset`` can allow fewer). Launch-bound figures (few tokens, CUDA graphs) depend on it."""
    try:
        usable = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # no sched_getaffinity on this platform
        usable = os.cpu_count()
    return {"cpu": cpu_model(), "cpu_count": os.cpu_count(), "cpu_usable": usable}


def environment() -> dict:
    """Everything a reader needs to know about where a number was measured."""
    env = {
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": _git_commit(),
        "command": os.environ.get("BENCH_COMMAND") or " ".join(shlex.quote(a) for a in sys.argv),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "triton": _version("triton"),
        "transformers": _version("transformers"),
        "liger_kernel": None,
        "quack": None,
        "cuda": torch.version.cuda,
        "gpu": None,
        "gpu_count": 0,
        "driver": None,
        "sm_count": None,
        **cpu_environment(),
    }
    from importlib.metadata import PackageNotFoundError, version

    for key, distribution in (("liger_kernel", "liger-kernel"), ("quack", "quack-kernels")):
        try:  # the installed distribution's metadata: quack itself is not imported here
            env[key] = version(distribution)
        except PackageNotFoundError:
            pass
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        env["gpu"] = props.name
        env["gpu_count"] = torch.cuda.device_count()
        env["sm_count"] = props.multi_processor_count
        env["gpu_memory_gib"] = round(props.total_memory / 2**30, 1)
        try:
            env["driver"] = subprocess.check_output(
                ["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], text=True
            ).strip().splitlines()[0]
        except (OSError, subprocess.CalledProcessError, IndexError):
            pass
    return env


def save(name: str, payload: dict, out_dir: pathlib.Path | None = None, stem: str | None = None) -> pathlib.Path:
    """Write ``{"experiment", "environment", **payload}`` for experiment ``name``; return the file.

    The folder is docs/data/<gpu slug of the device that ran it>/, so an H100 run can never
    overwrite the H200 data; ``out_dir`` overrides it (a device job writes to $OUT and the
    files are committed from there). The file is ``<name>.json``, or ``<stem>.json`` where
    ``stem`` may name the run's commit as ``{commit}`` (``"explore-widths-{commit}"``).
    A failed write raises: a run whose record is lost is a failed run.
    """
    env = environment()
    record = {"experiment": name, "environment": env, **payload}
    folder = out_dir if out_dir is not None else store.gpu_folder(store.gpu_slug(env["gpu"] or "cpu"))
    file_stem = (stem or name).format(commit=str(env["git_commit"])[:7])
    return store.write(pathlib.Path(folder) / f"{file_stem}.json", record)


def worker_args(name: str, *args: str) -> list[str]:
    """What follows ``python`` (or a launcher such as torchrun) in the command line of a child process of
    experiment ``name``: ``-m bench.run_all --worker NAME ARGS``, which hands ``ARGS`` to that
    experiment's ``worker(argv)``."""
    return ["-m", "bench.run_all", "--worker", name, *args]
