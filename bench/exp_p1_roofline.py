"""Experiment "p1_roofline" (篇1 §五): the five classic fusable points of Qwen3 on a measured roofline.

    python -m bench.run_all p1_roofline            # on a GPU, about 1.5 minutes on an H200
    python -m bench.run_all p1_roofline --quick    # tiny sizes on CPU (smoke test)

Ceilings, measured here: device-to-device copy bandwidth (a 2 GiB copy, read + write)
and bf16 matmul throughput (cuBLAS through torch.matmul).

Counts (snippets/p1_roofline.py, from the config): FLOPs and bytes per token and per
decoder layer, forward, for HF's eager op chain and for a single fused kernel.

Measured (Qwen3-8B geometry, bf16, B=4, T=4096 = 16384 tokens; attention softmax at
B=1, T=4096): each point's eager HF code against a fused version, side by side:

* RMSNorm: the layer's four Qwen3RMSNorm modules (input, post-attention, q_norm, k_norm)
  eager vs torch.compile of the same four calls;
* RoPE: apply_rotary_pos_emb on q, k (transposed views, as HF passes them) vs torch.compile;
* SwiGLU: silu(gate) * up vs torch.compile;
* QKV merge: three F.linear vs one F.linear on the concatenated weight;
* attention softmax: HF eager_attention_forward's scale + mask + softmax(fp32) + cast vs
  torch.compile of the same lines; and sdpa (flash) for the whole attention.

Achieved FLOP/s = counted FLOPs / median time; effective bandwidth = counted bytes of that
variant / median time.
"""
from __future__ import annotations

import torch
from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm, apply_rotary_pos_emb

from bench import common, prose
from bench.harness import mode, timers
from p1_roofline import fusable_points, ridge_point
from qwen3_configs import qwen3_config, tiny_qwen3_config

NAME = "p1_roofline"
GPU_SETUP = {"size": "8B", "batch": 4, "seq_len": 4096, "softmax_batch": 1, "copy_mib": 2048, "matmul": [8192, 8192, 8192]}
QUICK_SETUP = {"size": "tiny", "batch": 2, "seq_len": 32, "softmax_batch": 1, "copy_mib": 16, "matmul": [256, 256, 256]}
POINT_ORDER = ["RMSNorm", "RoPE", "SwiGLU", "QKV merge", "Attention softmax"]


def ceilings(setup, device, on_gpu):
    moved = 2 * setup["copy_mib"] * 2**20  # copy_mib read, as much written
    copy = timers.copy_bandwidth(moved, device, "eager") | {"bytes": moved}
    m, n, k = setup["matmul"]
    dtype = torch.bfloat16 if on_gpu else torch.float32
    a = torch.randn(m, k, device=device, dtype=dtype)
    b = torch.randn(k, n, device=device, dtype=dtype)
    matmul = timers.eager_time_us(lambda: a @ b)
    matmul.update({"shape": [m, n, k], "dtype": str(dtype).replace("torch.", ""), "flops": 2 * m * n * k})
    matmul["tflops"] = matmul["flops"] / (matmul["median_us"] * 1e-6) / 1e12
    return {"copy": copy, "matmul": matmul}


