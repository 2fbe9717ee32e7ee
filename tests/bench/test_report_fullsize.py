"""bench/report/fullsize.py: the full-size Qwen3-8B table and the ranking (tiers) from the committed fullsize.json,
and what they say when the data moves: a contender shifted so that the ranking flips, a pair that the level rule
must rank, a contender that did not run, an unknown setup."""
from __future__ import annotations

import copy

import pytest

from bench import store
from bench.harness import fullsize_job
from bench.report import fullsize as report
from bench.report import prose, tables
from bench.report.render import GENERATED_DIR
from bench_fixtures import check_artifacts


@pytest.fixture(scope="module")
def committed():
    return store.load("fullsize"), store.load("step")


def _data(committed):
    return copy.deepcopy(committed[0]), copy.deepcopy(committed[1])


def _set(data, contender, median_ms, half_width=0.5):
    """``contender`` at ``median_ms`` with a 95 % interval of ±half_width ms."""
    data["results"][contender].update(median_ms=median_ms, ci95_ms=[median_ms - half_width, median_ms + half_width])


def _body(text):
    return [[c.strip() for c in line.strip("|").split("|")] for line in text.splitlines()
            if line.startswith("| ") and not line.startswith("| 档位") and ":--" not in line]


def test_the_table_has_a_row_per_contender_in_the_run_order(committed):
    data, _ = _data(committed)
    rendered = report.render(data)
    assert set(rendered) == {"fullsize_table.md"}
    check_artifacts(rendered)
    text = rendered["fullsize_table.md"]
    rows = _body(text)
    assert [r[0] for r in rows] == [report.label(c) for c in data["config"]["contenders"]]
    assert len(set(report.LABELS.values())) == len(report.LABELS)
    assert set(data["config"]["contenders"]) <= set(report.LABELS) == set(fullsize_job.CONTENDERS)
    base = data["results"]["eager"]["median_ms"]
    for row in rows:
        record = next(r for c, r in data["results"].items() if report.label(c) == row[0])
        lo, hi = record["ci95_ms"]
        f = tables.fmt
        assert row[1] == f"{f(record['median_ms'], 4)}（{f(lo, 4)}–{f(hi, 4)}）"
        assert row[2] == f"{record['tokens_per_s']:,.0f}"
        assert row[3] == prose.pct(record["model_tflops"] / 989.0, 1)  # the H200's dense bf16 peak
        assert row[4] == prose.times(base / record["median_ms"])
        assert row[5] == f(record["peak_gib"])
    assert "951.2（949.9–952.2）" in text  # the committed run, as the brief reads it


def test_the_caption_names_the_setup_from_the_config(committed):
    data, _ = _data(committed)
    caption = report.render(data)["fullsize_table.md"].rstrip().splitlines()[-1]
    cfg = data["config"]
    assert caption.startswith("*") and caption.endswith("。*")
    for words in (f"Qwen3-8B 全部 {cfg['geometry']['num_hidden_layers']} 层", f"B×T = {cfg['batch']}×{cfg['seq_len']}",
                  "AdamW（fused）", "use_reentrant=False", "每个 decoder 层", "每档一个新进程",
                  f"计时 {cfg['timed_steps']} 步", f"{cfg['warmup']} 步预热",
                  f"矩阵乘是 {tables.fmt(cfg['gemm_ceiling_tflops'])} TFLOP/s", "区间、FLOPs 与排序规则见测法页",
                  data["environment"]["gpu"]):
        assert words in caption, words
    assert data["environment"]["git_commit"] not in caption and data["environment"]["torch"] not in caption


def test_an_unknown_setup_has_no_words(committed):
    data, _ = _data(committed)
    data["config"]["optimizer"] = "torch.optim.SGD"
    with pytest.raises(KeyError, match="optimizer"):
        report.render(data)


