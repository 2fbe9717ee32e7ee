"""篇2's generated tables and sentences (bench/report/{rmsnorm,tuning,step,loss_curve,summary_p2}.py).

* every table has at most 6 columns and a Chinese header, and no environment footer;
* every table the article shows starts with a takeaway sentence computed from the data;
* the key points and the conclusion say what the committed data says (numbers recomputed here
  from the raw JSON, independently of the render code);
* the comparison words follow the data: the same code says 慢 when ours is slower;
* every GPU log of 篇2 under docs/data/h200/ is described in the provenance table.
"""
from __future__ import annotations

import copy
import re

import pytest

from bench import store
from bench.report import loss_curve, prose, step, summary_p2, tuning
from bench.report import rmsnorm as report_rmsnorm
from bench.report.ops import compare_sentence
from bench.report.tables import fmt

P2_REPORTS = (report_rmsnorm, tuning, step, loss_curve)
ARTICLE = ("rmsnorm_fwd.md", "rmsnorm_fwdbwd.md", "rmsnorm_naive.md", "step_time.md", "step_rmsnorm_share.md",
           "loss_curve.md", "p2_conclusion.md")
CJK = re.compile(r"[\u4e00-\u9fff]")


def _have_data() -> bool:
    return all(store.data_path(n).exists() for n in summary_p2.DATA)


pytestmark = pytest.mark.skipif(not _have_data(), reason="篇2 data not committed")


@pytest.fixture(scope="module")
def data():
    return {n: store.load(n) for n in summary_p2.DATA}


@pytest.fixture(scope="module")
def artifacts(data):
    out = {}
    for module in P2_REPORTS:
        out.update(module.render(data[module.NAME]))
    out.update(summary_p2.render_summary(store.load))
    return {name: text for name, text in out.items() if name.endswith(".md")}


def tables(text: str) -> list[list[str]]:
    """The header cells of every markdown table in ``text``."""
    lines = text.splitlines()
    separator = re.compile(r"\|(\s*:?-+:?\s*\|)+")
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line, below in zip(lines, lines[1:]) if line.startswith("|") and separator.fullmatch(below.strip())]


def test_every_p2_table_is_narrow_with_a_chinese_header(artifacts, data):
    commits = {str(d["environment"]["git_commit"])[:7] for d in data.values()}
    assert set(ARTICLE) <= set(artifacts)
    for name, text in artifacts.items():
        for header in tables(text):
            assert len(header) <= 6, f"{name}: {len(header)} columns: {header}"
            assert CJK.search(" ".join(header)), f"{name}: header without Chinese: {header}"
        if name not in ("p2_env.md", "p2_provenance.md"):  # the environment lives in the 实验环境 box
            assert not any(c in text for c in commits), f"{name}: per-table environment footer"
            assert "driver" not in text and "GPU:" not in text, name


@pytest.mark.parametrize("name", ARTICLE)
def test_article_tables_start_with_a_takeaway_sentence(artifacts, name):
    text = artifacts[name]
    first, rest = text.split("\n\n", 1)
    assert not first.startswith(("|", "*", "!")), f"{name} starts with {first[:40]!r}"
    assert CJK.search(first) and first.endswith("。") and "\n" not in first
    assert re.search(r"\d", first), f"{name}: the takeaway carries numbers from the data"
    assert rest.startswith("| "), f"{name}: the table follows the sentence"


def _copy_ceiling_from_json(rms) -> float:
    """Independently: the fastest copy in the file, however it was timed."""
    res = rms["results"]
    return max([res["copy"]["gbps"], res["copy"]["eager"]["gbps"]] + [s["copy_same_bytes"]["gbps"] for s in res["shapes"]])


def test_keypoints_say_what_the_data_says(artifacts, data):
    text = artifacts["p2_keypoints.md"]
    assert text.startswith('!!! abstract "要点"\n\n')
    bullets = [line.strip()[2:] for line in text.splitlines() if line.strip().startswith("- ")]
    assert 4 <= len(bullets) <= 5

    rms, step, loss = data["rmsnorm"], data["step"], data["loss_curve"]
    ceiling = _copy_ceiling_from_json(rms)
    shares = [s["fwd"]["triton"]["gbps"] / ceiling for s in rms["results"]["shapes"]]
    assert f"拷贝上限的 {100 * min(shares):.0f}%–{100 * max(shares):.0f}%" in bullets[0]

    hf = [s["fwd_bwd"]["hf"]["median_us"] / s["fwd_bwd"]["triton"]["median_us"] for s in rms["results"]["shapes"]]
    assert f"HF eager 是 {min(hf):.1f}–{max(hf):.1f} 倍" in bullets[1]
    peers = [min(v["median_us"] for n, v in s["fwd_bwd"].items() if n not in ("triton", "naive"))
             / s["fwd_bwd"]["triton"]["median_us"] for s in rms["results"]["shapes"]]
    assert all(p > 1 for p in peers) and "最快" in bullets[1]

    tiers = step["results"]
    speedup = tiers["eager"]["median_ms"] / tiers["triton"]["median_ms"]
    assert f"HF eager 的 {speedup:.2f}×" in bullets[2]
    share = tiers["eager"]["profile"]["rmsnorm_ms"] / tiers["eager"]["median_ms"]
    assert f"RMSNorm 占比从 {100 * share:.1f}%" in bullets[2]
    for tier in ("compile", "liger"):  # said to be faster than ours: check that they are
        assert tiers[tier]["median_ms"] < tiers["triton"]["median_ms"]
        assert f"{tiers['eager']['median_ms'] / tiers[tier]['median_ms']:.2f}×" in bullets[2]

    fwd_only = tiers["eager"]["median_ms"] / tiers["triton_fwd"]["median_ms"]
    assert f"{fwd_only:.2f}×" in bullets[3] and ("没有收益" in bullets[3]) == (fwd_only < 1.01)

    res = loss["results"]
    assert f"{loss['config']['steps']} 步" in bullets[4]
    assert ("都通过门限" in bullets[4]) == all(res[v]["gate"]["passed"] for v in loss["config"]["variants"])
    for v in loss["config"]["variants"]:
        assert f"{100 * res[v]['gate']['final_rel_diff']:.3f}%" in bullets[4]


