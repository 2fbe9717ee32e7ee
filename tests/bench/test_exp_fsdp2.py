"""The two-process FSDP2 loss-gate experiment (bench/exp_fsdp2.py), as its --quick run (tests/bench/conftest.py).

On a CPU machine the quick run is two processes under torchrun with gloo and the Triton
interpreter: the whole path (launch, fully_shard, per-rank data, the gate, rank 0's record,
rendering) runs in the suite. Checks that it is FSDP training of the global batch and not
something else: each rank holds about half of every parameter, and the HF contender's loss curve
equals a single-process run on the whole batch.
"""
from __future__ import annotations

import importlib.util
import math

import pytest
import torch
from transformers import Qwen3ForCausalLM

from bench import exp_fsdp2
from bench.harness.loss_gate import corpus, model_config
from loss_consistency import batch_starts, train_lockstep

# The fused patch adds x and residual of one dtype; under autocast the residual stream is fp32 and a
# sublayer's output bf16, so it raises a clear error there, which the run records (and counts as a failure).
KNOWN_ERRORS = {("amp", "triton_fused_add"): "x and residual must have the same dtype"}


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


def test_unknown_contender():
    with pytest.raises(ValueError, match="unknown contender"):
        exp_fsdp2.contender_patch("nope")


def test_quick_run_trains_every_contender_and_gates_the_patched_ones(quick_fsdp2):
    cfg, results = quick_fsdp2["config"], quick_fsdp2["results"]
    assert cfg["world_size"] == 2 and cfg["backend"] == ("nccl" if cfg["nccl"] else "gloo")
    fused_here = importlib.util.find_spec(exp_fsdp2.FUSED_MODULE) is not None
    for variant in cfg["variants"]:
        trained = results[variant]
        assert set(trained) == set(exp_fsdp2.CONTENDERS)
        for contender, r in trained.items():
            if r["status"] == "skipped":  # the quick run keeps the whole set to bf16
                assert variant != "bf16" and contender in exp_fsdp2.QUICK_BF16_ONLY, (variant, contender)
                continue
            if contender == "liger" and cfg["backend"] == "gloo":
                assert r["status"] == "unavailable" and "CUDA only" in r["reason"]
                continue
            if contender == "triton_fused_add" and not fused_here:
                assert r["status"] == "unavailable" and exp_fsdp2.FUSED_MODULE in r["reason"]
                continue
            if r["status"] == "error":
                assert KNOWN_ERRORS.get((variant, contender), "no error expected") in r["reason"], (variant, contender, r)
                continue
            assert r["status"] == "ok", (variant, contender, r)
            assert len(r["losses"]) == cfg["steps"] and all(math.isfinite(x) for x in r["losses"])
            assert [len(t) for t in r["step_ms"]] == [cfg["steps"]] * 2 and len(r["median_step_ms"]) == 2
            # sharded: each rank holds about half of the parameters (a dimension of odd size splits unevenly)
            full = sum(p.numel() for p in Qwen3ForCausalLM(model_config(cfg)).parameters())
            assert sum(r["parameters_per_rank"]) == full and max(r["parameters_per_rank"]) < 0.55 * full
            assert r["fsdp_modules"] == cfg["geometry"]["num_hidden_layers"] + 1  # each layer, then the root
            if contender in exp_fsdp2.GATED:
                assert r["gate"]["passed"], (variant, contender, r["gate"])
        assert trained["control"]["gate"]["final_rel_diff"] < 5e-3  # the noise floor is small
    expected = ([] if fused_here else ["triton_fused_add"]) + (["liger"] if cfg["backend"] == "gloo" else [])
    assert results["unavailable"] == sorted(expected)
    errors = [f"{v}/{a}" for v in cfg["variants"] for a in exp_fsdp2.CONTENDERS if results[v][a]["status"] == "error"]
    assert results["errors"] == errors and results["passed"] == (not errors)


def test_fsdp_trains_the_global_batch(quick_fsdp2):
    """The HF contender on two ranks follows one process training on the whole batch (amp; only the
    summation order of the gradients differs, bf16 autocast rounds the partial ones)."""
    cfg = quick_fsdp2["config"]
    device = "cuda" if cfg["backend"] == "nccl" else "cpu"  # the quick run's device
    tokens = corpus(dict(cfg)).to(device)
    torch.manual_seed(cfg["seed"])
    model = Qwen3ForCausalLM(model_config(cfg)).to(device)
    starts = batch_starts(tokens.numel(), cfg["batch"], cfg["seq_len"], cfg["steps"], seed=cfg["data_seed"])
    (single,) = train_lockstep([model], tokens, starts, cfg["seq_len"], lr=cfg["lr"], warmup=cfg["warmup"],
                               autocast_dtype=torch.bfloat16)
    fsdp = quick_fsdp2["results"]["amp"]["hf"]["losses"]
    assert max(abs(a - b) / b for a, b in zip(fsdp, single)) < 1e-3, (fsdp, single)


def test_the_config_records_what_the_report_reads(quick_fsdp2):
    cfg = quick_fsdp2["config"]
    assert cfg["contenders"] == list(exp_fsdp2.CONTENDERS) and cfg["gated"] == list(exp_fsdp2.GATED)
    assert "arms" not in cfg


def test_quick_run_trains_the_large_geometry(quick_fsdp2):
    """The large part's path: sharded per layer with checkpointing, each contender's first-step loss near
    HF's, step and host times and tokens/s per rank, the model FLOPs per token for MFU."""
    cfg, large = quick_fsdp2["config"], quick_fsdp2["results"]["large"]
    assert cfg["parts"] == ["small", "large"] and cfg["large"]["contenders"] == list(exp_fsdp2.LARGE_CONTENDERS)
    assert set(large) == set(exp_fsdp2.QUICK_LARGE_CONTENDERS)
    hf = large["hf"]["first_loss"]
    for contender, r in large.items():
        assert r["status"] == "ok", (contender, r)
        assert abs(r["first_loss"] - hf) < 1e-3 * hf, contender
        assert [len(t) for t in r["step_ms"]] == [cfg["large"]["large_steps"]] * 2
        assert all(h > 0 for h in r["median_host_ms"]) and r["tokens_per_s_per_gpu"] > 0
        assert r["flops_per_token"] > 0


def test_parts_are_selectable(monkeypatch):
    monkeypatch.setenv("BENCH_FSDP2_PARTS", "large")
    assert exp_fsdp2.selected_parts() == ["large"]
    monkeypatch.setenv("BENCH_FSDP2_PARTS", "small,nope")
    with pytest.raises(ValueError, match="unknown parts"):
        exp_fsdp2.selected_parts()
