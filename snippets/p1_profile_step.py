# SPDX-License-Identifier: Apache-2.0
"""Dynamic reading of Qwen3: profile one training step and measure launch overhead.

Article 1 (docs/qwen3-fusion.md) shows this file in parts;
tests/test_p1_profile_step.py tests it.
The analysis reads the same Chrome-trace JSON that Perfetto (ui.perfetto.dev) opens.

    # tiny Qwen3 on CPU, or the 8B geometry (4 layers) on a GPU
    python snippets/p1_profile_step.py
"""
# --8<-- [start:step]
import torch


def training_step(model, input_ids: torch.Tensor) -> torch.Tensor:
    """Forward, next-token loss, backward (no optimizer), as in a real training step."""
    loss = model(input_ids=input_ids, labels=input_ids, use_cache=False).loss
    loss.backward()
    return loss


def annotate_decoder_layers(model) -> list:
    """Wrap each decoder layer's forward in a record_function range "decoder_layer.<i>".

    The profiler then shows the range on the CPU row and, on a GPU, a matching
    range over the kernels the layer launched. Returns the hook handles.
    """
    handles = []
    for index, layer in enumerate(model.model.layers):
        def enter(module, args, kwargs, name=f"decoder_layer.{index}"):
            module._profile_range = torch.profiler.record_function(name)
            module._profile_range.__enter__()

        def leave(module, args, kwargs, output):
            module._profile_range.__exit__(None, None, None)

        handles.append(layer.register_forward_pre_hook(enter, with_kwargs=True))
        handles.append(layer.register_forward_hook(leave, with_kwargs=True))
    return handles


def profile_training_step(model, input_ids, trace_path=None, warmup_steps=2):
    """Profile one training step after warm-up; optionally write a Perfetto-ready trace
    (a path ending in .json.gz is gzip-compressed)."""
    activities = [torch.profiler.ProfilerActivity.CPU]
    if input_ids.is_cuda:
        activities.append(torch.profiler.ProfilerActivity.CUDA)
    for _ in range(warmup_steps):  # first steps allocate memory and pick kernels
        training_step(model, input_ids)
    model.zero_grad(set_to_none=True)
    with torch.profiler.profile(activities=activities) as profiler:
        training_step(model, input_ids)
        if input_ids.is_cuda:
            torch.cuda.synchronize()
    if trace_path is not None:
        profiler.export_chrome_trace(str(trace_path))
    return profiler
# --8<-- [end:step]


import gzip  # noqa: E402  (helpers the article does not show)
import json  # noqa: E402


def load_trace(path) -> list:
    """The traceEvents of a Chrome trace (.json or .json.gz), as Perfetto reads it."""
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as file:
        return json.load(file)["traceEvents"]


def top_ops(profiler, n: int = 10) -> list:
    """The ATen ops with the most self time on the device (on the CPU without a GPU)."""
    rows = []
    for event in profiler.key_averages():
        device_us = getattr(event, "self_device_time_total", 0) or 0
        rows.append({"op": event.key, "calls": event.count, "self_device_us": device_us,
                     "self_cpu_us": event.self_cpu_time_total})
    on_device = any(row["self_device_us"] for row in rows)
    key = "self_device_us" if on_device else "self_cpu_us"
    rows = [row for row in rows if row["op"].startswith("aten::")]
    return sorted(rows, key=lambda row: row[key], reverse=True)[:n]


# --8<-- [start:kernels]
import collections
import re
import statistics

DEVICE_CATEGORIES = ("kernel", "gpu_memcpy", "gpu_memset")


def device_events(events: list) -> list:
    """What ran on the GPU, sorted by start time.

    Without a GPU the stand-in is the outermost ATen ops of each thread:
    the work a GPU run would turn into kernels.
    """
    found = [e for e in events
             if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES]
    if not found:
        found = outermost(e for e in events
                          if e.get("ph") == "X" and e.get("cat") == "cpu_op")
    return sorted(found, key=lambda e: e["ts"])


def outermost(events) -> list:
    """Events not nested inside another event of the same thread."""
    kept, end_by_thread = [], {}
    for event in sorted(events, key=lambda e: (e["tid"], e["ts"], -e["dur"])):
        if event["ts"] >= end_by_thread.get(event["tid"], float("-inf")):
            kept.append(event)
            end_by_thread[event["tid"]] = event["ts"] + event["dur"]
    return kept


# Order matters: an Inductor kernel named triton_..._mean is Triton, a flash kernel
# built on cutlass is attention.
KERNEL_CATEGORIES = [
    ("Triton (Inductor)", r"^triton_"),
    ("attention", r"flash|fmha|attention|sdpa|cudnn_generated"),
    ("GEMM", r"gemm|nvjet|xmma|cutlass|cublas|sm90_|sm80_|splitk"),
    ("softmax / loss", r"softmax|nll_loss|cross_entropy"),
    ("reduction", r"reduce_kernel|reduction"),
    ("copy / cast / layout",
     r"copy|catarray|cat_array|transpose|index|gather|scatter|fill|memcpy|memset"),
    ("elementwise", r"elementwise"),
]
COMPUTE_BOUND = {"GEMM", "attention"}


