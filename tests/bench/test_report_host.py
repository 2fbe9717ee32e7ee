"""bench/report/host.py: the host-time table, ours' breakdown and the sentence from the committed host.json and
step.json, and what they say when the data moves (ours as fast as F.rms_norm, a step that shows the host time, a
step whose shapes the host run does not cover, a contender that did not run)."""
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


def _sentence(data, step):
    return report.render_summary(lambda name: {"host": data, "step": step}[name])["host_sentence.md"]


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


def test_the_committed_sentence(committed):
    data, step = _data(committed)
    text = _sentence(data, step)
    by = {e["label"]: e["fwd_bwd"] for e in data["results"]["shapes"]}
    slower = [s for s, t in by.items()
              if report.differ(t["triton"], t["torch_rms_norm"]) and t["triton"]["wall_us"] > t["torch_rms_norm"]["wall_us"]]
    faster = [s for s, t in by.items()
              if report.differ(t["triton"], t["torch_rms_norm"]) and t["triton"]["wall_us"] < t["torch_rms_norm"]["wall_us"]]
    assert slower == ["H=1024", "k_norm"] and faster == ["q_norm"]  # at e71449b, with launch plans
    ratios = [by[s]["triton"]["wall_us"] / by[s]["torch_rms_norm"]["wall_us"] for s in slower]
    assert text.startswith(f"含主机开销，本站 RMSNorm 一次 forward + backward 在 {'、'.join(slower)} 上比 F.rms_norm 慢，")
    assert "墙钟时间是它的 " + "、".join(prose.times(r) for r in ratios) in text
    assert "只在 q_norm 上更快（311 对 760 µs）" in text
    assert "调用是主机受限的" in text
    shapes = data["results"]["shapes"]
    launches = [e["ours"]["one_launch"]["host_us"] for e in shapes]
    planned = [e["ours"]["planned_launch"]["host_us"] for e in shapes]
    assert f"kernel[grid] 发射一次 kernel 要 {prose.span(launches, lambda v: tables.fmt(v, 3))} µs" in text
    assert f"启动计划（第一次调用后记下编译好的 kernel 和不变的参数）只要 {prose.span(planned, lambda v: tables.fmt(v, 3))} µs" in text
    assert max(planned) < min(launches)
    assert "autograd 一次 x*2 的 forward + backward" in text
    # the 8-layer step: 33 calls, ours' extra host time, and a step that is still faster
    assert "8 层训练 step（B=4、T=4096）每步 33 次 RMSNorm 调用" in text
    mine, peer = step["results"]["triton"], step["results"]["torch_rmsnorm"]
    assert f"step 却比 F.rms_norm 快 {prose.pct(peer['median_ms'] / mine['median_ms'] - 1, 1)}" in text
    assert "被 GPU 工作盖住了" in text and "小模型、短序列" in text
    assert text.endswith("。\n") and text.count("\n") == 1


def test_the_sentence_of_a_run_before_the_launch_plans(committed):
    """host.json from before the plans (no planned parts): the launcher's cost per fwd + bwd, as then."""
    import copy

    data, step = copy.deepcopy(_data(committed))
    for entry in data["results"]["shapes"]:
        for part in report.PLANNED_PARTS:
            entry["ours"].pop(part)
    text = _sentence(data, step)
    assert "启动计划" not in text and "一次 forward + backward 发射 3 个 kernel" in text
    assert "forward 的参数准备" in text


def test_the_extra_host_time_is_counted_per_step(committed):
    data, step = _data(committed)
    counts = report.step_counts(step["config"])
    assert sum(counts.values()) == step["results"]["triton"]["norm_count"] == 33
    by = {(e["rows"], e["width"]): e["fwd_bwd"] for e in data["results"]["shapes"]}
    extra = sum(n * (by[k]["triton"]["host_us"] - by[k]["torch_rms_norm"]["host_us"]) for k, n in counts.items())
    assert f"多花约 {tables.fmt(extra / 1e3)} ms 主机时间" in _sentence(data, step)


def test_ours_as_fast_as_f_rms_norm_everywhere(committed):
    data, step = _data(committed)
    for e in data["results"]["shapes"]:
        e["fwd_bwd"]["triton"] = copy.deepcopy(e["fwd_bwd"]["torch_rms_norm"])
    text = _sentence(data, step)
    assert "在所有形状上都不比 F.rms_norm 慢" in text
    assert "主机受限" not in text and "小模型" not in text and "多花约" not in text  # no extra host time to hide


def test_within_the_timing_spread_is_not_a_difference():
    a = {"host_us": 100.0, "wall_us": 100.0, "host_range_us": [90.0, 115.0]}
    b = {"host_us": 120.0, "wall_us": 120.0, "host_range_us": [118.0, 122.0]}
    assert not report.differ(a, b)  # 20 % apart, loops spread 25 %
    b.update(host_us=130.0, wall_us=130.0)
    assert report.differ(a, b)


def test_a_step_that_shows_the_host_time(committed):
    data, step = _data(committed)
    mine, peer = step["results"]["triton"], step["results"]["torch_rmsnorm"]
    mine.update(median_ms=peer["median_ms"] * 1.05, ci95_ms=[peer["median_ms"] * 1.04, peer["median_ms"] * 1.06])
    text = _sentence(data, step)
    assert "step 也比 F.rms_norm 慢 5.0%（95% 区间不重叠）" in text and "盖住" not in text
    mine.update(median_ms=peer["median_ms"], ci95_ms=peer["ci95_ms"])
    text = _sentence(data, step)
    assert "两者的 step 持平（95% 区间重叠）" in text and "盖住" not in text


def test_a_step_the_host_run_does_not_cover(committed):
    data, step = _data(committed)
    step["config"]["batch"] = 8  # other rows than the host run timed
    text = _sentence(data, step)
    assert "训练 step" not in text and text.endswith("。\n")
    data, step = _data(committed)
    step["results"]["torch_rmsnorm"]["status"] = "error"
    assert "训练 step" not in _sentence(data, step)


def test_the_committed_files_are_what_the_data_renders_to():
    expected = report.render(store.load("host")) | report.render_summary(store.load)
    assert set(expected) == {"host_table.md", "host_breakdown.md", "host_sentence.md"}
    for name, text in expected.items():
        assert (GENERATED_DIR / name).read_text(encoding="utf-8") == text, f"run python -m bench.render: {name}"


def test_the_values_follow_the_data():
    """篇 2 §6.2's values: the shapes where ours' host-inclusive call is slower than F.rms_norm's, and by how much;
    none when ours is as fast everywhere."""
    data = copy.deepcopy(store.load("host"))
    assert report.values(data) == {"slower_shapes": "H=1024 和 k_norm", "slower_ratio": "1.7–2.5"}
    for entry in data["results"]["shapes"]:  # ours as fast as F.rms_norm everywhere: nothing slower
        entry["fwd_bwd"]["triton"] = dict(entry["fwd_bwd"]["torch_rms_norm"])
    assert report.slower_shapes(data) == [] and report.values(data)["slower_shapes"] == ""
