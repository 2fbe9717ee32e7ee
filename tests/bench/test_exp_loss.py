"""bench/exp_loss.py: the declared shapes, FLOPs and bytes, HF's shifted targets, and the quick run on CPU
(every contender that runs here, through the same measuring code as on the GPU; the GPU-only ones skipped
with a reason)."""
import math

import pytest
import torch
import torch.nn.functional as F
from transformers.loss.loss_utils import ForCausalLMLoss

from bench import exp_loss
from qwen3_configs import QWEN3_SIZES

# bf16 against the fp32 reference: a loss returned in bf16 (torch_chunked) is rounded to 2^-9 relative.
LOSS_RTOL, GRAD_NORM_RTOL, GRAD_MAX_RTOL = 4e-3, 2e-2, 3e-2
# Other libraries' contenders: at the quick shape (H = 16, V = 100) Liger + torch.compile's forward loss was 6.3 %
# off on an H100 (docs/data/h100-80gb-hbm3/gpu-test-failures-3c094b2.log); their accuracy is data, not this test's.
THIRD_PARTY = {"liger", "liger_compile", "cce"}


def torch_has_chunked() -> bool:
    return hasattr(F, "linear_cross_entropy") and hasattr(torch.nn, "LinearCrossEntropyOptions")


def test_shapes_one_per_qwen3_hidden_size():
    shapes = exp_loss.SHAPES
    assert sorted(s["hidden"] for s in shapes) == sorted({fields[0] for fields in QWEN3_SIZES.values()})
    assert all(s["tokens"] == 16384 and (s["batch"], s["seq"]) == (4, 4096) and s["vocab"] == 151936
               for s in shapes)
    assert sorted("、".join(s["models"] for s in shapes).split("、")) == sorted(QWEN3_SIZES)
    assert shapes[0]["hidden"] == 4096 and shapes[0]["models"] == "8B"  # the step's loss shape first
    assert exp_loss.selected_shapes(quick=False) == shapes


def test_flops_and_logits_bytes():
    counts = exp_loss.loss_counts(exp_loss.loss_shape(4, 4096, 4096))
    n, h, v = 16384, 4096, 151936
    assert counts == {"flops_fwd": 2 * n * h * v, "flops_fwd_bwd": 6 * n * h * v, "logits_bytes": 2 * n * v}
    assert round(counts["logits_bytes"] / 1e9, 2) == 4.98 and round(counts["flops_fwd"] / 1e12, 1) == 20.4
    assert exp_loss.liger_chunk_tokens(n, h, v) == 512  # next_pow2(ceil(16384 / ceil(151936 / 4096)))


def test_targets_are_hfs_shifted_labels():
    """hf_eager on the flattened targets is ForCausalLMLoss on the unshifted (B, T) labels they came from."""
    shape = exp_loss.loss_shape(3, 10, 8, 50)
    hidden, weight, targets = exp_loss.make_inputs(shape, "cpu", seed=0)
    rows = targets.view(3, 10)
    assert (rows[:, -1] == -100).all() and ((rows[:, :-1] >= 0) & (rows[:, :-1] < 50)).all()
    labels = torch.cat([torch.zeros(3, 1, dtype=torch.long), rows[:, :-1]], dim=1)  # the first one is never a target
    logits = F.linear(hidden, weight)
    torch.testing.assert_close(exp_loss.hf_loss(hidden, weight, targets),
                               ForCausalLMLoss(logits.view(3, 10, 50), labels, 50), rtol=0, atol=0)
    assert abs(float(logits.float().std()) - exp_loss.LOGIT_STD) < 1.0


def test_contender_selection(monkeypatch):
    assert exp_loss.contender_names(quick=True)[-5:] == ["ours", "ours_compile", "ours_unchecked", "ours_c8",
                                                         "ours_c16"]
    assert [n for n in exp_loss.contender_names(quick=False) if exp_loss.sweep_chunk(n) is not None] == [
        "ours_c128", "ours_c256", "ours_c512", "ours_c1024", "ours_c2048", "ours_c4096"]
    monkeypatch.setenv("BENCH_LOSS_CONTENDERS", "hf_eager, ours")
    assert exp_loss.selected_contenders(quick=False) == ["hf_eager", "ours"]
    monkeypatch.setenv("BENCH_LOSS_CONTENDERS", "ours_c8")
    with pytest.raises(ValueError, match="unknown contenders"):
        exp_loss.selected_contenders(quick=False)


