"""compile.json -> our modules under torch.compile: the methods page's table (with its caption; the sentence
above it is written by hand) and the figures of the hand-written readings on 番外 §七 and the methods page
(``values``: {{ compile.NAME }}; tests/test_readings_fusion.py checks their words).

Per case (module × shape) and phase: eager's GPU time and its share of the copy ceiling, compiled ÷ eager
of the GPU time (the profiler's device time per call) and of the host-inclusive time (do_bench of eager
calls), how far the host-inclusive time sits above the GPU time and how wide it spreads, and the graph
breaks; the run's tie rule says what counts as level.
"""
from __future__ import annotations

import re

from bench.report import prose, tables
from bench.report.names import PHASES, tie
from bench.report.ops import copy_ceiling, size

NAME = "compile"
MODULE_LABELS = {"TritonQwen3RMSNorm": "RMSNorm", "TritonQwen3FusedAddRMSNorm": "残差加 + RMSNorm"}
TIMERS = {"gpu": "GPU 时间", "host": "含主机开销"}


def ceiling(res) -> dict:
    """The run's 4 GiB copy, the faster of its two timings."""
    return copy_ceiling({**res, "shapes": []})


def case_label(case) -> str:
    shape = f"{case['rows']}×{case['width']}"
    shape = f"q_norm {shape}" if case["shape"] == "q_norm" else shape
    return f"{MODULE_LABELS.get(case['module'], case['module'])} {shape}"


def _error(case) -> str:
    """The first line of why the compiled form has no result: ``Name: message`` of the recorded repr
    (whose line breaks are written \\n)."""
    text = case["errors"].get("compiled", "没有结果")
    match = re.match(r"(\w+)\(['\"](.*)", text)
    if match:
        text = f"{match.group(1)}: {match.group(2)}"
    return text.split("\\n")[0].rstrip("')\"")[:80]


def ratios(data, timer) -> list[dict]:
    """Every (case, phase) with both sides: {"label", "phase", "ratio"} of compiled ÷ eager."""
    out = []
    for case in data["results"]["cases"]:
        for phase in data["config"]["phases"]:
            ratio = case.get("ratios", {}).get(phase, {}).get(timer)
            if ratio is not None:
                out.append({"label": case_label(case), "phase": phase, "ratio": ratio})
    return out


def graph_breaks(data) -> dict:
    """{"counts": {label: n}, "not_counted": {label: why}}."""
    counts, missing = {}, {}
    for case in data["results"]["cases"]:
        if "graph_breaks" in case:
            counts[case_label(case)] = case["graph_breaks"]
        else:
            missing[case_label(case)] = (case["errors"].get("graph_breaks")
                                         or case.get("skipped", {}).get("graph_breaks") or "未统计")
    return {"counts": counts, "not_counted": missing}


def _missing(data) -> str:
    """The caption's note on a case where compiled has no result, with its error (the row shows "—")."""
    missing = [c for c in data["results"]["cases"] if "compiled" not in c]
    if not missing:
        return ""
    return prose.glue("compiled 在 " + prose.join(f"{case_label(c)}（{_error(c)}）" for c in missing), "上没有结果。")


def caption(data) -> str:
    cfg, res = data["config"], data["results"]
    top = ceiling(res)
    text = (f"{tables.dtype_short(cfg['dtype'])}，eps 为 Python float。GPU 时间：torch profiler 记录的一次调用里全部 GPU 活动"
            f"（kernel、memset、拷贝）的时长之和，{cfg['profiled_calls']} 次调用的中位数，轮换输入（不复用 L2）；"
            "编译后第一次 CUDA graph 捕获曾失败，所以这里不用 CUDA graph 重放。含主机开销：triton.testing.do_bench "
            "对 eager 调用计时的中位数。占拷贝上限按最少字节数计，拷贝上限为本次运行测得最快的 "
            f"{size(top['bytes'])} 设备内拷贝，{top['gbps']:,.0f} GB/s。后端 {cfg['backend']}，dynamic=False。")
    types = sorted({t for c in res["cases"] for t in c.get("eps_types", [])})
    if types:
        text += f"Inductor 生成的代码里 eps 的类型：{prose.join(types)}（kernel 先把它转成计算精度）。"
    return text + _missing(data)