def test_conclusion_table(artifacts, data):
    text = artifacts["p2_conclusion.md"]
    header = tables(text)[0]
    assert header == ["方案", "RMSNorm fwd+bwd（µs，H=4096）", "相对 HF eager", "训练 step（ms）", "相对 HF eager",
                      "峰值显存（GiB）"]
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ")][2:]
    assert rows == ["HF eager", "F.rms_norm", "torch.compile(HF)", "Liger", "生产版", "生产版 + torch.compile"]
    last = next(line for line in text.splitlines() if line.startswith("| 生产版 + torch.compile"))
    assert last.split("|")[2].strip() == "—"  # no op-level number for a whole-model setting
    assert "全套补丁" in text  # the Liger step row is the full Qwen3 patch, and the caption says so
    tiers = data["step"]["results"]
    assert f"{fmt(tiers['triton']['median_ms'], 4)} ms" in text.split("\n\n")[0]


def test_comparison_words_follow_the_data():
    rows = [{"label": "H=1024", "ratio": 1.2, "peer": "liger"}, {"label": "H=2048", "ratio": 1.005, "peer": "liger"},
            {"label": "k_norm", "ratio": 0.8, "peer": "compile_hf"}]
    text = compare_sentence(rows, 0.01)
    assert "在 H=1024 上快于" in text and "在 H=2048 上与最快的对手持平" in text
    assert "在 k_norm 上比最快的对手（torch.compile(HF)）慢 25%" in text
    assert "全部" in compare_sentence([dict(r, ratio=1.5) for r in rows], 0.01)


def test_takeaway_turns_when_ours_gets_slower(data):
    rms = copy.deepcopy(data["rmsnorm"])
    for s in rms["results"]["shapes"]:  # make ours three times slower than every peer in forward + backward
        slowest = max(v["median_us"] for n, v in s["fwd_bwd"].items() if n != "triton")
        s["fwd_bwd"]["triton"]["median_us"] = 3 * slowest
    sentence = report_rmsnorm.render(rms)["rmsnorm_fwdbwd.md"].split("\n\n")[0]
    assert "慢" in sentence and "快于" not in sentence


def test_log_outcome_parsing():
    assert summary_p2.log_outcome("...\n====== 1 failed, 226 passed, 7 skipped, 73 warnings in 229.74s (0:03:49) ===") \
        == "1 失败，226 通过，7 跳过"
    assert summary_p2.log_outcome("25 passed, 1 warning in 32.36s\n") == "25 通过"
    assert summary_p2.log_outcome("  [loss_curve] amp: gate PASSED: x\n  [loss_curve] bf16: gate FAILED: y") \
        == "门限：fp32 权重 + bf16 autocast 通过，bf16 权重未通过"
    assert summary_p2.log_outcome("  [fsdp2] amp/fused: ERROR ValueError: z\n  [fsdp2] amp/triton: gate PASSED: x\n"
                                  "  [fsdp2] bf16/fused: gate FAILED: y") \
        == "门限：fp32 权重 + bf16 autocast 融合残差加 + RMSNorm 出错，fp32 权重 + bf16 autocast 生产版 RMSNorm 通过，" \
           "bf16 权重 融合残差加 + RMSNorm 未通过"
    assert summary_p2.log_outcome("no summary here") == ""


def test_ridge_sentence_reads_papers_one_data():
    roofline = {"environment": {"gpu": "NVIDIA H200"},
                "results": {"ceilings": {"matmul": {"tflops": 634.4}, "copy": {"gbps": 4000.0}},
                            "points": [{"name": "RMSNorm", "fused": {"flops": 10, "bytes": 20}}]}}
    assert summary_p2.ridge_sentence(roofline) == \
        "H200 的屋脊点实测约为 159 FLOP/字节（篇 1 §五），RMSNorm 的算术强度约为 0.5 FLOP/字节。\n"


def test_prose_helpers():
    assert prose.pct_span([0.855, 0.951]) == "86%–95%"
    assert prose.pct_span([0.951, 0.95]) == "95%"
    assert prose.times_span([1.111, 2.109]) == "1.11–2.11"
    assert prose.glue("autocast", "下") == "autocast 下" and prose.glue("Liger（全套补丁）", "下") == "Liger（全套补丁）下"
    assert prose.page("| a |\n", "说明", "结论。") == "结论。\n\n| a |\n\n*说明*\n"
