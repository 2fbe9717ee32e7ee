"""What the bench tests share besides their fixtures (tests/bench/conftest.py): an experiment's --quick run
as run_all saves it, the committed --quick fixtures, and the checks every rendered artifact passes."""
from __future__ import annotations

import argparse
import copy
import importlib
import importlib.util
import json
import pathlib

from artifacts import CJK, UNIT_LABEL, tables
from bench import store
from bench.harness import mode, record
from bench.report import plots
from unmeasured import coverage_paused

FIXTURES = pathlib.Path(__file__).parents[1] / "fixtures"
SMALL_TRACE = FIXTURES / "traces" / "p1_profile_small_trace.json"


def machine_folder() -> str:
    """The data folder of this machine, by record.save's rule: ``cpu``, or the GPU's (``h200``)."""
    return store.gpu_slug(record.environment()["gpu"] or "cpu")


def quick_run(name: str, folder: pathlib.Path) -> dict:
    """``bench.exp_<name>``'s --quick run, saved into ``folder/<machine_folder()>/`` and read back
    (a quick run on a GPU machine records its GPU; reports find its files by that name)."""
    module = importlib.import_module(f"bench.exp_{name}")
    out = folder / machine_folder()
    with coverage_paused():  # the kernels it runs are measured by their own tests
        payload = module.run(argparse.Namespace(quick=True, out=out))
    payload["config"]["quick"] = True
    return store.read(record.save(module.NAME, payload, out))


def fixture(name: str) -> dict:
    """A committed --quick fixture (tests/fixtures/<name>.json)."""
    data = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    if name == "p1_profile":  # the timeline reads the trace saved next to the JSON: a hand-made GPU trace
        data["results"]["main"].update(trace_file=SMALL_TRACE.name, trace_bytes=SMALL_TRACE.stat().st_size)
    return data


def as_if_on_a_gpu(data: dict) -> dict:
    """A p1 fixture with the fields only a GPU run fills in, to exercise those branches."""
    data = copy.deepcopy(data)
    data["environment"].update(gpu="NVIDIA H200", driver="000.00", cuda="13.0")
    if data["experiment"] == "p1_compile":
        for entry in data["results"]["shapes"]:
            entry["contenders"]["cuda_graph"] = copy.deepcopy(entry["contenders"]["eager"])
    if data["experiment"] == "p1_profile":
        data["results"]["main"]["layer"]["gpu_lag_us"] = 1234.0
    return data


def check_artifacts(rendered: dict[str, str]) -> None:
    """Tables of at most 6 columns with a Chinese header; plots with an axis label that names its unit, that
    read in the site's column (plots.legible: text >= 10 px, at most 450 px tall)."""
    for name, text in rendered.items():
        if name.endswith(".md"):
            for header in tables(text):
                assert len(header) <= 6 and CJK.search(" ".join(header)), (name, header)
        elif name.endswith(".svg"):
            assert text.startswith("<?xml") and any(UNIT_LABEL.search(t) for t in plots.svg_texts(text)), name
            assert not plots.legible(text), (name, plots.legible(text))


def unavailable_peers() -> set[str]:
    """The optional peers this machine cannot time: both on a CPU, the uninstalled ones on a GPU."""
    if not mode.gpu_available():
        return {"liger", "quack"}
    return {name for name, module in (("liger", "liger_kernel"), ("quack", "quack"))
            if importlib.util.find_spec(module) is None}


def fused_times(data: dict, unfused_over_ours: float, phase: str = "fwd_bwd") -> dict:
    """A copy of a fused_add record with the unfused contender at ``unfused_over_ours`` × ours' time."""
    data = copy.deepcopy(data)
    for s in data["results"]["shapes"]:
        ours = s[phase]["triton_fused_add"]["median_us"]
        s[phase]["unfused"] = dict(s[phase]["unfused"], median_us=ours * unfused_over_ours)
    return data


def check_p1_render(report, data) -> dict[str, str]:
    """Render ``data`` twice: the same bytes; tables of at most 6 columns with Chinese headers and no
    environment footer (the article's 实验环境 box has it), plots drawn as glyphs with units."""
    assert data["config"]["quick"] is True  # fixtures are smoke-test data, never published
    first = report.render(data)
    assert first == report.render(json.loads(json.dumps(data)))
    env = data["environment"]
    for rel, text in first.items():
        assert rel.startswith("p1_"), rel  # no clash with the other experiments' artifacts
        if rel.endswith(".md"):
            assert text.startswith("|"), rel
            header = text.splitlines()[0]
            assert header.count("|") - 1 <= 6 and CJK.search(header), f"{rel}: at most 6 columns, Chinese headers"
            assert str(env["git_commit"])[:7] not in text, f"{rel}: a commit hash under a table"
            assert "GPU:" not in text and f"torch {env['torch']}" not in text, f"{rel}: an environment footer"
        elif rel.endswith(".svg"):
            assert text.startswith("<?xml") and text.rstrip().endswith("</svg>"), rel
            assert "<text" not in text and any("（" in t for t in plots.svg_texts(text)), rel  # glyphs, units
            assert not plots.legible(text), (rel, plots.legible(text))  # reads in the site's column
        else:
            assert rel.endswith(".txt") and text.endswith("\n"), rel
    return first
