"""bench/report/summary_p1.py: 篇1's 实验环境 box, provenance and tables from the committed data; skipped without
data. The 要点 is hand-written: its words are checked in tests/test_article_claims.py."""
from __future__ import annotations

import pytest

from bench.report import p1_compile, p1_profile, p1_roofline, summary_p1
from bench.report.render import MissingData, loader, render_all
from bench.report.tables import fmt

pytestmark = pytest.mark.usefixtures("data_dir_with_the_small_trace")
MODULES = {"p1_profile": p1_profile, "p1_roofline": p1_roofline, "p1_compile": p1_compile}


def test_summaries_are_skipped_without_data():
    with pytest.raises(MissingData):
        summary_p1.render_summary(loader("no-such-gpu"))
    # a report whose data lie in one other GPU folder renders from there (render.data_gpu); the summaries do not
    names = {path.name for path in render_all("no-such-gpu")}
    assert not {"p1_env.md", "p1_provenance.md", "p2_env.md", "p2_provenance.md"} & names


@pytest.fixture(scope="module")
def committed():
    try:
        return {name: loader()(name) for name in summary_p1.DATA}
    except MissingData:
        pytest.skip("no committed 篇1 data")


def test_env_box_and_provenance_of_the_committed_data(committed):
    out = summary_p1.render_summary(loader())
    for data in committed.values():
        env = data["environment"]
        for key in ("gpu", "driver", "cuda", "torch", "triton", "transformers"):
            assert str(env[key]) in out["p1_env.md"], key
        assert env["date"][:10] in out["p1_env.md"] and env["git_commit"][:7] not in out["p1_env.md"]
        assert f"`{env['git_commit'][:7]}`" in out["p1_provenance.md"]
    trace = committed["p1_profile"]["results"]["main"]["trace_file"]
    assert f"| `{trace}` |" in out["p1_provenance.md"]


def _saving(name, saved, low, high):
    return {"name": name, "eager_us": saved + 100.0, "fused_us": 100.0, "saved_us": saved, "low_us": low,
            "high_us": high}


def test_the_ranking_needs_intervals_apart():
    """A saving shares the rank above it when the intervals overlap (持平); one that reaches 0 is not ranked."""
    rows = summary_p1.ranked([_saving("a", 100, 95, 105), _saving("b", 98, 96, 99), _saving("c", 50, 48, 52),
                              _saving("d", -5, -20, 3)])
    assert [r["rank"] for r in rows] == [1, 1, 2, None]


def test_the_conclusion_ranks_the_committed_savings(committed):
    """Recomputed from the raw medians and quantiles: the order, each saving, and QKV merge left unranked."""
    text = summary_p1.render_summary(loader())["p1_conclusion.md"]
    points = {p["name"]: p["measured"] for p in committed["p1_roofline"]["results"]["points"]}
    saved = {n: m["eager"]["median_us"] - m["fused"]["median_us"] for n, m in points.items()
             if n != "Attention softmax"}
    order = sorted(saved, key=saved.get, reverse=True)
    rows = [line for line in text.splitlines() if line.startswith("| ") and not line.startswith("| 名次")
            and not line.startswith("| :")]
    assert [r.split("|")[2].strip().split("（")[0] for r in rows] == \
        [{"QKV merge": "QKV 合并"}.get(n, n) for n in order]
    for name in order:
        assert f"| {fmt(saved[name])} |" in text, name
    qkv = points["QKV merge"]
    assert qkv["eager"]["p20_us"] - qkv["fused"]["p80_us"] < 0 and "| — | QKV 合并 |" in text
    assert text.index("RMSNorm") < text.index("RoPE") < text.index("SwiGLU")
    assert "注意力 softmax 不在表里" in text
    values = summary_p1.summary_values(loader())["p1"]
    swiglu = points["SwiGLU"]
    assert values["swiglu_saved"] == f"{fmt(saved['SwiGLU'])} µs"
    assert values["swiglu_eager"] == f"{fmt(swiglu['eager']['median_us'])} µs"


