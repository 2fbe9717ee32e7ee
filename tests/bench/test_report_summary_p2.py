"""bench/report/summary_p2.py and 篇2's generated tables (the rmsnorm, tuning, step and loss_curve reports).

* every table has at most 6 columns and a Chinese header, and no environment footer;
* the tables the pages read by hand start with the table (no generated sentence);
* the key points and the conclusion say what the committed data says (numbers recomputed here
  from the raw JSON, independently of the render code);
* a log's outcome is read from the log; the fused add page's 要点 box follows its data.
"""
from __future__ import annotations

import pytest

from artifacts import CJK, tables
from bench import store
from bench.report import loss_curve, rmsnorm, step, summary_p2, tuning
from bench.report.tables import fmt

P2_REPORTS = (rmsnorm, tuning, step, loss_curve)
# the tables the pages read by hand-written sentences: rmsnorm_fwd.md, rmsnorm_fwdbwd.md and p2_conclusion.md
# (numbers from values.json, words checked in tests/test_article_claims.py), loss_curve.md and p2_survey.md
# (tests/test_readings_p1p2.py), and on the methods page rmsnorm_naive.md, step_time.md and step_rmsnorm_share.md
# (tests/test_readings_methods.py); none starts with a generated sentence
READ_BY_HAND = ("rmsnorm_naive.md", "step_time.md", "step_rmsnorm_share.md")


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


def test_every_p2_table_is_narrow_with_a_chinese_header(artifacts, data):
    commits = {str(d["environment"]["git_commit"])[:7] for d in data.values()}
    assert set(READ_BY_HAND) <= set(artifacts)
    for name, text in artifacts.items():
        for header in tables(text):
            assert len(header) <= 6, f"{name}: {len(header)} columns: {header}"
            assert CJK.search(" ".join(header)), f"{name}: header without Chinese: {header}"
        if name not in ("p2_env.md", "p2_provenance.md"):  # the environment lives in the 实验环境 box
            assert not any(c in text for c in commits), f"{name}: per-table environment footer"
            assert "driver" not in text and "GPU:" not in text, name


@pytest.mark.parametrize("name", READ_BY_HAND)
def test_tables_read_by_hand_start_with_the_table(artifacts, name):
    assert artifacts[name].startswith("| "), f"{name} starts with {artifacts[name][:40]!r}"


def _copy_ceiling_from_json(rms) -> float:
    """Independently: the fastest copy in the file, however it was timed."""
    res = rms["results"]
    return max([res["copy"]["gbps"], res["copy"]["eager"]["gbps"]] + [s["copy_same_bytes"]["gbps"] for s in res["shapes"]])


def test_survey_table_names_each_library_and_measures_the_measured_ones(artifacts, data):
    text = artifacts["p2_survey.md"]
    rows = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:-1]]
            for line in text.splitlines() if line.startswith("| ") and not line.startswith("| 库") and "--" not in line}
    assert list(rows) == [name for name, *_ in summary_p2.SURVEY]
    shape = next(s for s in data["rmsnorm"]["results"]["shapes"] if s["width"] == 4096 and s["dy_layout"] == "contiguous")
    ours = shape["fwd_bwd"]["triton"]["median_us"]
    # absolute times, with HF eager and ours in the caption: no ratio against our own kernel
    assert f"RMSNorm fwd+bwd {fmt(shape['fwd_bwd']['liger']['median_us'])} µs" in rows["Liger Kernel"][2]
    assert "倍" not in "".join(cells[2] for cells in rows.values())
    assert f"HF eager 是 {fmt(shape['fwd_bwd']['hf']['median_us'])} µs，本站实现是 {fmt(ours)} µs" in text
    assert rows["Unsloth"][2] == "—（本站未测）"


def test_torch_rms_norm_values(artifacts, data):
    """§2.5's numbers ({{ rmsnorm.torch_fwd_* }}): F.rms_norm's forward over ours, recomputed here from the raw shapes."""
    from bench.report import rmsnorm

    shapes = data["rmsnorm"]["results"]["shapes"]
    ratios = {s["label"]: s["fwd"]["torch_rms_norm"]["median_us"] / s["fwd"]["triton"]["median_us"] for s in shapes}
    narrow = [r for label, r in ratios.items() if "norm" in label]
    wide = [r for label, r in ratios.items() if label.startswith("H=")]
    v = rmsnorm.values(data["rmsnorm"])
    assert v["torch_fwd_wide"] == f"{min(wide):.1f}–{max(wide):.1f}"
    assert v["torch_fwd_narrow"] == f"{min(narrow):.1f}–{max(narrow):.1f}"
    assert "p2_torch_rms_norm.md" not in artifacts  # the sentence is the page's own (tests/test_readings_p1p2.py)


