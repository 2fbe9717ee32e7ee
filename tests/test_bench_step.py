"""The RMSNorm attribution of bench/exp_step.py, checked on a tiny Qwen3 on CPU.

The profiler method (record_function around each norm's forward, backward nodes
linked by autograd sequence number) must find every norm, attribute exactly
the norm's own backward nodes and nothing from attention, MLP or loss.
"""
import pytest
import torch
from transformers import Qwen3ForCausalLM

from bench import exp_step
from bench.report import prose
from bench.report import step as report_step
from qwen3_configs import rmsnorm_count, tiny_qwen3_config
from qwen3_fused_add_patch import patch_qwen3_fused_add_rmsnorm
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
    """triton_fused_add: HF's norm modules with patched forwards; the module ranges hold the
    2L fused add+norm calls and the 2L+1 plain ones, each with its one backward node."""
    model, n_norms = _model(device=device)
    undo = patch_qwen3_fused_add_rmsnorm()
    try:
        profile = _profile(model, on_gpu=on_gpu)
    finally:
        undo()
    assert profile["annotated_ranges"] == n_norms
    assert profile["backward_node_names"] == ["FusedAddRMSNormFunctionBackward",
                                              "TritonRMSNormFunctionBackward"]
    assert profile["backward_nodes"] == n_norms
    if on_gpu:
        assert any("fused_add" in name for name in profile["named_rmsnorm_kernels"])


def test_no_annotation_no_attribution():
    model, _ = _model()
    profile = _profile(model, annotate=False)
    assert profile["annotated_ranges"] == 0 and profile["rmsnorm_ms"] is None


def test_tier_selection(monkeypatch):
    monkeypatch.delenv("BENCH_STEP_CONTENDERS", raising=False)
    assert exp_step.selected_contenders() == list(exp_step.CONTENDERS)
    monkeypatch.setenv("BENCH_STEP_CONTENDERS", "eager, triton")
    assert exp_step.selected_contenders() == ["eager", "triton"]
    monkeypatch.setenv("BENCH_STEP_CONTENDERS", "eager,fast")
    with pytest.raises(ValueError, match="fast"):
        exp_step.selected_contenders()


# ---------------------------------------------------------------- the fused-add tier's sentence and table

def _step_fixture():
    import json
    import pathlib

    path = pathlib.Path(__file__).parent / "fixtures" / "step.json"
    return json.loads(path.read_text(encoding="utf-8"))


def _set_fused(data, ratio, spread):
    """The fused-add tier at ``ratio`` × the triton tier's step, each with a min–max range of ±spread."""
    results = data["results"]
    ours = results["triton"]["median_ms"]
    for tier, step in (("triton", ours), (report_step.FUSED_ADD, ours * ratio)):
        results[tier].update(median_ms=step, min_ms=step * (1 - spread), max_ms=step * (1 + spread))
    return data


@pytest.mark.parametrize("ratio, spread, words, absent", [
    (0.97, 0.001, "比生产版快 3.0%", "波动区间"),
    (0.97, 0.05, "比生产版快 3.0%，但仍在两档各自的波动区间之内", None),
    (1.05, 0.001, "比生产版慢 5.0%", "波动区间"),
    (0.995, 0.05, "与生产版持平（相差不到 1%）", "比生产版"),
])
def test_fused_add_words_follow_the_data(ratio, spread, words, absent):
    data = _set_fused(_step_fixture(), ratio, spread)
    rows = report_step.contender_rows(data)
    text = report_step.render(data)["step_fused_add.md"]
    takeaway = text.split("\n\n")[0]
    assert words in takeaway and takeaway.endswith("。") and not takeaway.startswith("|")
    assert absent is None or absent not in takeaway
    assert words in report_step._step_takeaway(data, rows)  # the step table's sentence says the same
    header = next(line for line in text.splitlines() if line.startswith("|"))
    cells = [c.strip() for c in header.strip("|").split("|")]
    assert len(cells) <= 6 and cells[0] == "档位" and "相对生产版" in cells
    body = [line for line in text.splitlines() if line.startswith("| ") and "档位" not in line and ":--" not in line]
    assert [line.split("|")[1].strip() for line in body] == [
        report_step.label(t) for t in (exp_step.BASELINE, "triton", report_step.FUSED_ADD)]
    fused_row = body[-1].split("|")
    assert fused_row[5].strip() == prose.times(1 / ratio)


def test_fused_add_share_clause_follows_the_data():
    data = _set_fused(_step_fixture(), 0.97, 0.001)
    profile = data["results"]["triton"]["profile"]
    step = data["results"]["triton"]["median_ms"]
    profile["rmsnorm_ms"] = 0.02 * step  # RMSNorm 2 % of the step: not much left to save
    small = report_step.fused_add_takeaway(data, report_step.contender_rows(data))
    assert "生产版的一步里 RMSNorm 占 2.0%" in small and "step 层面能省的本来就不多" in small
    profile["rmsnorm_ms"] = 0.2 * step
    large = report_step.fused_add_takeaway(data, report_step.contender_rows(data))
    assert "占 20.0%" in large and "本来就不多" not in large


def test_fused_add_without_the_tier_says_so():
    data = _step_fixture()
    data["results"][report_step.FUSED_ADD] = {"contender": report_step.FUSED_ADD, "status": "skipped", "reason": "budget"}
    text = report_step.render(data)["step_fused_add.md"]
    assert "没有跑成" in text.split("\n\n")[0]
    assert report_step.label(report_step.FUSED_ADD) not in text.split("\n\n")[1]  # not a row of the table
    del data["results"][report_step.FUSED_ADD]  # a run from before the tier existed
    assert report_step.fused_add_takeaway(data, report_step.contender_rows(data)).endswith("生产版 + 融合残差加法这一档还没有测。")