def test_the_profiled_step_values(committed):
    """{{ p1.profiled_* }}, {{ p1.step_median }}...: §3.2's figures of the profiled step against the unprofiled ones."""
    main = committed["p1_profile"]["results"]["main"]
    step_ms, launch = main["step"]["median_ms"], main["launch"]
    values = summary_p1.summary_values(loader())["p1"]
    assert "p1_profile_overhead.md" not in summary_p1.render_summary(loader())  # the reading is the page's own
    assert values["profiled_span"] == f"{fmt(launch['span_us'] / 1e3)} ms"
    assert values["step_median"] == f"{fmt(step_ms)} ms"
    assert values["profiled_idle"] == f"{fmt(launch['idle_us'] / 1e3)} ms"
    assert values["profiled_busy"] == f"{100 * launch['busy_fraction']:.1f}%"
    assert values["unprofiled_busy"] == f"{100 * launch['busy_us'] / (1e3 * step_ms):.1f}%"  # the launch table's
    assert values["unprofiled_idle"] == f"{fmt(step_ms - launch['busy_us'] / 1e3, 2)} ms"


def test_the_env_box_names_the_cpu_or_says_it_was_not_recorded(committed):
    """The committed runs predate the CPU field: the box says so; a run that records it is named, and a file
    without it is listed; either way the CPU-bound figures are named."""
    records = [committed[name] for name in summary_p1.DATA]
    missing = summary_p1.cpu_note(*records)
    assert missing.startswith("CPU：这次运行的数据没有记录 CPU 型号。") and "CPU 受限的数字" in missing
    import copy

    named = copy.deepcopy(records)
    for data in named[:2]:
        data["environment"].update(cpu="AMD EPYC 9654", cpu_count=192)
    note = summary_p1.cpu_note(*named)
    assert note.startswith("CPU：AMD EPYC 9654（192 个逻辑 CPU）（`p1_compile.json` 没有记录）")
    assert "CPU 受限的数字" in note
    box = summary_p1.render_summary(loader())["p1_env.md"]
    assert f"    {missing}" in box


def test_the_other_runs_gemm_rates_and_their_ridge_point(committed):
    """§五: the roofline's matmul rate is one run of one shape, not a ceiling (the ceilings table says so); the other
    runs' rates ({{ p1.gemm_* }}) are read from their files, and the ridge point at the highest of them."""
    roofline = committed["p1_roofline"]
    rendered = p1_roofline.render(roofline)["p1_roofline_ceilings.md"]
    assert "一次运行、一个形状的中位数" in rendered and "实用上限" not in rendered
    assert "p1_gemm_spread.md" not in summary_p1.render_summary(loader())  # the sentence is the page's own
    try:
        fullsize, fusion = loader()("fullsize"), loader()("fusion")
    except MissingData:
        pytest.skip("fullsize.json or fusion.json not committed")
    v = summary_p1.summary_values(loader())["p1"]
    top = fullsize["config"]["gemm_ceiling_tflops"]
    qkv = max(s["tflops"] for e in fusion["results"]["kernels"]["qkv"] for s in e["fwd"].values())
    assert v["gemm_fullsize"] == f"{fmt(top, 4)} TFLOP/s" and v["gemm_qkv"] == f"{fmt(qkv, 4)} TFLOP/s"
    high = max(top, qkv) * 1e12 / (roofline["results"]["ceilings"]["copy"]["gbps"] * 1e9)
    assert v["gemm_top_ridge"] == f"{fmt(high)} FLOP/字节"
    assert summary_p1.other_gemm_rates(None, None) == {}


def test_the_three_qkv_gemms_run_at_the_same_runs_matmul_rate(committed):
    """§五's "三个 GEMM 的吞吐与同一次运行里测的 8192³ 矩阵乘相当": within 5 % of it, in p1_roofline.json."""
    r = committed["p1_roofline"]["results"]
    qkv = next(p for p in r["points"] if p["name"] == "QKV merge")["measured"]["eager"]["tflops"]
    assert abs(qkv / r["ceilings"]["matmul"]["tflops"] - 1) < 0.05
