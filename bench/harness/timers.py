"""The timers every number comes from.

GPU time: :func:`cuda_graph_time_us`, or :func:`profiler_time_us` where no graph can be captured.
Eager wall time: :func:`eager_time_us`. Per-call times of a long call (a training step):
:func:`call_times_ms`. The copy ceiling: :func:`copy_bandwidth`.
Without a GPU (``--quick`` smoke runs) each falls back to perf_counter samples: numbers for the
smoke test only.
"""
from __future__ import annotations

import math
import statistics
import time

import torch

from bench.harness.mode import gpu_available


def quantile(ordered: list, q: float) -> float:
    """Linear interpolation between the closest ranks, as triton.testing.do_bench computes quantiles."""
    point = q * (len(ordered) - 1)
    lower, upper = math.floor(point), math.ceil(point)
    t = point - lower
    return (1 - t) * ordered[lower] + t * ordered[upper]


def sample_stats(samples_ms: list) -> dict:
    """Median, 20/80 % quantiles and min in µs, and the number of samples, of times in ms."""
    ordered = sorted(samples_ms)
    return {"median_us": quantile(ordered, 0.5) * 1e3, "p20_us": quantile(ordered, 0.2) * 1e3,
            "p80_us": quantile(ordered, 0.8) * 1e3, "min_us": ordered[0] * 1e3, "n": len(ordered)}


def wall_time_us(fn, samples: int = 3, grad_to_none=None) -> dict:
    """CPU stand-in for the GPU timers: one warm-up call, then ``samples`` perf_counter-timed calls."""
    fn()
    times_ms = []
    for _ in range(samples):
        for tensor in grad_to_none or ():
            tensor.grad = None
        start = time.perf_counter()
        fn()
        times_ms.append((time.perf_counter() - start) * 1e3)
    return sample_stats(times_ms)


def eager_time_us(fn, warmup_ms: float = 50, rep_ms: float = 300, grad_to_none=None, on_gpu=None) -> dict:
    """Wall time of eager calls, host overhead included: triton.testing.do_bench (L2 flushed
    before each call, ``grad_to_none`` grads reset). Median, 20/80 % quantiles, min in µs; n calls."""
    if not (gpu_available() if on_gpu is None else on_gpu):
        return wall_time_us(fn, grad_to_none=grad_to_none)
    import triton.testing

    samples_ms = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, grad_to_none=grad_to_none,
                                         return_mode="all")
    torch.cuda.synchronize()
    return sample_stats(samples_ms)


