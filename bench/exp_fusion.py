"""Qwen3's other fusion points at op level: QK-norm + RoPE and SwiGLU, every contender side by side.

    python -m bench.run_all fusion          # on a GPU; writes docs/data/<gpu>/fusion.json

One question over every kernel it concerns: at each Qwen3 dense size's shapes (16,384 tokens: B=4, T=4096),
how long does each implementation of a fusion point take, forward and forward + backward, and how close does
it come to the copy ceiling? The kernels and their shapes are declared in ``KERNELS``:

* ``qk_rope``: q (B, T, Hq, 128) and k (B, T, 8, 128) in, HF's per-head RMSNorm of each, the transpose and
  RoPE (cos, sin of shape (B, T, 128) from Qwen3RotaryEmbedding) out. One shape per distinct Hq.
  Contenders (bench/harness/contenders.py ``QK_ROPE``): HF eager, torch.compile of HF's code, Liger (its
  RMSNorm and its RoPE), this site's RMSNorm with HF's RoPE (the RMSNorm patch), this site's fused kernel.
* ``swiglu``: gate and up (16384, I) in, ``silu(gate) * up`` out; one shape per intermediate size.
  Contenders (``SWIGLU``): HF eager, torch.compile of it, Liger's ``LigerSiLUMulFunction``, this site's.

GPU time of CUDA-graph replays cycling over input sets of >= 4x L2 (``harness.op_timing.time_phases``),
forward under no_grad, forward + backward through ``torch.autograd.grad`` (no ``.grad`` accumulation).
Minimum bytes (``min_bytes``), bf16: QK-norm + RoPE reads q, k, cos, sin and writes the rotated q, k;
its backward reads the two output gradients, q, k, cos and sin and writes dq, dk (the saved rstd and the
weights' bytes are left out: under 1 %). SwiGLU reads gate and up and writes act; its backward reads
gate, up and d_act and writes d_gate and d_up.
"""
from __future__ import annotations

import torch

from bench.harness import mode
from bench.harness.contenders import QK_ROPE, SWIGLU, qk_rope_contenders, swiglu_contenders
from bench.harness.op_timing import add_gbps, large_copy, shape_entry, time_phases
from bench.harness.shapes import BENCH_BATCH, BENCH_SEQ_LEN, BENCH_TOKENS
from qwen3_configs import HEAD_DIM, KV_HEADS, QWEN3_SIZES

NAME = "fusion"
DTYPE = torch.bfloat16
EPS = 1e-6
ELEM = 2  # bytes of a bf16 value


def _sizes_with(index: int) -> dict:
    """{value of field ``index`` of QWEN3_SIZES: 'sizes that have it'}: one shape per distinct value."""
    out: dict = {}
    for size, fields in QWEN3_SIZES.items():
        out.setdefault(fields[index], []).append(size)
    return {value: "、".join(sizes) for value, sizes in out.items()}


def qk_rope_shape(batch, seq, q_heads, kv_heads=KV_HEADS, head_dim=HEAD_DIM, models=""):
    return {"label": f"Hq={q_heads}", "models": models, "batch": batch, "seq": seq, "q_heads": q_heads,
            "kv_heads": kv_heads, "head_dim": head_dim}


def swiglu_shape(rows, width, models=""):
    return {"label": f"I={width}", "models": models, "rows": rows, "width": width}


KERNELS = {
    "qk_rope": {"contenders": list(QK_ROPE), "ours": "triton_qk_rope",
                "shapes": [qk_rope_shape(BENCH_BATCH, BENCH_SEQ_LEN, heads, models=models)
                           for heads, models in _sizes_with(3).items()],
                "quick": [qk_rope_shape(2, 8, 4, 2, 32)]},
    "swiglu": {"contenders": list(SWIGLU), "ours": "triton_swiglu",
               "shapes": [swiglu_shape(BENCH_TOKENS, width, models) for width, models in _sizes_with(1).items()],
               "quick": [swiglu_shape(16, 300)]},
}


def min_bytes(kernel: str, shape: dict) -> dict:
    """The fewest bytes a call moves, {"fwd": ..., "fwd_bwd": ...} (see the module docstring)."""
    if kernel == "qk_rope":
        rows = shape["batch"] * shape["seq"]
        qk = rows * (shape["q_heads"] + shape["kv_heads"]) * shape["head_dim"] * ELEM
        tables = 2 * rows * shape["head_dim"] * ELEM  # cos and sin
        return {"fwd": 2 * qk + tables, "fwd_bwd": 5 * qk + 2 * tables}
    n = shape["rows"] * shape["width"] * ELEM
    return {"fwd": 3 * n, "fwd_bwd": 8 * n}


