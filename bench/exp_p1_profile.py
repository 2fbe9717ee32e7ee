"""Experiment "p1_profile" (篇1 §二–§四): read Qwen3 statically, then profile one training step.

    python -m bench.run_all p1_profile            # on a GPU, about 1 minute on an H200
    python -m bench.run_all p1_profile --quick    # tiny Qwen3 on CPU (smoke test)

Static part (CPU, any machine): module and parameter counts of the full-depth Qwen3-8B
(built on the meta device), the location and version of modeling_qwen3.py, the source of
Qwen3DecoderLayer.forward, what torch.fx.symbolic_trace can trace, and the op kinds and
fusable patterns of the torch.export graph (a 36-layer Qwen3 with tiny widths: op counts
do not depend on the widths).

Dynamic part: Qwen3-8B layer geometry with 4 decoder layers (not 36: the profile is per
layer, and the embedding and lm_head are those of 8B), bf16, sdpa, B=1, T=4096. One
training step = zero_grad(set_to_none) + forward with labels + backward, no optimizer.
Each decoder layer's forward is wrapped in record_function("decoder_layer.<i>").

* one profiled step after 2 warm-up steps: kernels by time, kernel categories, ATen ops,
  launch summary (kernel count, kernel time, busy, gaps), and the kernels of
  decoder_layer.1's forward on the GPU row and its ATen ops on the CPU row;
* the same step at several sequence lengths: step time (do_bench median) against the
  GPU's busy time, to show when launch overhead matters.

The Perfetto trace of the main step is written next to the JSON as p1_profile_trace.json.gz.
"""
from __future__ import annotations

import pathlib

import torch
from transformers.models.qwen3.modeling_qwen3 import Qwen3DecoderLayer

from bench import store
from bench.harness import mode, timers
from p1_fx_trace import count_patterns, export_decoder_layer, export_model, op_kinds, qwen3_parts, try_symbolic_trace
from p1_profile_step import (annotate_decoder_layers, annotation, category_table, kernel_table, launch_summary,
                             layer_timeline, load_trace, memory_bound_runs, profile_training_step, top_ops,
                             training_step)
from p1_static_read import (build_qwen3, expected_rmsnorm_count, modeling_source, module_class_counts,
                            parameter_counts, source_of)
from qwen3_configs import qwen3_config, tiny_qwen3_config

NAME = "p1_profile"
LAYER = "decoder_layer.1"
GPU_SETUP = {"size": "8B", "layers": 4, "batch": 1, "seq_len": 4096, "sweep": [256, 1024, 4096, 16384]}
QUICK_SETUP = {"size": "tiny", "layers": 2, "batch": 1, "seq_len": 64, "sweep": [16, 64]}


def static_analysis() -> dict:
    """Everything §二 shows, from this environment's transformers (CPU only, a few seconds)."""
    config = qwen3_config("8B")
    model = build_qwen3(config, device="meta")
    where = modeling_source()
    first_line, text = source_of(Qwen3DecoderLayer.forward)
    static = {
        "size": "8B",
        "num_hidden_layers": config.num_hidden_layers,
        "modules": dict(module_class_counts(model).most_common()),
        "parameters": parameter_counts(model),
        "total_parameters": sum(p.numel() for p in model.parameters()),
        "expected_rmsnorm": expected_rmsnorm_count(config),
        "repr": repr(model),
        "modeling_file": {k: where[k] for k in ("transformers", "relative", "url")},
        "decoder_forward": {"first_line": first_line, "text": text},
    }
    del model

    torch.manual_seed(0)
    tiny = build_qwen3(tiny_qwen3_config(num_hidden_layers=config.num_hidden_layers), device="cpu")
    fx = []
    for name, part in qwen3_parts(tiny).items():
        graph, error = try_symbolic_trace(part)
        fx.append({"module": name, "ok": graph is not None, "error": error,
                   "op_kinds": dict(op_kinds(graph).most_common()) if graph is not None else None})
    layer_graph = export_decoder_layer(tiny)
    model_graph = export_model(tiny, torch.randint(0, tiny.config.vocab_size, (1, 8)))
    model_kinds = op_kinds(model_graph)
    static["graph"] = {
        "fx": fx,
        "export_layer_op_kinds": dict(op_kinds(layer_graph).most_common()),
        "export_model_ops": sum(model_kinds.values()),
        "export_model_layers": tiny.config.num_hidden_layers,
        "export_model_patterns": count_patterns(model_graph),
    }
    return static


