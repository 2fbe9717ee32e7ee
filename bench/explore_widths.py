"""Launch-config exploration at many row widths: the input to the ladders of
snippets/rmsnorm_config.py (not rendered; each run is committed as
docs/data/<gpu>/explore-widths-<commit>.json).

    python -m bench.explore_widths --out DIR [--fused-widths 256,...] [--widths ...]
        [--liger-widths ...] [--cluster-widths ...] [--persistent-widths ...]
        [--eviction-widths ...] [--eviction-fused-widths ...] [--exchange-widths ...]
        [--smem-widths ...] [--budget-s S] [--quick]

16384 rows, bf16, each kernel timed by CUDA-graph replay over rotating input sets:

* ``fused``: the fused add + RMSNorm at each width (default: width_sweep's 43): every
  ``fused_candidates`` config of the forward and of the backward (dy and ds both
  given), the shipped ladder's, and side by side ours unfused (torch's add + the plain
  kernels) and, at ``--liger-widths``, Liger's fused add, forward and forward+backward
  through autograd;
* ``plain``: the plain kernels' ``candidate_configs`` (plus the register backward
  without prefetch for rows of 8192 lanes and more) at ``--widths``, with F.rms_norm
  and Liger next to them;
* ``cluster``: the register forward over a whole wide row split across a thread-block
  cluster (``num_ctas``), quack's approach, as far as Triton compiles it;
* ``persistent`` (``--persistent-widths``): the shipped chunked forward against the same
  chunks on a persistent grid (SMs x 1..8 programs), which bounds the rows in flight.
* ``exchange`` (``--exchange-widths``): the shipped chunked kernels against the exchange
  kernels (a row's chunk programs swap their partial sums through global memory, so each
  element is read once), forward and backward, plain and fused, in one process;
* ``smem`` (``--smem-widths``): the shipped chunked forward against a forward that holds
  each row in shared memory, written in Gluon (Triton 3.6's explicit-layout dialect), with
  the copies by cp.async or by TMA, next to ``torch.compile`` of HF's module and quack;
* ``eviction`` (``--eviction-widths``, ``--eviction-fused-widths``): the shipped chunked
  forward (plain, or the fused add) against the same kernel with or without L2 eviction
  hints (Inductor's looped reduction: pass 1 ``evict_last``, pass 2 ``evict_first``), the
  width as a runtime value or a constant, and tl.range unrolling, at chunks of 2048 to
  8192 and 8 to 32 warps, next to ``torch.compile`` of HF's module and quack.

Eager against ``torch.compile`` is bench/exp_compile.py's (``python -m bench.run_all
compile``); explore-widths-be832ca.json holds that diagnostic's first run.

All Triton configs are compiled first by worker processes (``warmup``: no launch), so
the timing loop only loads them; ``--budget-s`` stops starting new widths.

The configs are timed one after another in one process, and what ran before can change a
time: the 8-warp no-prefetch backward at 14336 lanes (it spills registers) times about 600
µs alone and about 470 µs once a config that spills more has run
(docs/data/h200/diag-explore-order-b27dcf6.log). Retime a winner that spills in a fresh
process before a ladder takes it.
``--snippets DIR`` imports the kernels from DIR (an older tree, for an A/B).
"""
from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import multiprocessing
import pathlib
import re
import sys
import time

import torch

from bench.harness import mode, record, timers
from bench.harness.compile_only import compile_only
from bench.harness.contenders import liger_fused_add_rms_norm, liger_rms_norm, optional_contender
from bench.harness.op_timing import time_contender, time_fused_add
from bench.harness.shapes import SWEEP_WIDTHS

ROWS = 16384
QUICK_ROWS = 16
EPS = 1e-6
DTYPE = torch.bfloat16
QUICK_FUSED_WIDTHS = [300, 9000]
STEM = "explore-widths-{commit}"  # record.save puts the run's commit in the file name
DEVICE = "cuda" if mode.gpu_available() else "cpu"  # cpu: --quick under the interpreter


def _kernels():
    import rmsnorm_fused_add
    import rmsnorm_triton

    return rmsnorm_triton, rmsnorm_fused_add


def _fields(config) -> dict:
    return dataclasses.asdict(config)


def fused_configs(width: int, direction: str, quick: bool = False):
    """fused_candidates plus the shipped fused ladder's config (first)."""
    from rmsnorm_config import fused_candidates

    rt, _ = _kernels()
    shipped = (rt.forward_config if direction == "forward" else rt.backward_config)(
        width, DEVICE, fused=True)
    configs = list(dict.fromkeys(
        [shipped] + fused_candidates(direction, width, *rt.column_blocks(width))))
    return configs[:3] if quick else configs


def plain_configs(width: int, direction: str, quick: bool = False):
    """candidate_configs, plus the register backward without prefetch at wide rows."""
    rt, _ = _kernels()
    configs = rt.candidate_configs(width, direction)
    block_cols, tail_cols = rt.column_blocks(width)
    if direction == "backward" and width <= rt.MAX_COLS and block_cols + tail_cols >= 8192:
        configs += [rt.LaunchConfig(1, block_cols, tail_cols, w, p, prefetch=False)
                    for w in (8, 16) for p in (1, 2)]
    if direction == "backward":
        from rmsnorm_config import reread_candidates

        configs += reread_candidates(width, block_cols, tail_cols)
    return configs[:3] if quick else configs


# ---------------------------------------------------------------- compiling, in workers

def _compile_worker(jobs):
    """Compile each (kind, width, config) job into Triton's on-disk cache."""
    rt, rf = _kernels()
    compile_only(rt)
    x = w = None
    for kind, width, config in jobs:
        # the timed shapes: Triton specializes integer arguments (multiples of 16)
        if x is None or x.shape[-1] != width:
            x = torch.empty(ROWS, width, device=DEVICE, dtype=DTYPE)
            w = torch.ones(width, device=DEVICE, dtype=DTYPE)
            rstd = torch.empty(ROWS, device=DEVICE)
        try:
            if kind == "fused_fwd":
                rf.fused_add_rms_norm_forward(x, x, w, EPS, config=config)
            elif kind == "fused_bwd":
                rf.fused_add_rms_norm_backward(x, x, x, w, rstd, config=config)
            elif kind == "fwd":
                rt.rms_norm_forward(x, w, EPS, config=config)
            elif kind == "bwd":
                rt.rms_norm_backward(x, x, w, rstd, config=config)
            elif kind == "liger":  # compiles on its first call (a launch)
                leaves = [torch.randn_like(x).requires_grad_() for _ in range(2)]
                weight = torch.nn.Parameter(w.clone())
                torch.autograd.grad(liger_fused_add_rms_norm()(*leaves, weight, EPS), leaves + [weight],
                                    (x.normal_(), x))
        except Exception as error:  # recorded again (with the message) by the timing loop
            print(f"compile {kind} {width} {config}: {error}"[:300], flush=True)
    torch.cuda.synchronize()


def precompile(jobs, workers, worker=None):
    """Fill Triton's cache for every job, ``workers`` processes at a time."""
    began = time.perf_counter()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers) as pool:
        pool.map(worker or _compile_worker, [jobs[i::workers] for i in range(workers)])
    print(f"precompiled {len(jobs)} configs in {time.perf_counter() - began:.0f} s", flush=True)


# ---------------------------------------------------------------- timing

def _time(fns):
    return timers.cuda_graph_time_us(fns, min_calls=8, replays=6)["median_us"]


def _timed(fields, fns):
    try:
        fields["us"] = _time(fns)
    except Exception as error:  # recorded, the sweep goes on
        fields["error"] = f"{type(error).__name__}: {error}"[:300]
    return fields


def _best(entries):
    timed = [e for e in entries if "us" in e]
    return min(timed, key=lambda e: e["us"]) if timed else None


