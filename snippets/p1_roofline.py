# SPDX-License-Identifier: Apache-2.0
"""FLOPs and bytes per token of Qwen3's classic fusable points, and where they sit on
a roofline.

Article 1 (docs/qwen3-fusion.md) shows this file in parts;
tests/test_p1_roofline.py tests it.
All counts are per token and per decoder layer, forward only, bf16 activations.
Counting rules: one add, mul, exp, division, max or rsqrt is one FLOP; a view is
free; per-row scalars (mean, rstd) and the weight vectors are ignored (< 0.1 % of
the bytes).

    python snippets/p1_roofline.py
"""
# --8<-- [start:counts]
BF16, FP32 = 2, 4  # bytes per element


def stage_totals(stages, elements: float) -> dict:
    """Sum (read bytes, written bytes, FLOPs) per element over an op chain's kernels."""
    return {
        "kernels": len(stages),
        "bytes": elements * sum(read + written for _, read, written, _ in stages),
        "flops": elements * sum(flops for *_, flops in stages),
    }


def rmsnorm_point(config) -> dict:
    """The 4 RMSNorms of a layer: 2 over hidden_size, q_norm/k_norm over every head's
    head_dim."""
    elements = 2 * config.hidden_size + (config.num_attention_heads
                                         + config.num_key_value_heads) * config.head_dim
    eager = [  # Qwen3RMSNorm.forward: (kernel, read B, written B, FLOPs) per element
        ("x.to(float32)", BF16, FP32, 0), ("pow(2)", FP32, FP32, 1),
        ("mean(-1)", FP32, 0, 1), ("x * rsqrt(var + eps)", FP32, FP32, 1),
        ("to(bfloat16)", FP32, BF16, 0), ("weight * x", BF16, BF16, 1),
        # per-row kernels: launches without per-element bytes
        ("var + eps", 0, 0, 0), ("rsqrt", 0, 0, 0),
    ]
    fused = [("rms_norm", BF16, BF16, 4)]
    return {"name": "RMSNorm", "elements": elements,
            "eager": stage_totals(eager, elements),
            "fused": stage_totals(fused, elements)}


def rope_point(config) -> dict:
    """apply_rotary_pos_emb on q and k: q * cos + rotate_half(q) * sin."""
    elements = ((config.num_attention_heads + config.num_key_value_heads)
                * config.head_dim)
    eager = [
        ("q * cos", BF16, BF16, 1), ("-x2 (half)", BF16 / 2, BF16 / 2, 0.5),
        ("cat(-x2, x1)", BF16, BF16, 0), ("rotated * sin", BF16, BF16, 1),
        ("add", 2 * BF16, BF16, 1),
    ]
    fused = [("rope", BF16, BF16, 3.5)]
    points = {"eager": stage_totals(eager, elements),
              "fused": stage_totals(fused, elements)}
    points["eager"]["kernels"] *= 2  # the chain runs once for q and once for k
    # eager: q and k each read cos and sin; fused: one kernel reads them once
    points["eager"]["bytes"] += 2 * 2 * BF16 * config.head_dim
    points["fused"]["bytes"] += 2 * BF16 * config.head_dim
    return {"name": "RoPE", "elements": elements, **points}


def swiglu_point(config) -> dict:
    """act_fn(gate_proj(x)) * up_proj(x) with act_fn = silu(x) = x / (1 + exp(-x))."""
    elements = config.intermediate_size
    eager = [("silu(gate)", BF16, BF16, 4), ("silu * up", 2 * BF16, BF16, 1)]
    fused = [("swiglu", 2 * BF16, BF16, 5)]
    return {"name": "SwiGLU", "elements": elements,
            "eager": stage_totals(eager, elements),
            "fused": stage_totals(fused, elements)}


def qkv_point(config, tokens: int) -> dict:
    """q_proj, k_proj, v_proj: three GEMMs reading the same x, or one GEMM on
    concatenated weights. The weights are read once per step, so their bytes per
    token shrink as 1 / tokens."""
    hidden, out = (config.hidden_size,
                   (config.num_attention_heads + 2 * config.num_key_value_heads)
                   * config.head_dim)
    flops = 2 * hidden * out
    weights_per_token = BF16 * hidden * out / tokens
    eager = {"kernels": 3, "flops": flops,
             "bytes": 3 * BF16 * hidden + BF16 * out + weights_per_token}
    fused = {"kernels": 1, "flops": flops,
             "bytes": BF16 * hidden + BF16 * out + weights_per_token}
    return {"name": "QKV merge", "elements": out, "eager": eager, "fused": fused}


