"""Residual add + RMSNorm, op level, at Qwen3's hidden sizes: fused kernels side by side.

    python -m bench.run_all fused_add        # on a GPU -> docs/data/<gpu>/fused_add.json

Every contender computes ``s = residual + x`` and ``y = RMSNorm(s)`` and returns (y, s):

* ``triton``: this project's ``fused_add_rms_norm`` (snippets/rmsnorm_fused_add.py), one kernel each way;
* ``unfused``: a torch add, then this project's plain ``rms_norm``: the baseline the fusion removes;
* ``compile_hf``: ``torch.compile`` of HF's add + Qwen3RMSNorm (one static graph per width);
* ``liger``: Liger's ``LigerFusedAddRMSNormFunction`` (casting mode llama, in_place=False: the
  functional form's default in_place=True writes dX into the dy buffer, which the graphs reuse);
* ``quack``: quack's ``rmsnorm(x, w, residual=r, prenorm=True)``, which returns (out, residual_out)
  only with prenorm=True; it adds and normalizes in fp32 without rounding s first (not HF's order).

A contender that cannot run here is in ``results["skipped"]`` with the reason; an error at one
width goes in that width's ``errors``.

The backward receives both gradients, dy for y and ds for s (s is the next layer's residual), and
``torch.autograd.grad`` returns the gradients of x, residual and w: no ``.grad`` accumulation,
so no contender pays for a copy of the shared dx.

Bytes, the minimum (``harness.op_timing.min_bytes(R, H, fwd_io=4, bwd_io=4)``) for R rows of H bf16:
forward reads x and r and writes s and y, 4*R*H*2, plus w read; backward reads dy, ds and s (x_hat
is recomputed from s and the saved rstd, 4 bytes per row, not counted) and writes dx, 4*R*H*2, which
is also the residual's gradient, plus w read and dW written. Unfused the same work moves
3 + 2 tensors forward and 3 + 3 (norm) + 2 (ds add) backward.
"""
from __future__ import annotations

import argparse
import contextlib

import torch

from bench import common, prose
from bench.exp_rmsnorm import _ceiling_text, bandwidth_bars, compare_sentence, copy_ceiling, fastest_peer, rows_caption
from bench.harness import mode, record
from bench.harness.contenders import fused_add_contenders
from bench.harness.op_timing import add_gbps, fused_add_inputs, large_copy, min_bytes, shape_entry, time_fused_add
from bench.harness.shapes import BENCH_TOKENS, RMSNORM_SHAPES

NAME = "fused_add"
SHAPES = [RMSNORM_SHAPES[name] for name in RMSNORM_SHAPES if name.startswith("H=")]  # 16384 x 1024 ... 5120
QUICK_SHAPES = [(16, 256), (16, 1000)]
CONTENDERS = ["unfused", "compile_hf", "liger", "quack", "triton"]
PEERS = CONTENDERS[:-1]
ZH = {"triton": "融合版", "unfused": "生产版 + torch 加法", "compile_hf": "torch.compile(HF)", "liger": "Liger",
      "quack": "quack"}
PHASE_ZH = {"fwd": "forward", "fwd_bwd": "forward + backward"}
DTYPE = torch.bfloat16
EPS = 1e-6
BYTES = {"fwd_io": 4, "bwd_io": 4}
# Passes over the R x H values (the docstring above): fused forward reads x, r and writes s, y;
# unfused the add reads x, r, writes s, then the norm reads s, writes y. Backward: fused reads
# dy, ds, s, writes dx; unfused the norm reads dy, s, writes its dx, then autograd adds ds to it.
PASSES = {"fused": {"fwd": 4, "fwd_bwd": 8}, "unfused": {"fwd": 5, "fwd_bwd": 11}}


def run(args) -> dict:
    quick, on_gpu, shapes, device, _ = mode.gpu_or_quick(args, NAME, QUICK_SHAPES, SHAPES)
    results = {"copy": large_copy(quick, device), "shapes": [], "skipped": {}}
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        for index, (rows, width) in enumerate(shapes):
            print(f"  H={width}", flush=True)
            nbytes = min_bytes(rows, width, **BYTES)
            n_sets = 1 if quick else mode.rotating_input_sets(nbytes["fwd_bwd"], device)
            sets = fused_add_inputs(rows, width, DTYPE, device, n_sets, seed=100 * index)
            entry = shape_entry(f"H={width}", rows, width, nbytes, n_sets, nbytes["fwd"], device)
            built = fused_add_contenders(CONTENDERS_BUILT, width, DTYPE, device, results["skipped"], EPS)
            for name, (fn, weight) in built.items():
                time_fused_add(entry, "triton" if name == "triton_fused_add" else name, fn, weight, sets)
            add_gbps(entry)
            results["shapes"].append(entry)
            sets.clear()
            if on_gpu:
                torch.cuda.empty_cache()
    config = {"dtype": "bfloat16", "eps": EPS, "shapes": [list(s) for s in shapes], "contenders": CONTENDERS,
              "rows": BENCH_TOKENS if not quick else QUICK_SHAPES[0][0], "bytes": BYTES,
              "l2_bytes": mode.l2_cache_bytes(device), "liger_in_place": False, "quack_prenorm": True,
              "timer": "median GPU time per call from CUDA-graph replays cycling over input sets >= 4x L2"}
    return {"config": config, "results": results}


CONTENDERS_BUILT = [name if name != "triton" else "triton_fused_add" for name in CONTENDERS]


# ---------------------------------------------------------------- rendering