def explore_fused(width, rows, quick, with_liger):
    """Every explored config of the fused kernels, and the unfused path and Liger."""
    rt, rf = _kernels()
    sets_n = 1 if quick else mode.rotating_input_sets(4 * rows * width * 2, DEVICE)
    gen = torch.Generator(device=DEVICE).manual_seed(width)
    sets = [tuple(torch.randn(rows, width, device=DEVICE, generator=gen).to(DTYPE)
                  for _ in range(4)) for _ in range(sets_n)]  # x, residual, dy, ds
    w = (torch.rand(width, device=DEVICE, generator=gen) + 0.5).to(DTYPE)
    saved = [rf.fused_add_rms_norm_forward(x, r, w, EPS) for x, r, _, _ in sets]
    entry = {"width": width, "rows": rows, "input_sets": sets_n, "fwd": [], "bwd": []}
    for config in fused_configs(width, "forward", quick):
        entry["fwd"].append(_timed(_fields(config), [
            lambda x=x, r=r, c=config: rf.fused_add_rms_norm_forward(x, r, w, EPS, config=c)
            for x, r, _, _ in sets]))
    for config in fused_configs(width, "backward", quick):
        entry["bwd"].append(_timed(_fields(config), [
            lambda dy=dy, ds=ds, s=sv[1], rstd=sv[2], c=config:
            rf.fused_add_rms_norm_backward(dy, ds, s, w, rstd, config=c)
            for (_, _, dy, ds), sv in zip(sets, saved)]))
    # ours unfused, kernel by kernel: torch's add + the plain forward; the plain
    # backward + autograd's add of ds
    plain_rstd = [rt.rms_norm_forward(sv[1], w, EPS)[1] for sv in saved]
    entry["unfused"] = {
        "fwd_us": _timed({}, [lambda x=x, r=r: rt.rms_norm_forward(r + x, w, EPS)
                              for x, r, _, _ in sets]).get("us"),
        "bwd_us": _timed({}, [lambda dy=dy, ds=ds, s=sv[1], rstd=rstd:
                              rt.rms_norm_backward(dy, s, w, rstd)[0] + ds
                              for (_, _, dy, ds), sv, rstd in zip(sets, saved, plain_rstd)]
                         ).get("us")}
    # through autograd, as the fused_add experiment times them
    weight = torch.nn.Parameter(w.clone())
    e2e = {"fwd": {}, "fwd_bwd": {}, "errors": {}}
    pairs = [(x, r, dy, ds) for x, r, dy, ds in sets]
    contenders = {"triton": lambda x, r: rf.fused_add_rms_norm(x, r, weight, EPS),
                  "unfused": lambda x, r: _unfused(rt, x, r, weight)}
    if with_liger:
        try:
            contenders["liger"] = functools.partial(_liger_pair, liger_fused_add_rms_norm(), weight)
        except Exception as error:
            e2e["errors"]["liger"] = repr(error)[:300]
    for name, contender in contenders.items():
        time_fused_add(e2e, name, contender, weight, pairs, replays=6)
    entry["autograd"] = {phase: {k: v["median_us"] for k, v in e2e[phase].items()}
                         for phase in ("fwd", "fwd_bwd")} | {"errors": e2e["errors"]}
    return entry


def _liger_pair(fn, weight, x, r):
    return fn(x, r, weight, EPS)


def _unfused(rt, x, r, weight):
    s = r + x
    return rt.rms_norm(s, weight, EPS), s


def explore_plain(width, rows, quick, with_peers):
    """Every plain candidate, forward and backward separately, and the peers."""
    rt, _ = _kernels()
    sets_n = 1 if quick else mode.rotating_input_sets(2 * rows * width * 2, DEVICE)
    gen = torch.Generator(device=DEVICE).manual_seed(width)
    sets = [tuple(torch.randn(rows, width, device=DEVICE, generator=gen).to(DTYPE)
                  for _ in range(2)) for _ in range(sets_n)]
    w = (torch.rand(width, device=DEVICE, generator=gen) + 0.5).to(DTYPE)
    rstds = [rt.rms_norm_forward(x, w, EPS)[1] for x, _ in sets]
    entry = {"width": width, "rows": rows, "input_sets": sets_n, "fwd": [], "bwd": []}
    for config in plain_configs(width, "forward", quick):
        entry["fwd"].append(_timed(_fields(config), [
            lambda x=x, c=config: rt.rms_norm_forward(x, w, EPS, config=c) for x, _ in sets]))
    for config in plain_configs(width, "backward", quick):
        entry["bwd"].append(_timed(_fields(config), [
            lambda x=x, dy=dy, r=r, c=config: rt.rms_norm_backward(dy, x, w, r, config=c)
            for (x, dy), r in zip(sets, rstds)]))
    if with_peers:
        weight = torch.nn.Parameter(w.clone())
        peers = {"fwd": {}, "fwd_bwd": {}, "errors": {}, "skipped": {}}
        builds = {"torch_rms_norm": lambda: lambda x: torch.nn.functional.rms_norm(
                      x, (width,), weight, EPS),
                  "liger": lambda: functools.partial(liger_rms_norm(), w=weight, eps=EPS)}
        for name, build in builds.items():
            fn = optional_contender(name, peers["skipped"], build)
            if fn is not None:
                time_contender(peers, name, fn, weight, sets, eager=False, replays=6)
        entry["peers"] = {phase: {k: v["median_us"] for k, v in peers[phase].items()}
                          for phase in ("fwd", "fwd_bwd")} | {"errors": peers["errors"]}
    return entry


@functools.lru_cache(maxsize=None)
def _persistent_forward_kernel():
    """The chunked forward on a persistent grid: each program walks row blocks program,
    program + grid, ..., so at most grid x BLOCK_ROWS rows are between their two passes."""
    import triton
    import triton.language as tl

    global _rt  # a jitted function finds its helpers among the module's globals
    _rt, _ = _kernels()

    @triton.jit
    def fwd_chunked_persistent(
        X, W, Y, RSTD, R, S, n_rows, n_cols, eps, eps_low, size1, size2,
        x_stride0, x_stride1, x_stride2, tiles_per_program,
        BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr, COMPUTE_DTYPE: tl.constexpr,
        ALIGN: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
    ):
        n_cols = n_cols // ALIGN * ALIGN
        n_chunks = tl.cdiv(n_cols, BLOCK_COLS)
        for tile in range(tiles_per_program):
            rows = ((tl.program_id(0) + tile * tl.num_programs(0)) * BLOCK_ROWS
                    + tl.arange(0, BLOCK_ROWS))
            row_mask = rows < n_rows
            x_offsets = _rt._row_offsets(rows, size1, size2, x_stride0, x_stride1, x_stride2,
                                        ALIGN)
            squares = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=COMPUTE_DTYPE)
            for chunk in range(n_chunks):
                cols = chunk * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
                x = _rt._load_tile(X, x_offsets, cols, row_mask, n_cols).to(COMPUTE_DTYPE)
                squares += x * x
            rstd = _rt._inv_rms(tl.sum(squares, axis=1) / n_cols, eps, eps_low, COMPUTE_DTYPE)
            for chunk in range(n_chunks):
                cols = (n_chunks - 1 - chunk) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
                x = _rt._load_tile(X, x_offsets, cols, row_mask, n_cols).to(COMPUTE_DTYPE)
                w = tl.load(W + cols, mask=cols < n_cols, other=0.0).to(COMPUTE_DTYPE)
                _rt._normalize_store(X, Y, S, x, w, rstd, rows, cols, row_mask, n_cols, ALIGN,
                                    False)
            tl.store(RSTD + rows, rstd, mask=row_mask)

    return fwd_chunked_persistent


def persistent_attempt(width, rows, quick):
    """The shipped chunked forward (one program per row block) against the same chunks on a
    persistent grid of SMs x P programs (P = 1 .. 8; 8 to 32 warps): does bounding the rows in
    flight, so that the second pass finds them in L2, make wide rows faster?"""
    import triton

    rt, _ = _kernels()
    kernel = _persistent_forward_kernel()
    sets = 1 if quick else 4
    weight = (torch.rand(width, device=DEVICE) + 0.5).to(DTYPE)
    prepared = [rt.forward_arguments(torch.randn(rows, width, device=DEVICE).to(DTYPE), weight, EPS)
                for _ in range(sets)]
    config = rt.forward_config(width, DEVICE)
    if not (quick or config.chunked):
        raise ValueError(f"rows of {width} take the register forward ({config}): no chunks to compare")
    entry = {"width": width, "shipped": _fields(config)}
    entry["shipped"]["us"] = _time([lambda a=a: rt.launch_forward(a, config) for _, _, a in prepared])
    expected = prepared[0][0].clone()
    blocks = triton.cdiv(rows, config.block_rows)
    sms = rt.sm_count(torch.device(DEVICE))
    entry["persistent"] = []
    for per_sm in ((1,) if quick else (1, 2, 3, 4, 6, 8)):
        for warps in ((config.num_warps,) if quick else sorted({config.num_warps, 8, 16, 32})):
            grid = min(blocks, sms * per_sm)
            fields = {"programs_per_sm": per_sm, "num_warps": warps, "grid": grid}

            def launch(args, grid=grid, warps=warps):
                kernel[(grid,)](**args, tiles_per_program=triton.cdiv(blocks, grid),
                                BLOCK_ROWS=config.block_rows, BLOCK_COLS=config.block_cols,
                                num_warps=warps)
            prepared[0][0].zero_()
            launch(prepared[0][2])
            fields["y_matches_shipped"] = bool(torch.equal(prepared[0][0], expected))
            entry["persistent"].append(_timed(fields, [lambda a=a: launch(a) for _, _, a in prepared]))
    return entry


