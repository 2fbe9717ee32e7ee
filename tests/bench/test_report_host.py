"""bench/report/host.py: the host-time table, ours' breakdown, 篇2's short sentence and the values of the methods
page's reading from the committed host.json and step.json, and what they say when the data moves (a step whose
intervals overlap, a step whose shapes the host run does not cover, a contender that did not run). The reading's
words are checked in tests/test_readings_fusion.py."""
from __future__ import annotations

import copy

import pytest

from bench import store
from bench.report import host as report
from bench.report import prose, tables
from bench.report.render import GENERATED_DIR
from bench_fixtures import check_artifacts


@pytest.fixture(scope="module")
def committed():
    return store.load("host"), store.load("step")


def _data(committed):
    return copy.deepcopy(committed[0]), copy.deepcopy(committed[1])


def _body(text):
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
            if line.startswith("| ") and ":--" not in line][1:]


def _values(data, step):
    return report.summary_values(lambda name: {"host": data, "step": step}[name])["host"]


def test_the_table_rows_are_contenders_and_the_columns_shapes(committed):
    data, _ = _data(committed)
    rendered = report.render(data)
    assert set(rendered) == {"host_table.md", "host_breakdown.md"}
    check_artifacts(rendered)
    text = rendered["host_table.md"]
    shapes = data["results"]["shapes"]
    header = next(line for line in text.splitlines() if line.startswith("|"))
    assert [c.strip() for c in header.strip("|").split("|")][1:] == [e["label"] for e in shapes]
    assert all(f"{e['label']} 为 {e['rows']}×{e['width']}" in text for e in shapes)  # the caption names the shapes
    rows = _body(text)
    assert [r[0] for r in rows] == [report.label(c) for c in data["config"]["contenders"]]
    for row, contender in zip(rows, data["config"]["contenders"]):
        for cell, entry in zip(row[1:], shapes):
            t = entry["fwd_bwd"][contender]
            assert cell == f"{tables.fmt(t['host_us'], 3)} / {tables.fmt(t['wall_us'], 3)}"
    caption = text.rstrip().splitlines()[-1]
    cfg = data["config"]
    for words in (f"连续 {cfg['calls']} 次", f"{cfg['repeats']} 轮的中位数", "bf16", data["environment"]["cpu"]):
        assert words in caption, words


def test_the_breakdown(committed):
    data, _ = _data(committed)
    text = report.render(data)["host_breakdown.md"]
    rows = _body(text)
    assert [r[0] for r in rows][1:] == list(report.PARTS.values())
    for row, part in zip(rows[1:], report.PARTS):
        assert row[1:] == [tables.fmt(e["ours"][part]["host_us"], 3) for e in data["results"]["shapes"]]
    assert rows[0][1:] == [tables.fmt(e["fwd_bwd"]["triton"]["host_us"], 3) for e in data["results"]["shapes"]]


def test_a_contender_that_did_not_run(committed):
    data, _ = _data(committed)
    del data["results"]["shapes"][0]["fwd_bwd"]["quack"]
    row = next(r for r in _body(report.render(data)["host_table.md"]) if r[0] == "quack")
    assert row[1] == "未运行" and row[2] != "未运行"


def test_the_committed_values(committed):
    """The methods page's reading: ratios per shape, ours' host time by part, the 8-layer step's figures."""
    data, step = _data(committed)
    values = _values(data, step)
    by = {e["label"]: e["fwd_bwd"] for e in data["results"]["shapes"]}
    for label, t in by.items():
        key = label.lower().replace("=", "")
        assert values[f"{key}_vs_torch"] == prose.times(t["triton"]["wall_us"] / t["torch_rms_norm"]["wall_us"])
        assert values[f"{key}_ours"] == f"{tables.fmt(t['triton']['wall_us'], 3)} µs"
    shapes = data["results"]["shapes"]
    launches = [e["ours"]["one_launch"]["host_us"] for e in shapes]
    planned = [e["ours"]["planned_launch"]["host_us"] for e in shapes]
    assert values["launch"] == f"{prose.span(launches, lambda v: tables.fmt(v, 3))} µs"
    assert values["planned_launch"] == f"{prose.span(planned, lambda v: tables.fmt(v, 3))} µs"
    direct = [e["ours"]["forward"]["host_us"] + e["ours"]["backward_direct"]["host_us"] for e in shapes]
    assert values["direct_share"] == prose.pct_span([d / e["fwd_bwd"]["triton"]["host_us"] for d, e in zip(direct, shapes)])
    assert (values["step_layers"], values["step_shape"], values["step_calls"]) == ("8", "B=4、T=4096", "33")
    mine, peer = step["results"]["triton"], step["results"]["torch_rmsnorm"]
    assert values["step_gain"] == prose.pct(peer["median_ms"] / mine["median_ms"] - 1, 1)
    assert values["step_ms"] == f"{tables.fmt(mine['median_ms'], 4)} ms"