def _table(data) -> str:
    top = ceiling(data["results"])["gbps"]
    body = []
    for case in data["results"]["cases"]:
        breaks = case.get("graph_breaks")
        for phase in data["config"]["phases"]:
            eager = case.get("eager", {}).get(phase, {}).get("gpu")
            ratio = case.get("ratios", {}).get(phase, {})
            body.append([case_label(case), PHASES[phase],
                         f"{tables.fmt(eager['median_us'])}（{prose.pct(eager['gbps'] / top)}）" if eager else "—",
                         f"{ratio['gpu']:.3f}" if "gpu" in ratio else "—",
                         f"{ratio['host']:.2f}" if "host" in ratio else "—",
                         str(breaks) if breaks is not None else "—"])
    table = tables.md_table(["模块与形状", "方向", "eager GPU 时间（µs，占拷贝上限）", "compiled ÷ eager：GPU 时间",
                             "compiled ÷ eager：含主机开销", "图中断（次）"], body, "llrrrr")
    return prose.page(table, caption(data))


def _host_spread(data) -> tuple[list[float], dict]:
    """Per (case, mode, phase) with both timers: the host-inclusive median ÷ the GPU-time median, and per
    timer the p20–p80 ranges as shares of their medians."""
    over, spread = [], {"host": [], "gpu": []}
    for case in data["results"]["cases"]:
        for mode in data["config"]["modes"]:
            for phase in data["config"]["phases"]:
                times = case.get(mode, {}).get(phase, {})
                if times.get("host") and (times.get("gpu") or {}).get("median_us"):
                    over.append(times["host"]["median_us"] / times["gpu"]["median_us"])
                for timer in spread:
                    t = times.get(timer) or {}
                    if {"p20_us", "p80_us"} <= set(t) and t.get("median_us"):
                        spread[timer].append((t["p80_us"] - t["p20_us"]) / t["median_us"])
    return over, spread


def render(data: dict) -> dict[str, str]:
    return {"compile.md": _table(data)}


def values(data: dict) -> dict[str, str]:
    """{{ compile.NAME }}: the figures of the hand-written readings (the article's and the methods page's): the
    graph breaks (when every case counted the same), the compiled ÷ eager ratios of the GPU time (and how many
    groups) and of the host-inclusive time (all, and per phase), how far the host-inclusive time sits above the GPU
    time and the widest p20–p80 range of each timer as a share of its median, the tie rule."""
    gpu, host = ratios(data, "gpu"), ratios(data, "host")
    out = {"tie": prose.pct(tie(data["config"]))}
    found = graph_breaks(data)
    if len(set(found["counts"].values())) == 1 and not found["not_counted"]:
        out["graph_breaks"] = str(next(iter(found["counts"].values())))
    if gpu:
        out["gpu_ratio"] = prose.times_span([r["ratio"] for r in gpu], 3)
        out["gpu_groups"] = str(len(gpu))
    if host:
        out["host_ratio"] = prose.times_span([r["ratio"] for r in host], 2)
        for phase in data["config"]["phases"]:
            rows = [r["ratio"] for r in host if r["phase"] == phase]
            if rows:
                out[f"host_{phase}_ratio"] = prose.times_span(rows, 2)
    over, spread = _host_spread(data)
    if over:
        out["host_over_gpu"] = prose.times_span(over, 2)
    if spread["host"] and spread["gpu"]:
        out["host_spread"] = prose.pct(max(spread["host"]))
        out["gpu_spread"] = prose.pct(max(spread["gpu"]))
    return out
