"""Qwen3's other fusion points at op level: QK-norm + RoPE, SwiGLU and the merged QKV projection.

    python -m bench.run_all fusion          # on a GPU; writes docs/data/<gpu>/fusion.json

One question over every kernel it concerns: at each Qwen3 dense size's shapes (16,384 tokens: B=4, T=4096),
how long does each implementation of a fusion point take, forward and forward + backward, and how close does
it come to the copy ceiling (a GEMM: how many TFLOP/s)? The kernels and their shapes are declared in ``KERNELS``:

* ``qk_rope``: q (B, T, Hq, 128) and k (B, T, 8, 128) in, HF's per-head RMSNorm of each, the transpose and
  RoPE (cos, sin of shape (B, T, 128) from Qwen3RotaryEmbedding) out. One shape per distinct Hq.
  Contenders (bench/harness/contenders.py ``QK_ROPE``): HF eager, torch.compile of HF's code, Liger (its
  RMSNorm and its RoPE), this site's RMSNorm with HF's RoPE (the RMSNorm patch), this site's fused kernel.
* ``swiglu``: gate and up (16384, I) in, ``silu(gate) * up`` out; one shape per intermediate size.
  Contenders (``SWIGLU``): HF eager, torch.compile of it, Liger's ``LigerSiLUMulFunction``, this site's.
* ``qkv``: 篇 1's fifth fusion point, the merged QKV projection. x (16384, hidden) in, q (16384, Hq*128),
  k and v (16384, 8*128) out: does one GEMM with the weight ``cat(q_proj.weight, k_proj.weight,
  v_proj.weight)`` (N x K = ((Hq + 2*8)*128) x hidden, concatenated once, not per call) beat HF's three
  ``nn.Linear`` (bias=False)? One shape per distinct (hidden, Hq) pair. Contenders (``QKV``):
  ``three_gemms`` (HF's three F.linear on the same x), ``compile_three`` (torch.compile of that module:
  does Inductor merge them?), ``merged_gemm`` (one F.linear, its output split into q, k, v views). The
  backward gets separate dq, dk, dv, as attention's backward hands them.

GPU time of CUDA-graph replays cycling over input sets of >= 4x L2 (``harness.op_timing.time_phases``),
forward under no_grad, forward + backward through ``torch.autograd.grad`` (no ``.grad`` accumulation) of
the inputs and the weights (qkv: x and the three weights, or x and the merged one).
Minimum bytes (``min_bytes``), bf16: QK-norm + RoPE reads q, k, cos, sin and writes the rotated q, k;
its backward reads the two output gradients, q, k, cos and sin and writes dq, dk (the saved rstd and the
weights' bytes are left out: under 1 %). SwiGLU reads gate and up and writes act; its backward reads
gate, up and d_act and writes d_gate and d_up.

The qkv GEMMs are compute-bound: their entries carry no copy ceiling and no GB/s. Each timed phase gets
``tflops`` from the FLOPs both variants share (``flops_fwd`` = 2*M*N*K with M tokens, N = (Hq+2*Hkv)*128,
K = hidden; ``flops_fwd_bwd`` = 3x: dX and dW are one GEMM's worth each). What merging changes is the
memory traffic and the launches around the same FLOPs, per variant in ``bytes`` (the fewest, in bytes)
and ``launches`` (counted from the algorithm); forward + backward counts include the forward:

* forward: three GEMMs read x three times (3*M*K + N*K read, M*N written), the merged GEMM once
  (M*K + N*K read, M*N written); 3 launches against 1 (split makes views, no kernel).
* backward, three GEMMs: dX is three GEMMs (each reads its dY_i and W_i and writes a fresh M x K
  partial: mm's backward does not accumulate into an existing tensor), then autograd's input buffer sums
  the partials of x's three uses with two element-wise adds (in place when it can: each reads 2*M*K and
  writes M*K); dW is three GEMMs reading dY_i and x each. 2*M*N + 2*N*K + 12*M*K in all; 8 launches
  (3 + 2 + 3).
* backward, merged: split's backward concatenates dq, dk, dv into one (M, N) dY (one cat, M*N read and
  written: the price of the merge when the output gradients arrive as three tensors), then one dX GEMM with
  the whole N as its reduction dimension (no partials, no adds) and one dW GEMM. 4*M*N + 2*N*K + 2*M*K;
  3 launches (cat, dX, dW).

On a GPU ``device_kernels`` records, per phase and contender, the names of the device activities that one
call runs (torch.profiler, ``timers.device_kernel_names``): the launches as measured, any extra kernels of
cuBLAS (memsets, split-K reductions) and Inductor's kernels included.
"""
from __future__ import annotations

