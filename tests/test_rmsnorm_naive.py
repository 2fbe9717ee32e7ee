"""The teaching kernels of 篇2 §四/§五 compute the same function as the production ones."""
import runpy

import pytest
import torch

import rmsnorm_naive
from rmsnorm_naive import naive_rms_norm_fwd
from rmsnorm_naive_autograd import naive_rms_norm
from helpers import REL_TOL, fp64_reference, poisoned_allocations, random_inputs, rel_err


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32, torch.float64], ids=str)
def test_naive_matches_fp64_reference(dtype, device, on_gpu):
    for i, shape in enumerate([(4, 512, 4096), (1000, 2560)] if on_gpu else [(3, 4, 128), (5, 100)]):
        x, w, dy = random_inputs(shape, dtype, device, seed=100 + i)
        x_ = x.clone().requires_grad_()
        w_ = w.clone().requires_grad_()
        with poisoned_allocations():
            y = naive_rms_norm(x_, w_, 1e-6)
            y.backward(dy)
        ref_y, ref_dx, ref_dw = fp64_reference(x, w, 1e-6, dy)
        assert y.dtype == dtype and x_.grad.dtype == dtype and w_.grad.dtype == dtype
        assert rel_err(y, ref_y) < REL_TOL[dtype]
        assert rel_err(x_.grad, ref_dx) < REL_TOL[dtype]
        assert rel_err(w_.grad, ref_dw) < REL_TOL[dtype]


def test_naive_gradcheck_fp64(device):
    x = torch.randn(3, 24, dtype=torch.float64, device=device, requires_grad=True)
    w = torch.randn(24, dtype=torch.float64, device=device, requires_grad=True)
    assert torch.autograd.gradcheck(naive_rms_norm, (x, w, 1e-6), fast_mode=True)


def test_naive_output_dtype_follows_promotion(device):
    x = torch.randn(2, 64, device=device).to(torch.bfloat16)
    w = torch.rand(64, device=device) + 0.5
    assert naive_rms_norm_fwd(x, w).dtype == torch.float32


def test_script_runs_and_prints_one_line(capsys):
    runpy.run_path(rmsnorm_naive.__file__, run_name="__main__")  # asserts inside: forward matches HF
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1 and "max |d" in out
