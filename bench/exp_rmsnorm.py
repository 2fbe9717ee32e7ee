"""RMSNorm microbenchmark: every contender side by side, forward and forward+backward.

    python -m bench.run_all rmsnorm          # on a GPU; writes docs/data/<gpu>/rmsnorm.json
    python -m bench.exp_rmsnorm              # same, printing the ratio table

Contenders: HF eager Qwen3RMSNorm, torch.nn.functional.rms_norm (fused in
PyTorch >= 2.11), torch.compile(HF module), Liger-Kernel's LigerRMSNorm
(in_place=False: its default writes dX into dY), the naive one-row-per-program
kernel (篇2 §四/§五) and this project's kernel. bf16 throughout.

Bytes counted are the minimum: forward reads x and writes y; backward reads x
and dy and writes dx; so forward+backward is 5 * rows * H * 2 bytes.
"""
from __future__ import annotations

import argparse
import contextlib
import sys

from bench import common

NAME = "rmsnorm"
SHAPES = [  # (label, rows, width, dy layout)
    ("H=1024", 16384, 1024, "contiguous"),
    ("H=2048", 16384, 2048, "contiguous"),
    ("H=2560", 16384, 2560, "contiguous"),
    ("H=4096", 16384, 4096, "contiguous"),
    ("H=5120", 16384, 5120, "contiguous"),
    ("q_norm 524288x128", 16384 * 32, 128, "contiguous"),
    ("k_norm 131072x128", 16384 * 8, 128, "contiguous"),
    ("q_norm, dy transposed", 16384 * 32, 128, "heads_transposed"),
]
QUICK_SHAPES = [("H=256", 64, 256, "contiguous"), ("q 64x128", 64, 128, "heads_transposed")]
CONTENDERS = ["hf", "torch_rms_norm", "compile_hf", "liger", "naive", "triton"]
LABELS = {
    "hf": "HF eager",
    "torch_rms_norm": "F.rms_norm",
    "compile_hf": "compile(HF)",
    "liger": "Liger",
    "naive": "naive Triton",
    "triton": "this kernel",
}
EPS = 1e-6


def _make_contenders(width, dtype, device):
    """name -> (forward_fn(x) -> y, parameters) for one width."""
    import torch
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    from rmsnorm_naive_autograd import naive_rms_norm
    from rmsnorm_triton import rms_norm

    weight = torch.nn.Parameter((torch.rand(width, device=device) + 0.5).to(dtype))
    hf = Qwen3RMSNorm(width, eps=EPS).to(device=device, dtype=dtype)
    hf.weight = weight
    contenders = {
        "hf": (hf, weight),
        "torch_rms_norm": (lambda x: torch.nn.functional.rms_norm(x, (width,), weight, EPS), weight),
        "naive": (lambda x: naive_rms_norm(x, weight, EPS), weight),
        "triton": (lambda x: rms_norm(x, weight, EPS), weight),
    }
    if device == "cuda":  # pragma: gpu only
        torch._dynamo.reset()
        contenders["compile_hf"] = (torch.compile(hf, dynamic=False), weight)
        try:
            from liger_kernel.transformers import LigerRMSNorm

            liger = LigerRMSNorm(width, eps=EPS, casting_mode="llama", in_place=False).to(device=device, dtype=dtype)
            liger.weight = weight
            contenders["liger"] = (liger, weight)
        except ImportError as error:
            print(f"liger-kernel not importable ({error}); skipped", file=sys.stderr)
    return contenders


def _bench(fn, quick, grad_to_none=None):
    """Eager timing: do_bench median per call, L2 flushed in between (host overhead included)."""
    import torch

    if quick:  # CPU smoke test: one call, wall clock
        import time

        start = time.perf_counter()
        fn()
        return {"median_us": (time.perf_counter() - start) * 1e6, "p20_us": None, "p80_us": None}
    import triton.testing

    p50, p20, p80 = triton.testing.do_bench(fn, warmup=50, rep=300, quantiles=[0.5, 0.2, 0.8], grad_to_none=grad_to_none)
    torch.cuda.synchronize()
    return {"median_us": p50 * 1e3, "p20_us": p20 * 1e3, "p80_us": p80 * 1e3}


