"""Experiment "p1_compile" (篇1 §三.3 and §六): one Qwen3 decoder layer, eager vs torch.compile vs CUDA graph.

    python -m bench.run_all p1_compile            # on a GPU, about 2 minutes on an H200
    python -m bench.run_all p1_compile --quick    # tiny Qwen3 on CPU (smoke test, Inductor writes C++)

Subject: one Qwen3DecoderLayer with Qwen3-8B geometry, bf16, sdpa, called as Qwen3Model
calls it (hidden states, RoPE cos/sin, no mask), at a small and a training-size batch.

Contenders, side by side in one process:
* eager: HF as shipped;
* CUDA graph: the eager layer captured with torch.cuda.make_graphed_callables
  (forward and backward each replayed as one graph launch);
* torch.compile: Inductor, default mode, dynamic=False (one compile per shape).

Per contender and shape: training forward (autograd on) and forward+backward times
(do_bench medians, parameter and input grads reset to None between runs), and from one
profiled call each: the number of GPU kernels and of CPU-side launch API calls.
Also saved: compile wall time, Inductor's kernel list for the layer (names and the
ATen nodes each fused), and the Triton code Inductor writes for HF's Qwen3RMSNorm
(forward and backward) at hidden size 4096.
"""
from __future__ import annotations

import pathlib
import re
import tempfile
import time

import torch
from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer, Qwen3RotaryEmbedding

from bench.harness import mode, timers
from bench.harness.shapes import BENCH_TOKENS
from p1_compile_capture import capture_output_code, compile_rmsnorm, generated_kernels, graph_kind, kernel_body
from p1_fx_trace import DecoderLayerCall
from p1_profile_step import device_events, load_trace
from qwen3_configs import qwen3_config, tiny_qwen3_config

NAME = "p1_compile"
GPU_SETUP = {"size": "8B", "shapes": [[1, 512], [4, 4096]], "rmsnorm": {"hidden": 4096, "rows": BENCH_TOKENS}}
QUICK_SETUP = {"size": "tiny", "shapes": [[1, 16]], "rmsnorm": {"hidden": 64, "rows": 8}}
LAUNCH_API = re.compile(r"^(cuda|cu)(LaunchKernel|LaunchKernelEx|GraphLaunch|LaunchCooperativeKernel|ModuleLaunch)",
                        re.IGNORECASE)
CONTENDERS = ("eager", "cuda_graph", "compile")  # in table order; eager is the baseline
BASELINE = "eager"
EAGER_TIMER = {"warmup_ms": 50, "rep_ms": 400}


