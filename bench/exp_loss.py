"""lm_head + causal-LM cross-entropy at Qwen3 sizes: HF, torch.compile, Liger, Cut Cross-Entropy, torch's
chunked op and this site's fused op, side by side.

    python -m bench.run_all loss            # on a GPU; writes docs/data/<gpu>/loss.json
    BENCH_LOSS_CONTENDERS=hf_eager,ours python -m bench.run_all loss     # a subset of the contenders
    BENCH_WIDTHS=4096 python -m bench.run_all loss                       # a subset of the hidden sizes

One question: at each Qwen3 dense size's last layer (16,384 tokens: B=4, T=4096; vocabulary 151,936; bf16),
how long does ``loss = cross_entropy(hidden @ weight.T, targets)`` take, forward and forward + backward, how
much memory does it take on top of its inputs, and is its loss (and are its gradients) right? One shape per
distinct hidden size of ``QWEN3_SIZES`` (1024, 2048, 2560, 4096, 5120; the 8-layer step's is 4096, run
first so that a run cut short by the budget still has it). Every contender is ``fn(hidden (N, H), weight
(V, H), targets (N,) int64) -> scalar loss``, the mean over the targets that are not ignore_index:

* ``hf_eager``: HF's arithmetic, Qwen3ForCausalLM's ``lm_head`` (``F.linear``, bf16 logits) then
  ``transformers.loss.loss_utils.ForCausalLMLoss`` on the already-shifted targets (``shift_labels``): the
  logits upcast to fp32, ``F.cross_entropy(..., ignore_index=-100)``, reduction mean.
* ``compile``: ``torch.compile`` of that same function (Inductor, one static graph per shape: dynamo reset
  before each shape, ``fail_on_recompile_limit_hit`` so that a fallback to eager is never timed). GPU only.
* ``liger``: Liger-Kernel's ``liger_kernel.transformers.functional.liger_fused_linear_cross_entropy``
  (``LigerFusedLinearCrossEntropyFunction``) with its defaults: ``accum_dtype=None`` (d_W accumulated across
  token chunks in the weight's dtype, bf16), ``chunk_mem_const=1`` (chunks of
  ``next_pow2(ceil(N / ceil(V / H)))`` tokens: ``liger_chunk_tokens`` in each entry). GPU only.
* ``liger_compile``: ``torch.compile`` of the Liger function: is its loss right under compile? GPU only.
* ``cce``: Apple's Cut Cross-Entropy (``cut_cross_entropy.linear_cross_entropy(e, c, targets,
  ignore_index=-100, reduction="mean")``) with its defaults: ``impl="cce"``, ``filter_eps="high"`` (the
  backward skips every vocabulary block whose |softmax - onehot| is below bf16 eps / 32 = 2.4e-4
  everywhere: its time and its gradient depend on how peaked the softmax is, see the inputs below). GPU only;
  skipped with the reason where it is not installed (it is in no requirements file).
* ``torch_chunked``: ``torch.nn.functional.linear_cross_entropy`` with ``options=LinearCrossEntropyOptions()``
  (its chunked path, ``acc_policy`` and ``chunking_method`` "auto") where the installed torch has it
  (torch 2.13 does, 2.11 does not: skipped with the reason). Runs on the CPU too.
* ``ours``: this site's ``linear_cross_entropy`` (snippets/linear_cross_entropy.py) with its default config
  (``launch_config``: ``ours_config`` in each entry) and its default bad-target check (one host sync);
  ``ours_compile``: ``torch.compile`` of the same call (GPU only); ``ours_unchecked``: ``check_targets=False``
  (no sync: the check's cost is its time minus ``ours``'); ``ours_cNNN``: the default with ``chunk_tokens`` NNN
  (``CHUNK_SWEEP``; block and warps from ``launch_config``): the time / memory trade-off of the chunk size.
  The sweep and ``ours_unchecked`` run the forward + backward only (``FWD_BWD_ONLY``).

Inputs: hidden ~ N(0, 1); weight ~ N(0, (LOGIT_STD / sqrt(H))^2), so the logits are about N(0, 5^2): a
softmax of entropy about 3.4 nats (``reference.entropy_nats``), the order of a trained LM's per-token
predictive entropy. With unit logits the softmax over 151,936 ids is flat (11.4 nats) and CCE's gradient
filter would drop almost all of the gradient: a random model is not what CCE is built for. Targets: HF's
shifted labels, uniform random ids in [0, V) with the last position of each of the B rows = -100
(``targets = pad(labels, (0, 1), -100)[..., 1:]`` flattened). One label set (no prompt masking).

Per shape, phase (``fwd``: under no_grad, inputs that need no gradient; ``fwd_bwd``: the forward, then
``loss.backward()`` into hidden's and weight's ``.grad``, set to None before each call, as a training step
does: autograd then moves the gradient a contender returns into ``.grad``, or copies it if the contender still
holds it) and contender, ``entry[phase][id]`` holds:

* the time: ``timers.eager_time_us``, triton.testing.do_bench of eager calls (L2 flushed before each call;
  WARMUP_MS, REP_MS: a call takes up to ~100 ms at H = 5120, so a few samples each). Not CUDA graphs: Liger's
  backward calls ``torch.equal(grad_output, 1)``, a host sync that no graph can capture; host overhead is
  included for every contender alike. ``tflops``: the phase's FLOPs / median time;
* ``peak_bytes``: the peak of ``torch.cuda.max_memory_allocated()`` during one call above what was allocated
  before it; None on a CPU. In fwd that is above the inputs. In fwd_bwd the bytes before the call include the
  previous call's two gradients in ``.grad`` (2 * (N*H + V*H) bytes, the same for every contender), which the
  call frees first and replaces: its peak_bytes is the memory a contender holds beyond its inputs and one set
  of gradients (the logits or their chunks, and any copy of a gradient);
* ``loss`` (one call's value; "nan" / "inf" as strings when not finite), its ``loss_dtype``, ``loss_rel_err``
  against the reference; in fwd_bwd ``grad_hidden`` and ``grad_weight``: ``max_err`` = max |g - g_ref| /
  max |g_ref| and ``norm_err`` = ||g - g_ref|| / ||g_ref||. A wrong loss or gradient is recorded, not hidden;
  ``hf_eager``'s errors are bf16's own (its logits and gradients are rounded to bf16).

``entry["gemm_floor"]`` (GPU only): the three full-size N x V x H GEMMs of the op (logits, d_hidden, d_weight)
timed alone with the same timer, their medians in µs, ``total_us`` and the rate they reach (``tflops``): the floor
that every contender's forward + backward sits above.

The reference, once per shape: HF's arithmetic in fp32 from fp32 copies of hidden and weight (fp32 logits,
``F.cross_entropy``), float32 matmul precision "highest" (no TF32), gradients by autograd w.r.t. the fp32
copies. FLOPs: ``flops_fwd`` = 2*N*H*V (every token's logits, ignored ones included: the GEMM computes them),
``flops_fwd_bwd`` = 3x (d_hidden and d_weight are one GEMM's worth each); ``logits_bytes`` = N*V*2, the bf16
logits HF materializes (its fp32 copy is twice that). A contender that fails a phase has the error in
``entry["errors"][id]`` ("fwd: ..." / "fwd_bwd: ...") and the run goes on; one that cannot run here is in
``results["skipped"]`` with the reason. Shapes not started within BENCH_LOSS_BUDGET_S (default BUDGET_S)
are in ``results["not_run"]``. Budget: about 5 minutes on an H200.
"""
from __future__ import annotations

