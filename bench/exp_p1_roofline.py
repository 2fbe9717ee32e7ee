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

from bench.harness import mode, timers
from p1_roofline import fusable_points, ridge_point
from qwen3_configs import qwen3_config, tiny_qwen3_config

NAME = "p1_roofline"
GPU_SETUP = {"size": "8B", "batch": 4, "seq_len": 4096, "softmax_batch": 1, "copy_mib": 2048, "matmul": [8192, 8192, 8192]}
QUICK_SETUP = {"size": "tiny", "batch": 2, "seq_len": 32, "softmax_batch": 1, "copy_mib": 16, "matmul": [256, 256, 256]}


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