def rotary_tables(batch, seq, head_dim, dtype, device):
    """cos, sin (B, T, D) as Qwen3RotaryEmbedding returns them for positions 0..T-1 of each row."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RotaryEmbedding
    from qwen3_configs import tiny_qwen3_config

    config = tiny_qwen3_config(head_dim=head_dim, rope_theta=1000000.0)
    rotary = Qwen3RotaryEmbedding(config).to(device)
    x = torch.empty(batch, seq, head_dim, device=device, dtype=dtype)
    positions = torch.arange(seq, device=device).expand(batch, seq)
    return rotary(x, positions)


def input_sets(kernel, shape, dtype, device, n_sets, seed):
    """[(inputs, inputs that get a gradient, output gradients)] per set, fresh random values."""
    gen = torch.Generator(device=device).manual_seed(seed)

    def randn(*size):
        return torch.randn(*size, device=device, generator=gen).to(dtype)

    sets = []
    for _ in range(n_sets):
        if kernel == "qk_rope":
            b, t, hq, hkv, d = (shape[k] for k in ("batch", "seq", "q_heads", "kv_heads", "head_dim"))
            cos, sin = rotary_tables(b, t, d, dtype, device)
            # output gradients as sdpa's backward hands them: contiguous (B, heads, T, D)
            sets.append(((randn(b, t, hq, d), randn(b, t, hkv, d), cos, sin), 2,
                         (randn(b, hq, t, d), randn(b, hkv, t, d))))
        else:
            rows, width = shape["rows"], shape["width"]
            sets.append(((randn(rows, width), randn(rows, width)), 2, (randn(rows, width),)))
    return sets


def time_op(entry, name, fn, params, sets, replays=25):
    """Forward (no_grad) and forward + backward (``torch.autograd.grad`` of the inputs that get a gradient
    and of ``params``) of ``fn(*inputs)`` over the input sets, into ``entry[phase][name]``."""
    leaves = [tuple(t.detach().clone().requires_grad_(i < n_grad) for i, t in enumerate(inputs))
              for inputs, n_grad, _ in sets]

    def forward(k):
        with torch.no_grad():
            fn(*sets[k][0])

    def forward_backward(k):
        outputs = fn(*leaves[k])
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        torch.autograd.grad(outputs, [*leaves[k][:sets[k][1]], *params], sets[k][2])

    time_phases(entry, name, forward, forward_backward, len(sets), replays=replays)


def contenders(kernel, shape, device, skipped):
    if kernel == "qk_rope":
        return qk_rope_contenders(KERNELS[kernel]["contenders"], shape["head_dim"], DTYPE, device,
                                  skipped.setdefault(kernel, {}), EPS)
    return swiglu_contenders(KERNELS[kernel]["contenders"], DTYPE, device, skipped.setdefault(kernel, {}))


def run(args) -> dict:
    quick, _, _, device, _ = mode.gpu_or_quick(args, NAME, "quick", "shapes")
    results = {"copy": large_copy(quick, device), "kernels": {}, "skipped": {}}
    for kernel, spec in KERNELS.items():
        entries = []
        for index, shape in enumerate(spec["quick" if quick else "shapes"]):
            print(f"  {kernel} {shape['label']}", flush=True)
            nbytes = min_bytes(kernel, shape)
            n_sets = 1 if quick else mode.rotating_input_sets(nbytes["fwd_bwd"], device)
            sets = input_sets(kernel, shape, DTYPE, device, n_sets, seed=1000 * len(entries) + index)
            rows = shape.get("rows", shape.get("batch", 0) * shape.get("seq", 0))
            entry = shape_entry(shape["label"], rows, shape.get("width", shape.get("head_dim")), nbytes, n_sets,
                                nbytes["fwd"], device, shape=shape)
            for name, (fn, params) in contenders(kernel, shape, device, results["skipped"]).items():
                time_op(entry, name, fn, params, sets)
            add_gbps(entry)
            entries.append(entry)
            del sets
            if device == "cuda":
                torch.cuda.empty_cache()
        results["kernels"][kernel] = entries
    config = {"dtype": "bfloat16", "eps": EPS, "tokens": BENCH_TOKENS,
              "kernels": {k: {"contenders": v["contenders"], "ours": v["ours"]} for k, v in KERNELS.items()},
              "l2_bytes": mode.l2_cache_bytes(device), "tie_rule": "fusion_2pct",
              "timer": ("median GPU time per call from CUDA-graph replays cycling over input sets >= 4x L2; "
                        "fwd under no_grad, fwd_bwd through torch.autograd.grad")}
    return {"config": config, "results": results}
