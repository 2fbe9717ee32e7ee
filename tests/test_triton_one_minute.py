"""snippets/triton_one_minute.py: the four-concept kernel of 篇2 §三."""
import runpy
import pathlib

import pytest
import torch

import triton_one_minute
from triton_one_minute import scale, scale_kernel

SNIPPET = pathlib.Path(triton_one_minute.__file__)


@pytest.mark.parametrize("n_elements", [1, 255, 256, 1000])
def test_scale_matches_torch(device, n_elements):
    x = torch.randn(n_elements, device=device)
    torch.testing.assert_close(scale(x, -1.75), x * -1.75, rtol=0, atol=0)


def test_mask_keeps_stores_inside_the_tensor(device):
    # The last block covers elements 768..1023 of a 1000-element tensor: the
    # mask must stop the stores at 1000, so the sentinel tail stays untouched.
    n_elements, block = 1000, 256
    x = torch.randn(n_elements + 24, device=device)
    out = torch.full((n_elements + 24,), float("nan"), device=device)
    scale_kernel[(4,)](x, out, n_elements, 3.0, BLOCK_SIZE=block)
    torch.testing.assert_close(out[:n_elements], x[:n_elements] * 3.0, rtol=0, atol=0)
    assert torch.isnan(out[n_elements:]).all()


def test_rejects_non_contiguous(device):
    x = torch.randn(8, 8, device=device).t()
    with pytest.raises(ValueError, match="contiguous"):
        scale(x, 2.0)


def test_script_runs(capsys):
    runpy.run_path(str(SNIPPET), run_name="__main__")
    assert "blocks launched: 4" in capsys.readouterr().out