import dataclasses
import importlib.metadata
import os
import re
import time

import torch
import torch.nn.functional as F
import triton
from transformers.loss.loss_utils import ForCausalLMLoss

from bench.harness import mode, shapes
from bench.harness.contenders import compiled, optional_contender
from bench.harness.shapes import BENCH_BATCH, BENCH_SEQ_LEN
from bench.harness.timers import eager_time_us
from linear_cross_entropy import CrossEntropyConfig, launch_config, linear_cross_entropy
from qwen3_configs import qwen3_config

NAME = "loss"
DTYPE = torch.bfloat16
ELEM = 2  # bytes of a bf16 value
VOCAB = qwen3_config().vocab_size  # 151936
IGNORE_INDEX = -100
LOGIT_STD = 5.0  # the logits' standard deviation (module docstring: inputs)
FIRST_HIDDEN = 4096  # the 8-layer step's loss shape, run first
CHUNK_SWEEP = (128, 256, 512, 1024, 2048, 4096)
QUICK_CHUNK_SWEEP = (8, 16)  # several chunks of the quick shape's 32 tokens
WARMUP_MS, REP_MS = 50, 400  # do_bench's, per phase and contender
BUDGET_S = 360  # no shape starts later than this into the run (BENCH_LOSS_BUDGET_S)
PEERS = ("hf_eager", "compile", "liger", "liger_compile", "cce", "torch_chunked")
GPU_ONLY = ("compile", "liger", "liger_compile", "cce", "ours_compile")
OURS_VARIANTS = ("ours_compile", "ours_unchecked")
LABELS = ("HF's shifted labels: uniform random ids in [0, vocab), targets = pad(labels, (0, 1), ignore_index)"
          "[..., 1:] flattened (the last position of each of the B rows ignored); one label set, no prompt masking")