@functools.lru_cache(maxsize=None)
def _eviction_forward_kernel():
    """The chunked forward with L2 eviction hints and a choice of the second pass's order.

    FIRST: the policy of pass 1's x load (with the fused add: of the s store; x and the
    residual, never read again, are loaded evict_first); SECOND: of pass 2's re-read;
    REVERSE: pass 2 walks the chunks last first, as the shipped kernel does. Inductor's
    looped RMSNorm reads pass 1 evict_last, pass 2 evict_first, in order. N_COLS > 0:
    the width as a constant (Inductor's kernels have it so); UNROLL: tl.range's
    loop_unroll_factor."""
    import triton
    import triton.language as tl

    global _rt
    _rt, _ = _kernels()

    @triton.jit
    def fwd_chunked_evict(
        X, W, Y, RSTD, R, S, n_rows, n_cols, eps, eps_low, size1, size2,
        x_stride0, x_stride1, x_stride2,
        BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr, COMPUTE_DTYPE: tl.constexpr,
        ALIGN: tl.constexpr, HAS_RESIDUAL: tl.constexpr,
        FIRST: tl.constexpr, SECOND: tl.constexpr, REVERSE: tl.constexpr,
        N_COLS: tl.constexpr, UNROLL: tl.constexpr,
    ):
        if N_COLS > 0:  # the width as a constant, as Inductor compiles it: fixed trip counts
            n_cols = N_COLS
        else:
            n_cols = n_cols // ALIGN * ALIGN
        rows = tl.program_id(0) * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        row_mask = rows < n_rows
        x_offsets = _rt._row_offsets(rows, size1, size2, x_stride0, x_stride1, x_stride2, ALIGN)
        s_offsets = tl.multiple_of(rows.to(tl.int64) * n_cols, ALIGN)
        n_chunks = tl.cdiv(n_cols, BLOCK_COLS)
        squares = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=COMPUTE_DTYPE)
        for chunk in tl.range(0, n_chunks, loop_unroll_factor=UNROLL):
            cols = chunk * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
            if HAS_RESIDUAL:
                x = _rt._add_residual(
                    _rt._load_tile(X, x_offsets, cols, row_mask, n_cols, "evict_first"),
                    _rt._load_tile(R, x_offsets, cols, row_mask, n_cols, "evict_first"))
                tl.store(S + s_offsets[:, None] + cols[None, :], x, eviction_policy=FIRST,
                         mask=row_mask[:, None] & (cols < n_cols)[None, :])
            else:
                x = _rt._load_tile(X, x_offsets, cols, row_mask, n_cols, FIRST)
            x = x.to(COMPUTE_DTYPE)
            squares += x * x
        rstd = _rt._inv_rms(tl.sum(squares, axis=1) / n_cols, eps, eps_low, COMPUTE_DTYPE)
        for chunk in tl.range(0, n_chunks, loop_unroll_factor=UNROLL):
            if REVERSE:
                cols = (n_chunks - 1 - chunk) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
            else:
                cols = chunk * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
            if HAS_RESIDUAL:
                x = _rt._load_tile(S, s_offsets, cols, row_mask, n_cols, SECOND)
            else:
                x = _rt._load_tile(X, x_offsets, cols, row_mask, n_cols, SECOND)
            x = x.to(COMPUTE_DTYPE)
            w = tl.load(W + cols, mask=cols < n_cols, other=0.0,
                        eviction_policy="evict_last").to(COMPUTE_DTYPE)
            _rt._normalize_store(X, Y, S, x, w, rstd, rows, cols, row_mask, n_cols, ALIGN,
                                False)
        tl.store(RSTD + rows, rstd, mask=row_mask)

    return fwd_chunked_evict


# (pass 1 policy, pass 2 policy, pass 2 last chunk first): the shipped kernel's order
# without hints, and Inductor's (explore-widths-080ebee-eviction.json: the other mixes
# were no faster)
EVICTION_STYLES = (("", "", True), ("evict_last", "evict_first", False))
UNROLLS = (1, 4)  # tl.range's loop_unroll_factor


def eviction_variants(width: int, quick: bool = False):
    """(first, second, reverse, chunk, warps, constant width, unroll) of the eviction
    attempt at one width."""
    chunks = (2048,) if width % 8 else (2048, 4096, 8192)
    variants = [(first, second, reverse, chunk, warps, constant, unroll)
                for first, second, reverse in EVICTION_STYLES
                for constant in (False, True) for unroll in UNROLLS
                for chunk in chunks for warps in (8, 16, 32)]
    return [v for v in variants if v[3:5] == (chunks[0], 8)][:4] if quick else variants


def _eviction_constexprs(width, chunk, first, second, reverse, constant, unroll):
    return dict(BLOCK_ROWS=1, BLOCK_COLS=chunk, FIRST=first, SECOND=second, REVERSE=reverse,
                N_COLS=width if constant else 0, UNROLL=unroll)


def _eviction_launch(kernel, args, rows, warps, **constexprs):
    kernel[(rows,)](**args, **constexprs, num_warps=warps)


def _eviction_compile_worker(jobs):
    """Compile each (width, fused, variant) of the eviction attempt, never launching it."""
    rt, _ = _kernels()
    kernel = _eviction_forward_kernel()
    for width, fused, (first, second, reverse, chunk, warps, constant, unroll) in jobs:
        # 16 rows: the binary ROWS rows run (Triton specializes both as multiples of 16)
        x = torch.empty(16, width, device=DEVICE, dtype=DTYPE)
        w = torch.ones(width, device=DEVICE, dtype=DTYPE)
        _, _, args = rt.forward_arguments(x, w, EPS, x if fused else None)
        kernel.warmup(**args, **_eviction_constexprs(width, chunk, first, second, reverse,
                                                     constant, unroll),
                      num_warps=warps, grid=(16,))


def eviction_attempt(width, rows, quick, fused):
    """The shipped forward against the eviction variants (_eviction_forward_kernel) and,
    side by side, torch.compile of HF's module (Inductor's Triton kernel) and quack: plain,
    or with ``fused`` the add + RMSNorm. y (and s) must equal the shipped kernel's."""
    from bench.harness.contenders import fused_add_contenders, rmsnorm_contenders

    rt, rf = _kernels()
    kernel = _eviction_forward_kernel()
    sets_n = 1 if quick else mode.rotating_input_sets((3 if fused else 2) * rows * width * 2,
                                                     DEVICE)
    gen = torch.Generator(device=DEVICE).manual_seed(width)
    inputs = [tuple(torch.randn(rows, width, device=DEVICE, generator=gen).to(DTYPE)
                    for _ in range(2)) for _ in range(sets_n)]
    weight = (torch.rand(width, device=DEVICE, generator=gen) + 0.5).to(DTYPE)
    prepared = [rt.forward_arguments(x, weight, EPS, r if fused else None) for x, r in inputs]
    config = rt.forward_config(width, DEVICE, fused=fused)
    entry = {"width": width, "fused": fused, "rows": rows, "input_sets": sets_n,
             "shipped": _fields(config)}
    entry["shipped"]["us"] = _time([lambda a=a: rt.launch_forward(a, config)
                                    for _, _, a in prepared])
    y0, _, args0 = prepared[0]
    expected = (y0.clone(), args0["S"].clone())
    entry["variants"] = []
    for first, second, reverse, chunk, warps, constant, unroll in eviction_variants(width, quick):
        fields = {"first": first, "second": second, "reverse": reverse, "block_cols": chunk,
                  "num_warps": warps, "constant_width": constant, "unroll": unroll}
        launch = functools.partial(_eviction_launch, kernel, rows=rows, warps=warps,
                                   **_eviction_constexprs(width, chunk, first, second,
                                                          reverse, constant, unroll))
        try:
            y0.zero_()
            launch(args0)
            fields["y_matches_shipped"] = bool(torch.equal(y0, expected[0])
                                               and torch.equal(args0["S"], expected[1]))
        except Exception as error:
            fields["error"] = f"{type(error).__name__}: {error}"[:300]
            entry["variants"].append(fields)
            continue
        entry["variants"].append(_timed(fields, [lambda a=a: launch(a) for _, _, a in prepared]))
    peers = {"fwd": {}, "fwd_bwd": {}, "errors": {}}
    skipped = {}
    if fused:
        built = fused_add_contenders(["compile_hf", "quack"], width, DTYPE, DEVICE, skipped, EPS)
        for name, (fn, w) in built.items():
            time_fused_add(peers, name, fn, w, [(x, r, x, r) for x, r in inputs], replays=6)
    else:
        built = rmsnorm_contenders(["compile_hf", "quack"], width, DTYPE, DEVICE, skipped, EPS)
        for name, (fn, w) in built.items():
            time_contender(peers, name, fn, w, inputs, eager=False, replays=6)
    entry["peers"] = {"fwd": {k: v["median_us"] for k, v in peers["fwd"].items()},
                      "errors": peers["errors"], "skipped": skipped}
    return entry