def _graph_bench(fns, quick):
    """GPU time per call from CUDA-graph replays over rotating input sets."""
    if quick:
        return _bench(fns[0], quick)
    return common.cuda_graph_time_us(fns)


def _inputs(rows, width, layout, dtype, device, seed):
    import torch

    gen = torch.Generator(device=device).manual_seed(seed)
    x = torch.randn(rows, width, device=device, dtype=torch.float32, generator=gen).to(dtype)
    if layout == "heads_transposed":  # dy as q_norm receives it: (B, T, heads, D) view of (B, heads, T, D)
        heads = 32 if rows >= 32 * 64 else 2
        batch = 4 if rows >= 4 * heads else 1
        seq = rows // (batch * heads)
        dy = torch.randn(batch, heads, seq, width, device=device, generator=gen).to(dtype).transpose(1, 2)
        x = x.view(batch, seq, heads, width)
    else:
        dy = torch.randn(rows, width, device=device, generator=gen).to(dtype)
    return x, dy


def copy_bandwidth(nbytes, device, quick):
    """GB/s of a device-to-device copy moving ``nbytes`` in all (half read, half written).

    Timed like the contenders (CUDA-graph replay) and, as ``eager``, with do_bench on
    eager calls: inside a graph a multi-GiB copy runs slower on the H200 than eagerly.
    """
    import torch

    src = torch.randn(nbytes // 8, device=device)
    dst = torch.empty_like(src)
    stats = _graph_bench([lambda: dst.copy_(src)], quick)  # timed like the contenders
    stats["gbps"] = (2 * src.numel() * 4) / (stats["median_us"] * 1e3)
    eager = _bench(lambda: dst.copy_(src), quick)
    stats["eager"] = eager | {"gbps": (2 * src.numel() * 4) / (eager["median_us"] * 1e3)}
    return stats


def run(args) -> dict:
    import torch

    quick = getattr(args, "quick", False)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16
    shapes = QUICK_SHAPES if quick else SHAPES
    copy_bytes = (64 if quick else 4096) * 2**20
    results = {"copy": {**copy_bandwidth(copy_bytes, device, quick), "bytes": copy_bytes}, "shapes": []}
    for index, (label, rows, width, layout) in enumerate(shapes):
        print(f"  {label}", flush=True)
        bytes_fwd_bwd = 5 * rows * width * 2
        n_sets = 1 if quick else min(8, max(2, -(-4 * 60 * 2**20 // bytes_fwd_bwd)))  # >= 4x L2 per cycle
        sets = [_inputs(rows, width, layout, dtype, device, seed=100 * index + k) for k in range(n_sets)]
        entry = {"label": label, "rows": rows, "width": width, "dy_layout": layout, "input_sets": n_sets,
                 "bytes_fwd": 2 * rows * width * 2, "bytes_fwd_bwd": bytes_fwd_bwd,
                 "copy_same_bytes": copy_bandwidth(2 * rows * width * 2, device, quick),
                 "fwd": {}, "fwd_bwd": {}, "fwd_eager": {}, "fwd_bwd_eager": {}, "errors": {}}
        for name, (fn, weight) in _make_contenders(width, dtype, device).items():
            leaves = [x.detach().clone().requires_grad_() for x, _ in sets]

            def forward(k, fn=fn):
                with torch.no_grad():
                    fn(sets[k][0])

            def forward_backward(k, fn=fn, weight=weight, leaves=leaves):
                leaves[k].grad = None
                weight.grad = None
                fn(leaves[k]).backward(sets[k][1])

            try:
                entry["fwd_eager"][name] = _bench(lambda: forward(0), quick)
                entry["fwd_bwd_eager"][name] = _bench(lambda: forward_backward(0), quick)
                entry["fwd"][name] = _graph_bench([lambda k=k: forward(k) for k in range(n_sets)], quick)
                entry["fwd_bwd"][name] = _graph_bench([lambda k=k: forward_backward(k) for k in range(n_sets)], quick)
            except Exception as error:  # recorded, not hidden: the table shows a dash
                entry["errors"][name] = repr(error)[:300]
                print(f"    {name} failed: {error!r}"[:300], flush=True)
                for phase in ("fwd", "fwd_bwd", "fwd_eager", "fwd_bwd_eager"):
                    entry[phase].pop(name, None)
            for _, dy in sets:
                assert bool(torch.isfinite(dy).all()), f"{name} modified grad_output"
        for phase, nbytes in (("fwd", entry["bytes_fwd"]), ("fwd_bwd", entry["bytes_fwd_bwd"]),
                              ("fwd_eager", entry["bytes_fwd"]), ("fwd_bwd_eager", entry["bytes_fwd_bwd"])):
            for stats in entry[phase].values():
                stats["gbps"] = nbytes / (stats["median_us"] * 1e3)
        results["shapes"].append(entry)
        del sets
        if device == "cuda":
            torch.cuda.empty_cache()
    results["rstd"] = rstd_choice(device, dtype, quick)
    config = {"dtype": "bfloat16", "eps": EPS, "shapes": [list(s) for s in shapes], "contenders": CONTENDERS,
              "timer": ("fwd/fwd_bwd: median GPU time per call from CUDA-graph replays cycling over input sets "
                        ">= 4x L2; *_eager: triton.testing.do_bench median per eager call (host overhead "
                        "included), warmup=50 ms, rep=300 ms, L2 flushed between runs"),
              "liger_in_place": False}
    return {"config": config, "results": results}


def rstd_choice(device, dtype, quick):
    """Backward time with the saved rstd vs recomputing it in the backward kernel."""
    import torch

    from rmsnorm_triton import rms_norm_backward, rms_norm_forward

    out = []
    widths = [(64, 128), (64, 256)] if quick else [(16384 * 32, 128), (16384, 1024), (16384, 4096)]
    for rows, width in widths:
        sets = [_inputs(rows, width, "contiguous", dtype, device, seed=99 + k) for k in range(1 if quick else 3)]
        w = (torch.rand(width, device=device) + 0.5).to(dtype)
        rstds = [rms_norm_forward(x, w, EPS)[1] for x, _ in sets]
        saved = _graph_bench([lambda k=k: rms_norm_backward(sets[k][1], sets[k][0], w, rstds[k])
                              for k in range(len(sets))], quick)
        recomputed = _graph_bench([lambda k=k: rms_norm_backward(sets[k][1], sets[k][0], w, None, eps=EPS)
                                   for k in range(len(sets))], quick)
        out.append({"rows": rows, "width": width, "saved_us": saved["median_us"],
                    "recomputed_us": recomputed["median_us"], "rstd_bytes": rows * 4,
                    "bwd_bytes": 3 * rows * width * 2})
    return out


# ---------------------------------------------------------------- rendering

def copy_ceiling(res) -> dict:
    """The fastest device-to-device copy of the run, however it was timed.

    Candidates: the 4 GiB copy inside a CUDA graph (only ~2.7 TB/s on the H200 at commit
    aeb7b6f), the same 4 GiB copy timed eagerly (~4.2 TB/s), and the copy of each shape's
    forward bytes inside a CUDA graph (67-336 MB, 3.4-4.2 TB/s). The ceiling is the best
    copy actually measured, so every percentage is against the best the card showed.
    """
    graph_timed = "calls_per_graph" in res["copy"]
    large = {"gbps": res["copy"]["gbps"], "bytes": res["copy"]["bytes"],
             "timer": "CUDA graph" if graph_timed else "eager"}
    copies = [large]
    if "eager" in res["copy"]:
        copies.append({"gbps": res["copy"]["eager"]["gbps"], "bytes": res["copy"]["bytes"], "timer": "eager"})
    copies += [{"gbps": s["copy_same_bytes"]["gbps"], "bytes": s["bytes_fwd"], "timer": "CUDA graph"}
               for s in res["shapes"] if graph_timed and "calls_per_graph" in s["copy_same_bytes"]]
    best = max(copies, key=lambda c: c["gbps"])
    return best | {"large_copy_gbps": large["gbps"], "large_copy_bytes": large["bytes"], "large_copy_timer": large["timer"]}


def _size(nbytes):
    return f"{nbytes / 2**30:.0f} GiB" if nbytes >= 2**30 else f"{nbytes / 1e6:.0f} MB"


def _table(data, phase):
    res = data["results"]
    ceiling = copy_ceiling(res)
    copy = ceiling["gbps"]
    names = [n for n in CONTENDERS if any(n in s[phase] for s in res["shapes"])]
    headers = ["shape"] + [LABELS[n] for n in names] + ["GB/s (ours)", "% of copy"]
    # Only comparable when the copy was timed the same way (CUDA graph) as the kernels.
    same_size = phase == "fwd" and all("calls_per_graph" in x["copy_same_bytes"] for x in res["shapes"])
    headers += ["% of same-size copy"] if same_size else []
    headers += ["best peer ÷ ours"]
    rows = []
    for s in res["shapes"]:
        ours = s[phase]["triton"]
        peers = {n: v["median_us"] for n, v in s[phase].items() if n not in ("triton", "naive")}
        best_name = min(peers, key=peers.get)
        row = [s["label"]] + [common.fmt(s[phase][n]["median_us"]) if n in s[phase] else "—" for n in names]
        row += [f"{ours['gbps']:,.0f}", f"{100 * ours['gbps'] / copy:.0f}%"]
        if same_size:  # a copy of x moves exactly the forward's bytes
            row += [f"{100 * ours['gbps'] / s['copy_same_bytes']['gbps']:.0f}%"]
        row += [f"{peers[best_name] / ours['median_us']:.2f}× ({LABELS[best_name]})"]
        rows.append(row)
    if ceiling["gbps"] == ceiling["large_copy_gbps"]:
        copy_text = f"a device-to-device copy moving {_size(ceiling['bytes'])} ran at {copy:,.0f} GB/s (read + write)"
    else:
        timer = "timed eagerly" if ceiling["timer"] == "eager" else "timed like the kernels"
        copy_text = (f"the fastest device-to-device copy of this run, {_size(ceiling['bytes'])} {timer}, at "
                     f"{copy:,.0f} GB/s (read + write); the {_size(ceiling['large_copy_bytes'])} copy reached "
                     f"only {ceiling['large_copy_gbps']:,.0f} GB/s inside a CUDA graph")
    copy_line = (f"*Times in µs per call. Copy ceiling: {copy_text}. Bytes counted: "
                 + ("read x + write y." if phase == "fwd" else "forward (read x, write y) + backward (read x, dy; write dx).")
                 + " GPU time per call: median of CUDA-graph replays over rotating input sets (no L2 reuse, no host"
                " overhead), bf16.*")
    return common.md_table(headers, rows) + "\n" + copy_line + "\n\n" + common.env_line(data["environment"]) + "\n"


def _eager_table(data):
    res = data["results"]
    names = [n for n in CONTENDERS if any(n in s["fwd_bwd_eager"] for s in res["shapes"])]
    headers = ["shape"] + [LABELS[n] for n in names]
    rows = []
    for s in res["shapes"]:
        rows.append([s["label"]] + [common.fmt(s["fwd_bwd_eager"][n]["median_us"]) if n in s["fwd_bwd_eager"] else "—"
                                    for n in names])
    note = ("*Forward + backward per eager call in µs (do_bench median, L2 flushed): "
            "GPU time plus whatever the host adds (Python, autograd, launches) when it is the slower side.*")
    return common.md_table(headers, rows) + "\n" + note + "\n\n" + common.env_line(data["environment"]) + "\n"


def _short_label(shape):
    """Axis label: the hidden size, or q/k plus the transposed-dy marker for 128-wide rows."""
    if shape["width"] != 128:
        return f"H={shape['width']}"
    kind = "q_norm" if shape["rows"] >= 16384 * 32 else "k_norm"
    return kind + (" (dyᵀ)" if shape["dy_layout"] == "heads_transposed" else "")


def _bandwidth_plot(data):
    plt = common.plot_style()
    res = data["results"]
    shapes = [s for s in res["shapes"]]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    names = [n for n in CONTENDERS if any(n in s["fwd"] for s in shapes)]
    width = 0.8 / len(names)
    for ax, phase, title in ((axes[0], "fwd", "forward"), (axes[1], "fwd_bwd", "forward + backward")):
        for i, name in enumerate(names):
            values = [s[phase][name]["gbps"] if name in s[phase] else 0 for s in shapes]
            ax.bar([k + (i - (len(names) - 1) / 2) * width for k in range(len(shapes))], values, width,
                   label=LABELS[name], color=common.SERIES_COLORS[i % len(common.SERIES_COLORS)])
        ceiling = copy_ceiling(res)["gbps"]
        ax.axhline(ceiling, color="#D98F92", linestyle="--", linewidth=1.2)
        ax.text(len(shapes) - 0.5, ceiling, " copy", va="bottom", ha="right", color="#D98F92")
        ax.set_xticks(range(len(shapes)), [_short_label(s) for s in shapes], fontsize=8, rotation=30, ha="right")
        ax.set_title(f"RMSNorm {title}, bf16")
    axes[0].set_ylabel("effective bandwidth (GB/s, minimum bytes)")
    axes[1].legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    gpu = data["environment"].get("gpu") or "CPU"
    fig.suptitle(f"{gpu}: higher is better", fontsize=9)
    return common.svg_of(fig)


def _rstd_table(data):
    rows = []
    for r in data["results"]["rstd"]:
        rows.append([f"{r['rows']}×{r['width']}", common.fmt(r["saved_us"]), common.fmt(r["recomputed_us"]),
                     f"{r['recomputed_us'] / r['saved_us']:.2f}×", f"{r['rstd_bytes'] / 2**20:.2f} MiB"])
    headers = ["backward shape", "saved rstd µs", "recomputed rstd µs", "recompute / saved", "rstd memory"]
    return common.md_table(headers, rows) + "\n" + common.env_line(data["environment"]) + "\n"


def render(data: dict) -> dict[str, str]:
    return {
        "rmsnorm_fwd.md": _table(data, "fwd"),
        "rmsnorm_fwdbwd.md": _table(data, "fwd_bwd"),
        "rmsnorm_rstd.md": _rstd_table(data),
        "rmsnorm_eager.md": _eager_table(data),
        "rmsnorm_bandwidth.svg": _bandwidth_plot(data),
    }


def print_summary(payload):
    res = payload["results"]
    copy = copy_ceiling(res)["gbps"]
    print(f"copy ceiling: {copy:,.0f} GB/s (4 GiB copy: {res['copy']['gbps']:,.0f} GB/s in a CUDA graph, "
          f"{res['copy']['eager']['gbps']:,.0f} GB/s eager)")
    for phase in ("fwd", "fwd_bwd", "fwd_eager", "fwd_bwd_eager"):
        print(f"\n{phase}: µs (GB/s, % copy)")
        for s in res["shapes"]:
            cells = [f"{n}={v['median_us']:.1f} ({v['gbps']:.0f}, {100 * v['gbps'] / copy:.0f}%)" for n, v in s[phase].items()]
            ours = s[phase]["triton"]["median_us"]
            ratios = " ".join(f"{n}/{'ours'}={v['median_us'] / ours:.2f}" for n, v in s[phase].items() if n != "triton")
            print(f"  {s['label']:<24} " + "  ".join(cells) + f"\n  {'':<24} ratios: {ratios}")
    for r in res["rstd"]:
        print(f"rstd {r['rows']}x{r['width']}: saved {r['saved_us']:.1f} µs, recomputed {r['recomputed_us']:.1f} µs")


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    payload = run(parser.parse_args())
    print_summary(payload)
    with contextlib.suppress(Exception):
        print(common.save(NAME, payload))
