"""snippets/rmsnorm_naive_autograd.py (篇2 §5.5): the autograd wrapper around the teaching kernels."""
import runpy

import pytest
import torch

import rmsnorm_naive
import rmsnorm_naive_autograd
from rmsnorm_naive_autograd import naive_rms_norm


def test_frozen_weight_gets_no_gradient_and_dy_is_only_read(device):
    x = torch.randn(4, 96, device=device, requires_grad=True)
    w = torch.randn(96, device=device)  # frozen: no dW sum
    dy = torch.randn(4, 96, device=device)
    dy_before = dy.clone()
    naive_rms_norm(x, w).backward(dy)
    assert w.grad is None and x.grad is not None
    assert torch.equal(dy, dy_before)
    _, dw = rmsnorm_naive.naive_rms_norm_bwd(dy, x.detach(), w, compute_dw=False)
    assert dw is None


def test_double_backward_raises(device):
    x = torch.randn(2, 32, dtype=torch.float64, device=device, requires_grad=True)
    w = torch.randn(32, dtype=torch.float64, device=device, requires_grad=True)
    with pytest.raises(NotImplementedError, match="create_graph"):
        torch.autograd.grad(naive_rms_norm(x, w).sum(), x, create_graph=True)


def test_script_runs_and_prints_one_line(capsys):
    runpy.run_path(rmsnorm_naive_autograd.__file__, run_name="__main__")
    out = capsys.readouterr().out
    assert len(out.splitlines()) == 1 and "max |d" in out