import torch

from bench.harness import mode
from bench.harness.contenders import QK_ROPE, QKV, SWIGLU, qk_rope_contenders, qkv_contenders, swiglu_contenders
from bench.harness.op_timing import add_gbps, large_copy, shape_entry, time_phases
from bench.harness.shapes import BENCH_BATCH, BENCH_SEQ_LEN, BENCH_TOKENS, sizes_with
from bench.harness.timers import device_kernel_names
from qwen3_configs import HEAD_DIM, KV_HEADS

NAME = "fusion"
DTYPE = torch.bfloat16
EPS = 1e-6
ELEM = 2  # bytes of a bf16 value


def qk_rope_shape(batch, seq, q_heads, kv_heads=KV_HEADS, head_dim=HEAD_DIM, models=""):
    return {"label": f"Hq={q_heads}", "models": models, "batch": batch, "seq": seq, "q_heads": q_heads,
            "kv_heads": kv_heads, "head_dim": head_dim}


def swiglu_shape(rows, width, models=""):
    return {"label": f"I={width}", "models": models, "rows": rows, "width": width}


def qkv_shape(tokens, hidden, q_heads, kv_heads=KV_HEADS, head_dim=HEAD_DIM, models=""):
    """The projections of ``tokens`` rows of width ``hidden``; labelled by the merged weight's N x K."""
    n = (q_heads + 2 * kv_heads) * head_dim
    return {"label": f"{n}×{hidden}", "models": models, "rows": tokens, "width": hidden, "q_heads": q_heads,
            "kv_heads": kv_heads, "head_dim": head_dim}


KERNELS = {
    "qk_rope": {"contenders": list(QK_ROPE), "ours": "triton_qk_rope",
                "shapes": [qk_rope_shape(BENCH_BATCH, BENCH_SEQ_LEN, heads, models=models)
                           for heads, models in sizes_with(3).items()],
                "quick": [qk_rope_shape(2, 8, 4, 2, 32)]},
    "swiglu": {"contenders": list(SWIGLU), "ours": "triton_swiglu",
               "shapes": [swiglu_shape(BENCH_TOKENS, width, models) for width, models in sizes_with(1).items()],
               "quick": [swiglu_shape(16, 300)]},
    "qkv": {"contenders": list(QKV), "baseline": "three_gemms", "merged": "merged_gemm",
            "shapes": [qkv_shape(BENCH_TOKENS, hidden, heads, models=models)
                       for (hidden, heads), models in sizes_with(0, 3).items()],
            "quick": [qkv_shape(16, 64, 4, 2, 16)]},
}
GEMM_KERNELS = ("qkv",)  # timed in TFLOP/s, with no copy ceiling


def qkv_counts(shape: dict) -> dict:
    """The FLOPs both variants share, and per variant the fewest bytes and the launches (module docstring)."""
    m, k = shape["rows"], shape["width"]
    n = (shape["q_heads"] + 2 * shape["kv_heads"]) * shape["head_dim"]
    flops = 2 * m * n * k
    three_fwd, merged_fwd = 3 * m * k + n * k + m * n, m * k + n * k + m * n
    return {"gemm": {"m": m, "n": n, "k": k, "n_q": shape["q_heads"] * shape["head_dim"],
                     "n_kv": shape["kv_heads"] * shape["head_dim"]},
            "flops_fwd": flops, "flops_fwd_bwd": 3 * flops,
            "bytes": {"three_gemms": {"fwd": ELEM * three_fwd,
                                      "fwd_bwd": ELEM * (three_fwd + 2 * m * n + 2 * n * k + 12 * m * k)},
                      "merged_gemm": {"fwd": ELEM * merged_fwd,
                                      "fwd_bwd": ELEM * (merged_fwd + 4 * m * n + 2 * n * k + 2 * m * k)}},
            "launches": {"three_gemms": {"fwd": 3, "fwd_bwd": 3 + 3 + 2 + 3},
                         "merged_gemm": {"fwd": 1, "fwd_bwd": 1 + 1 + 1 + 1}}}