def kernel_category(name: str) -> str:
    lowered = name.lower()
    for category, pattern in KERNEL_CATEGORIES:
        if re.search(pattern, lowered):
            return category
    return "other"


def short_kernel_name(name: str) -> str:
    """The kernel template plus the op it was instantiated for:
    'void at::native::vectorized_elementwise_kernel<4, ...MulFunctor<float>...>(...)'
    -> 'vectorized_elementwise_kernel[Mul]'."""
    text = re.sub(r"^void\s+", "", name)
    base = re.split(r"[<(]", text, maxsplit=1)[0].split("::")[-1] or text
    detail = None
    for pattern in (r"CUDAFunctor_(\w+)", r"(\w+?)Functor\b", r"(\w+?)_kernel_impl",
                    r"(\w+?)_kernel_cuda", r"(\w+?)_kernel\(", r"(\w+?)Ops<"):
        found = [m for m in re.findall(pattern, text[len(base):])
                 if m not in ("Binary", "Unary", "AUnary", "BUnary")]
        if found:
            detail = found[-1].split("::")[-1]
            break
    base = base if len(base) <= 56 else base[:53] + "..."
    return f"{base}[{detail}]" if detail else base
# --8<-- [end:kernels]


# --8<-- [start:launch]
def launch_summary(events: list, small_us: float = 10.0, gap_us: float = 5.0) -> dict:
    """Launch-overhead figures of one profiled step.

    busy = the union of kernel intervals; span = first kernel start to last kernel
    end; idle = span - busy, made of gaps in which the GPU waits for the CPU to
    launch work.
    """
    kernels = device_events(events)
    if not kernels:
        raise ValueError("the trace holds no kernels (and no CPU ops)")
    durations = [k["dur"] for k in kernels]
    busy, gaps, end = 0.0, [], None
    for k in kernels:
        start, stop = k["ts"], k["ts"] + k["dur"]
        if end is None or start > end:
            if end is not None:
                gaps.append(start - end)
            busy += k["dur"]
            end = stop
        elif stop > end:
            busy += stop - end
            end = stop
    span = max(k["ts"] + k["dur"] for k in kernels) - kernels[0]["ts"]
    small = [d for d in durations if d < small_us]
    return {
        "kernels": len(kernels),
        "kernel_time_us": sum(durations),
        "busy_us": busy,
        "span_us": span,
        "idle_us": span - busy,
        "busy_fraction": busy / span if span else 1.0,
        "median_kernel_us": statistics.median(durations),
        "small_kernels": len(small),
        "small_kernel_time_share": (sum(small) / sum(durations) if sum(durations)
                                    else 0.0),
        "gaps_over_threshold": sum(g > gap_us for g in gaps),
        "gap_time_over_threshold_us": sum(g for g in gaps if g > gap_us),
        "small_us": small_us,
        "gap_us": gap_us,
    }


def kernel_table(events: list, n: int = 12) -> list:
    """Kernels grouped by short name, by total time: the profiler's top-kernels view."""
    groups = collections.defaultdict(list)
    for k in device_events(events):
        groups[short_kernel_name(k["name"])].append(k)
    total = sum(k["dur"] for group in groups.values() for k in group) or 1.0
    rows = [{"kernel": name, "category": kernel_category(group[0]["name"]),
             "calls": len(group), "total_us": sum(k["dur"] for k in group),
             "mean_us": statistics.mean(k["dur"] for k in group),
             "share": sum(k["dur"] for k in group) / total}
            for name, group in groups.items()]
    return sorted(rows, key=lambda row: row["total_us"], reverse=True)[:n]


def category_table(events: list) -> list:
    """Kernel count and time per category (GEMM, attention, elementwise, ...)."""
    count, time_us = collections.Counter(), collections.Counter()
    for k in device_events(events):
        category = kernel_category(k["name"])
        count[category] += 1
        time_us[category] += k["dur"]
    total = sum(time_us.values()) or 1.0
    return [{"category": c, "kernels": count[c], "total_us": time_us[c],
             "share": time_us[c] / total}
            for c, _ in time_us.most_common()]
# --8<-- [end:launch]


# --8<-- [start:timeline]
def annotation(events: list, name: str, category: str = "user_annotation"):
    """The record_function range called ``name``: "user_annotation" is its CPU range,
    "gpu_user_annotation" the matching range on the GPU row (None if absent)."""
    for e in events:
        if e.get("cat") == category and e.get("name") == name and e.get("ph") == "X":
            return e
    if category == "user_annotation":
        raise ValueError(f"no record_function range named {name!r} in the trace")
    return None


