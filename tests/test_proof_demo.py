"""Tests for snippets/proof_demo.py (the example file of docs/how-we-test.md)."""
import pathlib
import runpy

import pytest
import torch

from proof_demo import TOLERANCE, max_error, poisoned_like, rms_norm_reference, time_on_gpu


def hf_qwen3_rms_norm(x, weight, eps=1e-6):
    """The real Hugging Face module, with the given weight."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    module = Qwen3RMSNorm(weight.shape[0], eps=eps).to(device=weight.device, dtype=weight.dtype)
    with torch.no_grad():
        module.weight.copy_(weight)
    return module(x)


@pytest.mark.parametrize("x_dtype,w_dtype", [
    (torch.float32, torch.float32),
    (torch.bfloat16, torch.bfloat16),
    (torch.bfloat16, torch.float32),
    (torch.float16, torch.float16),
])
def test_reference_matches_hugging_face(device, x_dtype, w_dtype):
    torch.manual_seed(1)
    x = torch.randn(6, 96, device=device, dtype=x_dtype) * 3
    weight = torch.rand(96, device=device, dtype=w_dtype) + 0.5
    expected = hf_qwen3_rms_norm(x, weight)
    actual = rms_norm_reference(x, weight)
    assert actual.dtype == expected.dtype  # bf16 input + fp32 weight -> fp32, as in HF
    # fp64 normalisation may differ from HF's fp32 by one rounding of x.dtype.
    torch.testing.assert_close(actual, expected, rtol=TOLERANCE[x_dtype], atol=TOLERANCE[x_dtype])


def test_reference_is_exact_in_fp64(device):
    torch.manual_seed(2)
    x = torch.randn(5, 33, device=device, dtype=torch.float64)
    weight = torch.rand(33, device=device, dtype=torch.float64) + 0.5
    rms = x.pow(2).mean(-1, keepdim=True).add(1e-6).sqrt()
    torch.testing.assert_close(rms_norm_reference(x, weight), x / rms * weight, rtol=1e-14, atol=1e-14)


def test_reference_rejects_bad_input():
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match="weight must be 1-D"):
        rms_norm_reference(x, torch.ones(7))
    with pytest.raises(ValueError, match="weight must be 1-D"):
        rms_norm_reference(x, torch.ones(2, 8))
    with pytest.raises(TypeError, match="floating point"):
        rms_norm_reference(x.to(torch.int32), torch.ones(8))


def test_max_error_accepts_a_correct_candidate():
    torch.manual_seed(3)
    x = torch.randn(4, 64, dtype=torch.float32)
    weight = torch.rand(64) + 0.5

    def candidate(x, weight):
        return torch.nn.functional.rms_norm(x, (64,), weight, eps=1e-6)

    error = max_error(candidate, rms_norm_reference, x, weight)
    assert 0 < error < 1e-5


def test_max_error_rejects_wrong_math_dtype_shape_and_nan():
    torch.manual_seed(4)
    x = torch.randn(4, 64)
    weight = torch.rand(64) + 0.5

    def forgets_weight(x, weight):
        return rms_norm_reference(x, torch.ones_like(weight))

    def wrong_dtype(x, weight):
        return rms_norm_reference(x, weight).double()

    def wrong_shape(x, weight):
        return rms_norm_reference(x, weight)[:-1]

    def skips_last_row(x, weight):
        out = poisoned_like(x)
        out[:-1] = rms_norm_reference(x[:-1], weight)
        return out

    with pytest.raises(AssertionError, match="exceeds"):
        max_error(forgets_weight, rms_norm_reference, x, weight)
    with pytest.raises(AssertionError, match="float64"):
        max_error(wrong_dtype, rms_norm_reference, x, weight)
    with pytest.raises(AssertionError, match=r"\(3, 64\)"):
        max_error(wrong_shape, rms_norm_reference, x, weight)
    with pytest.raises(AssertionError, match="NaN"):
        max_error(skips_last_row, rms_norm_reference, x, weight)


def test_poisoned_like_is_all_nan_with_same_layout():
    base = torch.randn(3, 5, dtype=torch.bfloat16)
    poison = poisoned_like(base)
    assert poison.shape == base.shape and poison.dtype == base.dtype
    assert torch.isnan(poison).all()


def test_script_runs_alone(capsys):
    runpy.run_path(str(pathlib.Path(__file__).parents[1] / "snippets" / "proof_demo.py"), run_name="__main__")
    assert "F.rms_norm matches the reference: True" in capsys.readouterr().out


@pytest.mark.gpu
def test_time_on_gpu_is_positive():
    x = torch.randn(1024, 1024, device="cuda", dtype=torch.bfloat16)
    weight = torch.rand(1024, device="cuda", dtype=torch.bfloat16) + 0.5
    assert time_on_gpu(rms_norm_reference, x, weight) > 0


def test_the_tolerance_comment_gives_each_formats_ulps():
    """The comment above TOLERANCE: about 8 ulp (machine epsilon) of bf16 and fp16, about 84 of fp32 and
    4,500 of fp64."""
    ulps = {dtype: tol / torch.finfo(dtype).eps for dtype, tol in TOLERANCE.items()}
    assert 7 < ulps[torch.bfloat16] < 9 and 7 < ulps[torch.float16] < 9
    assert round(ulps[torch.float32]) == 84 and round(ulps[torch.float64], -2) == 4500
