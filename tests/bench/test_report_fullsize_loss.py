"""bench/report/fullsize_loss.py: the whole set with its loss at full size, from the committed fullsize_loss.json:
the step table, the profiled step's buckets (a column per contender), the values the pages read, and what the
report does with a bucket it has no words for or a run without profiles."""
from __future__ import annotations

import copy

import pytest

from bench import store
from bench.report import fullsize
from bench.report import fullsize_loss as report
from bench.report import prose, render, tables
from bench_fixtures import check_artifacts


@pytest.fixture(scope="module")
def committed():
    return store.load("fullsize_loss", render.data_gpu("fullsize_loss"))


def _rows(text):
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
            if line.startswith("| ") and ":--" not in line]


def test_renders_the_step_table_and_the_profile(committed):
    rendered = report.render(copy.deepcopy(committed))
    assert set(rendered) == {"fullsize_loss_table.md", "fullsize_loss_profile.md"}
    check_artifacts(rendered)
    rows = _rows(rendered["fullsize_loss_table.md"])[1:]
    assert [r[0] for r in rows] == [fullsize.label(c) for c in committed["config"]["contenders"]]


def test_each_profile_cell_is_the_records_bucket(committed):
    text = report.render(copy.deepcopy(committed))["fullsize_loss_profile.md"]
    head, *body = _rows(text)
    names = report.profiled(committed)
    assert head[1:] == [report.SHORT[c] for c in names]
    assert names == list(report.ORDER)
    by_label = {row[0]: row[1:] for row in body}
    for bucket, words in report.BUCKET_ZH.items():
        if words not in by_label:
            assert all(bucket not in committed["results"][c]["profile"]["buckets"] for c in names)
            continue
        for name, cell in zip(names, by_label[words]):
            total = committed["results"][name]["profile"]["buckets"].get(bucket, {}).get("total_us", 0.0)
            assert cell == tables.fmt(total / 1e3, 3)
    launches = by_label["kernel 启动次数"]
    assert launches == [f"{committed['results'][c]['profile']['launches']:,}" for c in names]


def test_a_bucket_without_words_fails_the_render(committed):
    data = copy.deepcopy(committed)
    data["results"]["liger"]["profile"]["buckets"]["a new bucket"] = {"kernels": 1, "total_us": 1.0}
    with pytest.raises(KeyError, match="a new bucket"):
        report.render(data)


def test_a_run_without_profiles_renders_the_table_only(committed):
    data = copy.deepcopy(committed)
    for record in data["results"].values():
        record.pop("profile", None)
    assert set(report.render(data)) == {"fullsize_loss_table.md"}


def test_values_against_liger_and_the_target(committed):
    values = report.values(copy.deepcopy(committed))
    results = committed["results"]
    ours, liger = results["fusion_set_loss"], results["liger"]
    assert values["ours_vs_liger"] == prose.times(ours["median_ms"] / liger["median_ms"], 3)
    assert values["target_ms"] == f"{tables.fmt(0.92 * liger['median_ms'], 4)} ms"
    short = ours["median_ms"] - 0.92 * liger["median_ms"]
    assert values["target_short"] == f"{tables.fmt(short, 3)} ms"
    gain = ours["tokens_per_s"] / liger["tokens_per_s"] - 1
    assert values["ours_tps_gain_vs_liger"] == prose.pct(gain, 1)
    profile = ours["profile"]
    outside = sum(b["total_us"] for k, b in profile["buckets"].items() if k not in ("GEMM", "attention"))
    assert values["fusion_set_loss_non_gemm"] == f"{tables.fmt((outside + profile['gpu_idle_us']) / 1e3, 3)} ms"