def _contenders(config, setup, device, dtype, quick):
    """point name -> (tokens, {variant: fn}) with fresh random inputs for each point."""
    batch, seq = setup["batch"], setup["seq_len"]
    tokens = batch * seq
    hidden, inter, heads, kv, dim = (config.hidden_size, config.intermediate_size, config.num_attention_heads,
                                     config.num_key_value_heads, config.head_dim)
    eps = config.rms_norm_eps

    def rand(*shape):
        return torch.randn(*shape, device=device, dtype=dtype)

    def compiled(fn):
        return torch.compile(fn, dynamic=False)

    torch._dynamo.reset()
    points = {}

    # RMSNorm: the four norms of one layer
    norms = [Qwen3RMSNorm(hidden, eps), Qwen3RMSNorm(hidden, eps), Qwen3RMSNorm(dim, eps), Qwen3RMSNorm(dim, eps)]
    for norm in norms:
        norm.to(device=device, dtype=dtype)
        with torch.no_grad():
            norm.weight.copy_(torch.rand_like(norm.weight) + 0.5)
    x1, x2 = rand(batch, seq, hidden), rand(batch, seq, hidden)
    q_rows, k_rows = rand(batch, seq, heads, dim), rand(batch, seq, kv, dim)

    def four_norms():
        return norms[0](x1), norms[1](x2), norms[2](q_rows), norms[3](k_rows)

    points["RMSNorm"] = (tokens, {"eager": four_norms, "fused": compiled(four_norms)})

    # RoPE on q and k as HF passes them: (B, heads, T, D) views of (B, T, heads, D)
    q = rand(batch, seq, heads, dim).transpose(1, 2)
    k = rand(batch, seq, kv, dim).transpose(1, 2)
    angle = torch.rand(batch, seq, dim, device=device) * 6.28
    cos, sin = angle.cos().to(dtype), angle.sin().to(dtype)
    rope = {"eager": lambda: apply_rotary_pos_emb(q, k, cos, sin)}
    if not quick:
        rope_compiled = compiled(apply_rotary_pos_emb)
        rope["fused"] = lambda: rope_compiled(q, k, cos, sin)
    points["RoPE"] = (tokens, rope)

    # SwiGLU
    gate, up = rand(tokens, inter), rand(tokens, inter)

    def swiglu(g, u):
        return torch.nn.functional.silu(g) * u

    swiglu_fns = {"eager": lambda: swiglu(gate, up)}
    if not quick:
        swiglu_compiled = compiled(swiglu)
        swiglu_fns["fused"] = lambda: swiglu_compiled(gate, up)
    points["SwiGLU"] = (tokens, swiglu_fns)

    # QKV merge
    x = rand(tokens, hidden)
    wq, wk, wv = rand(heads * dim, hidden) * 0.02, rand(kv * dim, hidden) * 0.02, rand(kv * dim, hidden) * 0.02
    wqkv = torch.cat([wq, wk, wv])
    linear = torch.nn.functional.linear

    def qkv_separate():
        return linear(x, wq), linear(x, wk), linear(x, wv)

    def qkv_merged():
        return linear(x, wqkv).split([heads * dim, kv * dim, kv * dim], dim=-1)

    points["QKV merge"] = (tokens, {"eager": qkv_separate, "fused": qkv_merged})

    # Attention softmax, as in eager_attention_forward, and flash attention via sdpa
    sb = setup["softmax_batch"]
    scores = rand(sb, heads, seq, seq)
    causal = torch.full((seq, seq), torch.finfo(dtype).min, device=device, dtype=dtype).triu(1)[None, None]
    scaling = dim ** -0.5

    def eager_softmax(s, mask):
        weights = s * scaling
        weights = weights + mask
        return torch.nn.functional.softmax(weights, dim=-1, dtype=torch.float32).to(dtype)

    softmax_fns = {"eager": lambda: eager_softmax(scores, causal)}
    if not quick:
        softmax_compiled = compiled(eager_softmax)
        softmax_fns["fused"] = lambda: softmax_compiled(scores, causal)
    qa, ka, va = rand(sb, heads, seq, dim), rand(sb, kv, seq, dim), rand(sb, kv, seq, dim)
    softmax_fns["flash"] = lambda: torch.nn.functional.scaled_dot_product_attention(
        qa, ka, va, is_causal=True, enable_gqa=True)
    points["Attention softmax"] = (sb * seq, softmax_fns)
    return points


def run(args) -> dict:
    quick, on_gpu, setup, device, dtype = mode.gpu_or_quick(args, NAME, QUICK_SETUP, GPU_SETUP)
    config = tiny_qwen3_config() if setup["size"] == "tiny" else qwen3_config(setup["size"])
    torch.manual_seed(0)

    print("  ceilings", flush=True)
    measured_ceilings = ceilings(setup, device, on_gpu)
    bandwidth = measured_ceilings["copy"]["gbps"] * 1e9
    peak = measured_ceilings["matmul"]["tflops"] * 1e12

    tokens = setup["batch"] * setup["seq_len"]
    points = fusable_points(config, tokens=tokens, seq_len=setup["seq_len"])
    by_name = {p["name"]: p for p in points}
    with torch.no_grad():
        for name, (point_tokens, fns) in _contenders(config, setup, device, dtype, quick).items():
            point = by_name[name]
            point["tokens"] = point_tokens
            point["measured"] = {}
            for variant, fn in fns.items():
                print(f"  {name}: {variant}", flush=True)
                stats = timers.eager_time_us(fn)
                counted = point[variant]
                seconds = stats["median_us"] * 1e-6
                stats["tflops"] = counted["flops"] * point_tokens / seconds / 1e12
                stats["gbps"] = counted["bytes"] * point_tokens / seconds / 1e9
                point["measured"][variant] = stats
            if on_gpu:
                torch.cuda.empty_cache()
    run_config = {**setup, "tokens": tokens, "dtype": str(dtype).replace("torch.", ""),
                  "hidden_size": config.hidden_size, "intermediate_size": config.intermediate_size,
                  "num_attention_heads": config.num_attention_heads, "num_key_value_heads": config.num_key_value_heads,
                  "head_dim": config.head_dim,
                  "fused": "torch.compile(dynamic=False) of the same HF lines; QKV: one GEMM on torch.cat weights; "
                           "flash: F.scaled_dot_product_attention(is_causal=True, enable_gqa=True)",
                  "timer": "triton.testing.do_bench median, warmup 50 ms, rep 300 ms" if on_gpu else "perf_counter"}
    return {"config": run_config,
            "results": {"ceilings": measured_ceilings, "ridge_flop_per_byte": ridge_point(peak, bandwidth),
                        "points": points}}