REFERENCE = ("HF's arithmetic in fp32: F.cross_entropy(F.linear(hidden.float(), weight.float()), targets), "
             "matmul precision 'highest' (no TF32), gradients by autograd w.r.t. the fp32 copies")


def contender_names(quick: bool) -> list[str]:
    """Every contender of a run: the peers, ours, its variants, ours at each chunk size of the sweep."""
    sweep = QUICK_CHUNK_SWEEP if quick else CHUNK_SWEEP
    return [*PEERS, "ours", *OURS_VARIANTS, *(f"ours_c{chunk}" for chunk in sweep)]


def sweep_chunk(name: str) -> int | None:
    """The chunk size of a sweep contender ``ours_cNNN``; None for any other contender."""
    match = re.fullmatch(r"ours_c(\d+)", name)
    return int(match.group(1)) if match else None


def fwd_bwd_only(name: str) -> bool:
    """The chunk sweep and the unchecked variant: forward + backward only (what they are run for)."""
    return sweep_chunk(name) is not None or name == "ours_unchecked"


def selected_contenders(quick: bool) -> list[str]:
    """The comma-separated BENCH_LOSS_CONTENDERS (a subset to re-run), else every contender."""
    known = contender_names(quick)
    wanted = os.environ.get("BENCH_LOSS_CONTENDERS")
    chosen = [t.strip() for t in wanted.split(",") if t.strip()] if wanted else known
    unknown = sorted(set(chosen) - set(known))
    if unknown:
        raise ValueError(f"unknown contenders {unknown}; choose from {known}")
    return chosen


def loss_shape(batch: int, seq: int, hidden: int, vocab: int = VOCAB, models: str = "") -> dict:
    return {"label": f"H={hidden}", "models": models, "batch": batch, "seq": seq, "tokens": batch * seq,
            "hidden": hidden, "vocab": vocab}


SHAPES = [loss_shape(BENCH_BATCH, BENCH_SEQ_LEN, hidden, models=models)
          for hidden, models in sorted(shapes.sizes_with(0).items(), key=lambda kv: (kv[0] != FIRST_HIDDEN, kv[0]))]
QUICK_SHAPES = [loss_shape(2, 16, 16, 100)]


