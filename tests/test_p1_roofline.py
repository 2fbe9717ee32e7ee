"""snippets/p1_roofline.py (篇1 §五): per-token FLOPs and bytes against hand formulas, and the roofline."""
import pytest
import torch
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

from p1_fx_trace import op_kinds, try_symbolic_trace
from p1_roofline import attainable, fusable_points, ridge_point, time_floor_us
from qwen3_configs import BENCH_SEQ_LEN, BENCH_TOKENS, qwen3_config, tiny_qwen3_config


@pytest.fixture(scope="module")
def points_8b():
    return {p["name"]: p for p in fusable_points(qwen3_config("8B"), tokens=BENCH_TOKENS, seq_len=BENCH_SEQ_LEN)}


def test_rmsnorm_8b_by_hand(points_8b):
    p = points_8b["RMSNorm"]
    elements = 2 * 4096 + (32 + 8) * 128  # two hidden-size norms + q_norm/k_norm over 40 heads
    assert p["elements"] == elements == 13312
    assert p["fused"]["bytes"] == 4 * elements  # read bf16, write bf16
    # to(fp32) 2+4, pow 4+4, mean 4, x*rstd 4+4, to(bf16) 4+2, weight* 2+2 = 36 bytes per element
    assert p["eager"]["bytes"] == 36 * elements
    assert p["eager"]["flops"] == p["fused"]["flops"] == 4 * elements
    assert (p["eager"]["kernels"], p["fused"]["kernels"]) == (8, 1)
    assert p["eager"]["intensity"] == pytest.approx(4 / 36)
    assert p["fused"]["intensity"] == pytest.approx(1.0)


def test_swiglu_and_rope_8b_by_hand(points_8b):
    swiglu = points_8b["SwiGLU"]
    assert swiglu["eager"]["bytes"] == 10 * 12288 and swiglu["fused"]["bytes"] == 6 * 12288
    assert swiglu["fused"]["flops"] == 5 * 12288
    rope = points_8b["RoPE"]
    e = (32 + 8) * 128
    assert rope["eager"]["bytes"] == 20 * e + 2 * 2 * 2 * 128  # + bf16 cos and sin, read for q and for k
    assert rope["fused"]["bytes"] == 4 * e + 2 * 2 * 128
    assert rope["eager"]["flops"] == 3.5 * e
    assert rope["eager"]["kernels"] == 10


def test_qkv_and_softmax_8b_by_hand(points_8b):
    qkv = points_8b["QKV merge"]
    out = (32 + 2 * 8) * 128
    assert qkv["fused"]["flops"] == 2 * 4096 * out
    weights_per_token = 2 * 4096 * out / BENCH_TOKENS
    assert qkv["fused"]["bytes"] == pytest.approx(2 * 4096 + 2 * out + weights_per_token)
    assert qkv["eager"]["bytes"] - qkv["fused"]["bytes"] == pytest.approx(2 * 2 * 4096)  # x read twice more
    soft = points_8b["Attention softmax"]
    elements = 32 * 4096
    assert soft["eager"]["bytes"] == pytest.approx(elements * (20 + 2 / 32))
    assert soft["fused"]["bytes"] == 4 * elements
    flash = soft["flash"]
    assert flash["flops"] == pytest.approx(2 * 32 * 128 * 4096 + 3.5 * 32 * 4096)
    assert flash["bytes"] == 2 * 128 * (2 * 32 + 2 * 8)


def test_eager_kernel_counts_match_the_hf_graph():
    """The stage list for RMSNorm has as many kernels as HF's forward has compute ops."""
    kinds = op_kinds(try_symbolic_trace(Qwen3RMSNorm(64))[0])
    compute_ops = sum(kinds[k] for k in ("to", "pow", "mean", "add", "rsqrt", "mul"))
    point = fusable_points(tiny_qwen3_config())[0]
    assert point["name"] == "RMSNorm" and point["eager"]["kernels"] == compute_ops


def test_memory_bound_points_sit_left_of_the_ridge(points_8b):
    ridge = ridge_point(peak_flops=989e12, bandwidth=4.8e12)
    assert ridge == pytest.approx(989 / 4.8)
    for name in ("RMSNorm", "RoPE", "SwiGLU", "Attention softmax"):
        assert points_8b[name]["eager"]["intensity"] < points_8b[name]["fused"]["intensity"] < ridge
    assert points_8b["QKV merge"]["eager"]["intensity"] > ridge
    assert points_8b["Attention softmax"]["flash"]["intensity"] > ridge


def test_roofline_helpers():
    assert attainable(1.0, peak_flops=100.0, bandwidth=10.0) == 10.0
    assert attainable(50.0, peak_flops=100.0, bandwidth=10.0) == 100.0
    variant = {"bytes": 4.0, "flops": 4.0}
    assert time_floor_us(variant, tokens=1000, peak_flops=1e12, bandwidth=1e9) == pytest.approx(4.0)
    with pytest.raises(ValueError):
        ridge_point(0, 1)
    with pytest.raises(ValueError):
        fusable_points(tiny_qwen3_config(), tokens=0)


def test_counts_scale_with_the_config():
    small = {p["name"]: p for p in fusable_points(qwen3_config("0.6B"), tokens=4096, seq_len=4096)}
    large = {p["name"]: p for p in fusable_points(qwen3_config("8B"), tokens=4096, seq_len=4096)}
    assert large["SwiGLU"]["fused"]["bytes"] / small["SwiGLU"]["fused"]["bytes"] == 12288 / 3072
    # per-element costs do not depend on width: the intensity of an elementwise point is a constant
    assert large["SwiGLU"]["fused"]["intensity"] == small["SwiGLU"]["fused"]["intensity"]
    assert torch.tensor(large["RMSNorm"]["eager"]["intensity"]) == torch.tensor(small["RMSNorm"]["eager"]["intensity"])