def fresh_backward_configs(width: int, quick: bool = False):
    """The chunked backward configs of the attempt: the one shipped for rows of ``width``
    (first and last) and its neighbours; every width of the attempt runs the first width's."""
    rt, _ = _kernels()
    shipped = rt.backward_config(width, DEVICE)
    configs = [rt.LaunchConfig(r, chunk, 0, warps, per_sm, chunked=True)
               for chunk in (8192, 4096) for r in (2, 1) for warps in (16, 8)
               for per_sm in (1, 2)]
    configs = [shipped] + [c for c in configs if c != shipped] + [shipped]
    return configs[:2] if quick else configs


def _fresh_backward_worker(config, widths, rows, quick):
    """One config's plain and fused (ds) backward at each width, in this process alone."""
    rt, rf = _kernels()
    out = []
    for width in widths:
        sets_n = 1 if quick else mode.rotating_input_sets(4 * rows * width * 2, DEVICE)
        gen = torch.Generator(device=DEVICE).manual_seed(width)
        sets = [tuple(torch.randn(rows, width, device=DEVICE, generator=gen).to(DTYPE)
                      for _ in range(3)) for _ in range(sets_n)]  # x, dy, ds
        w = (torch.rand(width, device=DEVICE, generator=gen) + 0.5).to(DTYPE)
        rstds = [rt.rms_norm_forward(x, w, EPS)[1] for x, _, _ in sets]
        entry = _fields(config) | {"width": width, "input_sets": sets_n}
        entry["plain_us"] = _timed({}, [
            lambda x=x, dy=dy, r=r: rt.rms_norm_backward(dy, x, w, r, config=config)
            for (x, dy, _), r in zip(sets, rstds)]).get("us")
        entry["fused_us"] = _timed({}, [
            lambda x=x, dy=dy, ds=ds, r=r:
            rf.fused_add_rms_norm_backward(dy, ds, x, w, r, config=config)
            for (x, dy, ds), r in zip(sets, rstds)]).get("us")
        out.append(entry)
        del sets, rstds
    return out


def fresh_backward_attempt(widths, rows, quick):
    """fresh_backward_configs, each in a new process (nothing timed before it there)."""
    ctx = multiprocessing.get_context("spawn")
    entries = []
    for order, config in enumerate(fresh_backward_configs(widths[0], quick)):
        with ctx.Pool(1) as pool:
            timed = pool.apply(_fresh_backward_worker, (config, widths, rows, quick))
        for entry in timed:
            entry["order"] = order
            print(f"fresh backward {entry}", flush=True)
        entries += timed
    return entries


@functools.lru_cache(maxsize=None)
def _exchange_kernels():
    """The chunked kernels on a co-resident grid whose chunk programs swap their partial
    row sums through global memory, so that each element is read once and stays in
    registers: quack's cluster split, with global memory for distributed shared memory.

    Program (slot, part) holds chunk ``part`` of the row tiles slot, slot + n_slots, ...
    It stores its partial sums, counts itself in on the tile's counter, waits for the
    others, and adds all chunks' partials in one order (every program of a row gets the
    same bits). PREFETCH: the next tile's loads are issued before this tile's exchange.
    The grid must be co-resident: a cooperative launch (launch_cooperative_grid) fails
    rather than hangs when it is not. The interpreter runs programs one at a time: GPU only.
    """
    import triton
    import triton.language as tl

    global _rt, _exchange_row_sums  # the kernels find their helpers among the globals
    _rt, _ = _kernels()

    @triton.jit
    def _exchange_row_sums(PARTIALS, ARRIVALS, partial, tile, rows, n_rows,
                          CHUNKS: tl.constexpr):
        part = tl.program_id(1)
        n_chunks = tl.num_programs(1)
        row_mask = rows < n_rows
        tl.store(PARTIALS + part * n_rows + rows, partial, mask=row_mask)
        tl.debug_barrier()  # every thread's partials are stored before the arrival
        arrived = tl.atomic_add(ARRIVALS + tile, 1, sem="acq_rel", scope="gpu") + 1
        while arrived < n_chunks:
            arrived = tl.atomic_add(ARRIVALS + tile, 0, sem="acquire", scope="gpu")
        tl.debug_barrier()
        parts = tl.arange(0, CHUNKS)
        mask = (parts < n_chunks)[:, None] & row_mask[None, :]
        return tl.sum(tl.load(PARTIALS + parts[:, None] * n_rows + rows[None, :],
                              mask=mask, other=0.0, cache_modifier=".cg"), axis=0)

    @triton.jit
    def fwd_exchange(X, W, Y, RSTD, R, S, PARTIALS, ARRIVALS, n_rows, n_cols, eps, eps_low,
                     tiles_per_program, size1, size2, x_stride0, x_stride1, x_stride2,
                     BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,
                     CHUNKS: tl.constexpr, COMPUTE_DTYPE: tl.constexpr, ALIGN: tl.constexpr,
                     HAS_RESIDUAL: tl.constexpr, PREFETCH: tl.constexpr):
        n_cols = n_cols // ALIGN * ALIGN
        slot = tl.program_id(0)
        n_slots = tl.num_programs(0)
        n_tiles = tl.cdiv(n_rows, BLOCK_ROWS)
        cols = tl.program_id(1) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
        w = tl.load(W + cols, mask=cols < n_cols, other=0.0).to(COMPUTE_DTYPE)
        rows = slot * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        offsets = _rt._row_offsets(rows, size1, size2, x_stride0, x_stride1, x_stride2,
                                   ALIGN)
        x_next = _rt._load_tile(X, offsets, cols, rows < n_rows, n_cols)
        r_next = _rt._load_tile(R, offsets, cols, rows < n_rows, n_cols)
        for i in range(tiles_per_program):
            tile = slot + i * n_slots
            rows = tile * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
            row_mask = rows < n_rows
            offsets = _rt._row_offsets(rows, size1, size2, x_stride0, x_stride1,
                                       x_stride2, ALIGN)
            if PREFETCH:
                x_raw, r_raw = x_next, r_next
                rows_next = rows + n_slots * BLOCK_ROWS
                offsets_next = _rt._row_offsets(rows_next, size1, size2, x_stride0,
                                                x_stride1, x_stride2, ALIGN)
                x_next = _rt._load_tile(X, offsets_next, cols, rows_next < n_rows, n_cols)
                if HAS_RESIDUAL:
                    r_next = _rt._load_tile(R, offsets_next, cols, rows_next < n_rows,
                                            n_cols)
            else:
                x_raw = _rt._load_tile(X, offsets, cols, row_mask, n_cols)
                r_raw = _rt._load_tile(R, offsets, cols, row_mask, n_cols)
            if tile < n_tiles:  # the same for every chunk program of the slot
                x = x_raw
                if HAS_RESIDUAL:
                    x = _rt._add_residual(x, r_raw)
                x = x.to(COMPUTE_DTYPE)
                sum_squares = _exchange_row_sums(PARTIALS, ARRIVALS, tl.sum(x * x, axis=1),
                                                tile, rows, n_rows, CHUNKS)
                rstd = _rt._inv_rms(sum_squares / n_cols, eps, eps_low, COMPUTE_DTYPE)
                _rt._normalize_store(X, Y, S, x, w, rstd, rows, cols, row_mask, n_cols,
                                     ALIGN, HAS_RESIDUAL)
                if tl.program_id(1) == 0:
                    tl.store(RSTD + rows, rstd, mask=row_mask)

    @triton.jit
    def bwd_exchange(DY, X, W, RSTD, DX, DW_PARTIAL, DS, PARTIALS, ARRIVALS, n_rows, n_cols,
                     tiles_per_program, BLOCK_ROWS: tl.constexpr, BLOCK_COLS: tl.constexpr,
                     CHUNKS: tl.constexpr, COMPUTE_DTYPE: tl.constexpr, ALIGN: tl.constexpr,
                     HAS_DS: tl.constexpr, PREFETCH: tl.constexpr):
        # contiguous (n_rows, n_cols) x, dy and ds; rstd saved by the forward
        n_cols = n_cols // ALIGN * ALIGN
        slot = tl.program_id(0)
        n_slots = tl.num_programs(0)
        n_tiles = tl.cdiv(n_rows, BLOCK_ROWS)
        cols = tl.program_id(1) * BLOCK_COLS + tl.arange(0, BLOCK_COLS)
        strides = (0, 0, n_cols, 0, 0, n_cols)
        w = tl.load(W + cols, mask=cols < n_cols, other=0.0).to(COMPUTE_DTYPE)
        dw_acc = tl.zeros([BLOCK_ROWS, BLOCK_COLS], dtype=COMPUTE_DTYPE)
        rows = slot * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
        x_next, dy_next, ds_next = _rt._load_grad_tile(
            X, DY, DS, rows, cols, n_rows, n_cols, 1, n_rows, strides, ALIGN, HAS_DS)
        for i in range(tiles_per_program):
            tile = slot + i * n_slots
            rows = tile * BLOCK_ROWS + tl.arange(0, BLOCK_ROWS)
            row_mask = rows < n_rows
            if PREFETCH:
                x_raw, dy_raw, ds_raw = x_next, dy_next, ds_next
                x_next, dy_next, ds_next = _rt._load_grad_tile(
                    X, DY, DS, rows + n_slots * BLOCK_ROWS, cols, n_rows, n_cols, 1,
                    n_rows, strides, ALIGN, HAS_DS)
            else:
                x_raw, dy_raw, ds_raw = _rt._load_grad_tile(
                    X, DY, DS, rows, cols, n_rows, n_cols, 1, n_rows, strides, ALIGN,
                    HAS_DS)
            if tile < n_tiles:
                x, dy = x_raw.to(COMPUTE_DTYPE), dy_raw.to(COMPUTE_DTYPE)
                wdy = w[None, :] * dy
                dot = _exchange_row_sums(PARTIALS, ARRIVALS, tl.sum(wdy * x, axis=1), tile,
                                        rows, n_rows, CHUNKS)
                rstd = tl.load(RSTD + rows, mask=row_mask, other=0.0).to(COMPUTE_DTYPE)
                x_hat = x * rstd[:, None]
                _rt._dx_store(DX, x_hat, wdy, dot * rstd / n_cols, rstd,
                              ds_raw.to(COMPUTE_DTYPE), rows, cols, row_mask, n_cols,
                              ALIGN, HAS_DS)
                dw_acc += dy * x_hat.to(X.dtype.element_ty).to(COMPUTE_DTYPE)
        partial = DW_PARTIAL + slot.to(tl.int64) * n_cols
        tl.store(partial + cols, tl.sum(dw_acc, axis=0), mask=cols < n_cols)

    return fwd_exchange, bwd_exchange


