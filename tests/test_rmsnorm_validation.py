"""snippets/rmsnorm_validation.py: the §5.6 checks pass on the real kernel and catch broken ones.

Its __main__ section is the page's run block: the docs code-block test executes it.
"""
import pytest
import torch
from torch.autograd.gradcheck import GradcheckError

import rmsnorm_validation as validation
from helpers import MissingProjectionTerm


def test_gradcheck_passes(device):
    validation.check_gradcheck(device)


def test_gradcheck_catches_a_wrong_backward(device, monkeypatch):
    monkeypatch.setattr(validation, "rms_norm", MissingProjectionTerm.apply)
    with pytest.raises(GradcheckError):
        validation.check_gradcheck(device)


def test_fast_mode_gradcheck_misses_what_the_full_jacobian_catches():
    """Why check_gradcheck uses the full Jacobian (the page says so in §5.6)."""
    def wrong(x, w):
        return MissingProjectionTerm.apply(x, w, 1e-6)

    for seed in range(3):
        torch.manual_seed(seed)
        x = torch.randn(3, 5, 64, dtype=torch.float64, requires_grad=True)
        w = torch.randn(64, dtype=torch.float64, requires_grad=True)
        assert torch.autograd.gradcheck(wrong, (x, w), fast_mode=True, raise_exception=False)
        assert not torch.autograd.gradcheck(wrong, (x, w), raise_exception=False)


@pytest.mark.parametrize("shape", [(4, 8, 256), (2, 4, 4, 128)])
def test_bf16_errors_are_comparable_to_hf(shape, device, on_gpu):
    errors = validation.compare_with_hf(shape, device)
    slack = 1.5 if on_gpu else 3.0  # the interpreter truncates fp32 -> bf16
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


@pytest.mark.parametrize("weight_std, max_ulp_gpu", [(0.0, 1), (0.1, 2)])
def test_forward_within_one_ulp_of_hf(device, on_gpu, weight_std, max_ulp_gpu):
    """x_hat (unit weight) within 1 ulp of HF; y = x_hat * w within 2 (a 1-ulp x_hat step can cross a binade)."""
    shape = (4, 2048, 4096) if on_gpu else (4, 8, 256)
    max_ulp, identical = validation.forward_vs_hf(shape, device, weight_std)
    assert max_ulp <= max_ulp_gpu + (0 if on_gpu else 1)  # the interpreter truncates fp32 -> bf16
    if on_gpu:
        assert identical > 0.999


def test_ulp_distance_counts_bf16_steps():
    one = torch.tensor([1.0, -1.0, 0.0], dtype=torch.bfloat16)
    up = torch.nextafter(one.float(), torch.tensor(2.0)).to(torch.bfloat16)  # rounds to itself in bf16
    step = torch.tensor([1.0078125, -0.9960937, 0.0], dtype=torch.bfloat16)  # one bf16 ulp away (0: same)
    assert validation.bf16_ulp_distance(one, up).tolist() == [0, 0, 0]
    assert validation.bf16_ulp_distance(one, step).tolist() == [1, 1, 0]
    assert validation.bf16_ulp_distance(torch.tensor([-0.0], dtype=torch.bfloat16),
                                        torch.tensor([0.0], dtype=torch.bfloat16)).item() == 0


@pytest.mark.gpu
def test_forward_check_tells_cast_orders_apart(monkeypatch):  # pragma: gpu only
    """Multiplying the weight in fp32 (F.rms_norm's order) is close to HF but not bit-compatible."""
    monkeypatch.setattr(validation, "rms_norm",
                        lambda x, w, eps: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps))
    _, identical = validation.forward_vs_hf((4, 2048, 4096), "cuda")
    assert identical < 0.99


def test_double_backward_check_fails_when_nothing_raises(device, monkeypatch):
    def differentiable_twice(x, w, eps):  # plain torch ops support create_graph=True
        return w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps))

    monkeypatch.setattr(validation, "rms_norm", differentiable_twice)
    with pytest.raises(AssertionError, match="NotImplementedError"):
        validation.check_double_backward_raises(device)
