"""bench/report/compile.py: the methods table and the values of the hand-written readings say what the data says:
graph breaks, the compiled ÷ eager ratios in GPU time and host-inclusive time, how far and how widely the
host-inclusive time sits above the GPU time, and a case where the compile failed is named with its error in the
caption. (The readings' words, on 番外 §七 and the methods page: tests/test_readings_fusion.py.)"""
from __future__ import annotations

import copy
import json

import pytest

from bench.report import compile as report
from bench_fixtures import check_artifacts


def test_renders_from_the_quick_run(quick_compile):
    rendered = report.render(quick_compile)
    assert set(rendered) == {"compile.md"}
    check_artifacts(rendered)
    assert rendered == report.render(json.loads(json.dumps(quick_compile)))  # deterministic
    text = rendered["compile.md"]
    assert text.startswith("| 模块与形状 |")  # the table alone: the sentence above it is the page's
    rows = [line for line in rendered["compile.md"].splitlines() if line.startswith("| RMSNorm") or
            line.startswith("| 残差加")]
    assert len(rows) == 2 * len(quick_compile["results"]["cases"])
    if not any("compiled" in c for c in quick_compile["results"]["cases"]):  # the CPU: the failure is named
        assert "上没有结果" in text and "Unsupported: Unsupported method call" in text
        assert "gpu_ratio" not in report.values(quick_compile)


def as_if_compiled(data, gpu, host):
    """The quick record with a compiled result per case: eager's times × ``gpu`` and × ``host`` (per phase
    or one value), 0 graph breaks, Inductor's fp64 eps."""
    data = copy.deepcopy(data)
    for case in data["results"]["cases"]:
        case["errors"], case["skipped"] = {}, {}
        case.update(graph_breaks=0, eps_types=["fp64"])
        case["compiled"], case["ratios"] = {}, {}
        for phase in ("fwd", "fwd_bwd"):
            g = gpu[phase] if isinstance(gpu, dict) else gpu
            h = host[phase] if isinstance(host, dict) else host
            eager = case["eager"][phase]
            case["compiled"][phase] = {"gpu": dict(eager["gpu"], median_us=eager["gpu"]["median_us"] * g),
                                       "host": dict(eager["host"], median_us=eager["host"]["median_us"] * h)}
            case["ratios"][phase] = {"gpu": g, "host": h}
    return data


def test_within_the_tie_and_the_host_ratio(quick_compile):
    data = as_if_compiled(quick_compile, gpu={"fwd": 0.995, "fwd_bwd": 1.012}, host={"fwd": 1.31, "fwd_bwd": 0.82})
    rendered = report.render(data)
    values = report.values(data)
    assert {k: values[k] for k in ("tie", "graph_breaks", "gpu_ratio", "gpu_groups", "host_ratio",
                                   "host_fwd_ratio", "host_fwd_bwd_ratio")} == {
        "tie": "2%", "graph_breaks": "0", "gpu_ratio": "0.995–1.012", "gpu_groups": "6", "host_ratio": "0.82–1.31",
        "host_fwd_ratio": "1.31", "host_fwd_bwd_ratio": "0.82"}
    table = rendered["compile.md"]
    assert "| RMSNorm 4×256 | forward + backward | " in table and "| 1.012 | 0.82 | 0 |" in table
    assert "eps 的类型：fp64" in table and "没有结果" not in table
    check_artifacts(rendered)


def test_the_tie_comes_from_the_run(quick_compile):
    data = as_if_compiled(quick_compile, gpu=1.015, host=1.2)
    assert report.values(data)["tie"] == "2%"
    data["config"]["tie_rule"] = "within_1pct"
    assert report.values(data)["tie"] == "1%" and report.values(data)["host_ratio"] == "1.20"


def test_a_failed_compile_in_one_case_is_named(quick_compile):
    data = as_if_compiled(quick_compile, gpu=1.0, host=1.0)
    fused = data["results"]["cases"][-1]
    del fused["compiled"], fused["graph_breaks"]
    fused["ratios"] = {}
    fused["errors"]["compiled"] = "BackendCompilerFailed('backend=inductor raised:\\nRuntimeError: boom')"
    fused["errors"]["graph_breaks"] = "RuntimeError('explain failed')"
    text = report.render(data)["compile.md"]
    assert "compiled 在 残差加 + RMSNorm 4×256（BackendCompilerFailed: backend=inductor raised:）上没有结果" in text
    assert report.values(data)["gpu_groups"] == "4"  # the failed case's two groups have no ratio
    assert "graph_breaks" not in report.values(data)  # not every case counted: the page has no single number


@pytest.mark.parametrize("breaks", [0, 2])
def test_the_graph_breaks_are_read_from_the_record(quick_compile, breaks):
    data = as_if_compiled(quick_compile, gpu=1.0, host=1.0)
    for case in data["results"]["cases"]:
        case["graph_breaks"] = breaks
    assert report.values(data)["graph_breaks"] == str(breaks)
    assert f"| {breaks} |" in report.render(data)["compile.md"]


def test_the_host_inclusive_time_is_set_against_the_gpu_time_of_the_committed_run():
    """The figures that say why the host-inclusive ratio says little: host ÷ GPU per group and the widest p20–p80
    range of each timer, from the data."""
    from bench import store

    data = store.load("compile")
    groups = [case[mode][phase] for case in data["results"]["cases"] for mode in ("eager", "compiled")
              for phase in ("fwd", "fwd_bwd")]
    over = [g["host"]["median_us"] / g["gpu"]["median_us"] for g in groups]
    values = report.values(data)
    assert values["host_over_gpu"] == f"{min(over):.2f}–{max(over):.2f}"
    for timer in ("host", "gpu"):
        widest = max((g[timer]["p80_us"] - g[timer]["p20_us"]) / g[timer]["median_us"] for g in groups)
        assert values[f"{timer}_spread"] == f"{100 * widest:.0f}%"