def _tiers(data, step):
    return [[row["contender"] for row in t] for t in report.tiers(
        [row for row in report.rows(data) if row["status"] == "ok"], step["config"]["resolution"])]


def test_the_committed_tiers(committed):
    """liger_triton vs liger: intervals disjoint, but 0.8 % apart (under the resolution): level, and the top tier."""
    data, step = _data(committed)
    assert _tiers(data, step) == [["liger_triton", "liger"], ["compile", "compile_liger_flce"],
                                  ["triton_fused_add", "triton", "quack"], ["eager"]]


def test_the_level_rule():
    res = 0.0165

    def row(step, lo, hi):
        return {"step": step, "lo": lo, "hi": hi}

    # disjoint intervals, under the resolution apart: level
    assert report.level(row(887.4, 885.9, 888.1), row(894.5, 893.6, 894.9), res)
    # more than the resolution apart, but overlapping intervals: level
    assert report.level(row(900, 880, 920), row(920, 905, 935), res)
    # disjoint and more than the resolution apart: ranked (the rule can fail)
    assert not report.level(row(894.5, 893.6, 894.9), row(920.0, 918.9, 921.5), res)
    # the same pair with a coarser resolution: level again
    assert report.level(row(894.5, 893.6, 894.9), row(920.0, 918.9, 921.5), 0.05)


def test_a_pair_the_rule_must_rank(committed):
    """Ours (and quack) 3 % slower than the fused add, narrow intervals: no longer level, the fused add ranks ahead."""
    data, step = _data(committed)
    fused = data["results"]["triton_fused_add"]["median_ms"]
    _set(data, "triton", fused * 1.03)
    _set(data, "quack", fused * 1.03)
    assert _tiers(data, step)[2:] == [["triton_fused_add"], ["triton", "quack"], ["eager"]]


def test_shifting_a_contender_flips_the_ranking(committed):
    """Liger's full patch 3 % faster than Liger + ours: Liger alone at the top, then Liger + ours."""
    data, step = _data(committed)
    _set(data, "liger", data["results"]["liger_triton"]["median_ms"] / 1.03)
    assert _tiers(data, step)[:2] == [["liger"], ["liger_triton"]]


def test_a_finer_resolution_splits_a_tier(committed):
    data, step = _data(committed)
    step["config"]["resolution"] = 0.005  # liger_triton vs liger (0.8 %, disjoint) is now resolved
    assert _tiers(data, step)[:2] == [["liger_triton"], ["liger"]]


def test_a_tier_whose_members_are_not_all_level(committed):
    """A chain: A level with B, B level with C, but A resolved from C: the three cannot be ordered as groups."""
    data, step = _data(committed)
    _set(data, "compile", 910.0, 0.5)
    _set(data, "compile_liger_flce", 920.0, 10.5)  # overlaps both neighbours
    _set(data, "quack", 930.0, 0.5)
    for c in ("triton", "triton_fused_add"):
        _set(data, c, 960.0)
    tier = next(t for t in report.tiers([r for r in report.rows(data) if r["status"] == "ok"],
                                        step["config"]["resolution"]) if len(t) == 3)
    assert [r["contender"] for r in tier] == ["compile", "compile_liger_flce", "quack"]
    assert not report.level(tier[0], tier[2], step["config"]["resolution"])  # a chain, not a level group


@pytest.mark.parametrize("status", ["error", "skipped"])
def test_a_contender_that_did_not_run(committed, status):
    data, step = _data(committed)
    data["results"]["quack"] = {"contender": "quack", "label": "HF + quack RMSNorm", "status": status,
                                "reason": "quack not importable"}
    table = report.render(data)["fullsize_table.md"]
    row = next(r for r in _body(table) if r[0] == "quack RMSNorm")
    assert row[1:] == ["未运行", "—", "—", "—", "—"]
    assert ["triton_fused_add", "triton"] in _tiers(data, step)


