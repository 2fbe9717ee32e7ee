"""snippets/rmsnorm_autotune.py (篇2 §七): the triton.autotune version of the forward."""
import runpy

import pytest
import torch
import triton

import rmsnorm_autotune


@pytest.mark.parametrize("n_cols", [128, 1024, 2560, 4096, 5120, 12288])
def test_autotune_candidates_are_the_sweep_candidates(n_cols):
    """The autotuner's triton.Configs are rmsnorm_triton.candidate_configs, launch config for launch config."""
    from rmsnorm_triton import candidate_configs

    kernel = rmsnorm_autotune.autotuned_fwd_kernel(n_cols)
    assert isinstance(kernel, triton.runtime.Autotuner)
    assert [(c.kwargs, c.num_warps) for c in kernel.configs] == [
        (c.constexprs(), c.num_warps) for c in candidate_configs(n_cols, "forward") if not c.chunked]


@pytest.fixture
def one_candidate(monkeypatch):
    """A one-config autotuner launches without timing, so it runs under the interpreter too."""
    from rmsnorm_triton import candidate_configs

    rmsnorm_autotune.autotuned_fwd_kernel.cache_clear()
    monkeypatch.setattr(rmsnorm_autotune, "candidate_configs",
                        lambda n_cols, direction: candidate_configs(n_cols, direction)[-1:])
    yield
    rmsnorm_autotune.autotuned_fwd_kernel.cache_clear()


def test_autotuned_wrapper_passes_the_kernel_arguments_right(device, one_candidate):
    """The wrapper's launch (arguments by name, grid from meta) against the shipped forward."""
    from rmsnorm_triton import candidate_configs, rms_norm_forward

    for shape, dtype in [((40, 256), torch.bfloat16), ((2, 3, 5, 128), torch.float32), ((7, 96), torch.float64),
                         ((3, 2560), torch.bfloat16)]:
        x = torch.randn(shape, device=device, dtype=dtype)
        if len(shape) == 4:
            x = x.transpose(1, 2)  # a strided q_norm-like view
        weight = torch.rand(shape[-1], device=device, dtype=dtype) + 0.5
        y, best = rmsnorm_autotune.rms_norm_forward_autotuned(x, weight)
        (expected,) = candidate_configs(shape[-1], "forward")[-1:]
        assert best.kwargs == expected.constexprs() and best.num_warps == expected.num_warps
        torch.testing.assert_close(y, rms_norm_forward(x, weight, config=expected)[0], rtol=0, atol=0)


@pytest.mark.gpu
@pytest.mark.parametrize("rows, width", [(4096, 4096), (16384, 128), (1000, 2560)])
def test_autotuned_forward_matches_shipped(rows, width):  # pragma: gpu only
    from rmsnorm_triton import candidate_configs, rms_norm_forward

    x = torch.randn(rows, width, device="cuda", dtype=torch.bfloat16)
    weight = torch.rand(width, device="cuda", dtype=torch.bfloat16) + 0.5
    y, best = rmsnorm_autotune.rms_norm_forward_autotuned(x, weight)
    assert isinstance(best, triton.Config)
    assert best.kwargs in [c.constexprs() for c in candidate_configs(width, "forward") if not c.chunked]
    torch.testing.assert_close(y, rms_norm_forward(x, weight)[0])  # reduction order may differ


@pytest.mark.gpu
def test_autotune_usage_script(capsys):  # pragma: gpu only
    runpy.run_path(rmsnorm_autotune.__file__, run_name="__main__")
    assert "autotune picked" in capsys.readouterr().out