def cuda_graph_time_us(fns, min_calls: int = 12, replays: int = 25, on_gpu=None) -> dict:
    """GPU time per call, from CUDA-graph replays: no Python or launch overhead.

    ``fns`` is a list of callables that do the same work on *different* buffers;
    the graph cycles through them so that consecutive calls do not find their
    inputs in L2 (see :func:`bench.harness.mode.rotating_input_sets`). Returns median
    and 20/80 percentiles in µs.
    """
    if not (gpu_available() if on_gpu is None else on_gpu):
        return wall_time_us(fns[0])
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for fn in fns * 2:  # warm-up: compilation, autotuning, allocator
            fn()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    calls = -(-min_calls // len(fns)) * len(fns)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(calls):
            fns[i % len(fns)]()
    graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / calls)
    del graph
    times.sort()
    return {"median_us": statistics.median(times), "p20_us": times[len(times) // 5],
            "p80_us": times[(4 * len(times)) // 5], "calls_per_graph": calls}


def device_activities(events, device_type) -> list:
    """The profiler events that are work on the device (kernels, memsets, copies): not the GPU-side
    ranges of user annotations, such as the ``ProfilerStep#N`` that a profiling schedule records
    around each step, whose device time is that of every kernel inside it (counting it doubles the sum)."""
    return [e for e in events if e.device_type == device_type and not e.is_user_annotation]


def profiler_time_us(fns, calls: int = 10, on_gpu=None) -> dict:
    """GPU time per call from the torch profiler, for calls that are not captured in a CUDA graph
    (after a torch.compile in the process the first capture failed on the H200: PERF_LOG run 11).

    After two warm-up passes over ``fns``, ``calls`` profiling cycles each run one unrecorded call
    and one recorded call, cycling through ``fns`` (different buffers: the recorded call does not
    find its inputs in L2), with a synchronize after each. A sample is the sum of the durations of
    the device activities the recorded call ran (kernels, memsets, copies: ``device_activities``).
    Median, 20/80 % quantiles, min in µs, n, and the median number of device activities per call.
    """
    if not (gpu_available() if on_gpu is None else on_gpu):
        return wall_time_us(fns[0])
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, schedule

    for fn in fns * 2:  # compilation, autotuning, allocator
        fn()
    torch.cuda.synchronize()
    samples_us, activities = [], []

    def collect(prof):
        device = device_activities(prof.events(), DeviceType.CUDA)
        samples_us.append(sum(e.self_device_time_total for e in device))
        activities.append(len(device))

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], on_trace_ready=collect,
                 schedule=schedule(wait=0, warmup=1, active=1, repeat=calls)) as prof:
        for i in range(2 * calls):
            fns[i % len(fns)]()
            torch.cuda.synchronize()
            prof.step()
    if len(samples_us) != calls or min(samples_us) <= 0:
        raise RuntimeError(f"the profiler recorded {len(samples_us)} of {calls} calls, device time "
                           f"{samples_us}: no GPU time to report")
    return sample_stats([us / 1e3 for us in samples_us]) | {"device_activities": statistics.median(activities)}


def device_kernel_names(fn, on_gpu=None) -> list[str] | None:
    """The names of the device activities (kernels, memsets, copies) one call of ``fn`` runs, in the order they
    started, from the torch profiler after one warm-up call; None without a GPU. How many launches a call makes."""
    if not (gpu_available() if on_gpu is None else on_gpu):
        return None
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    device = sorted(device_activities(prof.events(), DeviceType.CUDA), key=lambda e: e.time_range.start)
    return [e.name for e in device]


def call_times_ms(fns, calls: int, on_gpu=None) -> list[float]:
    """The time of each of ``calls`` calls, cycling through ``fns``, in ms: CUDA events around
    each call, waited for before the next. For calls long enough to time one by one (a training step)."""
    on_gpu = gpu_available() if on_gpu is None else on_gpu
    times_ms = []
    for i in range(calls):
        fn = fns[i % len(fns)]
        if on_gpu:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times_ms.append(start.elapsed_time(end))
        else:
            begin = time.perf_counter()
            fn()
            times_ms.append((time.perf_counter() - begin) * 1e3)
    return times_ms


def in_ms(stats: dict) -> dict:
    """A timer's result with every ``*_us`` value as ``*_ms``."""
    return {(k[:-3] + "_ms" if k.endswith("_us") else k): (v / 1e3 if k.endswith("_us") else v)
            for k, v in stats.items()}


def copy_bandwidth(nbytes: int, device, timer: str = "graph") -> dict:
    """The copy ceiling: ``dst.copy_(src)`` on the device moving ``nbytes`` in all (half read, half
    written), timed like the kernels it bounds (``"graph"``: :func:`cuda_graph_time_us`) or eagerly
    (``"eager"``: :func:`eager_time_us`). The timer's result plus ``gbps``."""
    src = torch.randn(nbytes // 8, device=device)  # fp32: nbytes / 2 read, nbytes / 2 written
    dst = torch.empty_like(src)
    timers = {"graph": lambda: cuda_graph_time_us([lambda: dst.copy_(src)]),
              "eager": lambda: eager_time_us(lambda: dst.copy_(src))}
    stats = timers[timer]()
    return stats | {"gbps": 2 * src.numel() * 4 / (stats["median_us"] * 1e3)}