def vs_peers(data, phase) -> list[dict]:
    """Per shape: ours' time and share of the copy ceiling, each peer ÷ ours, the fastest peer."""
    res = data["results"]
    ceiling = copy_ceiling(res)["gbps"]
    out = []
    for s in res["shapes"]:
        times = s[phase]
        ours = times.get("triton")
        peers, best = fastest_peer(times, PEERS)
        out.append({"label": s["label"], "ours_us": ours["median_us"] if ours else None,
                    "of_copy": ours["gbps"] / ceiling if ours else None, "peer": best,
                    "peer_us": peers.get(best), "ratio": peers[best] / ours["median_us"] if ours and best else None,
                    "ratios": {n: us / ours["median_us"] if ours else None for n, us in peers.items()}})
    return out


def _takeaway(data, phase, rows) -> str:
    mine = [r for r in rows if r["ratio"] is not None]
    if not mine:
        why = data["results"].get("skipped", {}).get("triton") or "没有结果"
        return f"{PHASE_ZH[phase]}：融合版未测（{why}）。"
    text = (f"{PHASE_ZH[phase]}：融合版在 {len(mine)} 个形状上达到拷贝上限的 {prose.pct_span(r['of_copy'] for r in mine)}；"
            f"{compare_sentence(mine, subject='融合版', labels=ZH)}")
    unfused = [r["ratios"]["unfused"] for r in mine if r["ratios"].get("unfused")]
    if unfused:
        text += f"；不融合（生产版 RMSNorm + torch 加法）用时是融合版的 {prose.times_span(unfused)} 倍"
    return text + "。"


def _caption(data, phase) -> str:
    moved = ("读 x、r，写 s、y" if phase == "fwd"
             else "forward 读 x、r，写 s、y；backward 读 dy、ds、s，写 x 与 r 共同的梯度 dx")
    return (f"bf16，{rows_caption(data['results']['shapes'])}。时间为每次调用的 GPU 时间：CUDA graph 重放、轮换输入"
            f"（不复用 L2）的中位数。字节按最少计（{moved}）；拷贝上限为{_ceiling_text(data['results'])}。")


def _table(data, phase) -> str:
    rows = vs_peers(data, phase)
    f = common.fmt
    body = [[r["label"], f(r["ours_us"]), prose.pct(r["of_copy"]) if r["of_copy"] is not None else "—",
             ZH.get(r["peer"], "—"), f(r["peer_us"]), prose.times(r["ratio"]) if r["ratio"] else "—"] for r in rows]
    table = common.md_table(["形状", "融合版（µs）", "占拷贝上限", "最快的对手", "对手（µs）", "对手 ÷ 融合版"], body, "lrrlrr")
    return prose.page(table, _caption(data, phase), _takeaway(data, phase, rows))


def _ratio_table(data) -> str:
    """Each peer ÷ ours, forward and forward + backward in one cell: 'fwd / fwd+bwd'."""
    fwd, both = vs_peers(data, "fwd"), vs_peers(data, "fwd_bwd")
    names = [n for n in PEERS if any(n in r["ratios"] for r in fwd + both)]

    def cell(a, b, n):
        values = [r["ratios"].get(n) for r in (a, b)]
        return " / ".join(f"{v:.2f}×" if v else "—" for v in values)

    body = [[a["label"]] + [cell(a, b, n) for n in names] for a, b in zip(fwd, both)]
    table = common.md_table(["形状"] + [f"{ZH[n]} ÷ 融合版" for n in names], body)
    return prose.page(table, "每格为 forward / forward + backward 的用时之比，大于 1 表示融合版更快；"
                             f"bf16，{rows_caption(data['results']['shapes'])}，CUDA graph 重放的 GPU 时间中位数。")


def byte_bound(phase: str) -> float:
    """How much faster the fusion can make a copy-bound add + norm: unfused passes ÷ fused passes."""
    return PASSES["unfused"][phase] / PASSES["fused"][phase]


def gain_parts(data) -> list[str]:
    """The fusion's own gain at op level, per phase: fused vs unfused (a torch add, then the same norm kernels),
    against the bound that the bytes set; then the fused kernels against the fastest peer, forward + backward."""
    parts = []
    for phase in ("fwd", "fwd_bwd"):
        rows = [{"label": r["label"], "ratio": r["ratios"]["unfused"]} for r in vs_peers(data, phase)
                if r["ratios"].get("unfused")]
        if not rows:
            why = data["results"].get("skipped", {}).get("triton") or "没有结果"
            parts.append(f"{PHASE_ZH[phase]}：融合版或不融合的一方未测（{why}）")
            continue
        parts.append(prose.glue(PHASE_ZH[phase], f"按字节最多快到 {prose.times(byte_bound(phase))}，实测")
                     + compare_sentence(rows, subject="融合版", other="不融合"))
    best = [r for r in vs_peers(data, "fwd_bwd") if r["ratio"] is not None]
    if best:
        parts.append("与最快的对手相比，forward + backward " + compare_sentence(best, subject="融合版", labels=ZH))
    return parts


def render(data: dict) -> dict[str, str]:
    return {"fused_add_fwd.md": _table(data, "fwd"), "fused_add_fwdbwd.md": _table(data, "fwd_bwd"),
            "fused_add_ratios.md": _ratio_table(data),
            "fused_add_bandwidth.svg": bandwidth_bars(data, CONTENDERS, ZH, "残差加 + RMSNorm", figsize=(8, 6))}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    payload = run(parser.parse_args())
    for phase in ("fwd", "fwd_bwd"):
        print(_takeaway(payload, phase, vs_peers(payload, phase)))
    with contextlib.suppress(Exception):
        print(record.save(NAME, payload))
