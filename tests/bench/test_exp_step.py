"""bench/exp_step.py: the RMSNorm attribution, checked on a tiny Qwen3 on CPU, the contender selection, and
the quick run (each contender in its own process, started through run_all's worker hand-off).

The profiler method (record_function around each norm's forward, backward nodes
linked by autograd sequence number) must find every norm, attribute exactly
the norm's own backward nodes and nothing from attention, MLP or loss.
"""
import pytest
import torch
from transformers import Qwen3ForCausalLM

from bench import exp_step
from bench.harness import step_runs
from bench.report.names import TIE_RULES
from qwen3_configs import rmsnorm_count, tiny_qwen3_config
from qwen3_fused_add_patch import apply_fused_add_rmsnorm
from qwen3_patch import patch_qwen3_rmsnorm
from rmsnorm_triton import TritonQwen3RMSNorm

HF_NODES_FP32 = {"PowBackward0", "MeanBackward1", "AddBackward0", "RsqrtBackward0", "MulBackward0"}


def _model(norm_cls=None, device="cpu"):
    config = tiny_qwen3_config(use_cache=False)
    undo = patch_qwen3_rmsnorm(norm_cls) if norm_cls else None
    try:
        torch.manual_seed(0)
        model = Qwen3ForCausalLM(config)
    finally:
        if undo:
            undo()
    return model.to(device), rmsnorm_count(config)


def _profile(model, annotate=True, on_gpu=False):
    batch = torch.randint(0, model.config.vocab_size, (2, 16), device=next(model.parameters()).device)
    return exp_step.profile_rmsnorm(model, [batch], 1, annotate=annotate, on_gpu=on_gpu)


def test_hf_norms_forward_ranges_and_backward_nodes():
    model, n_norms = _model()
    profile = _profile(model)
    assert profile["annotated_ranges"] == n_norms
    # fp32: both .to() casts are no-ops, leaving pow, mean, add eps, rsqrt, mul, mul by weight.
    assert set(profile["backward_node_names"]) == HF_NODES_FP32
    assert profile["backward_nodes"] == 6 * n_norms
    assert 0 < profile["rmsnorm_fwd_ms"] and 0 < profile["rmsnorm_bwd_ms"]
    assert profile["rmsnorm_ms"] < profile["device_ms"]


def test_triton_norms_are_one_backward_node_each(device, on_gpu):
    model, n_norms = _model(TritonQwen3RMSNorm, device)  # Triton needs the backend's device
    profile = _profile(model, on_gpu=on_gpu)
    assert profile["annotated_ranges"] == n_norms
    assert profile["backward_node_names"] == ["TritonRMSNormFunctionBackward"]
    assert profile["backward_nodes"] == n_norms


def test_fused_add_tier_counts_the_fused_calls_as_norm_time(device, on_gpu):
    """triton_fused_add: the fused subclasses of HF's norm modules; the module ranges hold the
    2L fused add+norm calls and the 2L+1 plain ones, each with its one backward node."""
    model, n_norms = _model(device=device)
    undo = apply_fused_add_rmsnorm(model)
    try:
        profile = _profile(model, on_gpu=on_gpu)
    finally:
        undo()
    assert profile["annotated_ranges"] == n_norms
    assert profile["backward_node_names"] == ["FusedAddRMSNormFunctionBackward",
                                              "TritonRMSNormFunctionBackward"]
    assert profile["backward_nodes"] == n_norms
    if on_gpu:  # the fused add runs the plain kernels' family (HAS_RESIDUAL, HAS_DS)
        names = profile["named_rmsnorm_kernels"]
        assert any(n.startswith("rms_norm_fwd") for n in names), names
        assert any(n.startswith("rms_norm_bwd") for n in names), names


def test_no_annotation_no_attribution():
    model, _ = _model()
    profile = _profile(model, annotate=False)
    assert profile["annotated_ranges"] == 0 and profile["rmsnorm_ms"] is None


def test_tier_selection(monkeypatch):
    monkeypatch.delenv("BENCH_STEP_CONTENDERS", raising=False)
    assert step_runs.selected_contenders() == step_runs.STEP_CONTENDERS
    monkeypatch.setenv("BENCH_STEP_CONTENDERS", "eager, triton")
    assert step_runs.selected_contenders() == ["eager", "triton"]
    monkeypatch.setenv("BENCH_STEP_CONTENDERS", "eager,fast")
    with pytest.raises(ValueError, match="fast"):
        step_runs.selected_contenders()


