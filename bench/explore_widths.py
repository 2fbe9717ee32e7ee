"""Launch-config exploration at many row widths (input to forward_config / backward_config).

    python -m bench.explore_widths --out DIR [--widths 256,300,...] [--quack-widths ...]

For each width (16384 rows, bf16) it times every ``candidate_configs`` entry of the
production kernel, forward and backward separately, by CUDA-graph replay over rotating
inputs, and next to them F.rms_norm, Liger and (where importable) quack. All Triton
configs are compiled first by worker processes, so the timing loop only loads them.
Writes ``explore-widths-<commit>.json`` into DIR after every width (``record.save``, as every
experiment's record is saved), the name it is committed under in docs/data/<gpu>/.
"""
from __future__ import annotations

import argparse
import functools
import multiprocessing
import pathlib
import time

import torch

from bench.harness import mode, record, timers
from bench.harness.contenders import liger_rms_norm, optional_contender, quack_rmsnorm
from bench.harness.op_timing import time_contender
from rmsnorm_fused_add import fused_add_rms_norm_backward, fused_add_rms_norm_forward
from rmsnorm_triton import candidate_configs, rms_norm_backward, rms_norm_forward

ROWS = 16384
DEVICE = "cuda" if mode.gpu_available() else "cpu"  # cpu: a smoke test under the interpreter
EPS = 1e-6
WIDTHS = [256, 300, 384, 512, 576, 640, 768, 896, 1000, 1024, 1152, 1280, 1536, 1600, 2000,
          2048, 2304, 2560, 2880, 3000, 3072, 3584, 4096, 4608, 5000, 5120, 5376, 6144, 7168,
          8192, 9216, 10000, 10240, 12288, 13824, 14336, 16384, 20480, 24576, 32768, 65536]
STEM = "explore-widths-{commit}"  # record.save puts the run's commit in the file name
QUACK_WIDTHS = [576, 1000, 1536, 2304, 3000, 3072, 3584, 5000, 6144, 7168, 8192, 12288, 16384]


def _tensors(width, sets, seed=0):
    gen = torch.Generator(device=DEVICE).manual_seed(seed + width)
    out = []
    for _ in range(sets):
        x = torch.randn(ROWS, width, device=DEVICE, generator=gen).to(torch.bfloat16)
        dy = torch.randn(ROWS, width, device=DEVICE, generator=gen).to(torch.bfloat16)
        out.append((x, dy))
    w = (torch.rand(width, device=DEVICE, generator=gen) + 0.5).to(torch.bfloat16)
    return out, w


def _compile_worker(jobs):
    """Run each (width, direction, config) once: fills Triton's on-disk cache."""
    for width, direction, config in jobs:
        # the timed shape: Triton specializes integer arguments (== 1, multiple of 16)
        x = torch.empty(ROWS, width, device=DEVICE, dtype=torch.bfloat16).normal_()
        w = torch.ones(width, device=DEVICE, dtype=torch.bfloat16)
        try:
            if direction.startswith("fused"):
                fwd_config = config if direction == "fused_fwd" else None
                y, s, rstd = fused_add_rms_norm_forward(x, x, w, EPS, config=fwd_config)
                if direction == "fused_bwd":
                    fused_add_rms_norm_backward(x, x, s, w, rstd, config=config)
                continue
            y, rstd = rms_norm_forward(x, w, EPS, config=config if direction == "fwd" else None)
            if direction == "bwd":
                rms_norm_backward(torch.randn_like(x), x, w, rstd, config=config)
        except Exception as error:  # recorded again (with the message) by the timing loop
            print(f"compile {width} {config}: {error}", flush=True)
        del x, w
        torch.cuda.empty_cache()
    torch.cuda.synchronize()


def precompile(widths, fused_widths=(), workers=10):
    jobs = [(width, direction, config) for width in widths
            for direction, name in (("fwd", "forward"), ("bwd", "backward"))
            for config in candidate_configs(width, name)]
    jobs += [(width, direction, config) for width in fused_widths
             for direction, name in (("fused_fwd", "forward"), ("fused_bwd", "backward"))
             for config in candidate_configs(width, name) if not config.chunked]
    start = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers) as pool:
        pool.map(_compile_worker, [jobs[i::workers] for i in range(workers)])
    print(f"precompiled {len(jobs)} configs in {time.perf_counter() - start:.0f} s", flush=True)


def _time(fns):
    return timers.cuda_graph_time_us(fns, min_calls=8, replays=6)["median_us"]


def _peers(width, sets, w, with_quack):
    """F.rms_norm, Liger and (with_quack) quack, timed as the rmsnorm experiment times its
    contenders: ``{"fwd": {name: stats}, "fwd_bwd": {...}, "errors": {...}, "skipped": {...}}``."""
    weight = torch.nn.Parameter(w.clone())
    entry = {"fwd": {}, "fwd_bwd": {}, "errors": {}, "skipped": {}}
    builds = {"torch_rms_norm": lambda: lambda x: torch.nn.functional.rms_norm(x, (width,), weight, EPS),
              "liger": lambda: functools.partial(liger_rms_norm(), w=weight, eps=EPS)}
    if with_quack:
        builds["quack"] = lambda: functools.partial(quack_rmsnorm(), weight=weight, eps=EPS)
    for name, build in builds.items():
        fn = optional_contender(name, entry["skipped"], build)
        if fn is not None:
            time_contender(entry, name, fn, weight, sets, eager=False, replays=6)
    return entry