def layer_timeline(events: list, name: str = "decoder_layer.1",
                   row: str = "device") -> list:
    """What one annotated range ran, with start times relative to the range.

    row="cpu": the outermost ATen ops on the range's thread (the launches).
    row="device": the kernels those launches started, matched by correlation id
    (without a GPU, the CPU ops stand in for kernels).
    """
    if row not in ("device", "cpu"):
        raise ValueError(f"row must be 'device' or 'cpu', got {row!r}")
    cpu = annotation(events, name)
    start, end = cpu["ts"], cpu["ts"] + cpu["dur"]
    launched = {e["args"]["correlation"] for e in events
                if e.get("cat") in ("cuda_runtime", "cuda_driver")
                and start <= e["ts"] < end and "correlation" in e.get("args", {})}
    if row == "device" and launched:
        picked = [k for k in device_events(events)
                  if k.get("args", {}).get("correlation") in launched]
        gpu = annotation(events, name, "gpu_user_annotation")
        origin = gpu["ts"] if gpu else min((k["ts"] for k in picked), default=0)
    else:
        picked = outermost(e for e in events
                           if e.get("ph") == "X" and e.get("cat") == "cpu_op"
                           and e["tid"] == cpu["tid"] and start <= e["ts"] < end)
        origin = start
    return [{"start_us": e["ts"] - origin, "dur_us": e["dur"],
             "kernel": short_kernel_name(e["name"]),
             "category": kernel_category(e["name"])}
            for e in sorted(picked, key=lambda e: e["ts"])]


def memory_bound_runs(timeline: list) -> list:
    """Lengths of the runs of consecutive kernels that are not GEMM or attention."""
    runs, current = [], 0
    for row in timeline:
        if row["category"] in COMPUTE_BOUND:
            if current:
                runs.append(current)
            current = 0
        else:
            current += 1
    if current:
        runs.append(current)
    return runs
# --8<-- [end:timeline]


# --8<-- [start:launches]
LAUNCH_CATEGORIES = ("cuda_runtime", "cuda_driver")


def range_launches(events: list, name: str = "decoder_layer.1") -> list:
    """The GPU work launched inside one record_function range, each with its launch.

    A launch call on the CPU (cudaLaunchKernel, cuLaunchKernelEx, cudaMemsetAsync,
    ...) and the kernel, memset or memcpy it queued on the GPU carry the same
    ``args.correlation``. Kept: calls of the range's thread that start inside the
    range and started GPU work (calls such as cudaGetErrorString start none). Times
    are µs from the range's start on the CPU, so launches and kernels share one
    time axis.
    """
    cpu = annotation(events, name)
    start, end = cpu["ts"], cpu["ts"] + cpu["dur"]
    gpu_work = {e["args"]["correlation"]: e for e in events
                if e.get("ph") == "X" and e.get("cat") in DEVICE_CATEGORIES
                and "correlation" in e.get("args", {})}
    pairs = []
    for call in events:
        correlation = call.get("args", {}).get("correlation")
        if (call.get("ph") == "X" and call.get("cat") in LAUNCH_CATEGORIES
                and call.get("tid") == cpu["tid"]
                and start <= call["ts"] < end and correlation in gpu_work):
            work = gpu_work[correlation]
            pairs.append({"correlation": correlation, "launch": call["name"],
                          "launch_us": call["ts"] - start, "launch_dur_us": call["dur"],
                          "kernel": short_kernel_name(work["name"]),
                          "category": kernel_category(work["name"]),
                          "kernel_us": work["ts"] - start,
                          "kernel_dur_us": work["dur"]})
    return sorted(pairs, key=lambda pair: pair["launch_us"])
# --8<-- [end:launches]


if __name__ == "__main__":
    # --8<-- [start:usage]
    import pathlib
    import tempfile

    import torch

    from p1_profile_step import (annotate_decoder_layers, kernel_table, launch_summary,
                                 load_trace, profile_training_step)
    from p1_static_read import build_qwen3
    from qwen3_configs import qwen3_config, tiny_qwen3_config

    if torch.cuda.is_available():  # real Qwen3-8B layers (4 of 36), bf16, 4096 tokens
        config, device, dtype, tokens = (qwen3_config("8B", num_hidden_layers=4),
                                         "cuda", torch.bfloat16, 4096)
    else:                          # same structure, tiny sizes
        config, device, dtype, tokens = tiny_qwen3_config(), "cpu", torch.float32, 64
    model = build_qwen3(config, device=device).to(dtype)
    annotate_decoder_layers(model)
    input_ids = torch.randint(0, config.vocab_size, (1, tokens), device=device)

    trace = pathlib.Path(tempfile.gettempdir()) / "qwen3_step.json.gz"
    profile_training_step(model, input_ids, trace_path=trace)
    print("open in ui.perfetto.dev:", trace)
    events = load_trace(trace)
    print(launch_summary(events))
    for row in kernel_table(events, n=5):
        print(f"{row['calls']:5d} x {row['kernel']:45s} {row['total_us']:10.0f} us  "
              f"{row['category']}")
    # --8<-- [end:usage]
