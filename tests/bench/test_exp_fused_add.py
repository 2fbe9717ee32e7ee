"""bench/exp_fused_add.py as its --quick CPU run: the fused kernel and its peers at two widths, the bytes
counted, the config the report reads, and a contender that writes into dy or ds fails the run."""
from __future__ import annotations

import pytest
import torch

from bench import exp_fused_add
from bench.harness.op_timing import fused_add_inputs, time_fused_add
from bench.report.names import TIE_RULES
from bench_fixtures import unavailable_peers


def test_quick_run_times_the_fused_kernel_and_its_peers(quick_fused_add):
    res = quick_fused_add["results"]
    assert set(res["skipped"]) >= unavailable_peers()
    for s in res["shapes"]:
        assert {"unfused", "compile_hf", "triton_fused_add"} <= set(s["fwd_bwd"])
        assert "triton" not in s["fwd"]  # the fused kernel has its own id, never the plain kernel's
        assert s["bytes_fwd"] == 4 * s["rows"] * s["width"] * 2 + 2 * s["width"]
        assert s["bytes_fwd_bwd"] == 8 * s["rows"] * s["width"] * 2 + 6 * s["width"]


def test_the_config_records_what_the_report_reads(quick_fused_add):
    cfg = quick_fused_add["config"]
    assert cfg["contenders"] == exp_fused_add.CONTENDERS and cfg["ours"] == "triton_fused_add"
    assert cfg["peers"] == exp_fused_add.PEERS and cfg["baseline"] == "unfused" and cfg["tie_rule"] in TIE_RULES
    assert cfg["passes"] == exp_fused_add.PASSES


def test_a_contender_that_writes_into_the_gradients_fails_the_run():
    """The backward gets dy and ds; a contender writing dX into either (Liger's in_place=True) fails the run."""
    sets = fused_add_inputs(4, 64, exp_fused_add.DTYPE, "cpu", 1, seed=0)
    weight = torch.nn.Parameter(torch.ones(64, dtype=exp_fused_add.DTYPE))

    def in_place(x, r):
        s = r + x
        y = s * weight

        class Clobber(torch.autograd.Function):
            @staticmethod
            def forward(ctx, t):
                return t.view_as(t)

            @staticmethod
            def backward(ctx, g):
                g.zero_()  # writes into the caller's dy
                return g

        return Clobber.apply(y), s

    entry = {"fwd": {}, "fwd_bwd": {}, "errors": {}, "first_call_s": {}}
    with pytest.raises(AssertionError, match="wrote into dy or ds"):
        time_fused_add(entry, "clobber", in_place, weight, sets)