def explore(width, with_quack):
    nbytes = 2 * ROWS * width * 2
    sets, w = _tensors(width, mode.rotating_input_sets(nbytes, DEVICE))
    rstds = [rms_norm_forward(x, w, EPS)[1] for x, _ in sets]
    entry = {"width": width, "rows": ROWS, "input_sets": len(sets), "fwd": [], "bwd": []}
    for direction, name in (("fwd", "forward"), ("bwd", "backward")):
        for config in candidate_configs(width, name):
            fields = {k: getattr(config, k) for k in ("block_rows", "block_cols", "tail_cols",
                                                      "num_warps", "programs_per_sm", "chunked")}
            try:
                if direction == "fwd":
                    fns = [lambda x=x, c=config: rms_norm_forward(x, w, EPS, config=c)
                           for x, _ in sets]
                else:
                    fns = [lambda x=x, dy=dy, r=r, c=config: rms_norm_backward(dy, x, w, r, config=c)
                           for (x, dy), r in zip(sets, rstds)]
                fields["us"] = _time(fns)
            except Exception as error:
                fields["error"] = f"{type(error).__name__}: {error}"[:300]
            entry[direction].append(fields)
    entry["default_fwd_us"] = _time([lambda x=x: rms_norm_forward(x, w, EPS) for x, _ in sets])
    entry["default_bwd_us"] = _time([lambda x=x, dy=dy, r=r: rms_norm_backward(dy, x, w, r)
                                     for (x, dy), r in zip(sets, rstds)])
    entry["peers"] = _peers(width, sets, w, with_quack)
    return entry


def explore_fused(width):
    """The fused add + norm kernels over the plain kernel's (register) candidates."""
    nbytes = 4 * ROWS * width * 2
    sets, w = _tensors(width, mode.rotating_input_sets(nbytes, DEVICE))
    residuals = [torch.randn_like(x) for x, _ in sets]
    saved = [fused_add_rms_norm_forward(x, r, w, EPS) for (x, _), r in zip(sets, residuals)]
    entry = {"width": width, "rows": ROWS, "fwd": [], "bwd": []}
    for direction, name in (("fwd", "forward"), ("bwd", "backward")):
        for config in candidate_configs(width, name):
            if config.chunked:
                continue
            fields = {k: getattr(config, k) for k in ("block_rows", "num_warps",
                                                      "programs_per_sm")}
            try:
                if direction == "fwd":
                    fns = [lambda x=x, r=r, c=config: fused_add_rms_norm_forward(
                        x, r, w, EPS, config=c) for (x, _), r in zip(sets, residuals)]
                else:
                    fns = [lambda dy=dy, ds=r, s=sv[1], rstd=sv[2], c=config:
                           fused_add_rms_norm_backward(dy, ds, s, w, rstd, config=c)
                           for (_, dy), r, sv in zip(sets, residuals, saved)]
                fields["us"] = _time(fns)
            except Exception as error:
                fields["error"] = f"{type(error).__name__}: {error}"[:300]
            entry[direction].append(fields)
    entry["default_fwd_us"] = _time([lambda x=x, r=r: fused_add_rms_norm_forward(x, r, w, EPS)
                                     for (x, _), r in zip(sets, residuals)])
    entry["default_bwd_us"] = _time([lambda dy=dy, ds=r, sv=sv: fused_add_rms_norm_backward(
        dy, ds, sv[1], w, sv[2]) for (_, dy), r, sv in zip(sets, residuals, saved)])
    return entry


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--widths", default=",".join(map(str, WIDTHS)))
    parser.add_argument("--quack-widths", default=",".join(map(str, QUACK_WIDTHS)))
    parser.add_argument("--fused-widths", default="")
    args = parser.parse_args()
    widths = [int(v) for v in args.widths.split(",") if v]
    quack_widths = {int(v) for v in args.quack_widths.split(",") if v}
    fused_widths = [int(v) for v in args.fused_widths.split(",") if v]
    if DEVICE == "cuda":
        precompile(widths, fused_widths)
    copy = timers.copy_bandwidth(2 * 2**30 if DEVICE == "cuda" else 2**20, DEVICE, "eager")
    results, fused = [], []
    for width in fused_widths:
        entry = explore_fused(width)
        best_f = min(c["us"] for c in entry["fwd"] if "us" in c)
        best_b = min(c["us"] for c in entry["bwd"] if "us" in c)
        print(f"fused {width}: default {entry['default_fwd_us']:.1f}/"
              f"{entry['default_bwd_us']:.1f} best {best_f:.1f}/{best_b:.1f}", flush=True)
        fused.append(entry)
    for width in widths:
        start = time.perf_counter()
        entry = explore(width, width in quack_widths)
        best_f = min(c["us"] for c in entry["fwd"] if "us" in c)
        best_b = min(c["us"] for c in entry["bwd"] if "us" in c)
        peers = {k: (round(v["median_us"], 1), round(entry["peers"]["fwd_bwd"][k]["median_us"], 1))
                 for k, v in entry["peers"]["fwd"].items()}
        print(f"{width}: default {entry['default_fwd_us']:.1f}/{entry['default_bwd_us']:.1f} "
              f"best {best_f:.1f}/{best_b:.1f} peers {peers} "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
        results.append(entry)
        payload = {"config": {"quick": DEVICE != "cuda", "rows": ROWS, "dtype": "bfloat16", "eps": EPS},
                   "copy": copy, "results": results, "fused": fused}
        record.save("explore_widths", payload, args.out, stem=STEM)


if __name__ == "__main__":
    main()