def test_gpu_only_contenders_are_skipped_with_a_reason_off_cuda():
    skipped = {}
    built = exp_loss.contenders(exp_loss.GPU_ONLY, exp_loss.QUICK_SHAPES[0], "cpu", skipped)
    assert built == {} and set(skipped) == set(exp_loss.GPU_ONLY)
    assert all(reason for reason in skipped.values())
    assert "CUDA GPU only" in skipped["compile"] and "CUDA GPU only" in skipped["liger"]


def _finite(x) -> bool:
    return isinstance(x, float) and math.isfinite(x)


def test_quick_run(quick_loss, on_gpu):
    config, results = quick_loss["config"], quick_loss["results"]
    assert config["contenders"] == ["hf_eager", "compile", "liger", "liger_compile", "cce", "torch_chunked",
                                    "ours", "ours_compile", "ours_unchecked", "ours_c8", "ours_c16"]
    assert [config[k] for k in ("tokens", "vocab", "ignore_index", "chunk_sweep")] == [32, 100, -100, [8, 16]]
    assert config["versions"]["torch"] == torch.__version__ and "do_bench" in config["timer"]
    skipped = results["skipped"]
    if on_gpu:
        ran = set(config["contenders"]) - set(skipped)
        assert {"hf_eager", "compile", "ours", "ours_compile", "ours_unchecked", "ours_c8", "ours_c16"} <= ran
    else:
        ran = {"hf_eager", "ours", "ours_unchecked", "ours_c8", "ours_c16"} | (
            {"torch_chunked"} if torch_has_chunked() else set())
        assert set(skipped) == set(config["contenders"]) - ran  # compile, liger, liger_compile, cce, ours_compile
    assert all(isinstance(reason, str) and reason for reason in skipped.values())
    assert not results["not_run"]
    (entry,) = results["shapes"]
    assert not entry["errors"], entry["errors"]
    assert entry["ours_config"]["chunk_tokens"] == 32 and entry["reference"]["counted"] == 30  # 2 rows' last ignored
    assert _finite(entry["reference"]["loss"]) and entry["reference"]["entropy_nats"] > 0
    fwd_bwd_only = {"ours_unchecked", "ours_c8", "ours_c16"}
    assert {n for n in ran if exp_loss.fwd_bwd_only(n)} == fwd_bwd_only
    for phase in ("fwd", "fwd_bwd"):
        assert set(entry[phase]) == (ran if phase == "fwd_bwd" else ran - fwd_bwd_only), phase
        for name, stats in entry[phase].items():
            assert _finite(stats["median_us"]) and stats["median_us"] > 0, (phase, name)
            assert stats["tflops"] == entry[f"flops_{phase}"] / (stats["median_us"] * 1e6)
            assert (stats["peak_bytes"] is None) is not on_gpu
            if name in THIRD_PARTY:  # their own accuracy: recorded, and the report names a wrong loss
                assert _finite(stats["loss"]) and stats["loss_rel_err"] >= 0, (phase, name, stats)
                continue
            assert _finite(stats["loss"]) and stats["loss_rel_err"] < LOSS_RTOL, (phase, name, stats)
            reference = entry["reference"]["loss"]
            assert abs(stats["loss"] - reference) <= stats["loss_rel_err"] * reference * 1.01
            if phase == "fwd_bwd":
                for grad in ("grad_hidden", "grad_weight"):
                    assert stats[grad]["norm_err"] < GRAD_NORM_RTOL and stats[grad]["max_err"] < GRAD_MAX_RTOL, (
                        name, grad, stats[grad])
            else:
                assert "grad_hidden" not in stats
    assert set(entry["first_call_s"]) == ran
    # ours with its default config (one chunk here) and at the sweep's chunks: the same loss
    for name in ("ours_c8", "ours_c16", "ours_unchecked"):
        assert math.isclose(entry["fwd_bwd"][name]["loss"], entry["fwd_bwd"]["ours"]["loss"], rel_tol=1e-4)


def test_gemm_floor_times_the_three_full_gemms():
    """gemm_floor: one median per GEMM, their sum, and the rate 3 x 2 N H V FLOPs / total reaches."""
    import torch

    from bench import exp_loss

    hidden, weight = torch.randn(64, 16), torch.randn(100, 16)
    floor = exp_loss.gemm_floor((hidden, weight, None))
    assert set(floor) == {"logits", "d_hidden", "d_weight", "total_us", "tflops"}
    assert floor["total_us"] == floor["logits"] + floor["d_hidden"] + floor["d_weight"] > 0
    assert floor["tflops"] == 3 * 2 * 64 * 16 * 100 / (floor["total_us"] * 1e6)