def test_ours_or_the_baseline_missing(committed):
    data, _ = _data(committed)
    data["results"]["triton"] = {"contender": "triton", "status": "error", "reason": "x"}
    assert "未运行" in _body(report.render(data)["fullsize_table.md"])[3][1]


def test_ours_level_with_the_baseline(committed):
    data, step = _data(committed)
    _set(data, "triton", data["results"]["eager"]["median_ms"] * 1.001, 5.0)
    full = {r["contender"]: r for r in report.rows(data)}
    assert report.level(full["triton"], full["eager"], step["config"]["resolution"])


def test_the_committed_files_are_what_the_data_renders_to():
    expected = report.render(store.load("fullsize"))
    assert set(expected) == {"fullsize_table.md"}
    for name, text in expected.items():
        assert (GENERATED_DIR / name).read_text(encoding="utf-8") == text, f"run python -m bench.render: {name}"


def test_a_run_without_the_gemm_ceiling_or_memory(committed):
    """A run on a GPU with no peak on record (or off the GPU): no MFU, no peak memory; dashes and a caption
    that says so."""
    data, _ = _data(committed)
    data["config"]["gemm_ceiling_tflops"] = None
    data["environment"]["gpu"] = "a GPU without a peak on record"
    for record in data["results"].values():
        record.update(mfu=None, peak_gib=None)
    text = report.render(data)["fullsize_table.md"]
    assert "没有这张卡的 bf16 峰值，MFU 未算" in text and "TFLOP/s" not in text
    assert all(row[3] == "—" and row[5] == "—" for row in _body(text))


def test_mfu_is_against_the_dense_bf16_peak_and_the_caption_says_so(committed):
    """MFU = model FLOPs per second ÷ the H200's dense bf16 peak (989 TFLOP/s, datasheet), the usual convention;
    the run's own 8192³ GEMM rate is named in the caption, not used as the denominator."""
    data, _ = _data(committed)
    text = report.render(data)["fullsize_table.md"]
    assert "MFU 的分母是 H200 的 bf16 稠密峰值 989 TFLOP/s（数据手册）" in text
    assert f"同一次运行实测的 8192³ bf16 矩阵乘是 {tables.fmt(data['config']['gemm_ceiling_tflops'])} TFLOP/s" in text
    eager = next(r for r in report.rows(data) if r["contender"] == "eager")
    assert eager["mfu"] == data["results"]["eager"]["model_tflops"] / 989.0


def test_the_full_model_beats_the_8_layer_amdahl_bound():
    """篇2 §6.2: the 8-layer step's Amdahl bound for RMSNorm (step ÷ (step − RMSNorm), HF eager, no optimizer) is
    no ceiling for the full model: swapping only RMSNorm there gains more than that bound."""
    from bench import store
    from bench.report import step as step_report

    full, step = store.load("fullsize")["results"], store.load("step")
    eager = next(r for r in step_report.contender_rows(step) if r["contender"] == "eager")
    assert eager["bound"] and full["eager"]["median_ms"] / full["triton"]["median_ms"] > eager["bound"]


def test_the_caption_says_which_fused_add_boundary_was_measured(committed):
    """fullsize.json predates fused_add_boundary: its fused-add row measured the patch that paired the adds
    across every layer boundary, and the caption says so. A record with today's rule has no such words; a rule
    the report has no words for fails the render."""
    data, _ = _data(committed)
    assert "fused_add_boundary" not in data["config"] and data["results"]["triton_fused_add"]["status"] == "ok"
    note = "本站 RMSNorm + 融合残差加法一行测的是把残差加法跨层融合的旧补丁"
    assert note in report.caption(data)
    data["config"]["fused_add_boundary"] = fullsize_job.FUSED_ADD_BOUNDARY
    assert "跨层融合" not in report.caption(data)
    data["config"]["fused_add_boundary"] = "something else"
    with pytest.raises(KeyError, match="fused_add_boundary"):
        report.caption(data)
