"""fusion.json -> the 番外二 page's op-level tables: QK-norm + RoPE and SwiGLU, every contender side by side,
and the merged QKV projection (one GEMM against three).

Per memory-bound kernel and phase (forward, forward + backward) one table: a row per shape (the Qwen3 sizes
that have it), this site's kernel in µs with its share of the copy ceiling, and each peer's time ÷ ours
(above 1: ours is faster).

A GEMM kernel (its config names a ``baseline`` and a ``merged`` contender instead of ``ours``: ``qkv``) gets
its two files, ``fusion_<kernel>_<phase>.md``, only when the data holds it: a row per shape (the merged weight's
N × K), both variants in µs with their TFLOP/s, the merged time ÷ the baseline's (below 1: merging is faster),
any other contender's time ÷ the baseline's, and the kernels per call (as the profiler counted them on the GPU;
without that record, the launches the experiment counts from the algorithm).

No table carries a sentence: 番外二 and its methods page read them by hand, with the run's tie rule (level within
2 %) splitting the shapes (:func:`by_peer_tie`, :func:`gemm_by_tie`) and bench/report/fusion_page.py's
``summary_values`` giving the numbers.
"""
from __future__ import annotations

from bench.report import prose, tables
from bench.report.names import OP_LABELS, PHASES, tie
from bench.report.ops import by_tie, ceiling_text, copy_ceiling, fastest_peer

NAME = "fusion"
MOVED = {
    "qk_rope": {"fwd": "读 q、k、cos、sin，写旋转后的 q、k",
                "fwd_bwd": "forward 之外，backward 读两个输出梯度、q、k、cos、sin，写 dq、dk"},
    "swiglu": {"fwd": "读 gate、up，写 act", "fwd_bwd": "forward 之外，backward 读 gate、up、d_act，写 d_gate、d_up"},
}
# The GEMM kernels: their names, what the table's short column names call each contender, and why merging changes
# the count.
TITLES = {"qkv": "QKV 投影"}
SHORT = {"three_gemms": "三个", "compile_three": "compile", "merged_gemm": "合并"}
WHY = {
    "fwd": "forward 三个 GEMM 各读一次 x，合并只读一次，输出切成 q、k、v 三个视图，不另起 kernel",
    "fwd_bwd": ("backward 三个 GEMM 各算一份 dX 部分和，autograd 再用两次逐元素加法累加，dW 也是三个 GEMM；"
                "合并先把 dq、dk、dv 拼成一个 dY（split 的反向，一次 cat），再各用一个 GEMM 算 dX 和 dW"),
}


def flat(res) -> dict:
    """The layout ops.copy_ceiling reads: every memory-bound kernel's shapes in one list (a GEMM kernel's
    entries time no copy)."""
    return {"copy": res["copy"],
            "shapes": [s for entries in res["kernels"].values() for s in entries if "copy_same_bytes" in s]}


def is_gemm(data, kernel) -> bool:
    return "merged" in data["config"]["kernels"][kernel]


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
                    "all_of_copy": {n: t["gbps"] / ceiling for n, t in times.items()},
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
    caption = (f"bf16，{data['config']['tokens']} 个 token（B=4，T=4096）。时间为每次调用的 GPU 时间：CUDA graph "
               f"重放、轮换输入（不复用 L2）的中位数；比值大于 1 表示本站更快。字节按最少计（{MOVED[kernel][phase]}）；"
               f"拷贝上限为{ceiling_text(flat(data['results']))}。")
    return prose.page(table, caption)  # read by hand: 番外二 (fwd_bwd) and its methods page (fwd)


def by_peer_tie(data, kernel, phase) -> dict[str, list[dict]]:
    """rows() of the shapes with a peer, split by the run's tie rule: ours faster than the fastest peer, level
    with it, or slower ({"faster", "level", "slower"})."""
    faster, level, slower = by_tie([r for r in rows(data, kernel, phase) if r["peer"]], tie(data["config"]))
    return {"faster": faster, "level": level, "slower": slower}


