"""Our modules under torch.compile: eager against ``torch.compile(fullgraph=True)``, op level.

    python -m bench.run_all compile          # on a GPU -> docs/data/<gpu>/compile.json

Cases: ``TritonQwen3RMSNorm`` at 16384 x 4096 and at q_norm's 524288 x 128 (Qwen3-8B: 32 heads of one
training batch), ``TritonQwen3FusedAddRMSNorm`` at 16384 x 4096; bf16, eps 1e-6 (the modules' default,
a Python float). Per case, eager and compiled (one static graph per grad mode: dynamic=False, dynamo
reset before each case), forward (no_grad) and forward+backward (``torch.autograd.grad`` of the inputs
and the weight, dy and, for the fused module, ds):

* GPU time per call (``timers.profiler_time_us``): the durations of the device activities of one call
  from the torch profiler, summed, median over PROFILED_CALLS calls cycling over input sets >= 4x L2.
  Not CUDA-graph replay: the first capture after a torch.compile in the process failed on the H200
  (PERF_LOG run 11);
* host-inclusive wall time (``timers.eager_time_us``: triton.testing.do_bench's median) of the same call;
* ``graph_breaks``: ``torch._dynamo.explain``'s count (0 expected), after the timings;
* ``eps_types``: the Triton types of ``eps`` in Inductor's output code (Inductor passes a Python float
  as fp64; the kernels cast it to their compute dtype).

``ratios`` holds compiled ÷ eager per phase, of the GPU time and of the host-inclusive time. The copy
ceiling is the run's 4 GiB copy, timed first (before any compile).

--quick runs tiny shapes on the CPU under the Triton interpreter with the backend ``aot_eager``:
dynamo cannot trace the interpreter's Python (the compile fails, and is recorded in ``errors``), and
then explain is not run (recorded in ``skipped``: it would trace the interpreter for many seconds).
Budget on an H200: about a minute.
"""
from __future__ import annotations

import re
import time

import torch

from bench.harness import mode
from bench.harness.op_timing import large_copy, min_bytes
from bench.harness.shapes import BENCH_TOKENS, Q_NORM_ROWS
from bench.harness.timers import eager_time_us, profiler_time_us
from qwen3_configs import HEAD_DIM

NAME = "compile"
EPS = 1e-6
DTYPE = torch.bfloat16
# (module, rows, width): the plain norm at a hidden size and at q_norm's rows, the fused one at a hidden size
CASES = [("plain", BENCH_TOKENS, 4096), ("plain", Q_NORM_ROWS, HEAD_DIM), ("fused", BENCH_TOKENS, 4096)]
QUICK_CASES = [("plain", 4, 256), ("plain", 16, 128), ("fused", 4, 256)]
MODULES = {"plain": "TritonQwen3RMSNorm", "fused": "TritonQwen3FusedAddRMSNorm"}
MODES = ["eager", "compiled"]
PHASES = ["fwd", "fwd_bwd"]
BYTES = {"plain": {"fwd_io": 2, "bwd_io": 3}, "fused": {"fwd_io": 4, "bwd_io": 4}}
TIE_RULE = "within_2pct"  # issue 19's target: compiled within 2 % of eager (GPU time), or faster
PROFILED_CALLS = 10
QUICK_PROFILED_CALLS = 3


def build(kind: str, width: int, device):
    """The module, on ``device`` in bf16, with a weight drawn in [0.5, 1.5)."""
    from rmsnorm_fused_add import TritonQwen3FusedAddRMSNorm
    from rmsnorm_triton import TritonQwen3RMSNorm

    module = (TritonQwen3RMSNorm if kind == "plain" else TritonQwen3FusedAddRMSNorm)(width, eps=EPS)
    module = module.to(device=device, dtype=DTYPE)
    with torch.no_grad():
        module.weight.uniform_(0.5, 1.5)
    return module


def input_sets(kind: str, rows: int, width: int, device, n_sets: int, seed: int):
    """[(inputs, grads)]: (x,), (dy,) for the plain module; (x, residual), (dy, ds) for the fused one."""
    count = 1 if kind == "plain" else 2
    gen = torch.Generator(device=device).manual_seed(seed)

    def draw():
        return torch.randn(rows, width, device=device, generator=gen).to(DTYPE)

    return [(tuple(draw().requires_grad_() for _ in range(count)), tuple(draw() for _ in range(count)))
            for _ in range(n_sets)]


def calls(fn, module, sets) -> dict:
    """{phase: [call(k) for each input set]}: fwd under no_grad; fwd_bwd through torch.autograd.grad."""
    def forward(k):
        with torch.no_grad():
            fn(*sets[k][0])

    def forward_backward(k):
        inputs, grads = sets[k]
        outputs = fn(*inputs)
        outputs = outputs if isinstance(outputs, tuple) else (outputs,)
        torch.autograd.grad(outputs, (*inputs, module.weight), grads)

    return {"fwd": [lambda k=k: forward(k) for k in range(len(sets))],
            "fwd_bwd": [lambda k=k: forward_backward(k) for k in range(len(sets))]}


def _sync(on_gpu):
    if on_gpu:
        torch.cuda.synchronize()


