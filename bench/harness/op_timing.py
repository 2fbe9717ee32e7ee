"""Op-level timing: input sets, the fewest bytes an op moves, one contender timed both ways, and
the copies the reports choose the copy ceiling from.

A shape's entry in the results (:func:`shape_entry`) holds, per phase (``fwd``, ``fwd_bwd`` and,
timed eagerly, ``fwd_eager``, ``fwd_bwd_eager``), ``{contender id: timer stats + gbps}``, the
errors of contenders that failed there and the first calls' wall times (compiles included).
"""
from __future__ import annotations

import time

import torch

from bench.harness.mode import gpu_available
from bench.harness.shapes import BENCH_BATCH, Q_HEADS, Q_NORM_ROWS
from bench.harness.timers import copy_bandwidth, cuda_graph_time_us, eager_time_us


def min_bytes(rows: int, width: int, fwd_io: int = 2, bwd_io: int = 3, elem: int = 2) -> dict:
    """The fewest bytes an RMSNorm-like op moves, {"fwd": ..., "fwd_bwd": ...}: ``fwd_io``
    row-sized tensors in the forward (RMSNorm: x read, y written), ``bwd_io`` in the backward
    (x and dy read, dx written), plus the weight: read by each direction, dW written once."""
    tensor, weight = rows * width * elem, width * elem
    return {"fwd": fwd_io * tensor + weight, "fwd_bwd": (fwd_io + bwd_io) * tensor + 3 * weight}


def rmsnorm_inputs(rows, width, layout, dtype, device, seed):
    """(x, dy) of one input set; ``layout="heads_transposed"``: dy as q_norm receives it, a
    (B, T, heads, D) view of a (B, heads, T, D) tensor."""
    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(rows, width, device=device, dtype=torch.float32, generator=gen).to(dtype)
    if layout == "heads_transposed":
        # the benchmark's B=4 sequences of Qwen3-8B's 32 query heads; a --quick run: 4 x 2 heads
        heads = Q_HEADS if rows == Q_NORM_ROWS else 2
        seq = rows // (BENCH_BATCH * heads)
        dy = torch.randn(BENCH_BATCH, heads, seq, width, device=device, generator=gen).to(dtype).transpose(1, 2)
        x = x.view(BENCH_BATCH, seq, heads, width)
    else:
        dy = torch.randn(rows, width, device=device, generator=gen).to(dtype)
    return x, dy


def fused_add_inputs(rows, width, dtype, device, n_sets, seed):
    """[(x, residual, dy, ds)]: two RMSNorm input draws per set."""
    out = []
    for k in range(n_sets):
        x, dy = rmsnorm_inputs(rows, width, "contiguous", dtype, device, seed=seed + 2 * k)
        r, ds = rmsnorm_inputs(rows, width, "contiguous", dtype, device, seed=seed + 2 * k + 1)
        out.append((x, r, dy, ds))
    return out


def large_copy(quick: bool, device) -> dict:
    """The run's large copy (4 GiB; 64 MiB in a quick run), timed like the contenders (CUDA-graph
    replay) and, as ``eager``, with do_bench on eager calls: inside a graph a multi-GiB copy runs
    slower on the H200 than eagerly."""
    nbytes = (64 if quick else 4096) * 2**20
    return {**copy_bandwidth(nbytes, device), "eager": copy_bandwidth(nbytes, device, "eager"), "bytes": nbytes}


def shape_entry(label: str, rows: int, width: int, nbytes: dict, n_sets: int, copy_bytes: int, device,
                phases=("fwd", "fwd_bwd"), **fields) -> dict:
    """A shape's entry before timing: its size, bytes, the copy of ``copy_bytes`` timed like the
    contenders (the same-size copy), and an empty table per phase."""
    return {"label": label, "rows": rows, "width": width, **fields, "input_sets": n_sets,
            "bytes_fwd": nbytes["fwd"], "bytes_fwd_bwd": nbytes["fwd_bwd"],
            "copy_same_bytes": copy_bandwidth(copy_bytes, device),
            **{phase: {} for phase in phases}, "errors": {}, "first_call_s": {}}


def add_gbps(entry: dict) -> None:
    """Every timed phase's bandwidth: the phase's minimum bytes ÷ median time."""
    for phase in ("fwd", "fwd_bwd", "fwd_eager", "fwd_bwd_eager"):
        nbytes = entry["bytes_fwd_bwd" if phase.startswith("fwd_bwd") else "bytes_fwd"]
        for stats in entry.get(phase, {}).values():
            stats["gbps"] = nbytes / (stats["median_us"] * 1e3)


def _sync():
    if gpu_available():
        torch.cuda.synchronize()