def run(args) -> dict:
    quick, on_gpu, setup, device, dtype = mode.gpu_or_quick(args, NAME, QUICK_SETUP, GPU_SETUP)

    print("  static reading", flush=True)
    static = static_analysis()

    torch.manual_seed(0)
    if setup["size"] == "tiny":
        config = tiny_qwen3_config(num_hidden_layers=setup["layers"])
    else:
        config = qwen3_config(setup["size"], num_hidden_layers=setup["layers"])
    model = build_qwen3(config, device=device).to(dtype)
    model.train()
    annotate_decoder_layers(model)

    def batch(seq_len):
        return torch.randint(0, config.vocab_size, (setup["batch"], seq_len), device=device)

    def timed_step(input_ids):
        def step():
            model.zero_grad(set_to_none=True)
            training_step(model, input_ids)
        return timers.in_ms(timers.eager_time_us(step, warmup_ms=100, rep_ms=1500))

    out_dir = getattr(args, "out", None) or store.DATA_DIR / store.gpu_slug(
        torch.cuda.get_device_name(0) if on_gpu else "cpu")
    trace_path = pathlib.Path(out_dir) / f"{NAME}_trace.json.gz"
    trace_path.parent.mkdir(parents=True, exist_ok=True)

    print(f"  profiling one step, T={setup['seq_len']}", flush=True)
    input_ids = batch(setup["seq_len"])
    profiler = profile_training_step(model, input_ids, trace_path=trace_path)
    events = load_trace(trace_path)
    device_timeline = layer_timeline(events, LAYER, row="device")
    cpu_timeline = layer_timeline(events, LAYER, row="cpu")
    gpu_range = annotation(events, LAYER, "gpu_user_annotation")
    cpu_range = annotation(events, LAYER)
    main = {
        "seq_len": setup["seq_len"],
        "step": timed_step(input_ids),
        "launch": launch_summary(events),
        "kernels": kernel_table(events, n=15),
        "categories": category_table(events),
        "top_ops": top_ops(profiler, n=12),
        "layer": {
            "name": LAYER,
            "device": device_timeline,
            "cpu": cpu_timeline,
            "device_window_us": gpu_range["dur"] if gpu_range else None,
            "cpu_window_us": cpu_range["dur"],
            "gpu_lag_us": gpu_range["ts"] - cpu_range["ts"] if gpu_range else None,
            "memory_bound_runs": memory_bound_runs(device_timeline),
        },
        "trace_file": trace_path.name,
        "trace_bytes": trace_path.stat().st_size,
    }
    del profiler, events

    sweep = []
    for seq_len in setup["sweep"]:
        print(f"  sweep T={seq_len}", flush=True)
        ids = batch(seq_len)
        swept = _profiled_launch(model, ids)
        sweep.append({"seq_len": seq_len, "tokens": setup["batch"] * seq_len, "step": timed_step(ids), "launch": swept})
        if on_gpu:
            torch.cuda.empty_cache()

    peak = torch.cuda.max_memory_allocated() / 2**30 if on_gpu else None
    run_config = {
        **setup,
        "hidden_size": config.hidden_size, "intermediate_size": config.intermediate_size,
        "num_attention_heads": config.num_attention_heads, "num_key_value_heads": config.num_key_value_heads,
        "head_dim": config.head_dim, "vocab_size": config.vocab_size,
        "dtype": str(dtype).replace("torch.", ""), "attention": config._attn_implementation,
        "activation_checkpointing": False,
        "step": "zero_grad(set_to_none=True) + forward with labels + backward; no optimizer",
        "timer": "triton.testing.do_bench median (warmup 100 ms, rep 1500 ms)" if on_gpu else "perf_counter median",
        "profiled_layer": LAYER,
    }
    return {"config": run_config, "results": {"static": static, "main": main, "sweep": sweep, "peak_memory_gib": peak}}


def _profiled_launch(model, input_ids) -> dict:
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = pathlib.Path(folder) / "trace.json.gz"
        profile_training_step(model, input_ids, trace_path=path, warmup_steps=1)
        return launch_summary(load_trace(path))