def _exchange_grid(config, n_rows, n_cols):
    rt, _ = _kernels()
    n_chunks = -(-n_cols // config.block_cols)
    n_tiles = -(-n_rows // config.block_rows)
    resident = rt.sm_count(torch.device(DEVICE)) * config.programs_per_sm
    return max(1, min(n_tiles, resident // n_chunks)), n_chunks, n_tiles


def _exchange_buffers(n_chunks, n_rows, n_tiles):
    return dict(PARTIALS=torch.empty((n_chunks, n_rows), device=DEVICE),
                ARRIVALS=torch.zeros(n_tiles, dtype=torch.int32, device=DEVICE))


def exchange_forward(x, w, residual, config, prefetch, warmup=False):
    """The exchange forward: (y, rstd), and s with a residual (the fused add)."""
    rt, _ = _kernels()
    fwd, _ = _exchange_kernels()
    y, rstd, args = rt.forward_arguments(x, w, EPS, residual)
    n_slots, n_chunks, n_tiles = _exchange_grid(config, *x.shape)
    launch = dict(**args, **_exchange_buffers(n_chunks, x.shape[0], n_tiles),
                  tiles_per_program=-(-n_tiles // n_slots), BLOCK_ROWS=config.block_rows,
                  BLOCK_COLS=config.block_cols, CHUNKS=1 << (n_chunks - 1).bit_length(),
                  PREFETCH=prefetch, num_warps=config.num_warps,
                  launch_cooperative_grid=True)
    if warmup:
        return fwd.warmup(**launch, grid=(n_slots, n_chunks))
    fwd[(n_slots, n_chunks)](**launch)
    return (y, rstd) if residual is None else (y, args["S"], rstd)


def exchange_backward(dy, x, w, rstd, ds, config, prefetch, warmup=False):
    """The exchange backward of contiguous x, dy (and ds): (dx, dw)."""
    import triton.language as tl

    rt, _ = _kernels()
    _, bwd = _exchange_kernels()
    n_rows, n_cols = x.shape
    n_slots, n_chunks, n_tiles = _exchange_grid(config, n_rows, n_cols)
    dx, dw = torch.empty_like(x), torch.empty_like(w)
    dw_partial = torch.empty((n_slots, n_cols), device=DEVICE)
    launch = dict(DY=dy, X=x, W=w, RSTD=rstd, DX=dx, DW_PARTIAL=dw_partial,
                  DS=dx if ds is None else ds,
                  **_exchange_buffers(n_chunks, n_rows, n_tiles), n_rows=n_rows,
                  n_cols=n_cols, tiles_per_program=-(-n_tiles // n_slots),
                  BLOCK_ROWS=config.block_rows, BLOCK_COLS=config.block_cols,
                  CHUNKS=1 << (n_chunks - 1).bit_length(), COMPUTE_DTYPE=tl.float32,
                  ALIGN=rt.row_alignment(n_cols), HAS_DS=ds is not None,
                  PREFETCH=prefetch, num_warps=config.num_warps,
                  launch_cooperative_grid=True)
    if warmup:
        return bwd.warmup(**launch, grid=(n_slots, n_chunks))
    bwd[(n_slots, n_chunks)](**launch)
    rt.reduce_dw_partials(dw_partial, dw, n_slots, config.block_cols)
    return dx, dw


def exchange_configs(width: int, direction: str, quick: bool = False):
    """(config, prefetch) of the exchange attempt: chunks of 4096 to 16384, 1 or 2 rows,
    8 to 32 elements per thread and tensor, 1 to 4 programs per SM (1 or 2 backward),
    with and without prefetch."""
    rt, _ = _kernels()
    per_sm = (1, 2, 4) if direction == "forward" else (1, 2)
    configs = [(rt.LaunchConfig(r, chunk, 0, warps, p, chunked=True), prefetch)
               for prefetch in (True, False)
               for chunk in (4096, 8192, 16384) for r in (1, 2) for warps in (4, 8, 16)
               for p in per_sm
               if 8 <= r * chunk // (32 * warps) <= 32 and chunk < width
               and warps * p <= 32]
    return configs[:2] if quick else configs


def _exchange_compile_worker(jobs):
    """Compile each (kind, width, config, prefetch) of the exchange attempt, never launching."""
    for kind, width, config, prefetch in jobs:
        x = torch.empty(ROWS, width, device=DEVICE, dtype=DTYPE)
        w = torch.ones(width, device=DEVICE, dtype=DTYPE)
        rstd = torch.empty(ROWS, device=DEVICE)
        if kind in ("fwd", "fused_fwd"):
            exchange_forward(x, w, x if kind == "fused_fwd" else None, config, prefetch, True)
        else:
            exchange_backward(x, x, w, rstd, x if kind == "fused_bwd" else None, config,
                              prefetch, True)


def exchange_attempt(width, rows, quick):
    """The shipped chunked kernels against the exchange kernels at one width: forward and
    backward, plain and fused (residual in; ds in), side by side in one process. Each
    exchange result is compared with the shipped kernel's (max_abs_diff: y, rstd and s;
    dx and dW, whose sums are grouped differently)."""
    rt, rf = _kernels()
    sets_n = 1 if quick else mode.rotating_input_sets(4 * rows * width * 2, DEVICE)
    gen = torch.Generator(device=DEVICE).manual_seed(width)
    sets = [tuple(torch.randn(rows, width, device=DEVICE, generator=gen).to(DTYPE)
                  for _ in range(3)) for _ in range(sets_n)]  # x (or s); dy or residual; ds
    w = (torch.rand(width, device=DEVICE, generator=gen) + 0.5).to(DTYPE)
    rstds = [rt.rms_norm_forward(x, w, EPS)[1] for x, _, _ in sets]
    shipped_calls = {
        "fwd": lambda x, r, ds, rstd: rt.rms_norm_forward(x, w, EPS),
        "fused_fwd": lambda x, r, ds, rstd: rf.fused_add_rms_norm_forward(x, r, w, EPS),
        "bwd": lambda x, dy, ds, rstd: rt.rms_norm_backward(dy, x, w, rstd),
        "fused_bwd": lambda x, dy, ds, rstd: rf.fused_add_rms_norm_backward(dy, ds, x, w, rstd),
    }
    exchange_calls = {
        "fwd": lambda x, r, ds, rstd, c, p: exchange_forward(x, w, None, c, p),
        "fused_fwd": lambda x, r, ds, rstd, c, p: exchange_forward(x, w, r, c, p),
        "bwd": lambda x, dy, ds, rstd, c, p: exchange_backward(dy, x, w, rstd, None, c, p),
        "fused_bwd": lambda x, dy, ds, rstd, c, p: exchange_backward(dy, x, w, rstd, ds, c, p),
    }
    entry = {"width": width, "rows": rows, "input_sets": sets_n}
    for kind, shipped_call in shipped_calls.items():
        direction = "backward" if kind.endswith("bwd") else "forward"
        getter = rt.backward_config if direction == "backward" else rt.forward_config
        shipped = _fields(getter(width, DEVICE, fused=kind.startswith("fused")))
        x, r, ds = sets[0]
        expected = [t.float() for t in shipped_call(x, r, ds, rstds[0])]
        shipped_fns = [lambda s=s, rstd=rstd: shipped_call(*s, rstd)
                       for s, rstd in zip(sets, rstds)]
        timed = [_timed(dict(shipped, shipped=True), shipped_fns)]
        for config, prefetch in exchange_configs(width, direction, quick):
            fields = _fields(config) | {"prefetch": prefetch}
            try:
                got = [t.float() for t in exchange_calls[kind](x, r, ds, rstds[0], config,
                                                               prefetch)]
                fields["max_abs_diff"] = [float((g - e).abs().max())
                                          for g, e in zip(got, expected)]
            except Exception as error:
                fields["error"] = f"{type(error).__name__}: {error}"[:300]
                timed.append(fields)
                continue
            timed.append(_timed(fields, [
                lambda s=s, rstd=rstd, c=config, p=prefetch: exchange_calls[kind](*s, rstd, c, p)
                for s, rstd in zip(sets, rstds)]))
        timed.append(_timed(dict(shipped, shipped=True), shipped_fns))
        entry[kind] = timed
        best = _best(timed[1:-1])
        print(f"exchange {width} {kind}: shipped {timed[0].get('us')} / {timed[-1].get('us')}"
              f" best {best}", flush=True)
    del sets, rstds
    return entry


def _smem_forward_kernel():
    """The plain forward with each row held in shared memory, in Triton's Gluon dialect
    (explicit layouts and shared memory; not in Triton's own language). One read of x
    from DRAM, where the chunked forward reads it twice (pass 2 mostly from L2).

    A persistent program walks rows pid, pid + n_programs, ... through a ring of N_SLOTS
    chunk buffers (N_SLOTS >= the row's chunks): cp.async copies the first N_SLOTS chunks
    in, pass 1 sums squares as they land, pass 2 normalizes from shared memory and, as it
    frees each slot, starts the copy of the chunk N_SLOTS further on (the next row's
    beginning). Each chunk is one commit group, so "chunk c of this row has landed" is
    ``wait_group(N_SLOTS - 1 - c)``. Contiguous rows, N_COLS a multiple of 8 (16-byte
    copies). CUDA sm_80+ only: the interpreter cannot run Gluon.
    """
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.ampere import async_copy

    global _copy_chunk  # the kernel finds its helper among the globals

    @gluon.jit
    def _copy_chunk(ring, X, slot, k, pid, n_programs, n_rows, cols,
                    N_COLS: gl.constexpr, CHUNK: gl.constexpr, N_CHUNKS: gl.constexpr):
        row = pid + (k // N_CHUNKS) * n_programs  # chunk k of this program's sequence
        start = (k % N_CHUNKS) * CHUNK
        async_copy.async_copy_global_to_shared(
            ring.index(slot), X + row.to(gl.int64) * N_COLS + start + cols,
            mask=(start + cols < N_COLS) & (row < n_rows))
        async_copy.commit_group()  # empty past the last row: the count stays right

    @gluon.jit
    def smem_row_fwd_kernel(X, W, Y, RSTD, n_rows, eps, N_COLS: gl.constexpr,
                            CHUNK: gl.constexpr, N_SLOTS: gl.constexpr):
        N_CHUNKS: gl.constexpr = (N_COLS + CHUNK - 1) // CHUNK
        layout: gl.constexpr = gl.BlockedLayout([8], [32], [gl.num_warps()], [0])
        ring = gl.allocate_shared_memory(X.dtype.element_ty, [N_SLOTS, CHUNK],
                                         gl.SwizzledSharedLayout(1, 1, 1, [0]))
        cols = gl.arange(0, CHUNK, layout=layout)
        pid = gl.program_id(0)
        n_programs = gl.num_programs(0)
        for k in gl.static_range(N_SLOTS):
            _copy_chunk(ring, X, k, k, pid, n_programs, n_rows, cols, N_COLS, CHUNK, N_CHUNKS)
        for i in range((n_rows - pid + n_programs - 1) // n_programs):
            row = pid + i * n_programs
            first = i * N_CHUNKS
            squares = gl.zeros([CHUNK], gl.float32, layout)
            for c in gl.static_range(N_CHUNKS):
                async_copy.wait_group(N_SLOTS - 1 - c)
                x = ring.index((first + c) % N_SLOTS).load(layout).to(gl.float32)
                squares += x * x
            rstd = gl.rsqrt(gl.sum(squares, axis=0) / N_COLS + eps)
            for c in gl.static_range(N_CHUNKS):
                slot = (first + c) % N_SLOTS
                x = ring.index(slot).load(layout).to(gl.float32)
                mask = c * CHUNK + cols < N_COLS
                w = gl.load(W + c * CHUNK + cols, mask=mask, other=0.0)
                x_hat = (x * rstd).to(X.dtype.element_ty).to(gl.float32)  # HF's rounding
                gl.store(Y + row.to(gl.int64) * N_COLS + c * CHUNK + cols,
                         (x_hat * w.to(gl.float32)).to(Y.dtype.element_ty), mask=mask)
                _copy_chunk(ring, X, slot, first + c + N_SLOTS, pid, n_programs, n_rows,
                            cols, N_COLS, CHUNK, N_CHUNKS)
            gl.store(RSTD + row, rstd)
        async_copy.wait_group(0)

    return smem_row_fwd_kernel


TMA_INNER = 256  # a TMA box is at most 256 elements a side: chunks are [CHUNK / 256, 256]


def _tma_forward_kernel():
    """_smem_forward_kernel with Hopper's bulk copy engine (TMA) in place of cp.async: one
    thread starts a 16-byte-aligned copy of a whole chunk, and an mbarrier per ring slot
    says when it has landed, so the warps issue no loads of x at all. x is seen as
    [rows * N_COLS / 256, 256], a chunk as CHUNK / 256 of those rows; N_COLS a multiple of
    CHUNK. sm_90+ only."""
    from triton.experimental import gluon
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.language.nvidia.hopper import fence_async_shared, mbarrier, tma

    global _tma_chunk  # the kernel finds its helper among the globals

    @gluon.jit
    def _tma_chunk(x_desc, ring, ready, k, total, pid, n_programs,
                   N_COLS: gl.constexpr, CHUNK: gl.constexpr, N_SLOTS: gl.constexpr):
        gl.static_assert(N_COLS % CHUNK == 0)  # (and it puts gl in the helper's scope)
        N_CHUNKS: gl.constexpr = N_COLS // CHUNK
        row = pid + (k // N_CHUNKS) * n_programs  # chunk k of this program's sequence
        box_row = row * (N_COLS // 256) + (k % N_CHUNKS) * (CHUNK // 256)
        bar = ready.index(k % N_SLOTS)
        mbarrier.expect(bar, x_desc.block_type.nbytes, pred=k < total)
        tma.async_copy_global_to_shared(x_desc, [box_row, 0], bar, ring.index(k % N_SLOTS),
                                        pred=k < total)

    @gluon.jit
    def tma_row_fwd_kernel(x_desc, W, Y, RSTD, n_rows, eps, N_COLS: gl.constexpr,
                           CHUNK: gl.constexpr, N_SLOTS: gl.constexpr):
        N_CHUNKS: gl.constexpr = N_COLS // CHUNK
        BOX_ROWS: gl.constexpr = CHUNK // 256
        layout: gl.constexpr = gl.BlockedLayout([1, 8], [1, 32], [gl.num_warps(), 1], [1, 0])
        ring = gl.allocate_shared_memory(x_desc.dtype, [N_SLOTS, BOX_ROWS, 256], x_desc.layout)
        ready = gl.allocate_shared_memory(gl.int64, [N_SLOTS, 1], mbarrier.MBarrierLayout())
        for s in gl.static_range(N_SLOTS):
            mbarrier.init(ready.index(s), count=1)
        fence_async_shared()
        pid = gl.program_id(0)
        n_programs = gl.num_programs(0)
        my_rows = (n_rows - pid + n_programs - 1) // n_programs
        total = my_rows * N_CHUNKS
        for first_slot in gl.static_range(N_SLOTS):
            _tma_chunk(x_desc, ring, ready, first_slot, total, pid, n_programs, N_COLS, CHUNK, N_SLOTS)
        box_r = gl.arange(0, BOX_ROWS, layout=gl.SliceLayout(1, layout))
        box_c = gl.arange(0, 256, layout=gl.SliceLayout(0, layout))
        offsets = box_r[:, None] * 256 + box_c[None, :]
        for i in range(my_rows):
            row = pid + i * n_programs
            first = i * N_CHUNKS
            squares = gl.zeros([BOX_ROWS, 256], gl.float32, layout)
            for c in gl.static_range(N_CHUNKS):
                seq = first + c  # the chunk's place in this program's sequence
                mbarrier.wait(ready.index(seq % N_SLOTS), (seq // N_SLOTS) & 1)
                x = ring.index(seq % N_SLOTS).load(layout).to(gl.float32)
                squares += x * x
            rstd = gl.rsqrt(gl.sum(gl.sum(squares, axis=1), axis=0) / N_COLS + eps)
            for c in gl.static_range(N_CHUNKS):
                seq = first + c
                x = ring.index(seq % N_SLOTS).load(layout).to(gl.float32)
                w = gl.load(W + c * CHUNK + offsets).to(gl.float32)
                x_hat = (x * rstd).to(x_desc.dtype).to(gl.float32)  # HF's rounding
                gl.store(Y + row.to(gl.int64) * N_COLS + c * CHUNK + offsets,
                         (x_hat * w).to(Y.dtype.element_ty))
                gl.thread_barrier()  # every warp has read the slot before it is refilled
                fence_async_shared()
                _tma_chunk(x_desc, ring, ready, seq + N_SLOTS, total, pid, n_programs,
                           N_COLS, CHUNK, N_SLOTS)
            gl.store(RSTD + row, rstd)
        for s in gl.static_range(N_SLOTS):
            mbarrier.invalidate(ready.index(s))

    return tma_row_fwd_kernel


def _ring_forward(kernel, x_arg, x, w, chunk, slots, warps, programs_per_sm, out):
    """Launch a shared-memory forward on a persistent grid; ``out``: preallocated (y, rstd)."""
    rt, _ = _kernels()
    n_rows, n_cols = x.shape
    y, rstd = out if out is not None else (torch.empty_like(x), torch.empty(
        n_rows, device=x.device, dtype=torch.float32))
    grid = min(n_rows, rt.sm_count(x.device) * programs_per_sm)
    kernel[(grid,)](x_arg, w, y, rstd, n_rows, EPS, N_COLS=n_cols, CHUNK=chunk, N_SLOTS=slots,
                    num_warps=warps)
    return y, rstd


def _check_ring_input(x, chunk, copy):
    if x.dim() != 2 or not x.is_contiguous() or x.shape[1] % 8:
        raise ValueError(f"the {copy} forward needs contiguous 2-D rows of a multiple of 8 "
                         f"elements (16-byte copies): shape {tuple(x.shape)}, strides {x.stride()}")
    if copy == "TMA" and (x.shape[1] % chunk or chunk % TMA_INNER or chunk // TMA_INNER > 256):
        raise ValueError(f"the TMA forward needs chunks of k x 256 dividing the row: {chunk}")


def tma_forward(x, w, chunk, slots, warps, programs_per_sm, out=None):
    """(y, rstd) of the TMA forward; ``out``: preallocated (y, rstd)."""
    _check_ring_input(x, chunk, "TMA")
    from triton.experimental.gluon import language as gl
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    layout = gl.NVMMASharedLayout(swizzle_byte_width=0, element_bitwidth=16, rank=2)
    x_desc = TensorDescriptor.from_tensor(x.view(-1, TMA_INNER), [chunk // TMA_INNER, TMA_INNER],
                                          layout)
    return _ring_forward(_tma_forward_kernel(), x_desc, x, w, chunk, slots, warps,
                         programs_per_sm, out)


def smem_forward(x, w, chunk, slots, warps, programs_per_sm, out=None):
    """(y, rstd) of the shared-memory forward (cp.async); ``out``: preallocated (y, rstd)."""
    _check_ring_input(x, chunk, "cp.async")
    return _ring_forward(_smem_forward_kernel(), x, x, w, chunk, slots, warps, programs_per_sm,
                         out)


SMEM_BYTES = 227 * 1024  # the H100/H200 limit per block (sm_90)


def smem_configs(width: int, quick: bool = False):
    """(chunk, slots, warps, programs per SM): the ring from one row to all that fits."""
    out = []
    for chunk, warps in ((4096, 16), (2048, 8), (8192, 16), (4096, 8)):
        n_chunks = -(-width // chunk)
        for per_sm in (1, 2, 3):
            room = SMEM_BYTES // per_sm // (chunk * 2) - 1  # a little for the reduction
            for slots in sorted({n_chunks, n_chunks + n_chunks // 2, 2 * n_chunks, room}):
                if n_chunks <= slots <= room:
                    out.append((chunk, slots, warps, per_sm))
    return out[:2] if quick else out


def smem_attempt(width, rows, quick):
    """The shipped forward against the shared-memory forwards (_smem_forward_kernel, copies
    by cp.async, and _tma_forward_kernel, by TMA) at every smem_configs config, and
    torch.compile of HF's module and quack, in one process. Each variant records how far
    its y and rstd are from the shipped kernel's; tests/bench/test_explore_smem.py bounds them."""
    from bench.harness.contenders import rmsnorm_contenders

    rt, _ = _kernels()
    sets_n = 1 if quick else mode.rotating_input_sets(2 * rows * width * 2, DEVICE)
    gen = torch.Generator(device=DEVICE).manual_seed(width)
    inputs = [(torch.randn(rows, width, device=DEVICE, generator=gen).to(DTYPE),)
              for _ in range(sets_n)]
    weight = (torch.rand(width, device=DEVICE, generator=gen) + 0.5).to(DTYPE)
    prepared = [rt.forward_arguments(x, weight, EPS) for x, in inputs]
    config = rt.forward_config(width, DEVICE)
    entry = {"width": width, "rows": rows, "input_sets": sets_n, "shipped": _fields(config)}
    shipped_fns = [lambda a=a: rt.launch_forward(a, config) for _, _, a in prepared]
    entry["shipped"]["us"] = _time(shipped_fns)
    y0, rstd0, _ = prepared[0]
    entry["variants"] = []
    engines = {"cp.async": smem_forward, "tma": tma_forward}
    for (chunk, slots, warps, per_sm), engine in itertools.product(smem_configs(width, quick),
                                                                    engines):
        if engine == "tma" and (width % chunk or chunk % TMA_INNER):
            continue
        forward = engines[engine]
        fields = {"copy": engine, "block_cols": chunk, "slots": slots, "num_warps": warps,
                  "programs_per_sm": per_sm, "smem_bytes": slots * chunk * 2}
        try:
            y, rstd = forward(inputs[0][0], weight, chunk, slots, warps, per_sm)
            fields["y_max_abs_diff"] = float((y.float() - y0.float()).abs().max())
            fields["y_differs"] = int((y != y0).sum())
            fields["rstd_max_rel_diff"] = float(((rstd - rstd0) / rstd0).abs().max())
        except Exception as error:
            fields["error"] = f"{type(error).__name__}: {error}"[:300]
            entry["variants"].append(fields)
            continue
        outs = [(torch.empty_like(y), torch.empty_like(rstd)) for _ in inputs]
        entry["variants"].append(_timed(fields, [
            lambda x=x, o=o, c=(chunk, slots, warps, per_sm), f=forward: f(x, weight, *c, out=o)
            for (x,), o in zip(inputs, outs)]))
    entry["shipped_again_us"] = _time(shipped_fns)
    peers = {"fwd": {}, "fwd_bwd": {}, "errors": {}}
    skipped = {}
    built = rmsnorm_contenders(["compile_hf", "quack"], width, DTYPE, DEVICE, skipped, EPS)
    for name, (fn, w) in built.items():
        time_contender(peers, name, fn, w, [(x, x) for x, in inputs], eager=False, replays=6)
    entry["peers"] = {"fwd": {k: v["median_us"] for k, v in peers["fwd"].items()},
                      "errors": peers["errors"], "skipped": skipped}
    return entry


def cluster_attempt(width, rows):
    """quack's way for wide rows: one row in registers across a cluster of num_ctas
    thread blocks. Records the compile error where Triton cannot build it."""
    rt, _ = _kernels()
    x = torch.randn(rows, width, device=DEVICE).to(DTYPE)
    w = torch.ones(width, device=DEVICE, dtype=DTYPE)
    y, rstd, args = rt.forward_arguments(x, w, EPS)
    out = []
    for num_ctas, num_warps in ((2, 16), (4, 16), (2, 32)):
        fields = {"width": width, "num_ctas": num_ctas, "num_warps": num_warps}
        try:
            rt.rms_norm_fwd_kernel[(rows,)](
                **args, BLOCK_ROWS=1, BLOCK_COLS=width, TAIL_COLS=0,
                num_warps=num_warps, num_ctas=num_ctas)
            fields["us"] = _time([lambda: rt.rms_norm_fwd_kernel[(rows,)](
                **args, BLOCK_ROWS=1, BLOCK_COLS=width, TAIL_COLS=0,
                num_warps=num_warps, num_ctas=num_ctas)])
        except Exception as error:
            message = str(error)
            found = re.findall(r"error: ([^\n]*)", message)
            fields["error"] = f"{type(error).__name__}: {found[0] if found else message}"[:400]
        out.append(fields)
    return out


# ---------------------------------------------------------------- main

def _widths(text):
    return [int(v) for v in text.split(",") if v.strip()]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=pathlib.Path, required=True)
    parser.add_argument("--fused-widths", default=None)
    parser.add_argument("--widths", default="")
    parser.add_argument("--liger-widths", default="")
    parser.add_argument("--cluster-widths", default="")
    parser.add_argument("--persistent-widths", default="")
    parser.add_argument("--eviction-widths", default="")
    parser.add_argument("--eviction-fused-widths", default="")
    parser.add_argument("--fresh-backward-widths", default="")
    parser.add_argument("--exchange-widths", default="")
    parser.add_argument("--smem-widths", default="")
    parser.add_argument("--snippets", default=None, help="import the kernels from this folder")
    parser.add_argument("--tag", default="")
    parser.add_argument("--budget-s", type=float, default=1e9)
    parser.add_argument("--workers", type=int, default=12)
    parser.add_argument("--precompile-only", action="store_true")
    parser.add_argument("--no-precompile", action="store_true")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    if args.snippets:
        sys.path.insert(0, str(pathlib.Path(args.snippets).resolve()))
    if not (args.quick or DEVICE == "cuda"):
        raise RuntimeError("explore_widths needs a CUDA GPU; use --quick for the CPU smoke test")
    args.out.mkdir(parents=True, exist_ok=True)
    rows = QUICK_ROWS if args.quick else ROWS
    payload = {"config": {"quick": args.quick, "rows": rows, "dtype": "bfloat16", "eps": EPS,
                          "timer": "median GPU time per call from CUDA-graph replays (8 calls "
                                   "per graph, 6 replays), rotating input sets",
                          "tag": args.tag},
               "results": {"fused": [], "plain": [], "cluster": [], "persistent": [],
                           "eviction": [], "fresh_backward": [], "exchange": [], "smem": []}}
    results = payload["results"]
    stem = STEM + (f"-{args.tag}" if args.tag else "")

    def save():  # after every width: a run cut short keeps what it measured
        record.save("explore_widths", payload, args.out, stem=stem)

    fused_widths = (_widths(args.fused_widths) if args.fused_widths is not None
                    else QUICK_FUSED_WIDTHS if args.quick else list(SWEEP_WIDTHS))
    plain_widths, liger_widths = _widths(args.widths), set(_widths(args.liger_widths))
    eviction_jobs = [(width, fused) for fused, text in ((False, args.eviction_widths),
                                                        (True, args.eviction_fused_widths))
                     for width in _widths(text)]
    if DEVICE == "cuda" and not args.no_precompile:
        jobs = [(kind, width, config) for width in fused_widths
                for kind, direction in (("fused_fwd", "forward"), ("fused_bwd", "backward"))
                for config in fused_configs(width, direction)]
        jobs += [(kind, width, config) for width in plain_widths
                 for kind, direction in (("fwd", "forward"), ("bwd", "backward"))
                 for config in plain_configs(width, direction)]
        jobs += [(kind, width, None) for width in fused_widths for kind in ("fwd", "bwd")]
        jobs += [("liger", width, None) for width in sorted(liger_widths)]
        if jobs:
            precompile(jobs, args.workers)
        jobs = [(width, fused, variant) for width, fused in eviction_jobs
                for variant in eviction_variants(width)]
        if jobs:
            precompile(jobs, args.workers, _eviction_compile_worker)
        fresh_widths = _widths(args.fresh_backward_widths)
        fresh = fresh_backward_configs(fresh_widths[0]) if fresh_widths else []
        jobs = [(kind, width, config) for width in fresh_widths
                for config in fresh for kind in ("bwd", "fused_bwd")]
        if jobs:
            precompile(jobs, args.workers)
        jobs = [(kind, width, config, prefetch) for width in _widths(args.exchange_widths)
                for kind, direction in (("fwd", "forward"), ("fused_fwd", "forward"),
                                        ("bwd", "backward"), ("fused_bwd", "backward"))
                for config, prefetch in exchange_configs(width, direction)]
        if jobs:
            precompile(jobs, args.workers, _exchange_compile_worker)
    if args.precompile_only:
        return
    began = time.perf_counter()
    results["copy"] = timers.copy_bandwidth(2 * 2**30 if DEVICE == "cuda" else 2**20, DEVICE,
                                            "eager")
    for width in fused_widths:
        if time.perf_counter() - began > args.budget_s:
            results.setdefault("skipped_widths", []).append(width)
            continue
        start = time.perf_counter()
        entry = explore_fused(width, rows, args.quick, width in liger_widths)
        results["fused"].append(entry)
        save()
        best_f, best_b = _best(entry["fwd"]), _best(entry["bwd"])
        print(f"fused {width}: shipped {entry['fwd'][0].get('us', 0):.1f}/"
              f"{entry['bwd'][0].get('us', 0):.1f} best {best_f and best_f['us']:.1f}/"
              f"{best_b and best_b['us']:.1f} unfused {entry['unfused']} "
              f"autograd {entry['autograd']['fwd_bwd']} ({time.perf_counter() - start:.1f} s)",
              flush=True)
    for width in plain_widths:
        if time.perf_counter() - began > args.budget_s:
            results.setdefault("skipped_widths", []).append(width)
            continue
        entry = explore_plain(width, rows, args.quick, DEVICE == "cuda")
        results["plain"].append(entry)
        save()
        print(f"plain {width}: best {_best(entry['fwd'])} / {_best(entry['bwd'])} "
              f"peers {entry.get('peers')}", flush=True)
    for width in _widths(args.persistent_widths):
        entry = persistent_attempt(width, rows, args.quick)
        results["persistent"].append(entry)
        save()
        best = _best(entry["persistent"])
        print(f"persistent {width}: shipped {entry['shipped']['us']:.1f} us, best persistent {best}",
              flush=True)
    for width, fused in eviction_jobs:
        entry = eviction_attempt(width, rows, args.quick, fused)
        results["eviction"].append(entry)
        save()
        best = _best(entry["variants"])
        print(f"eviction {width}{' fused' if fused else ''}: shipped {entry['shipped']['us']:.1f}"
              f" us, best {best}, peers {entry['peers']['fwd']}", flush=True)
    if args.fresh_backward_widths:
        results["fresh_backward"] = fresh_backward_attempt(
            _widths(args.fresh_backward_widths), rows, args.quick)
        save()
    for width in _widths(args.exchange_widths):
        if time.perf_counter() - began > args.budget_s:
            results.setdefault("skipped_widths", []).append(width)
            continue
        results["exchange"].append(exchange_attempt(width, rows, args.quick))
        save()
    for width in _widths(args.smem_widths):
        if time.perf_counter() - began > args.budget_s:
            results.setdefault("skipped_widths", []).append(width)
            continue
        entry = smem_attempt(width, rows, args.quick)
        results["smem"].append(entry)
        save()
        best = {copy: _best([v for v in entry["variants"] if v["copy"] == copy])
                for copy in ("cp.async", "tma")}
        print(f"smem {width}: shipped {entry['shipped']['us']:.1f} / "
              f"{entry['shipped_again_us']:.1f} us, best {best}, peers {entry['peers']['fwd']}",
              flush=True)
    for width in _widths(args.cluster_widths):
        results["cluster"] += cluster_attempt(width, rows)
        save()
        print(f"cluster {width}: {results['cluster'][-3:]}", flush=True)
    save()


if __name__ == "__main__":
    main()
