"""bench/report/compile.py: the methods table and the values of the article's reading say what the data says:
graph breaks, whether compiled is within the run's tie rule of eager in GPU time, the host-inclusive ratios, and a
case where the compile failed is named with its error. (The article's words: tests/test_readings_fusion.py.)"""
from __future__ import annotations

import copy
import json

import pytest

from artifacts import takeaway
from bench.report import compile as report
from bench_fixtures import check_artifacts


def test_renders_from_the_quick_run(quick_compile):
    rendered = report.render(quick_compile)
    assert set(rendered) == {"compile.md"}
    check_artifacts(rendered)
    assert rendered == report.render(json.loads(json.dumps(quick_compile)))  # deterministic
    first = takeaway(rendered["compile.md"])
    assert first.startswith("torch.compile(fullgraph=True) 对 eager：")
    rows = [line for line in rendered["compile.md"].splitlines() if line.startswith("| RMSNorm") or
            line.startswith("| 残差加")]
    assert len(rows) == 2 * len(quick_compile["results"]["cases"])
    if not any("compiled" in c for c in quick_compile["results"]["cases"]):  # the CPU: the failure is named
        assert "上没有结果" in first and "Unsupported: Unsupported method call" in first
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
    assert report.values(data) == {"tie": "2%", "graph_breaks": "0", "gpu_ratio": "0.995–1.012",
                                   "host_ratio": "0.82–1.31"}
    table = rendered["compile.md"]
    assert "GPU 时间 compiled ÷ eager 为 0.995–1.012，全部 6 组都在 eager 的 2% 以内或更快" in takeaway(table)
    assert "比值为 forward 1.31，forward + backward 0.82" in takeaway(table) and "没有结果" not in table
    assert "| RMSNorm 4×256 | forward + backward | " in table and "| 1.012 | 0.82 | 0 |" in table
    assert "eps 的类型：fp64" in table
    check_artifacts(rendered)


def test_a_case_over_the_tie_is_named_and_the_tie_comes_from_the_run(quick_compile):
    data = as_if_compiled(quick_compile, gpu=1.015, host=1.2)
    assert "全部 6 组都在 eager 的 2% 以内或更快" in report.takeaway(data)
    data["config"]["tie_rule"] = "within_1pct"
    assert "6 组慢于 eager 超过 1%：RMSNorm 4×256 forward 1.015、" in report.takeaway(data)
    assert report.values(data)["tie"] == "1%" and report.values(data)["host_ratio"] == "1.20"


def test_a_failed_compile_in_one_case_is_named(quick_compile):
    data = as_if_compiled(quick_compile, gpu=1.0, host=1.0)
    fused = data["results"]["cases"][-1]
    del fused["compiled"], fused["graph_breaks"]
    fused["ratios"] = {}
    fused["errors"]["compiled"] = "BackendCompilerFailed('backend=inductor raised:\\nRuntimeError: boom')"
    fused["errors"]["graph_breaks"] = "RuntimeError('explain failed')"
    text = report.takeaway(data)
    assert "compiled 在 残差加 + RMSNorm 4×256（BackendCompilerFailed: backend=inductor raised:）上没有结果" in text
    assert "图中断 0 次（残差加 + RMSNorm 4×256 未统计）" in text
    assert "全部 4 组都在 eager 的 2% 以内或更快" in text
    assert "graph_breaks" not in report.values(data)  # not every case counted: the page has no single number


@pytest.mark.parametrize("breaks, words", [(0, "图中断 0 次"), (2, "图中断 2 次")])
def test_the_graph_breaks_are_read_from_the_record(quick_compile, breaks, words):
    data = as_if_compiled(quick_compile, gpu=1.0, host=1.0)
    for case in data["results"]["cases"]:
        case["graph_breaks"] = breaks
    assert words in report.takeaway(data) and report.values(data)["graph_breaks"] == str(breaks)


def test_the_host_inclusive_time_is_set_against_the_gpu_time_of_the_committed_run():
    """The words that say why the host-inclusive ratio says little: host ÷ GPU per group, from the data."""
    from bench import store

    data = store.load("compile")
    over = [case[mode][phase]["host"]["median_us"] / case[mode][phase]["gpu"]["median_us"]
            for case in data["results"]["cases"] for mode in ("eager", "compiled") for phase in ("fwd", "fwd_bwd")]
    words = f"含主机开销的用时是同组 GPU 时间的 {min(over):.2f}–{max(over):.2f} 倍"
    assert words in report.takeaway(data)