def gemm_rows(data, kernel, phase) -> list[dict]:
    """Per shape where both variants ran: each one's µs and TFLOP/s, the merged time ÷ the baseline's
    (``ratio``), every other contender's time ÷ the baseline's, and the kernels per call of each contender
    (``measured``: counted by the profiler; otherwise the experiment's launch counts)."""
    spec = data["config"]["kernels"][kernel]
    base, merged = spec["baseline"], spec["merged"]
    out = []
    for s in data["results"]["kernels"][kernel]:
        times = s[phase]
        if base not in times or merged not in times:
            continue
        measured = s.get("device_kernels", {}).get(phase)
        counts = ({n: len(names) for n, names in measured.items()} if measured
                  else {n: c[phase] for n, c in s["launches"].items()})
        flops = s[f"flops_{phase}"]
        out.append({"label": s["label"], "models": s["shape"].get("models", ""), "m": s["gemm"]["m"],
                    "base_us": times[base]["median_us"], "base_tflops": flops / (times[base]["median_us"] * 1e6),
                    "merged_us": times[merged]["median_us"],
                    "merged_tflops": flops / (times[merged]["median_us"] * 1e6),
                    "ratio": times[merged]["median_us"] / times[base]["median_us"],
                    "others": {n: times[n]["median_us"] / times[base]["median_us"] for n in spec["contenders"]
                               if n not in (base, merged) and n in times},
                    "kernels": counts, "measured": bool(measured)})
    return out


def gemm_by_tie(data, kernel, phase) -> dict[str, list[dict]]:
    """gemm_rows() split by the run's tie rule on merged ÷ baseline: merging faster, level, or slower
    ({"faster", "level", "slower"})."""
    slower, level, faster = by_tie(gemm_rows(data, kernel, phase), tie(data["config"]))  # below 1: merging is faster
    return {"faster": faster, "level": level, "slower": slower}


def gemm_table(data, kernel, phase) -> str:
    spec = data["config"]["kernels"][kernel]
    base, merged = spec["baseline"], spec["merged"]
    body_rows = gemm_rows(data, kernel, phase)
    if not body_rows:
        return f"{TITLES[kernel]} {PHASES[phase]}：两种做法都没有测得时间。\n"
    others = [n for n in spec["contenders"] if any(n in r["others"] for r in body_rows)]
    counted = [n for n in spec["contenders"] if any(n in r["kernels"] for r in body_rows)]
    f = tables.fmt
    body = [[f"{r['label']}（{r['models']}）" if r["models"] else r["label"],
             f"{f(r['base_us'])}（{f(r['base_tflops'])}）", f"{f(r['merged_us'])}（{f(r['merged_tflops'])}）",
             prose.times(r["ratio"]), *(prose.times(r["others"][n]) if n in r["others"] else "—" for n in others),
             " / ".join(str(r["kernels"].get(n, "—")) for n in counted)] for r in body_rows]
    # short headers: the table is 6 columns wide in the methods page's column (the caption names each one)
    headers = ["权重 N×K（Qwen3）", *(f"{SHORT[n]} GEMM µs（TFLOP/s）" for n in (base, merged)),
               f"{SHORT[merged]} ÷ {SHORT[base]}", *(f"{SHORT[n]} ÷ {SHORT[base]}" for n in others),
               f"kernel 数（{' / '.join(SHORT[n] for n in counted)}）"]
    table = tables.md_table(headers, body, "l" + "r" * (len(headers) - 1))
    flops = "2·M·N·K 计" if phase == "fwd" else "6·M·N·K 计（forward 2·M·N·K，backward 的 dX、dW 各 2·M·N·K）"
    kernels = ("kernel 数为 torch.profiler 记录的一次调用的设备活动数（kernel、memset 等）"
               if all(r["measured"] for r in body_rows) else "kernel 数按做法数出（launch 次数），未经 profiler 记录")
    ms = sorted({r["m"] for r in body_rows})
    names = "，".join(f"{SHORT[n]} = {OP_LABELS[n]}" for n in (base, merged, *others))
    caption = (f"{names}。bf16，x 为 {prose.join(str(m) for m in ms)} 个 token × K（hidden），合并后的权重为 N×K，"
               f"N =（Hq + 2·Hkv）× head_dim。时间为每次调用的 GPU 时间：CUDA graph 重放、轮换输入的中位数；"
               f"比值为用时之比，小于 1 表示更快。TFLOP/s 按 FLOP 数 {flops}，两种做法的 FLOP 相同。"
               f"{kernels}。{WHY[phase]}。")
    return prose.page(table, caption)  # read by hand on the methods page


def render(data: dict) -> dict[str, str]:
    return {f"fusion_{kernel}_{phase}.md": (gemm_table if is_gemm(data, kernel) else table)(data, kernel, phase)
            for kernel in data["results"]["kernels"] for phase in ("fwd", "fwd_bwd")}