def time_mode(entry, name, fns, on_gpu, profiled_calls, codes=None) -> None:
    """First-call wall times (compiles included), then per phase the GPU time (profiler) and the
    host-inclusive time (do_bench) into ``entry[name]``; an exception is recorded in
    ``entry["errors"][name]``. With ``codes`` (a list), the first fwd_bwd call runs under Inductor's
    ``run_and_get_code``, which appends the output code of the graphs it compiles."""
    try:
        first = {}
        for phase in ("fwd_bwd", "fwd"):  # fwd_bwd first: the training graphs compile here
            began = time.perf_counter()
            if codes is not None and phase == "fwd_bwd":
                from torch._inductor.utils import run_and_get_code

                codes += run_and_get_code(fns[phase][0])[1]
            else:
                fns[phase][0]()
            _sync(on_gpu)
            first[phase] = round(time.perf_counter() - began, 3)
        entry["first_call_s"][name] = first
        entry[name] = {phase: {"gpu": profiler_time_us(fns[phase], profiled_calls, on_gpu=on_gpu),
                               "host": eager_time_us(fns[phase][0], on_gpu=on_gpu)} for phase in PHASES}
    except Exception as error:  # recorded, not hidden
        entry["errors"][name] = repr(error)[:300]
        print(f"    {entry['label']} {name} failed: {error!r}"[:300], flush=True)
        entry.pop(name, None)


def run_case(kind, rows, width, quick, on_gpu, device, backend, seed) -> dict:
    label = f"{MODULES[kind]} {rows}x{width}"
    nbytes = min_bytes(rows, width, **BYTES[kind])
    n_sets = 1 if quick else mode.rotating_input_sets(nbytes["fwd_bwd"], device)
    entry = {"label": label, "module": MODULES[kind], "kind": kind, "rows": rows, "width": width,
             "shape": "q_norm" if width == HEAD_DIM else f"H={width}",
             "input_sets": n_sets, "bytes_fwd": nbytes["fwd"], "bytes_fwd_bwd": nbytes["fwd_bwd"],
             "first_call_s": {}, "errors": {}, "skipped": {}}
    module = build(kind, width, device)
    sets = input_sets(kind, rows, width, device, n_sets, seed)
    profiled = QUICK_PROFILED_CALLS if quick else PROFILED_CALLS
    time_mode(entry, "eager", calls(module, module, sets), on_gpu, profiled)

    torch._dynamo.reset()
    compiled = torch.compile(module, fullgraph=True, dynamic=False, backend=backend)
    codes = [] if backend == "inductor" else None
    time_mode(entry, "compiled", calls(compiled, module, sets), on_gpu, profiled, codes)
    if codes:
        entry["eps_types"] = sorted(set(re.findall(r"'eps': '(\w+)'", "\n".join(codes))))
    else:
        entry["skipped"]["eps_types"] = (f"backend {backend} generates no code" if codes is None
                                         else "no Inductor output code was captured")

    if "compiled" in entry["errors"] and quick:
        entry["skipped"]["graph_breaks"] = ("not counted: the fullgraph compile failed in a quick run "
                                            "(explain would trace the Triton interpreter for many seconds)")
    else:
        try:
            torch._dynamo.reset()
            entry["graph_breaks"] = torch._dynamo.explain(module)(*sets[0][0]).graph_break_count
        except Exception as error:  # recorded, not hidden
            entry["errors"]["graph_breaks"] = repr(error)[:300]
    entry["ratios"] = {phase: {t: entry["compiled"][phase][t]["median_us"] / entry["eager"][phase][t]["median_us"]
                               for t in ("gpu", "host")}
                       for phase in PHASES if "compiled" in entry and "eager" in entry}
    for name in MODES:
        for phase, stats in entry.get(name, {}).items():
            stats["gpu"]["gbps"] = nbytes[phase] / (stats["gpu"]["median_us"] * 1e3)
    sets.clear()
    return entry


def run(args) -> dict:
    quick, on_gpu, cases, device, _ = mode.gpu_or_quick(args, NAME, QUICK_CASES, CASES)
    backend = "inductor" if on_gpu else "aot_eager"
    began = time.perf_counter()
    results = {"copy": large_copy(quick, device), "cases": []}  # before any compile: a graph-timed copy
    for index, (kind, rows, width) in enumerate(cases):
        start = time.perf_counter()
        entry = run_case(kind, rows, width, quick, on_gpu, device, backend, seed=100 * index)
        entry["wall_s"] = round(time.perf_counter() - start, 2)
        results["cases"].append(entry)
        ratios = "; ".join(f"{phase} compiled/eager GPU {r['gpu']:.3f}, host {r['host']:.3f}"
                           for phase, r in entry["ratios"].items())
        print(f"  {entry['label']}: {entry['wall_s']:.1f} s (total {time.perf_counter() - began:.0f} s); "
              f"graph breaks {entry.get('graph_breaks', '-')}" + (f"; {ratios}" if ratios else "")
              + "".join(f"; {n} failed" for n in entry["errors"]), flush=True)
        if on_gpu:
            torch.cuda.empty_cache()
    config = {"dtype": "bfloat16", "eps": EPS, "cases": [list(c) for c in cases], "modules": MODULES,
              "modes": MODES, "phases": PHASES, "backend": backend, "fullgraph": True, "dynamic": False,
              "tie_rule": TIE_RULE, "target": {"gpu": "compiled / eager <= 1 + tie"}, "bytes": BYTES,
              "l2_bytes": mode.l2_cache_bytes(device), "profiled_calls": QUICK_PROFILED_CALLS if quick else PROFILED_CALLS,
              "timer": {"gpu": "torch profiler: the device activities of one call summed, median over calls "
                               "cycling over input sets >= 4x L2",
                        "host": "triton.testing.do_bench median of eager calls (L2 flushed), host work included"}}
    return {"config": config, "results": results}