def softmax_point(config, seq_len: int) -> dict:
    """Eager attention materialises scores of seq_len keys per query and head, then
    runs scale, mask, softmax in fp32 and a cast back; the fused kernel does all four
    in one pass."""
    elements = config.num_attention_heads * seq_len
    mask_bytes = BF16 / config.num_attention_heads  # one (seq, seq) mask for all heads
    eager = [("scores * scaling", BF16, BF16, 1),
             ("+ mask", BF16 + mask_bytes, BF16, 1),
             ("softmax(float32)", BF16, FP32, 5), ("to(bfloat16)", FP32, BF16, 0)]
    fused = [("masked softmax", BF16, BF16, 7)]
    return {"name": "Attention softmax", "elements": elements,
            "eager": stage_totals(eager, elements),
            "fused": stage_totals(fused, elements)}


def flash_attention_point(config, seq_len: int) -> dict:
    """Flash attention (sdpa) fuses QK^T, softmax and PV: scores never reach HBM.
    Causal: on average a query attends to seq_len / 2 keys."""
    heads, kv_heads, head_dim = (config.num_attention_heads,
                                 config.num_key_value_heads, config.head_dim)
    flops = 2 * 2 * heads * head_dim * seq_len / 2 + 7 * heads * seq_len / 2
    # read q, k, v; write o
    bytes_per_token = BF16 * head_dim * (2 * heads + 2 * kv_heads)
    return {"kernels": 1, "flops": flops, "bytes": bytes_per_token}


def fusable_points(config, tokens: int = 16384, seq_len: int = 4096) -> list:
    """The five classic fusable points of one Qwen3 layer, per token, eager vs fused."""
    if tokens <= 0 or seq_len <= 0:
        raise ValueError(
            f"tokens and seq_len must be positive, got {tokens} and {seq_len}")
    points = [rmsnorm_point(config), rope_point(config), swiglu_point(config),
              qkv_point(config, tokens), softmax_point(config, seq_len)]
    points[-1]["flash"] = flash_attention_point(config, seq_len)
    for point in points:
        for variant in ("eager", "fused", "flash"):
            if variant in point:
                point[variant]["intensity"] = (point[variant]["flops"]
                                               / point[variant]["bytes"])
    return points
# --8<-- [end:counts]


# --8<-- [start:roofline]
def ridge_point(peak_flops: float, bandwidth: float) -> float:
    """Arithmetic intensity (FLOP/byte) where the memory roof meets the compute roof."""
    if peak_flops <= 0 or bandwidth <= 0:
        raise ValueError("peak_flops and bandwidth must be positive")
    return peak_flops / bandwidth


def attainable(intensity: float, peak_flops: float, bandwidth: float) -> float:
    """Roofline: the best FLOP/s an op of this intensity can reach."""
    return min(peak_flops, intensity * bandwidth)


def time_floor_us(point_variant: dict, tokens: int, peak_flops: float,
                  bandwidth: float) -> float:
    """Lower bound on the op's time for ``tokens`` tokens:
    max(bytes / bandwidth, FLOPs / peak)."""
    return 1e6 * tokens * max(point_variant["bytes"] / bandwidth,
                              point_variant["flops"] / peak_flops)
# --8<-- [end:roofline]


if __name__ == "__main__":
    # --8<-- [start:usage]
    from p1_roofline import fusable_points, ridge_point
    from qwen3_configs import qwen3_config

    # H200 datasheet figures, for a first look; the article uses measured ceilings
    ridge = ridge_point(peak_flops=989e12, bandwidth=4.8e12)
    print(f"ridge point: {ridge:.0f} FLOP/byte")
    for p in fusable_points(qwen3_config("8B"), tokens=16384, seq_len=4096):
        eager, fused = p["eager"], p["fused"]
        print(f"{p['name']:18s} FLOP/token {fused['flops']:>11,.0f}"
              f"   bytes/token eager {eager['bytes']:>9,.0f}"
              f" -> fused {fused['bytes']:>9,.0f}"
              f"   intensity {eager['intensity']:6.2f} -> {fused['intensity']:7.2f}"
              f"   kernels {eager['kernels']} -> {fused['kernels']}")
    # --8<-- [end:usage]