def test_quick_run_measures_each_contender_in_its_own_process(quick_step):
    cfg, results = quick_step["config"], quick_step["results"]
    assert cfg["contenders"] == ["eager", "triton_fused_add"] and list(results) == cfg["contenders"]
    assert cfg["baseline"] == exp_step.BASELINE and cfg["ours"] == exp_step.OURS and cfg["tie_rule"] in TIE_RULES
    for contender, record in results.items():
        assert record["status"] == "ok", record
        assert record["contender"] == contender and record["label"] == exp_step.CONTENDERS[contender]
        assert record["norm_count"] == 4 * cfg["model"]["num_hidden_layers"] + 1
        assert len(record["step_ms"]) == cfg["rounds"] * cfg["timed_steps"] and record["profile"]["rmsnorm_ms"] > 0
        assert record["processes"] == cfg["rounds"] == len(record["rounds"])
        lo, hi = record["ci95_ms"]
        assert lo <= record["median_ms"] <= hi
    assert cfg["resolution"] is not None and cfg["resolution"] >= 0


def test_rounds_interleave_and_aggregate():
    names = ["a", "b", "c"]
    assert [step_runs.round_order(names, r) for r in range(4)] == [
        ["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"], ["a", "b", "c"]]
    cfg = {"batch": 2, "seq_len": 4}
    rounds = [{"status": "ok", "step_ms": [10.0, 11.0, 12.0], "peak_gib": 1.0, "profile": {"device_ms": 9.0},
               "loss": 1.0},
              {"status": "error", "reason": "boom"},
              {"status": "ok", "step_ms": [20.0, 21.0, 22.0], "peak_gib": 2.0, "profile": None}]
    record = step_runs.aggregate("a", rounds, cfg)
    assert record["status"] == "ok" and record["processes"] == 2 and len(record["rounds"]) == 3
    assert record["median_ms"] == 16.0 and record["peak_gib"] == 2.0 and record["profile"] == {"device_ms": 9.0}
    assert record["ci95_ms"][0] <= 16.0 <= record["ci95_ms"][1]
    assert record["round_medians_ms"] == [11.0, 21.0]
    assert step_runs.aggregate("a", [{"status": "error", "reason": "boom"}], cfg)["status"] == "error"
    assert step_runs.resolution({"a": record, "b": {"status": "error"}}) == pytest.approx(
        (record["ci95_ms"][1] - record["ci95_ms"][0]) / 16.0)


def test_a_late_round_takes_a_skipped_rounds_place():
    cfg = {"batch": 2, "seq_len": 4, "timed_steps": 3}
    rounds = [{"status": "ok", "step_ms": [10.0, 11.0, 12.0], "peak_gib": 1.0, "profile": {"device_ms": 9.0}},
              {"status": "ok", "step_ms": [20.0, 21.0, 22.0], "peak_gib": 2.0, "profile": None},
              {"status": "skipped", "reason": "time budget"}]
    two = step_runs.aggregate("a", rounds, cfg)
    three = exp_step.add_late_round(two, {"status": "ok", "step_ms": [30.0, 31.0, 32.0], "median_ms": 31.0,
                                          "peak_gib": 3.0}, cfg)
    direct = step_runs.aggregate("a", rounds[:2] + [{"status": "ok", "step_ms": [30.0, 31.0, 32.0],
                                                    "peak_gib": 3.0}], cfg)
    for key in ("median_ms", "ci95_ms", "min_ms", "max_ms", "round_medians_ms", "processes", "peak_gib", "step_ms"):
        assert three[key] == direct[key], key
    assert [r["status"] for r in three["rounds"]] == ["ok", "ok", "ok"] and three["rounds"][2]["late"]
    with pytest.raises(ValueError, match="did not run"):
        exp_step.add_late_round(two, {"status": "error", "reason": "boom"}, cfg)
    with pytest.raises(ValueError, match="timed_steps"):
        exp_step.add_late_round(two, {"status": "ok", "step_ms": [1.0], "median_ms": 1.0}, cfg)
    payload = {"config": cfg, "results": {"a": two}}
    merged = exp_step.merge_late_rounds(payload, [{"contender": "a", "status": "ok", "step_ms": [30.0, 31.0, 32.0],
                                                   "median_ms": 31.0}])
    assert merged["config"]["late_rounds"] == ["a"] and merged["results"]["a"]["processes"] == 3
