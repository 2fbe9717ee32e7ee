"""bench/exp_width_sweep.py, bench/exp_fused_add.py and quack in bench/exp_rmsnorm.py, as --quick CPU runs.

Each experiment runs at its smoke-test sizes, is saved and loaded as run_all does, and renders:
tables of at most 6 columns with a Chinese header and a takeaway sentence first, plots with a unit
label. A contender that cannot run on the CPU (Liger, quack) is recorded as skipped with its
reason; a contender that fails at a width is an error string there, and the sweep goes on.
"""
from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import re

import pytest

import rmsnorm_triton
from bench import exp_fused_add, exp_rmsnorm, exp_width_sweep, store
from bench.harness import mode, record
from bench.harness.contenders import rmsnorm_contenders
from bench.harness.op_timing import fused_add_inputs, min_bytes, time_fused_add
from bench.report import fused_add as report_fused_add
from bench.report import plots, prose, summary_p2
from bench.report import rmsnorm as report_rmsnorm
from bench.report import width_sweep as report_width_sweep
from bench.report.render import render_all
from test_generated import UNIT_LABEL
from test_summary_p2 import tables

CJK = re.compile(r"[\u4e00-\u9fff]")


def _quick(module, tmp_path):
    payload = module.run(argparse.Namespace(quick=True))
    payload["config"]["quick"] = True
    return json.loads(record.save(module.NAME, payload, tmp_path).read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    return _quick(exp_width_sweep, tmp_path_factory.mktemp("sweep"))


@pytest.fixture(scope="module")
def fused(tmp_path_factory):
    return _quick(exp_fused_add, tmp_path_factory.mktemp("fused"))


def _check_artifacts(rendered):
    for name, text in rendered.items():
        if name.endswith(".md"):
            for header in tables(text):
                assert len(header) <= 6 and CJK.search(" ".join(header)), (name, header)
        else:
            assert text.startswith("<?xml") and any(UNIT_LABEL.search(t) for t in plots.svg_texts(text)), name


def _unavailable_peers():
    """The optional peers this machine cannot time: both on a CPU, the uninstalled ones on a GPU."""
    if not mode.gpu_available():
        return {"liger", "quack"}
    return {name for name, module in (("liger", "liger_kernel"), ("quack", "quack"))
            if importlib.util.find_spec(module) is None}


def _takeaway(text):
    first = text.split("\n\n")[0]
    assert CJK.search(first) and first.endswith("。") and "\n" not in first and not first.startswith("|")
    return first


def test_width_sweep_quick_run_records_errors_and_skips(sweep):
    shapes = sweep["results"]["shapes"]
    assert [s["width"] for s in shapes] == exp_width_sweep.QUICK_WIDTHS
    skipped = sweep["results"]["skipped"]
    assert set(skipped) == _unavailable_peers()  # reasons, not a crash
    why = "No module" if mode.gpu_available() else "CUDA"
    assert all(why in reason for reason in skipped.values())
    assert shapes[-1]["width"] > rmsnorm_triton.MAX_COLS  # the chunked path
    for s in shapes:
        assert "triton" not in s["errors"] and "triton" in s["fwd"] and "triton" in s["fwd_bwd"]
        assert {"torch_rms_norm", "compile_hf"} <= set(s["fwd"]) & set(s["fwd_bwd"])
        assert s["bytes_fwd_bwd"] == min_bytes(s["rows"], s["width"])["fwd_bwd"]
    # one static graph per width and grad mode: no recompile of an earlier width's graph
    # (dynamo's counter is per process: count from where this run started)
    graphs = [s["compiles"]["dynamo_graphs"] for s in shapes]
    assert graphs[0] >= 2 and [b - a for a, b in zip(graphs, graphs[1:])] == [2] * (len(graphs) - 1)


def test_width_sweep_renders_and_states_the_facts(sweep):
    rendered = report_width_sweep.render(sweep)
    assert set(rendered) == {"width_sweep.md", "width_sweep.svg", "width_sweep_article.md"}
    article = rendered["width_sweep_article.md"]
    assert article.count("。") == 1 and f"{len(exp_width_sweep.QUICK_WIDTHS)} 个宽度上" in article
    assert rendered == report_width_sweep.render(json.loads(json.dumps(sweep)))  # deterministic
    _check_artifacts(rendered)
    facts = report_width_sweep.sweep_facts(sweep)
    assert facts["fwd"]["unsupported"] == [] and facts["fwd"]["compared"] == len(exp_width_sweep.QUICK_WIDTHS)
    # a width where ours raised is named, not dropped silently
    broken = copy.deepcopy(sweep)
    wide = broken["results"]["shapes"][-1]
    for phase in ("fwd", "fwd_bwd"):
        wide[phase].pop("triton")
    wide["errors"]["triton"] = "ValueError: rows too wide"
    assert report_width_sweep.sweep_facts(broken)["fwd"]["unsupported"] == [wide["width"]]
    first = _takeaway(report_width_sweep.render(broken)["width_sweep.md"])
    assert f"H={wide['width']} 上没有结果" in first


def _with_times(sweep, ours, peer, phase="fwd"):
    """The quick data with ours' and F.rms_norm's times set per width (µs), other peers removed."""
    data = copy.deepcopy(sweep)
    ceiling = report_width_sweep.sweep_ceiling(data["results"])["gbps"]
    for s in data["results"]["shapes"]:
        s[phase] = {}
        for name, us in (("triton", ours(s["width"])), ("torch_rms_norm", peer(s["width"]))):
            if us is not None:
                s[phase][name] = {"median_us": us, "gbps": s[f"bytes_{phase}"] / (us * 1e3)}
        s["errors"] = {}
    return data, ceiling


def test_sweep_facts_follow_the_data(sweep):
    widths = [256, 1000, 2048, 3000]
    sweep = copy.deepcopy(sweep)
    sweep["results"]["shapes"] = [dict(sweep["results"]["shapes"][0], width=w, label=f"H={w}",
                                       bytes_fwd=min_bytes(16, w)["fwd"]) for w in widths]
    ceiling = report_width_sweep.sweep_ceiling(sweep["results"])["gbps"]
    at_share = {256: 0.5, 1000: 0.9, 2048: 0.80, 3000: 0.95}  # ours' share of the ceiling
    peer = {256: 0.5 * 1.01, 1000: 0.9 * 0.9, 2048: 0.8 * 1.25, 3000: 0.95}  # the peer's share

    def us(share, w):
        return min_bytes(16, w)["fwd"] / (share * ceiling * 1e3)

    data, _ = _with_times(sweep, lambda w: us(at_share[w], w), lambda w: us(peer[w], w))
    facts = report_width_sweep.sweep_facts(data)["fwd"]
    assert facts["compared"] == 4 and facts["level_or_ahead"] == 3  # 256 within 2 %, 1000 ahead, 3000 level
    assert facts["behind"] == [2048] and facts["worst"]["width"] == 2048
    assert facts["worst"]["ratio"] == pytest.approx(0.8)
    assert facts["misses"] == [2048]  # 80 % < 85 % at a width >= 1024; 256 is below TARGET_FROM
    text = report_width_sweep.takeaway(data)
    assert "4 个宽度中的 3 个" in text and "最差在 H=2048，比 F.rms_norm 慢 25%" in text
    assert "低于拷贝上限的 85%的有 H=2048" in text


def test_fused_add_quick_run_and_render(fused, monkeypatch):
    res = fused["results"]
    assert set(res["skipped"]) >= _unavailable_peers()
    for s in res["shapes"]:
        assert {"unfused", "compile_hf"} <= set(s["fwd_bwd"])
        assert s["bytes_fwd"] == 4 * s["rows"] * s["width"] * 2 + 2 * s["width"]
        assert s["bytes_fwd_bwd"] == 8 * s["rows"] * s["width"] * 2 + 6 * s["width"]
    rendered = report_fused_add.render(fused)
    assert set(rendered) == {"fused_add_fwd.md", "fused_add_fwdbwd.md", "fused_add_ratios.md",
                             "fused_add_bandwidth.svg"}
    _check_artifacts(rendered)
    for name in ("fused_add_fwd.md", "fused_add_fwdbwd.md"):
        _takeaway(rendered[name])
    # without ours (the fused kernel not importable) the tables still render and say why
    data = copy.deepcopy(fused)
    for s in data["results"]["shapes"]:
        for phase in ("fwd", "fwd_bwd"):
            s[phase].pop("triton_fused_add", None)
    data["results"]["skipped"]["triton_fused_add"] = "ModuleNotFoundError('rmsnorm_fused_add')"
    text = report_fused_add.render(data)["fused_add_fwd.md"]
    assert _takeaway(text).startswith("forward：融合版未测（ModuleNotFoundError")


def test_fused_add_leaves_the_gradients_alone(fused):
    """The backward gets dy and ds; a contender writing dX into either (Liger's in_place=True) fails the run."""
    import torch

    sets = fused_add_inputs(4, 64, exp_fused_add.DTYPE, "cpu", 1, seed=0)
    weight = torch.nn.Parameter(torch.ones(64, dtype=exp_fused_add.DTYPE))

    def in_place(x, r):
        s = r + x
        y = s * weight

        class Clobber(torch.autograd.Function):
            @staticmethod
            def forward(ctx, t):
                return t.view_as(t)

            @staticmethod
            def backward(ctx, g):
                g.zero_()  # writes into the caller's dy
                return g

        return Clobber.apply(y), s

    entry = {"fwd": {}, "fwd_bwd": {}, "errors": {}, "first_call_s": {}}
    with pytest.raises(AssertionError, match="wrote into dy or ds"):
        time_fused_add(entry, "clobber", in_place, weight, sets)


def test_rmsnorm_quack_is_skipped_on_cpu_and_committed_data_renders():
    skipped = {}
    contenders = rmsnorm_contenders(exp_rmsnorm.CONTENDERS, 64, exp_rmsnorm.DTYPE, "cpu", skipped, exp_rmsnorm.EPS)
    assert "quack" not in contenders and "quack" in skipped and "CUDA" in skipped["quack"]
    if not store.data_path("rmsnorm").exists():
        pytest.skip("rmsnorm data not committed")
    rms = store.load("rmsnorm")
    assert any("quack" in s["fwd"] for s in rms["results"]["shapes"])  # measured on the H200
    rendered = report_rmsnorm.render(rms)
    # with a quack column the contender tables drop HF eager to stay at 6 columns and say so
    for name in ("rmsnorm_fwd_all.md", "rmsnorm_eager.md"):
        header = tables(rendered[name])[0]
        assert len(header) == 6 and "quack" in header and "HF eager" not in header
        assert "HF eager 未列出" in rendered[name]
    # data from before quack (or a run where it could not load) still renders, without the column
    without = copy.deepcopy(rms)
    for s in without["results"]["shapes"]:
        for phase in ("fwd", "fwd_bwd", "fwd_eager", "fwd_bwd_eager"):
            s[phase].pop("quack", None)
    header = tables(report_rmsnorm.render(without)["rmsnorm_fwd_all.md"])[0]
    assert "quack" not in header and "HF eager" in header


def test_renders_skip_missing_data(monkeypatch, tmp_path):
    """No width_sweep.json or fused_add.json for a GPU: bench.render renders the rest and nothing of theirs."""
    monkeypatch.setattr(store, "DATA_DIR", tmp_path)
    assert render_all("h200") == {}


def _fused_times(fused, unfused_over_ours, phase="fwd_bwd"):
    """A copy of the quick run with the unfused contender at ``unfused_over_ours`` × ours' time."""
    data = copy.deepcopy(fused)
    for s in data["results"]["shapes"]:
        ours = s[phase]["triton_fused_add"]["median_us"]
        s[phase]["unfused"] = dict(s[phase]["unfused"], median_us=ours * unfused_over_ours)
    return data


@pytest.mark.parametrize("ratio, words", [
    (1.2, "实测在全部 2 个形状上快于不融合，不融合用时是融合版的 1.20 倍"),
    (1.0, "与不融合持平（相差不到 1%）"),
    (1 / 1.1, "比不融合慢 10%"),
])
def test_fused_add_gain_follows_the_data(fused, ratio, words):
    fwd, both, peers = report_fused_add.gain_parts(_fused_times(fused, ratio))
    assert both.startswith(f"forward + backward 按字节最多快到 {prose.times(11 / 8)}，") and words in both
    assert fwd.startswith(f"forward 按字节最多快到 {prose.times(5 / 4)}，")
    assert peers.startswith("与最快的对手相比，forward + backward ")
    assert "（不融合）" not in both  # no peer name to repeat when the other side is one contender


def test_fused_add_keypoints_box(fused):
    import pathlib

    step = json.loads((pathlib.Path(__file__).parent / "fixtures" / "step.json").read_text(encoding="utf-8"))
    box = summary_p2.fused_add_keypoints(_fused_times(fused, 1.2), step)
    lines = box.splitlines()
    assert lines[:2] == ['!!! abstract "要点"', ""] and all(line.startswith("    - ") for line in lines[2:])
    assert len(lines[2:]) == 5 and all(line.endswith("。") for line in lines[2:])
    assert "从 5 遍降到 4 遍" in lines[2] and "从 6 遍降到 4 遍" in lines[2]
    assert lines[3].startswith("    - 单算子 forward 按字节") and "单算子与最快的对手" in lines[5]
    assert "把残差加法也融合进 RMSNorm" in lines[6] and "比生产版" in lines[6]
