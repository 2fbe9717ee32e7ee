"""snippets/rmsnorm_validation.py: the §5.6 checks pass on the real kernel and catch broken ones."""
import pathlib
import runpy

import pytest
import torch
from torch.autograd.gradcheck import GradcheckError

import rmsnorm_validation as validation

SNIPPET = pathlib.Path(validation.__file__)


class MissingProjectionTerm(torch.autograd.Function):
    """A plausible wrong backward: dx = w * dy * rstd, forgetting the -x_hat * c term."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return weight * (x * rstd)

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        dw = (dy * x * rstd).reshape(-1, x.shape[-1]).sum(0)
        return weight * dy * rstd, dw, None


def test_gradcheck_passes(device):
    validation.check_gradcheck(device)


def test_gradcheck_catches_a_wrong_backward(device, monkeypatch):
    monkeypatch.setattr(validation, "rms_norm", MissingProjectionTerm.apply)
    with pytest.raises(GradcheckError):
        validation.check_gradcheck(device)


@pytest.mark.parametrize("shape", [(4, 8, 256), (2, 4, 4, 128)])
def test_bf16_errors_are_comparable_to_hf(shape, device, on_gpu):
    errors = validation.compare_with_hf(shape, device)
    slack = 1.25 if on_gpu else 3.0  # the interpreter truncates fp32 -> bf16
    for ours, theirs in zip(errors["Triton"], errors["HF"]):
        assert 0 < ours <= slack * theirs


def test_compare_with_hf_catches_the_fp16_store_bug(device, monkeypatch):
    """The seed draft stored y as fp16 for bf16 inputs: the dtype check must trip."""
    real = validation.rms_norm
    monkeypatch.setattr(validation, "rms_norm", lambda x, w, eps: real(x, w, eps).to(torch.float16))
    with pytest.raises(AssertionError):
        validation.compare_with_hf((4, 64), device)


def test_dw_determinism(device):
    validation.check_dw_determinism((64, 256), device)


def test_determinism_check_catches_run_to_run_noise(device, monkeypatch):
    real = validation.rms_norm

    def noisy(x, weight, eps):  # dW picks up a different tiny term on every call
        return real(x, weight, eps) + weight * torch.rand((), device=x.device, dtype=weight.dtype)

    monkeypatch.setattr(validation, "rms_norm", noisy)
    with pytest.raises(AssertionError):
        validation.check_dw_determinism((8, 64), device)


def test_double_backward_raises(device):
    dx = validation.check_double_backward_raises(device)
    assert torch.isfinite(dx).all()


def test_script_runs(capsys):
    runpy.run_path(str(SNIPPET), run_name="__main__")
    assert "all passed" in capsys.readouterr().out
