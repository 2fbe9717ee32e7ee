"""Shared fixtures of the bench tests: each experiment's --quick run, once per session, saved and read
back as ``python -m bench.run_all NAME --quick`` saves it (tests/tools/bench_fixtures.py), and a data
folder holding the small hand-made trace that the committed p1_profile fixture points to."""
from __future__ import annotations

import os
import shutil
import sys

import pytest

from bench import store
from bench_fixtures import SMALL_TRACE, machine_folder, quick_run

# Only a platform without processes (e.g. a WebAssembly build of Python) may skip the runs that start
# child processes (step, fsdp2); CI never does.
CAN_SPAWN = sys.platform not in ("emscripten", "wasi") or bool(os.environ.get("CI"))
# The step contenders a quick run measures, each in a child process: the baseline and the fused add (which
# runs the most code: the fused patch and its attribution).
QUICK_STEP_CONTENDERS = "eager,triton_fused_add"


def _session_run(name):
    @pytest.fixture(scope="session")
    def run(tmp_path_factory):
        return quick_run(name, tmp_path_factory.mktemp(f"quick_{name}"))
    return run


quick_rmsnorm = _session_run("rmsnorm")
quick_width_sweep = _session_run("width_sweep")
quick_fused_add = _session_run("fused_add")
quick_fused_add_sweep = _session_run("fused_add_sweep")
quick_compile = _session_run("compile")
quick_loss_curve = _session_run("loss_curve")
quick_p1_roofline = _session_run("p1_roofline")
quick_p1_compile = _session_run("p1_compile")
quick_fusion = _session_run("fusion")
quick_loss = _session_run("loss")


@pytest.fixture(scope="session")
def quick_p1_profile_dir(tmp_path_factory):
    """The folder whose cpu/ (or GPU's folder) holds p1_profile's quick record and its trace."""
    folder = tmp_path_factory.mktemp("quick_p1_profile")
    quick_run("p1_profile", folder)
    return folder


@pytest.fixture(scope="session")
def quick_p1_profile(quick_p1_profile_dir):
    return store.read(quick_p1_profile_dir / machine_folder() / "p1_profile.json")


def _quick_run_with(name: str, variable: str, contenders: str, tmp_path_factory):
    """``name``'s quick run in child processes, with ``variable`` (its contender selection) set meanwhile."""
    if not CAN_SPAWN:
        pytest.skip("this platform cannot start processes")
    previous = os.environ.get(variable)
    os.environ[variable] = contenders
    try:
        return quick_run(name, tmp_path_factory.mktemp(f"quick_{name}"))
    finally:
        if previous is None:
            del os.environ[variable]
        else:
            os.environ[variable] = previous


@pytest.fixture(scope="session")
def quick_step(tmp_path_factory):
    return _quick_run_with("step", "BENCH_STEP_CONTENDERS", QUICK_STEP_CONTENDERS, tmp_path_factory)


@pytest.fixture(scope="session")
def quick_step_loss(tmp_path_factory):
    """The set with its fused loss: the whole patch, in a step (the others are GPU only)."""
    return _quick_run_with("step_loss", "BENCH_STEP_CONTENDERS", "fusion_set_loss", tmp_path_factory)


@pytest.fixture(scope="session")
def quick_fsdp2(tmp_path_factory):
    if not CAN_SPAWN:
        pytest.skip("this platform cannot start processes")
    return quick_run("fsdp2", tmp_path_factory.mktemp("quick_fsdp2"))


@pytest.fixture
def data_dir_with_the_small_trace(tmp_path, monkeypatch):
    """A data folder holding the committed data plus the hand-made trace the p1_profile fixture points to."""
    for gpu in ("cpu", "h200"):
        folder = tmp_path / gpu
        source = store.DATA_DIR / gpu
        if source.is_dir():
            shutil.copytree(source, folder)
        folder.mkdir(exist_ok=True)
        (folder / SMALL_TRACE.name).write_bytes(SMALL_TRACE.read_bytes())
    monkeypatch.setattr(store, "DATA_DIR", tmp_path)
    return tmp_path


@pytest.fixture(scope="session")
def quick_fullsize(tmp_path_factory):
    """The fused add (it runs the most of our code: both patches' kernels, under checkpointing + AdamW) and
    Liger (a GPU-only contender: skipped on CPU)."""
    return _quick_run_with("fullsize", "BENCH_FULLSIZE_CONTENDERS", "triton_fused_add,liger", tmp_path_factory)


@pytest.fixture(scope="session")
def quick_fullsize_loss(tmp_path_factory):
    """The set with its fused loss under checkpointing + AdamW, with its profiled step (the peers are GPU only)."""
    return _quick_run_with("fullsize_loss", "BENCH_FULLSIZE_CONTENDERS", "fusion_set_loss", tmp_path_factory)