def _count_launches(fn, on_gpu):
    """GPU kernels (and memcpy/memset) and CPU-side launch API calls of one call of fn."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if on_gpu:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    with torch.profiler.profile(activities=activities) as profiler:
        fn()
        if on_gpu:
            torch.cuda.synchronize()
    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "trace.json"
        profiler.export_chrome_trace(str(path))
        events = load_trace(path)
    launches = [e for e in events if e.get("cat") in ("cuda_runtime", "cuda_driver") and LAUNCH_API.match(e.get("name", ""))]
    return {"kernels": len(device_events(events)), "launch_calls": len(launches),
            "graph_launches": sum("GraphLaunch" in e["name"] for e in launches)}


def run(args) -> dict:
    quick, on_gpu, setup, device, dtype = mode.gpu_or_quick(args, NAME, QUICK_SETUP, GPU_SETUP)
    torch.manual_seed(0)

    # the RMSNorm code Inductor writes (Triton on a GPU)
    print("  compiling Qwen3RMSNorm", flush=True)
    start = time.perf_counter()
    norm_kernels = compile_rmsnorm(setup["rmsnorm"]["hidden"], setup["rmsnorm"]["rows"], device=device, dtype=dtype)
    rmsnorm = {"compile_s": time.perf_counter() - start, **setup["rmsnorm"],
               "graphs": {graph: [{"name": k["name"], "kind": k["kind"], "source_nodes": k["source_nodes"],
                                   "body": kernel_body(k["source"])} for k in kernels]
                          for graph, kernels in norm_kernels.items()}}

    size_config = tiny_qwen3_config(num_hidden_layers=1) if setup["size"] == "tiny" else qwen3_config(
        setup["size"], num_hidden_layers=1)
    layer = Qwen3DecoderLayer(size_config, layer_idx=0).to(device=device, dtype=dtype)
    rotary = Qwen3RotaryEmbedding(size_config).to(device)
    with torch.no_grad():  # random weights; norm weights around 1
        for name, parameter in layer.named_parameters():
            if "norm" in name:
                parameter.copy_(torch.rand_like(parameter) + 0.5)
            else:
                parameter.normal_(0.0, 0.02)
    layer.train()
    eager = DecoderLayerCall(layer)
    compiled = torch.compile(DecoderLayerCall(layer), dynamic=False)
    parameters = list(layer.parameters())

    shapes, layer_kernels = [], None
    for batch, seq in setup["shapes"]:
        print(f"  shape B={batch} T={seq}", flush=True)
        x = torch.randn(batch, seq, size_config.hidden_size, device=device, dtype=dtype, requires_grad=True)
        dy = torch.randn(batch, seq, size_config.hidden_size, device=device, dtype=dtype)
        cos, sin = rotary(x, torch.arange(seq, device=device)[None].expand(batch, -1))

        # compile (timed, and its generated kernels captured once, at the last shape)
        start = time.perf_counter()
        if (batch, seq) == tuple(setup["shapes"][-1]):
            _, modules = capture_output_code(lambda: compiled(x, cos, sin).backward(dy))
            layer_kernels = {graph_kind(m): [{"name": k["name"], "source_nodes": k["source_nodes"]}
                                             for k in generated_kernels(m)] for m in modules}
        else:
            compiled(x, cos, sin).backward(dy)
        if on_gpu:
            torch.cuda.synchronize()
        compile_s = time.perf_counter() - start

        callables = {"eager": eager, "compile": compiled}
        if on_gpu:  # pragma: gpu only
            callables["cuda_graph"] = torch.cuda.make_graphed_callables(DecoderLayerCall(layer), (x, cos, sin))
        entry = {"batch": batch, "seq_len": seq, "tokens": batch * seq, "compile_s": compile_s, "contenders": {}}
        for name in CONTENDERS:
            if name not in callables:
                continue
            fn = callables[name]
            print(f"    {name}", flush=True)

            def forward():
                return fn(x, cos, sin)

            def forward_backward():
                fn(x, cos, sin).backward(dy)

            result = {"fwd": timers.eager_time_us(forward, **EAGER_TIMER),
                      "fwd_bwd": timers.eager_time_us(forward_backward, **EAGER_TIMER, grad_to_none=[x] + parameters)}
            for tensor in [x] + parameters:
                tensor.grad = None
            result["launches_fwd"] = _count_launches(forward, on_gpu)
            for tensor in [x] + parameters:
                tensor.grad = None
            result["launches_fwd_bwd"] = _count_launches(forward_backward, on_gpu)
            entry["contenders"][name] = result
        shapes.append(entry)
        del x, dy, cos, sin, callables
        if on_gpu:
            torch.cuda.empty_cache()

    run_config = {**setup, "contenders": list(CONTENDERS), "baseline": BASELINE,
                  "dtype": str(dtype).replace("torch.", ""), "attention": size_config._attn_implementation,
                  "hidden_size": size_config.hidden_size, "intermediate_size": size_config.intermediate_size,
                  "num_attention_heads": size_config.num_attention_heads,
                  "num_key_value_heads": size_config.num_key_value_heads, "head_dim": size_config.head_dim,
                  "compile": "torch.compile(DecoderLayerCall(layer), dynamic=False), default mode",
                  "cuda_graph": "torch.cuda.make_graphed_callables(DecoderLayerCall(layer), (x, cos, sin))",
                  "timer": "triton.testing.do_bench median, warmup 50 ms, rep 400 ms, grads reset to None"
                  if on_gpu else "perf_counter"}
    return {"config": run_config, "results": {"rmsnorm": rmsnorm, "layer_kernels": layer_kernels, "shapes": shapes}}