# ---------------------------------------------------------------- rendering

VARIANT_LABEL = {"eager": "HF eager", "fused": "torch.compile", "flash": "flash attention（sdpa）"}
BOUND_ZH = {True: "访存", False: "计算"}


def ridge_flop_per_byte(data: dict) -> float:
    """The measured ridge point: matmul ceiling ÷ copy bandwidth, in FLOP per byte."""
    ceilings = data["results"]["ceilings"]
    return ceilings["matmul"]["tflops"] * 1e12 / (ceilings["copy"]["gbps"] * 1e9)


def _point(name):
    return common.FUSION_POINT_ZH.get(name, name)


def _variant(point_name, variant):
    return "一次 GEMM（拼接权重）" if point_name == "QKV merge" and variant == "fused" else VARIANT_LABEL[variant]


def _arrow(before, after):
    return before if before == after else f"{before} → {after}"


def _caption(data, extra=""):
    c = data["config"]
    return prose.caption(
        f"Qwen3-{c['size']} 几何，{common.dtype_short(c['dtype'])}；RMSNorm、RoPE、SwiGLU、QKV 在 B={c['batch']}、"
        f"T={c['seq_len']}（{c['tokens']} 个 token）下，注意力在 B={c['softmax_batch']}、T={c['seq_len']} 下",
        "FLOP 与字节按每 token、每个解码层的 forward 计", extra, sep="；")


def _ceilings_table(data):
    r = data["results"]
    copy, matmul = r["ceilings"]["copy"], r["ceilings"]["matmul"]
    m, n, k = matmul["shape"]
    rows = [
        ["显存带宽（设备内拷贝，读 + 写）", f"{copy['gbps']:,.0f} GB/s",
         f"读写共 {copy['bytes'] / 2**20:,.0f} MiB，用时 {common.fmt(copy['median_us'])} µs"],
        [f"{common.dtype_short(matmul['dtype'])} 矩阵乘吞吐", f"{common.fmt(matmul['tflops'])} TFLOP/s",
         f"{m}×{k} @ {k}×{n}，用时 {common.fmt(matmul['median_us'])} µs；只测了一个形状，是实用上限，不是峰值"],
        ["屋脊点（矩阵乘吞吐 ÷ 拷贝带宽）", f"{common.fmt(ridge_flop_per_byte(data))} FLOP/字节",
         "算术强度低于它的算子访存受限"],
    ]
    return common.md_table(["天花板", "实测值", "怎么测的"], rows, align="lrl")


def _counts_table(data):
    ridge = ridge_flop_per_byte(data)
    rows = []
    for p in data["results"]["points"]:
        e, f = p["eager"], p["fused"]
        rows.append([_point(p["name"]), f"{e['kernels']} → {f['kernels']}",
                     _arrow(f"{e['flops']:,.0f}", f"{f['flops']:,.0f}"), f"{e['bytes']:,.0f} → {f['bytes']:,.0f}",
                     f"{common.fmt(e['intensity'])} → {common.fmt(f['intensity'])}",
                     _arrow(BOUND_ZH[e["intensity"] < ridge], BOUND_ZH[f["intensity"] < ridge])])
    headers = ["融合点", "kernel 数（eager → 融合）", "FLOP / token", "字节 / token（eager → 融合）",
               "算术强度（FLOP/字节，eager → 融合）", "受限于"]
    return common.md_table(headers, rows, align="lrrrrl") + _caption(data)