def time_phases(entry, name, forward, forward_backward, n_sets, eager=False, replays=25):
    """``forward(k)`` and ``forward_backward(k)`` over input sets 0..n_sets-1 into ``entry[phase][name]``:
    first-call wall times (compiles included) in ``entry["first_call_s"][name]``, then GPU time of
    CUDA-graph replays (fwd, fwd_bwd) and, with ``eager``, do_bench per eager call. An exception is
    recorded in ``entry["errors"][name]`` and the run goes on."""
    calls = range(n_sets)
    phases = {"fwd": lambda: cuda_graph_time_us([lambda k=k: forward(k) for k in calls], replays=replays),
              "fwd_bwd": lambda: cuda_graph_time_us([lambda k=k: forward_backward(k) for k in calls],
                                                    replays=replays)}
    if eager:
        phases = {"fwd_eager": lambda: eager_time_us(lambda: forward(0)),
                  "fwd_bwd_eager": lambda: eager_time_us(lambda: forward_backward(0)), **phases}
    try:
        first = {}
        for phase, call in (("fwd", forward), ("fwd_bwd", forward_backward)):
            began = time.perf_counter()
            call(0)
            _sync()
            first[phase] = round(time.perf_counter() - began, 3)
        entry.setdefault("first_call_s", {})[name] = first
        for phase, timer in phases.items():
            entry[phase][name] = timer()
    except Exception as error:  # recorded, not hidden
        entry["errors"][name] = repr(error)[:300]
        print(f"    {name} failed: {error!r}"[:300], flush=True)
        for phase in phases:
            entry[phase].pop(name, None)


def time_contender(entry, name, fn, weight, sets, eager=True, replays=25):
    """Time an RMSNorm contender ``fn(x) -> y`` over the input sets ``[(x, dy), ...]`` into ``entry[phase][name]``.

    fwd: forward under no_grad; fwd_bwd: forward + backward from fresh leaves. GPU time of
    CUDA-graph replays cycling over the sets, and with ``eager`` the do_bench time per eager
    call (fwd_eager, fwd_bwd_eager). ``entry["first_call_s"][name]`` is the wall time of the
    first forward and forward + backward calls: compiles included. An exception is recorded
    in ``entry["errors"][name]`` (the tables show a dash) and the run goes on.
    """
    leaves = [x.detach().clone().requires_grad_() for x, _ in sets]

    def forward(k):
        with torch.no_grad():
            fn(sets[k][0])

    def forward_backward(k):
        leaves[k].grad = None
        weight.grad = None
        fn(leaves[k]).backward(sets[k][1])

    time_phases(entry, name, forward, forward_backward, len(sets), eager, replays)
    for _, dy in sets:
        assert bool(torch.isfinite(dy).all()), f"{name} modified grad_output"


def _checksum(tensors) -> list[float]:
    return [float(t.float().sum()) for t in tensors]


def time_fused_add(entry, name, fn, weight, sets, replays=25):
    """Time a fused add + RMSNorm contender ``fn(x, r) -> (y, s)`` over ``[(x, r, dy, ds), ...]``: forward
    (no_grad) and forward + backward with both gradients, dy for y and ds for s, through
    ``torch.autograd.grad`` (grads of x, r, w; no ``.grad`` accumulation, so no contender pays for a
    copy of the shared dx). A contender that writes into dy or ds fails the run."""
    leaves = [(x.detach().clone().requires_grad_(), r.detach().clone().requires_grad_()) for x, r, _, _ in sets]
    grads_before = _checksum(t for _, _, dy, ds in sets for t in (dy, ds))

    def forward(k):
        with torch.no_grad():
            fn(sets[k][0], sets[k][1])

    def forward_backward(k):
        x, r = leaves[k]
        y, s = fn(x, r)
        torch.autograd.grad((y, s), (x, r, weight), (sets[k][2], sets[k][3]))

    time_phases(entry, name, forward, forward_backward, len(sets), replays=replays)
    assert _checksum(t for _, _, dy, ds in sets for t in (dy, ds)) == grads_before, f"{name} wrote into dy or ds"


def sweep_widths(widths, on_gpu: bool, measure) -> list[dict]:
    """One entry per width from ``measure(index, width)`` (its inputs are freed when it returns), with
    the width's wall time and Dynamo's graph count added, a progress line each. A recompile-limit hit
    raises instead of falling back to eager, so that a torch.compile contender is never timed as eager."""
    began = time.perf_counter()
    shapes = []
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        for index, width in enumerate(widths):
            start = time.perf_counter()
            entry = measure(index, width)
            entry["compiles"] = {"dynamo_graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"]}
            entry["wall_s"] = round(time.perf_counter() - start, 2)
            shapes.append(entry)
            print(f"  H={width}: {entry['wall_s']:.1f} s (total {time.perf_counter() - began:.0f} s)"
                  + "".join(f"; {n} failed" for n in entry["errors"]), flush=True)
            if on_gpu:
                torch.cuda.empty_cache()
    return shapes