def test_conclusion_table(artifacts, data):
    text = artifacts["p2_conclusion.md"]
    header = tables(text)[0]
    assert header == ["方案", "RMSNorm fwd+bwd（µs，H=4096）", "相对 HF eager", "训练 step（ms）", "相对 HF eager",
                      "峰值显存（GiB）"]
    rows = [line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| ")][2:]
    assert rows == ["HF eager", "F.rms_norm", "torch.compile(HF)", "Liger", "本站实现", "本站 RMSNorm + torch.compile"]
    last = next(line for line in text.splitlines() if line.startswith("| 本站 RMSNorm + torch.compile"))
    assert last.split("|")[2].strip() == "—"  # no op-level number for a whole-model setting
    assert "全套补丁" in text  # the Liger step row is the full Qwen3 patch, and the caption says so
    tiers = data["step"]["results"]
    assert f"| {fmt(tiers['triton']['median_ms'], 4)} |" in text
    assert not text.startswith(("H=", "本站")), "the sentence above the table is the page's own (篇 2 §八)"


def test_log_outcome_parsing():
    assert summary_p2.log_outcome("...\n====== 1 failed, 226 passed, 7 skipped, 73 warnings in 229.74s (0:03:49) ===") \
        == "1 失败，226 通过，7 跳过"
    assert summary_p2.log_outcome("25 passed, 1 warning in 32.36s\n") == "25 通过"
    assert summary_p2.log_outcome("  [loss_curve] amp: gate PASSED: x\n  [loss_curve] bf16: gate FAILED: y") \
        == "门限：fp32 权重 + bf16 autocast 通过，bf16 权重未通过"
    assert summary_p2.log_outcome("  [fsdp2] amp/fused: ERROR ValueError: z\n  [fsdp2] amp/triton: gate PASSED: x\n"
                                  "  [fsdp2] bf16/fused: gate FAILED: y") \
        == "门限：fp32 权重 + bf16 autocast 融合残差加 + RMSNorm 出错，fp32 权重 + bf16 autocast 本站 RMSNorm 通过，" \
           "bf16 权重 融合残差加 + RMSNorm 未通过"
    assert summary_p2.log_outcome("no summary here") == ""


def test_the_ridge_values_read_paper_one_s_data():
    roofline = {"environment": {"gpu": "NVIDIA H200"},
                "results": {"ceilings": {"matmul": {"tflops": 634.4}, "copy": {"gbps": 4000.0}},
                            "points": [{"name": "RMSNorm", "fused": {"flops": 10, "bytes": 20}}]}}

    def load(runs):
        def inner(name):
            if name not in runs:
                raise FileNotFoundError(name)
            return runs[name]
        return inner

    assert summary_p2.summary_values(load({"p1_roofline": roofline})) == \
        {"p2": {"ridge": "159 FLOP/字节", "rmsnorm_intensity": "0.5 FLOP/字节"}}
    # another run's higher matmul rate (fullsize.json's 8192³ GEMM): the ridge point is a range
    fullsize = {"config": {"gemm_ceiling_tflops": 800.0}}
    assert summary_p2.summary_values(load({"p1_roofline": roofline, "fullsize": fullsize}))["p2"]["ridge"] == \
        "159–200 FLOP/字节"
    low, high = summary_p2.ridge_span(roofline, {"config": {"gemm_ceiling_tflops": 600.0}})  # a slower GEMM: no range
    assert low == high


def test_the_env_box_says_which_torch_the_comparisons_hold_for():
    """The 实验环境 box's last line names the torch of the data (without its local label) and
    links to where the methods page says what changed after it."""
    envs = [{"torch": "2.11.0+cu130", "transformers": "5.17.0"}, {"torch": "2.11.0+cu130"}, {"torch": "2.12.1"}, {}]
    note = summary_p2.versions_note(envs)
    assert note.startswith("各项对比只在 torch 2.11.0、2.12.1、transformers 5.17.0 上测过；")
    assert "(triton-rmsnorm-methods.md#torch-与-triton-的版本)" in note
    # what newer releases do to the reader's baseline, and which row of the article to compare with instead
    assert "更接近本文的 Liger 一档" in note and "要对照本文的 quack 一档" in note


def test_transformers_5_25_maps_rmsnorm_to_liger_for_training_by_default():
    """The env box's claim about transformers 5.25, read in its source where that version is on disk (the
    folder the CPU suite installs it into): from_pretrained turns kernels on unless told not to, and the hub
    map sends RMSNorm to LigerRMSNorm for training on CUDA."""
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[2] / ".venv" / "transformers-5.25.0" / "transformers"
    if not root.is_dir():
        pytest.skip("transformers 5.25.0 is not installed under .venv/")
    hub = (root / "integrations" / "hub_kernels.py").read_text(encoding="utf-8").splitlines()
    assert '("RMSNorm", "LigerRMSNorm", ("cuda", "rocm"), (Mode.TRAINING, Mode.INFERENCE)),' in hub[232]
    utils = (root / "modeling_utils.py").read_text(encoding="utf-8").splitlines()
    assert utils[4421].strip() == "elif use_kernels is None:" and utils[4422].strip() == "use_kernels = True"