def min_bytes(kernel: str, shape: dict) -> dict:
    """The fewest bytes a call moves, {"fwd": ..., "fwd_bwd": ...} (see the module docstring)."""
    if kernel == "qk_rope":
        rows = shape["batch"] * shape["seq"]
        qk = rows * (shape["q_heads"] + shape["kv_heads"]) * shape["head_dim"] * ELEM
        tables = 2 * rows * shape["head_dim"] * ELEM  # cos and sin
        return {"fwd": 2 * qk + tables, "fwd_bwd": 5 * qk + 2 * tables}
    if kernel == "qkv":  # the merged GEMM's, the fewer
        return qkv_counts(shape)["bytes"]["merged_gemm"]
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
        elif kernel == "qkv":
            rows, n_q, n_kv = shape["rows"], shape["q_heads"] * shape["head_dim"], shape["kv_heads"] * shape["head_dim"]
            sets.append(((randn(rows, shape["width"]),), 1, (randn(rows, n_q), randn(rows, n_kv), randn(rows, n_kv))))
        else:
            rows, width = shape["rows"], shape["width"]
            sets.append(((randn(rows, width), randn(rows, width)), 2, (randn(rows, width),)))
    return sets


def time_op(entry, name, fn, params, sets, replays=25, kernels=False):
    """Forward (no_grad) and forward + backward (``torch.autograd.grad`` of the inputs that get a gradient
    and of ``params``) of ``fn(*inputs)`` over the input sets, into ``entry[phase][name]``; with ``kernels``,
    on a GPU, the device activities of one call of each in ``entry["device_kernels"][phase][name]``."""
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
    if kernels and name not in entry["errors"]:
        try:
            for phase, call in (("fwd", forward), ("fwd_bwd", forward_backward)):
                names = device_kernel_names(lambda: call(0))
                if names is not None:
                    entry.setdefault("device_kernels", {}).setdefault(phase, {})[name] = names
        except Exception as error:  # recorded, not hidden; the times stand
            entry.setdefault("device_kernel_errors", {})[name] = repr(error)[:300]


def gemm_entry(kernel: str, shape: dict, n_sets: int) -> dict:
    """A GEMM kernel's entry before timing: its size, FLOPs, bytes and launches per variant
    (:func:`qkv_counts`), and an empty table per phase; no copy ceiling."""
    return {"label": shape["label"], "rows": shape["rows"], "width": shape["width"], "shape": shape,
            "input_sets": n_sets, **qkv_counts(shape), "fwd": {}, "fwd_bwd": {}, "errors": {}, "first_call_s": {}}


def add_tflops(entry: dict) -> None:
    """Every timed phase's FLOP rate: the phase's FLOPs ÷ median time, in TFLOP/s."""
    for phase in ("fwd", "fwd_bwd"):
        for stats in entry[phase].values():
            stats["tflops"] = entry[f"flops_{phase}"] / (stats["median_us"] * 1e6)


def contenders(kernel, shape, device, skipped):
    if kernel == "qkv":
        n_q, n_kv = shape["q_heads"] * shape["head_dim"], shape["kv_heads"] * shape["head_dim"]
        return qkv_contenders(KERNELS[kernel]["contenders"], shape["width"], n_q, n_kv, DTYPE, device,
                              skipped.setdefault(kernel, {}))
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
            gemm = kernel in GEMM_KERNELS
            if gemm:
                entry = gemm_entry(kernel, shape, n_sets)
            else:
                rows = shape.get("rows", shape.get("batch", 0) * shape.get("seq", 0))
                entry = shape_entry(shape["label"], rows, shape.get("width", shape.get("head_dim")), nbytes, n_sets,
                                    nbytes["fwd"], device, shape=shape)
            for name, (fn, params) in contenders(kernel, shape, device, results["skipped"]).items():
                time_op(entry, name, fn, params, sets, kernels=gemm)
            (add_tflops if gemm else add_gbps)(entry)
            entries.append(entry)
            del sets
            if device == "cuda":
                torch.cuda.empty_cache()
        results["kernels"][kernel] = entries
    config = {"dtype": "bfloat16", "eps": EPS, "tokens": BENCH_TOKENS,
              "kernels": {k: {key: v[key] for key in ("contenders", "ours", "baseline", "merged") if key in v}
                          for k, v in KERNELS.items()},
              "l2_bytes": mode.l2_cache_bytes(device), "tie_rule": "fusion_2pct",
              "timer": ("median GPU time per call from CUDA-graph replays cycling over input sets >= 4x L2; "
                        "fwd under no_grad, fwd_bwd through torch.autograd.grad")}
    return {"config": config, "results": results}