def selected_shapes(quick: bool) -> list[dict]:
    """The shapes of this run: QUICK_SHAPES, else SHAPES or the hidden sizes of BENCH_WIDTHS."""
    if quick:
        return list(QUICK_SHAPES)
    default = [s["hidden"] for s in SHAPES]
    by_hidden = {s["hidden"]: s for s in SHAPES}
    return [by_hidden.get(h) or loss_shape(BENCH_BATCH, BENCH_SEQ_LEN, h) for h in shapes.selected_widths(default)]


def loss_counts(shape: dict) -> dict:
    """FLOPs of the lm_head GEMMs (every token, ignored ones included) and the bytes of HF's bf16 logits."""
    n, h, v = shape["tokens"], shape["hidden"], shape["vocab"]
    return {"flops_fwd": 2 * n * h * v, "flops_fwd_bwd": 3 * 2 * n * h * v, "logits_bytes": n * v * ELEM}


def liger_chunk_tokens(tokens: int, hidden: int, vocab: int) -> int:
    """The token chunk of Liger 0.8.5's fused linear cross-entropy at its default chunk_mem_const=1."""
    return min(triton.next_power_of_2(triton.cdiv(tokens, triton.cdiv(vocab, hidden))), tokens)


def make_inputs(shape: dict, device, seed: int):
    """(hidden, weight, targets): bf16 hidden ~ N(0, 1), weight scaled to logits of std LOGIT_STD, and HF's
    shifted random labels (LABELS)."""
    gen = torch.Generator(device=device).manual_seed(seed)
    n, h, v = shape["tokens"], shape["hidden"], shape["vocab"]
    hidden = torch.randn(n, h, device=device, generator=gen).to(DTYPE)
    weight = (torch.randn(v, h, device=device, generator=gen) * (LOGIT_STD / h**0.5)).to(DTYPE)
    labels = torch.randint(0, v, (shape["batch"], shape["seq"]), device=device, generator=gen)
    targets = F.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:].reshape(-1).contiguous()
    return hidden, weight, targets


def reference(hidden, weight, targets) -> tuple[dict, tuple]:
    """({"loss", "entropy_nats", "counted"}, (loss, d_hidden, d_weight)) in fp32 (REFERENCE); the entropy
    is the mean over the counted tokens of the softmax's entropy, in nats."""
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    try:
        h, w = hidden.float().requires_grad_(), weight.float().requires_grad_()
        loss = F.cross_entropy(F.linear(h, w), targets, ignore_index=IGNORE_INDEX)
        d_hidden, d_weight = torch.autograd.grad(loss, (h, w))
        counted = targets != IGNORE_INDEX
        entropy = torch.zeros((), device=hidden.device, dtype=torch.float64)
        with torch.no_grad():
            for start in range(0, h.shape[0], 2048):
                logp = F.linear(h[start:start + 2048], w).log_softmax(-1)
                row = -(logp.exp() * logp).sum(-1)
                entropy += row[counted[start:start + 2048]].double().sum()
        n_counted = int(counted.sum())
    finally:
        torch.set_float32_matmul_precision(precision)
    info = {"loss": float(loss.detach()), "entropy_nats": float(entropy) / max(n_counted, 1), "counted": n_counted}
    return info, (loss.detach(), d_hidden, d_weight)


def _number(x: float):
    """A float for the JSON, or its name ("nan", "inf") when not finite: a broken value stays visible."""
    x = float(x)
    return x if x == x and abs(x) != float("inf") else str(x)


def grad_errors(grad: torch.Tensor, ref: torch.Tensor) -> dict:
    """max |g - ref| / max |ref| and ||g - ref|| / ||ref||, in fp32."""
    diff = grad.float() - ref
    return {"max_err": _number(diff.abs().max() / ref.abs().max()),
            "norm_err": _number(torch.linalg.vector_norm(diff) / torch.linalg.vector_norm(ref))}


