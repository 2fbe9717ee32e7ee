"""fusion.json -> the 番外二 page's op-level tables: QK-norm + RoPE and SwiGLU, every contender side by side.

Per kernel and phase (forward, forward + backward) one table: a row per shape (the Qwen3 sizes that have it),
this site's kernel in µs with its share of the copy ceiling, and each peer's time ÷ ours (above 1: ours is
faster). The takeaway compares ours with the fastest peer under the run's tie rule (level within 2 %).
"""
from __future__ import annotations

from bench.report import prose, tables
from bench.report.names import OP_LABELS, PHASES, tie
from bench.report.ops import ceiling_text, compare_sentence, copy_ceiling, fastest_peer

NAME = "fusion"
TITLES = {"qk_rope": "QK-norm + RoPE", "swiglu": "SwiGLU"}
MOVED = {
    "qk_rope": {"fwd": "读 q、k、cos、sin，写旋转后的 q、k",
                "fwd_bwd": "forward 之外，backward 读两个输出梯度、q、k、cos、sin，写 dq、dk"},
    "swiglu": {"fwd": "读 gate、up，写 act", "fwd_bwd": "forward 之外，backward 读 gate、up、d_act，写 d_gate、d_up"},
}


def flat(res) -> dict:
    """The layout ops.copy_ceiling reads: every kernel's shapes in one list."""
    return {"copy": res["copy"], "shapes": [s for entries in res["kernels"].values() for s in entries]}


def peers(data, kernel) -> list[str]:
    spec = data["config"]["kernels"][kernel]
    return [c for c in spec["contenders"] if c != spec["ours"]]


def rows(data, kernel, phase) -> list[dict]:
    """Per shape: ours' µs and share of the copy ceiling, every peer's time ÷ ours, the fastest peer."""
    ours, ceiling = data["config"]["kernels"][kernel]["ours"], copy_ceiling(flat(data["results"]))["gbps"]
    out = []
    for s in data["results"]["kernels"][kernel]:
        times = s[phase]
        if ours not in times:
            continue
        mine = times[ours]["median_us"]
        times_of, best = fastest_peer(times, peers(data, kernel))
        out.append({"label": s["label"], "models": s["shape"].get("models", ""), "ours_us": mine,
                    "of_copy": times[ours]["gbps"] / ceiling, "ratios": {n: t / mine for n, t in times_of.items()},
                    "peer": best, "ratio": times_of[best] / mine if best else None})
    return out


def table(data, kernel, phase) -> str:
    body_rows = rows(data, kernel, phase)
    names = [n for n in peers(data, kernel) if any(n in r["ratios"] for r in body_rows)]
    f = tables.fmt
    body = [[f"{r['label']}（{r['models']}）" if r["models"] else r["label"],
             f"{f(r['ours_us'])}（{prose.pct(r['of_copy'])}）",
             *(prose.times(r["ratios"][n]) if n in r["ratios"] else "—" for n in names)] for r in body_rows]
    ours = OP_LABELS[data["config"]["kernels"][kernel]["ours"]]
    headers = ["形状（Qwen3）", f"{ours} µs（占拷贝上限）", *(f"{OP_LABELS[n]} ÷ 本站" for n in names)]
    table = tables.md_table(headers, body, "ll" + "r" * len(names))
    ranked = [r for r in body_rows if r["peer"]]
    takeaway = (f"{TITLES[kernel]} {PHASES[phase]}：本站在 {len(body_rows)} 个形状上达到拷贝上限的 "
                f"{prose.pct_span(r['of_copy'] for r in body_rows)}"
                + (f"；{compare_sentence(ranked, tie(data['config']), subject='本站', other='最快的对手')}"
                   if ranked else "") + "。")
    caption = (f"bf16，{data['config']['tokens']} 个 token（B=4，T=4096）。时间为每次调用的 GPU 时间：CUDA graph "
               f"重放、轮换输入（不复用 L2）的中位数；比值大于 1 表示本站更快。字节按最少计（{MOVED[kernel][phase]}）；"
               f"拷贝上限为 {ceiling_text(flat(data['results'])).removeprefix('本次测得最快的设备内拷贝：')}。")
    return prose.page(table, caption, takeaway)


def render(data: dict) -> dict[str, str]:
    out = {}
    for kernel in data["results"]["kernels"]:
        for phase in ("fwd", "fwd_bwd"):
            out[f"fusion_{kernel}_{phase}.md"] = table(data, kernel, phase)
    return out
