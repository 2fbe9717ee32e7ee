"""The two-process FSDP2 loss-gate experiment (bench/exp_fsdp2.py), as its --quick run.

On a CPU machine the quick run is two processes under torchrun with gloo and the Triton
interpreter: the whole path (launch, fully_shard, per-rank data, the gate, rank 0's record,
rendering) runs in the suite. Checks that it is FSDP training of the global batch and not
something else: each rank holds about half of every parameter, and the HF arm's loss curve
equals a single-process run on the whole batch.
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import os
import re
import sys

import pytest
import torch
from transformers import Qwen3ForCausalLM

from bench import exp_fsdp2
from bench.harness import record
from bench.harness.loss_gate import corpus, gate_with_control, model_config
from bench.report import fsdp2 as report_fsdp2
from bench.report import plots
from loss_consistency import batch_starts, train_lockstep

# The fused patch adds x and residual of one dtype; under autocast the residual stream is fp32 and a
# sublayer's output bf16, so it raises a clear error there, which the run records (and counts as a failure).
KNOWN_ERRORS = {("amp", "triton_fused_add"): "x and residual must have the same dtype"}
# Only a platform without processes (e.g. a WebAssembly build of Python) may skip; CI never does.
CAN_SPAWN = sys.platform not in ("emscripten", "wasi") or bool(os.environ.get("CI"))


def test_rank_rows_deal_every_row_once_in_sampler_order():
    starts = torch.arange(3 * 8).reshape(3, 8)
    shards = [exp_fsdp2.rank_rows(starts, rank, 2) for rank in range(2)]
    assert [s.shape for s in shards] == [(3, 4), (3, 4)]
    assert torch.equal(shards[0][1], torch.tensor([8, 10, 12, 14]))  # rows rank, rank + world, ...
    assert torch.equal(shards[1][1], torch.tensor([9, 11, 13, 15]))
    for step in range(3):  # together the ranks see the global batch, each row exactly once
        assert sorted(torch.cat([s[step] for s in shards]).tolist()) == starts[step].tolist()
    assert torch.equal(exp_fsdp2.rank_rows(starts, 0, 1), starts)
    again = exp_fsdp2.rank_rows(torch.arange(3 * 8).reshape(3, 8), 1, 2)
    assert torch.equal(again, shards[1]), "deterministic"
    assert [s.shape[1] for s in (exp_fsdp2.rank_rows(starts, r, 4) for r in range(4))] == [2] * 4


@pytest.mark.parametrize("args, message", [((torch.zeros(3, 6), 0, 4), "does not split evenly"),
                                           ((torch.zeros(3, 8), 2, 2), "outside a world"),
                                           ((torch.zeros(8), 0, 2), r"\(steps, batch\)")])
def test_rank_rows_refuses_what_it_cannot_split(args, message):
    with pytest.raises(ValueError, match=message):
        exp_fsdp2.rank_rows(*args)


def test_configs_keep_the_loss_curve_setup():
    full = exp_fsdp2.fsdp2_config(False)
    assert full["steps"] >= 200 and full["batch"] % exp_fsdp2.WORLD_SIZE == 0
    assert full["gate"] == dict(final_window=50, final_rtol=5e-3, step_rtol=0.05)
    assert full["variants"] == ["amp", "bf16"] and full["model"]["num_hidden_layers"] == 4


def test_gate_with_control_widens_by_the_controls_own_distance():
    """The loss-curve rule both experiments share: the control's final difference from HF, doubled, is
    the final-loss limit when larger than 0.5 %; the per-step limit stays."""
    hf = [3.0 - 0.01 * i for i in range(100)]
    lines = []
    gate, control = gate_with_control(hf, [x * 1.006 for x in hf], [x * 1.004 for x in hf], {}, "amp/triton",
                                      lines.append)
    assert control["final_rel_diff"] == pytest.approx(0.004) and gate["final_limit"] == pytest.approx(0.008)
    assert gate["passed"] and lines[0].startswith("amp/triton: gate PASSED")
    gate, _ = gate_with_control(hf, [x * 1.006 for x in hf], hf, {}, "bf16/fused", lines.append)
    assert not gate["passed"] and lines[1].startswith("bf16/fused: gate FAILED")


def test_unknown_arm():
    with pytest.raises(ValueError, match="unknown contender"):
        exp_fsdp2.contender_patch("nope")


@pytest.fixture(scope="module")
def quick():
    if not CAN_SPAWN:
        pytest.skip("this platform cannot start processes")
    data = exp_fsdp2.run(argparse.Namespace(quick=True))
    data["environment"] = record.environment()  # what record.save adds
    return data


def test_quick_run_trains_every_arm_and_gates_the_patched_ones(quick):
    cfg, results = quick["config"], quick["results"]
    assert cfg["world_size"] == 2 and cfg["backend"] == ("nccl" if cfg["nccl"] else "gloo")
    fused_here = importlib.util.find_spec(exp_fsdp2.FUSED_MODULE) is not None
    for variant in cfg["variants"]:
        arms = results[variant]
        assert set(arms) == set(exp_fsdp2.CONTENDERS)
        for arm, r in arms.items():
            if arm == "triton_fused_add" and not fused_here:
                assert r["status"] == "unavailable" and exp_fsdp2.FUSED_MODULE in r["reason"]
                continue
            if r["status"] == "error":
                assert KNOWN_ERRORS.get((variant, arm), "no error expected") in r["reason"], (variant, arm, r)
                continue
            assert r["status"] == "ok", (variant, arm, r)
            assert len(r["losses"]) == cfg["steps"] and all(math.isfinite(x) for x in r["losses"])
            assert [len(t) for t in r["step_ms"]] == [cfg["steps"]] * 2 and len(r["median_step_ms"]) == 2
            # sharded: each rank holds about half of the parameters (a dimension of odd size splits unevenly)
            full = sum(p.numel() for p in Qwen3ForCausalLM(model_config(cfg)).parameters())
            assert sum(r["parameters_per_rank"]) == full and max(r["parameters_per_rank"]) < 0.55 * full
            assert r["fsdp_modules"] == cfg["geometry"]["num_hidden_layers"] + 1  # each layer, then the root
            if arm in exp_fsdp2.GATED:
                assert r["gate"]["passed"], (variant, arm, r["gate"])
        assert arms["control"]["gate"]["final_rel_diff"] < 5e-3  # the noise floor is small
    assert results["unavailable"] == ([] if fused_here else ["triton_fused_add"])
    errors = [f"{v}/{a}" for v in cfg["variants"] for a in exp_fsdp2.CONTENDERS if results[v][a]["status"] == "error"]
    assert results["errors"] == errors and results["passed"] == (not errors)


def test_fsdp_trains_the_global_batch(quick):
    """The HF arm on two ranks follows one process training on the whole batch (amp; only the
    summation order of the gradients differs, bf16 autocast rounds the partial ones)."""
    cfg = quick["config"]
    device = "cuda" if cfg["backend"] == "nccl" else "cpu"  # the quick run's device
    tokens = corpus(dict(cfg)).to(device)
    torch.manual_seed(cfg["seed"])
    model = Qwen3ForCausalLM(model_config(cfg)).to(device)
    starts = batch_starts(tokens.numel(), cfg["batch"], cfg["seq_len"], cfg["steps"], seed=cfg["data_seed"])
    (single,) = train_lockstep([model], tokens, starts, cfg["seq_len"], lr=cfg["lr"], warmup=cfg["warmup"],
                               autocast_dtype=torch.bfloat16)
    fsdp = quick["results"]["amp"]["hf"]["losses"]
    assert max(abs(a - b) / b for a, b in zip(fsdp, single)) < 1e-3, (fsdp, single)


def test_render_from_the_quick_run(quick):
    rendered = report_fsdp2.render(quick)
    assert rendered == report_fsdp2.render(json.loads(json.dumps(quick))), "deterministic"
    assert set(rendered) == {"fsdp2.md", "fsdp2.svg", "fsdp2_sentence.md"}
    sentence = rendered["fsdp2_sentence.md"]
    assert sentence.count("。") == 1 and "triton-rmsnorm-methods.md#fsdp2-两卡训练" in sentence
    assert ("都通过了同一道 loss 门限" in sentence) == quick["results"]["passed"]
    text = rendered["fsdp2.md"]
    first, rest = text.split("\n\n", 1)
    assert first.endswith("。") and re.search(r"\d", first)
    assert ("都通过 loss 门限" in first) == quick["results"]["passed"]
    header = next(line for line in rest.splitlines() if line.startswith("|"))
    cells = header.strip("|").split("|")
    assert len(cells) <= 6 and all(re.search(r"[\u4e00-\u9fff]", c) for c in cells), header
    assert rest.count("\n| ") == 1 + len(quick["config"]["variants"]) * len(exp_fsdp2.CONTENDERS)
    assert any("相对差" in t for t in plots.svg_texts(rendered["fsdp2.svg"]))
    facts = report_fsdp2.article_facts(quick)
    assert facts["passed"] == quick["results"]["passed"]
    assert facts["steps"] == quick["config"]["steps"] and facts["gpus"] == 2
    assert facts["worst_final_rel_diff"] == max(quick["results"][v][a]["gate"]["final_rel_diff"]
                                                for v in quick["config"]["variants"] for a in exp_fsdp2.GATED
                                                if quick["results"][v][a]["status"] == "ok")


def test_render_says_fail_error_and_unavailable(quick):
    data = json.loads(json.dumps(quick))
    gate = data["results"]["bf16"]["triton"]["gate"]
    gate.update(passed=False, final_rel_diff=0.02)
    data["results"]["passed"] = False
    data["results"]["amp"]["triton_fused_add"] = {"status": "error", "reason": "ValueError: boom"}
    data["results"]["bf16"]["triton_fused_add"] = {"status": "unavailable", "reason": "x"}
    data["results"]["unavailable"] = ["triton_fused_add"]
    text = report_fsdp2.render(data)["fsdp2.md"]
    first = text.split("\n\n", 1)[0]
    assert "通过 loss 门限的：fp32 权重 + bf16 autocast 下的生产版 RMSNorm；" in first
    assert "未通过的：bf16 权重下的生产版 RMSNorm" in first and "2.000%" in first
    assert "出错：fp32 权重 + bf16 autocast 下的融合残差加 + RMSNorm" in first and "不可用" in first
    assert "| bf16 权重：生产版 RMSNorm |" in text and "| 未通过 |" in text and "| 出错 |" in text
    assert "ValueError: boom" in text.split("\n\n")[-1], "the caption gives the error"
    assert "fsdp2.svg" in report_fsdp2.render(data)