def accuracy(outputs: tuple, ref: tuple) -> dict:
    """The loss of one call against the reference; with gradients, theirs too."""
    loss = outputs[0].detach()
    out = {"loss": _number(loss), "loss_dtype": str(loss.dtype).removeprefix("torch."),
           "loss_rel_err": _number(abs(float(loss) - float(ref[0])) / abs(float(ref[0])))}
    if len(outputs) == 3:
        out["grad_hidden"] = grad_errors(outputs[1], ref[1])
        out["grad_weight"] = grad_errors(outputs[2], ref[2])
    return out


def _sync():
    if mode.gpu_available():
        torch.cuda.synchronize()


def peak_call(call, on_gpu: bool):
    """(call()'s outputs, the peak bytes allocated during it above those allocated before; None on a CPU)."""
    if not on_gpu:
        return call(), None
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    outputs = call()
    torch.cuda.synchronize()
    return outputs, torch.cuda.max_memory_allocated() - before


def measure(entry: dict, name: str, fn, inputs, ref: tuple, on_gpu: bool) -> None:
    """Each phase of contender ``fn``: a first call (wall time, compiles included, in
    ``entry["first_call_s"][name]``), one call for the accuracy and the peak memory, then do_bench, into
    ``entry[phase][name]``. A failed phase is recorded in ``entry["errors"][name]`` and the run goes on."""
    hidden, weight, targets = inputs
    hidden_leaf, weight_leaf = hidden.detach().requires_grad_(), weight.detach().requires_grad_()

    def forward():
        with torch.no_grad():
            return (fn(hidden, weight, targets),)

    def forward_backward():
        hidden_leaf.grad = weight_leaf.grad = None
        loss = fn(hidden_leaf, weight_leaf, targets)
        loss.backward()
        return (loss, hidden_leaf.grad, weight_leaf.grad)

    failed = []
    phases = (("fwd", forward), ("fwd_bwd", forward_backward))
    for phase, call in phases[1:] if fwd_bwd_only(name) else phases:
        try:
            began = time.perf_counter()
            call()
            _sync()
            entry["first_call_s"].setdefault(name, {})[phase] = round(time.perf_counter() - began, 3)
            outputs, peak = peak_call(call, on_gpu)
            checked = accuracy(outputs, ref)
            del outputs
            stats = eager_time_us(call, warmup_ms=WARMUP_MS, rep_ms=REP_MS)
            entry[phase][name] = {**stats, "tflops": entry[f"flops_{phase}"] / (stats["median_us"] * 1e6),
                                  "peak_bytes": peak, **checked}
        except Exception as error:  # recorded, not hidden
            failed.append(f"{phase}: {error!r}"[:300])
            print(f"    {name} {phase} failed: {error!r}"[:300], flush=True)
            if on_gpu:
                torch.cuda.empty_cache()
    if failed:
        entry["errors"][name] = "; ".join(failed)


def _gpu_only(device, what: str):
    if device != "cuda":
        raise RuntimeError(f"{what} runs on a CUDA GPU only (not under the Triton interpreter)")


def hf_loss(hidden, weight, targets):
    """Qwen3ForCausalLM's lm_head, then HF's ForCausalLMLoss on already-shifted targets (fp32 logits, mean)."""
    return ForCausalLMLoss(F.linear(hidden, weight), None, weight.shape[0], ignore_index=IGNORE_INDEX,
                           shift_labels=targets)


def liger_loss():
    """Liger's functional fused linear cross-entropy, its defaults (accum_dtype=None, chunk_mem_const=1)."""
    from liger_kernel.transformers.functional import liger_fused_linear_cross_entropy

    return lambda hidden, weight, targets: liger_fused_linear_cross_entropy(hidden, weight, targets,
                                                                            ignore_index=IGNORE_INDEX)


def cce_loss():
    """Cut Cross-Entropy's linear_cross_entropy, its defaults (impl "cce", filter_eps "high")."""
    from cut_cross_entropy import linear_cross_entropy as cce

    return lambda hidden, weight, targets: cce(hidden, weight, targets, ignore_index=IGNORE_INDEX,
                                               reduction="mean")