def _measured_table(data):
    copy = data["results"]["ceilings"]["copy"]["gbps"]
    ridge = ridge_flop_per_byte(data)
    rows = []
    for p in data["results"]["points"]:
        m = p.get("measured", {})
        if "eager" not in m:
            continue
        eager = m["eager"]
        for variant in ("eager", "fused", "flash"):
            if variant not in m:
                continue
            stats = m[variant]
            speedup = f"{common.fmt(eager['median_us'] / stats['median_us'])}×" if variant != "eager" else "1×"
            memory_bound = p[variant]["intensity"] < ridge
            rows.append([_point(p["name"]) if variant == "eager" else "", _variant(p["name"], variant),
                         common.fmt(stats["median_us"]), speedup, common.fmt(stats["tflops"]),
                         f"{stats['gbps']:,.0f}（{100 * stats['gbps'] / copy:.0f}%）" if memory_bound else "—"])
    headers = ["融合点", "实现", "耗时（µs）", "相对 eager", "TFLOP/s", "带宽（GB/s，占拷贝上限）"]
    return common.md_table(headers, rows, align="llrrrr") + _caption(data, "带宽按该实现自己读写的字节计，计算受限的行不列")




def _roofline_plot(data):
    import math

    plt = common.plot_style()
    r = data["results"]
    bandwidth = r["ceilings"]["copy"]["gbps"] * 1e9
    peak = r["ceilings"]["matmul"]["tflops"] * 1e12
    ridge = r["ridge_flop_per_byte"]
    fig, ax = plt.subplots(figsize=(8, 5))
    xs = [0.05 * 1.25 ** i for i in range(80)]
    xs = [x for x in xs if x <= 20000]
    ax.plot(xs, [min(peak, x * bandwidth) / 1e12 for x in xs], color="#888888", linewidth=1.5)
    ax.axvline(ridge, color="#888888", linestyle=":", linewidth=1)
    ax.text(ridge * 1.1, peak / 1e12 * 0.5, f"拐点 {ridge:.0f} FLOP/字节", fontsize=8, rotation=90, va="top")
    ax.text(ridge / 40, peak / 1e12 * 1.3, f"matmul {peak / 1e12:,.0f} TFLOP/s", fontsize=8)
    achieved = []
    handles, labels = [], []
    for index, p in enumerate(r["points"]):
        color = common.SERIES_COLORS[index % len(common.SERIES_COLORS)]
        m = p.get("measured", {})
        coords = {}
        for variant, marker in (("eager", "o"), ("fused", "o"), ("flash", "*")):
            if variant in m:
                coords[variant] = (p[variant]["intensity"], m[variant]["tflops"])
                achieved.append(m[variant]["tflops"])
                dot = ax.scatter(*coords[variant], s=110 if variant == "flash" else 55, marker=marker, zorder=3,
                                 facecolors="none" if variant == "eager" else color, edgecolors=color, linewidths=1.6)
                if variant == "fused" or (variant == "eager" and "fused" not in m):
                    handles.append(dot)
                    labels.append(common.FUSION_POINT_ZH.get(p["name"], p["name"]))
        if "eager" in coords and "fused" in coords:
            ax.annotate("", xy=coords["fused"], xytext=coords["eager"],
                        arrowprops={"arrowstyle": "->", "color": color, "lw": 1.2})
        if "flash" in coords:
            ax.annotate("flash attention（sdpa）", coords["flash"], textcoords="offset points", xytext=(8, -4),
                        fontsize=8, color=color)
    ax.set_xscale("log")
    ax.set_yscale("log")
    for axis in (ax.xaxis, ax.yaxis):  # plain numbers, not 10^n (no mathtext: see common.plot_style)
        axis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}"))
        axis.set_minor_formatter(plt.NullFormatter())
    ax.set_xlabel("算术强度（FLOP/字节，按每个 token 计，对数坐标）")
    ax.set_ylabel("实测算力（TFLOP/s，对数坐标）")
    ax.set_xlim(0.05, 20000)
    low = min(achieved + [peak / 1e12]) / 3
    ax.set_ylim(low, peak / 1e12 * 4)
    (x0, y0), (x1, y1) = ax.transData.transform([(0.07, 0.07 * bandwidth / 1e12), (0.7, 0.7 * bandwidth / 1e12)])
    ax.text(0.07, 0.07 * bandwidth / 1e12 * 1.5, f"拷贝带宽 {bandwidth / 1e9:,.0f} GB/s", fontsize=8,
            rotation=math.degrees(math.atan2(y1 - y0, x1 - x0)), rotation_mode="anchor")
    ax.legend(handles, labels, loc="upper left", fontsize=8)
    ax.set_title("空心 = HF eager，实心 = 融合后，箭头 = 融合带来的变化", fontsize=10)
    return common.svg_of(fig)


def render(data: dict) -> dict[str, str]:
    return {
        "p1_roofline_ceilings.md": _ceilings_table(data),
        "p1_roofline_counts.md": _counts_table(data),
        "p1_roofline_measured.md": _measured_table(data),
        "p1_roofline.svg": _roofline_plot(data),
    }
