"""bench/exp_p1_roofline.py as its --quick CPU run: the two measured ceilings, and each of the five fusable
points counted and timed in its HF form and (where a quick run compiles it) its fused form."""
from __future__ import annotations

import pytest

from bench import exp_p1_roofline


def test_quick_run_measures_the_ceilings_and_every_point(quick_p1_roofline):
    cfg, res = quick_p1_roofline["config"], quick_p1_roofline["results"]
    assert cfg["size"] == "tiny" and cfg["tokens"] == cfg["batch"] * cfg["seq_len"]
    copy, matmul = res["ceilings"]["copy"], res["ceilings"]["matmul"]
    assert copy["bytes"] == 2 * exp_p1_roofline.QUICK_SETUP["copy_mib"] * 2**20 and copy["gbps"] > 0
    assert matmul["flops"] == 2 * 256 ** 3 and matmul["tflops"] > 0
    assert res["ridge_flop_per_byte"] == pytest.approx(matmul["tflops"] * 1e12 / (copy["gbps"] * 1e9))
    points = {p["name"]: p for p in res["points"]}
    assert list(points) == ["RMSNorm", "RoPE", "SwiGLU", "QKV merge", "Attention softmax"]
    for point in points.values():
        assert {"eager", "fused"} <= set(point) and "eager" in point["measured"]
        assert all(m["median_us"] > 0 for m in point["measured"].values())
    assert "flash" in points["Attention softmax"]["measured"]