def torch_options():
    """torch's ``LinearCrossEntropyOptions()`` (its chunked path), or None where torch has no such class."""
    options = getattr(torch.nn, "LinearCrossEntropyOptions", None)
    return None if options is None else options()


def torch_chunked_loss():
    """``torch.nn.functional.linear_cross_entropy`` with ``options=LinearCrossEntropyOptions()``."""
    fn = getattr(F, "linear_cross_entropy", None)
    if fn is None:
        raise RuntimeError(f"torch {torch.__version__} has no torch.nn.functional.linear_cross_entropy")
    options = torch_options()
    if options is None:
        raise RuntimeError(f"torch {torch.__version__} has no torch.nn.LinearCrossEntropyOptions (no chunked path)")
    return lambda hidden, weight, targets: fn(hidden, weight, targets, ignore_index=IGNORE_INDEX, options=options)


def ours_loss(config: CrossEntropyConfig | None, check_targets: bool = True):
    return lambda hidden, weight, targets: linear_cross_entropy(hidden, weight, targets, ignore_index=IGNORE_INDEX,
                                                                config=config, check_targets=check_targets)


def contenders(names, shape: dict, device, skipped: dict) -> dict:
    """``id -> fn(hidden, weight, targets) -> loss`` for the contenders ``names`` at one shape; what cannot
    run here goes in ``skipped`` with the reason."""
    default = launch_config(shape["tokens"], shape["hidden"], ELEM, torch.device(device))

    def on_gpu(what, build):
        def checked():
            _gpu_only(device, what)
            return build()
        return checked

    def cce():
        fn = cce_loss()  # the import first: "not installed" is the reason where it is not
        _gpu_only(device, "Cut Cross-Entropy")
        return fn

    builds = {
        "hf_eager": lambda: hf_loss,
        "compile": on_gpu("torch.compile (Inductor)", lambda: compiled(hf_loss, device)),
        "liger": on_gpu("Liger's Triton code", liger_loss),
        "liger_compile": on_gpu("torch.compile of Liger's Triton code", lambda: compiled(liger_loss(), device)),
        "cce": cce,
        "torch_chunked": torch_chunked_loss,
        "ours": lambda: ours_loss(None),
        "ours_compile": on_gpu("torch.compile (Inductor)", lambda: compiled(ours_loss(None), device)),
        "ours_unchecked": lambda: ours_loss(None, check_targets=False),
    }
    out = {}
    for name in names:
        if sweep_chunk(name) is not None:
            config = dataclasses.replace(default, chunk_tokens=sweep_chunk(name))
            build = lambda config=config: ours_loss(config)  # noqa: E731
        else:
            build = builds[name]
        fn = optional_contender(name, skipped, build)
        if fn is not None:
            out[name] = fn
    return out


def versions() -> dict:
    """The installed versions of what the contenders run (None: not installed)."""
    out = {"torch": torch.__version__, "triton": triton.__version__}
    for key, dist in (("transformers", "transformers"), ("liger_kernel", "liger-kernel"),
                      ("cut_cross_entropy", "cut-cross-entropy")):
        try:
            out[key] = importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            out[key] = None
    return out


def gemm_floor(inputs) -> dict:
    """The three full-size GEMMs every contender must do (logits = hidden @ W^T, d_hidden = d_logits @ W,
    d_W = d_logits^T @ hidden; N x V x H each), timed alone on this shape like the contenders (eager_time_us):
    their summed medians are the op's GEMM floor, ``tflops`` the rate they reach."""
    hidden, weight, _ = inputs
    logits = hidden @ weight.t()
    gemms = {"logits": lambda: hidden @ weight.t(), "d_hidden": lambda: logits @ weight,
             "d_weight": lambda: logits.t() @ hidden}
    out = {name: eager_time_us(fn, warmup_ms=WARMUP_MS, rep_ms=REP_MS)["median_us"] for name, fn in gemms.items()}
    flops = 3 * 2 * hidden.shape[0] * hidden.shape[1] * weight.shape[0]
    out["total_us"] = sum(out.values())
    out["tflops"] = flops / (out["total_us"] * 1e6)
    return out