def test_a_run_before_the_launch_plans_has_no_breakdown_values(committed):
    """host.json from before the plans (no planned parts): the page's breakdown would name figures it lacks."""
    data, step = _data(committed)
    for entry in data["results"]["shapes"]:
        for part in report.PLANNED_PARTS:
            entry["ours"].pop(part)
    values = _values(data, step)
    assert "launch" not in values and "planned_launch" not in values and "h1024_vs_torch" in values


def test_the_extra_host_time_is_counted_per_step(committed):
    data, step = _data(committed)
    counts = report.step_counts(step["config"])
    assert sum(counts.values()) == step["results"]["triton"]["norm_count"] == 33
    by = {(e["rows"], e["width"]): e["fwd_bwd"] for e in data["results"]["shapes"]}
    extra = sum(n * (by[k]["triton"]["host_us"] - by[k]["torch_rms_norm"]["host_us"]) for k, n in counts.items())
    assert report.step_cost(data, step)["extra_ms"] == pytest.approx(extra / 1e3)
    assert _values(data, step)["step_extra_ms"] == f"{tables.fmt(extra / 1e3)} ms"


def test_within_the_timing_spread_is_not_a_difference():
    a = {"host_us": 100.0, "wall_us": 100.0, "host_range_us": [90.0, 115.0]}
    b = {"host_us": 120.0, "wall_us": 120.0, "host_range_us": [118.0, 122.0]}
    assert not report.differ(a, b)  # 20 % apart, loops spread 25 %
    b.update(host_us=130.0, wall_us=130.0)
    assert report.differ(a, b)


def test_the_step_cost_says_whether_the_intervals_are_disjoint(committed):
    data, step = _data(committed)
    assert report.step_cost(data, step)["disjoint"]
    mine, peer = step["results"]["triton"], step["results"]["torch_rmsnorm"]
    mine.update(median_ms=peer["median_ms"], ci95_ms=peer["ci95_ms"])
    assert not report.step_cost(data, step)["disjoint"]


def test_a_step_the_host_run_does_not_cover(committed):
    data, step = _data(committed)
    step["config"]["batch"] = 8  # other rows than the host run timed
    assert report.step_cost(data, step) is None and "step_calls" not in _values(data, step)
    data, step = _data(committed)
    step["results"]["torch_rmsnorm"]["status"] = "error"
    assert report.step_cost(data, step) is None


def test_the_committed_files_are_what_the_data_renders_to():
    expected = report.render(store.load("host"))
    assert set(expected) == {"host_table.md", "host_breakdown.md"}
    for name, text in expected.items():
        assert (GENERATED_DIR / name).read_text(encoding="utf-8") == text, f"run python -m bench.render: {name}"


def test_the_values_follow_the_data():
    """篇 2 §6.2's values: the shapes where ours' host-inclusive call is slower than F.rms_norm's, and by how much;
    none when ours is as fast everywhere."""
    data = copy.deepcopy(store.load("host"))
    assert report.slower_values(data) == {"slower_shapes": "H=1024 和 k_norm", "slower_ratio": "1.7–2.5"}
    for entry in data["results"]["shapes"]:  # ours as fast as F.rms_norm everywhere: nothing slower
        entry["fwd_bwd"]["triton"] = dict(entry["fwd_bwd"]["torch_rms_norm"])
    assert report.slower_shapes(data) == [] and report.slower_values(data)["slower_shapes"] == ""