def measure_shape(shape: dict, names, device, on_gpu: bool, skipped: dict, seed: int) -> dict:
    """One shape's entry: its counts, configs, reference and every contender's phases."""
    start = time.perf_counter()
    inputs = make_inputs(shape, device, seed)
    info, ref = reference(*inputs)
    default = launch_config(shape["tokens"], shape["hidden"], ELEM, torch.device(device))
    entry = {"label": shape["label"], "models": shape["models"], "shape": shape, **loss_counts(shape),
             "ours_config": dataclasses.asdict(default),
             "liger_chunk_tokens": liger_chunk_tokens(shape["tokens"], shape["hidden"], shape["vocab"]),
             "reference": info, "fwd": {}, "fwd_bwd": {}, "errors": {}, "first_call_s": {}}
    for name, fn in contenders(names, shape, device, skipped).items():
        measure(entry, name, fn, inputs, ref, on_gpu)
    entry["compiles"] = {"dynamo_graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"]}
    if on_gpu:
        entry["gemm_floor"] = gemm_floor(inputs)
    entry["wall_s"] = round(time.perf_counter() - start, 2)
    return entry


def run(args) -> dict:
    quick, on_gpu, _, device, _ = mode.gpu_or_quick(args, NAME, "quick", "shapes")
    names = selected_contenders(quick)
    budget_s = float(os.environ.get("BENCH_LOSS_BUDGET_S", BUDGET_S))
    results = {"shapes": [], "skipped": {}, "not_run": {}}
    began = time.perf_counter()
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        for index, shape in enumerate(selected_shapes(quick)):
            elapsed = time.perf_counter() - began
            if elapsed > budget_s:
                results["not_run"][shape["label"]] = f"budget: {elapsed:.0f} s of {budget_s:.0f} s spent"
                continue
            print(f"  {shape['label']} ({shape['models'] or 'quick'})", flush=True)
            entry = measure_shape(shape, names, device, on_gpu, results["skipped"], seed=1000 + index)
            results["shapes"].append(entry)
            print(f"  {shape['label']}: {entry['wall_s']:.1f} s (total {time.perf_counter() - began:.0f} s)"
                  + "".join(f"; {n} failed" for n in entry["errors"]), flush=True)
            if on_gpu:
                torch.cuda.empty_cache()
    first = (QUICK_SHAPES if quick else SHAPES)[0]
    config = {"dtype": "bfloat16", **{key: first[key] for key in ("tokens", "batch", "seq", "vocab")},
              "ignore_index": IGNORE_INDEX, "labels": LABELS, "logit_std": LOGIT_STD,
              "contenders": names, "peers": list(PEERS), "gpu_only": list(GPU_ONLY), "ours": "ours",
              "ours_variants": list(OURS_VARIANTS),
              "baseline": "hf_eager", "tie_rule": "fusion_2pct",
              "chunk_sweep": list(QUICK_CHUNK_SWEEP if quick else CHUNK_SWEEP),
              "torch_chunked_options": repr(torch_options()), "reference": REFERENCE,
              "budget_s": budget_s, "versions": versions(),
              "timer": (f"eager calls, triton.testing.do_bench (L2 flushed before each call; warmup {WARMUP_MS} ms, "
                        f"rep {REP_MS} ms), not CUDA graphs: Liger's backward calls torch.equal (a host sync) that "
                        "a graph cannot capture; fwd under no_grad, fwd_bwd through torch.autograd.grad of hidden "
                        "and weight; peak memory: torch.cuda.max_memory_allocated above the bytes allocated before "
                        "the call, outputs included")}
    return {"config": config, "results": results}
