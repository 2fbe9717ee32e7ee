"""RMSNorm microbenchmark: every contender side by side, forward and forward+backward.

    python -m bench.run_all rmsnorm          # on a GPU; writes docs/data/<gpu>/rmsnorm.json
    python -m bench.exp_rmsnorm              # same, printing the ratio table

Contenders: HF eager Qwen3RMSNorm, torch.nn.functional.rms_norm (fused in
PyTorch >= 2.11), torch.compile(HF module), Liger-Kernel's LigerRMSNorm
(in_place=False: its default writes dX into dY), quack's CuTe-DSL rmsnorm (CUDA
only: recorded under results["skipped"] with the reason when it cannot be imported),
the naive one-row-per-program kernel (篇2 §四/§五) and this project's kernel.
bf16 throughout.

Bytes counted are the minimum (``harness.op_timing.min_bytes``): forward reads x and w and writes y;
backward reads x, dy and w and writes dx and dW; so forward+backward is
5 * rows * H * 2 bytes plus 3 * H * 2 for the weight.
"""
from __future__ import annotations

import argparse
import contextlib

import torch

from bench import common, prose
from bench.harness import mode, record, timers
from bench.harness.contenders import rmsnorm_contenders
from bench.harness.op_timing import add_gbps, large_copy, min_bytes, rmsnorm_inputs, shape_entry, time_contender
from bench.harness.shapes import HIDDEN_SIZES, RMSNORM_SHAPES
from qwen3_configs import HEAD_DIM
from rmsnorm_triton import rms_norm_backward, rms_norm_forward

NAME = "rmsnorm"


def _shape(name, layout="contiguous", label=None):
    rows, width = RMSNORM_SHAPES[name]
    return (label or (name if name.startswith("H=") else f"{name} {rows}x{width}"), rows, width, layout)


SHAPES = [  # (label, rows, width, dy layout)
    *(_shape(f"H={hidden}") for hidden in HIDDEN_SIZES),
    _shape("q_norm"),
    _shape("k_norm"),
    _shape("q_norm", "heads_transposed", "q_norm, dy transposed"),
]
QUICK_SHAPES = [("H=256", 64, 256, "contiguous"), ("q 64x128", 64, 128, "heads_transposed")]
CONTENDERS = ["hf", "torch_rms_norm", "compile_hf", "liger", "quack", "naive", "triton"]
PHASES = ("fwd", "fwd_bwd", "fwd_eager", "fwd_bwd_eager")
DTYPE = torch.bfloat16
EPS = 1e-6


def run(args) -> dict:
    quick, _, shapes, device, _ = mode.gpu_or_quick(args, NAME, QUICK_SHAPES, SHAPES)
    results = {"copy": large_copy(quick, device), "shapes": [], "skipped": {}}
    for index, (label, rows, width, layout) in enumerate(shapes):
        print(f"  {label}", flush=True)
        nbytes = min_bytes(rows, width)
        n_sets = 1 if quick else mode.rotating_input_sets(nbytes["fwd_bwd"], device)
        sets = [rmsnorm_inputs(rows, width, layout, DTYPE, device, seed=100 * index + k) for k in range(n_sets)]
        entry = shape_entry(label, rows, width, nbytes, n_sets, 2 * rows * width * 2, device, PHASES,
                            dy_layout=layout)
        for name, (fn, weight) in rmsnorm_contenders(CONTENDERS, width, DTYPE, device, results["skipped"],
                                                     EPS).items():
            time_contender(entry, name, fn, weight, sets)
        add_gbps(entry)
        results["shapes"].append(entry)
        del sets
        if device == "cuda":
            torch.cuda.empty_cache()
    results["rstd"] = rstd_choice(device, DTYPE, quick)
    config = {"dtype": "bfloat16", "eps": EPS, "shapes": [list(s) for s in shapes], "contenders": CONTENDERS,
              "l2_bytes": mode.l2_cache_bytes(device),
              "timer": ("fwd/fwd_bwd: median GPU time per call from CUDA-graph replays cycling over input sets "
                        ">= 4x L2; *_eager: triton.testing.do_bench median per eager call (host overhead "
                        "included), warmup=50 ms, rep=300 ms, L2 flushed between runs"),
              "liger_in_place": False}
    return {"config": config, "results": results}


def rstd_choice(device, dtype, quick):
    """Backward time with the saved rstd vs recomputing it in the backward kernel."""
    out = []
    widths = [(64, 128), (64, 256)] if quick else [RMSNORM_SHAPES[n] for n in ("q_norm", "H=1024", "H=4096")]
    for rows, width in widths:
        sets = [rmsnorm_inputs(rows, width, "contiguous", dtype, device, seed=99 + k) for k in range(1 if quick else 3)]
        w = (torch.rand(width, device=device) + 0.5).to(dtype)
        rstds = [rms_norm_forward(x, w, EPS)[1] for x, _ in sets]
        saved = timers.cuda_graph_time_us([lambda k=k: rms_norm_backward(sets[k][1], sets[k][0], w, rstds[k])
                                           for k in range(len(sets))])
        recomputed = timers.cuda_graph_time_us(
            [lambda k=k: rms_norm_backward(sets[k][1], sets[k][0], w, None, eps=EPS) for k in range(len(sets))])
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


# Chinese labels of tables and plots (LABELS keeps the data's own names): peers, the teaching kernel and ours.
ZH = {"hf": "HF eager", "torch_rms_norm": "F.rms_norm", "compile_hf": "torch.compile(HF)", "liger": "Liger",
      "quack": "quack", "naive": "教学版", "triton": "生产版"}
PEERS = ["hf", "torch_rms_norm", "compile_hf", "liger", "quack"]  # data files before quack have no "quack"
PHASE_ZH = {"fwd": "forward", "fwd_bwd": "forward + backward"}
TIE = 0.01  # within 1 % of each other counts as a tie: the 20-80 % spread of a median is about 0.5 %


SHAPE_NAMES = {shape: name for name, shape in RMSNORM_SHAPES.items()}


def shape_label(rows, width, layout="contiguous", label=""):
    """H=4096 for the hidden-size norms; q_norm / k_norm for the head_dim-wide head norms, named by
    the shape's label when it has one (quick runs: "q 64x128"), else by qwen3_configs.RMSNORM_SHAPES."""
    if width != HEAD_DIM:
        return f"H={width}"
    kind = ("k_norm" if label.startswith("k") else "q_norm") if label else SHAPE_NAMES.get((rows, width),
                                                                                           f"{rows}×{width}")
    return kind + ("（dy 转置）" if layout == "heads_transposed" else "")


def _label(s):
    return shape_label(s["rows"], s["width"], s.get("dy_layout", "contiguous"), s.get("label", ""))


def rows_caption(shapes) -> str:
    """Where the row counts go: 'H=1024 … H=5120 各 16384 行，q_norm 为 524288×128，…'."""
    wide = [s for s in shapes if s["width"] != HEAD_DIM]
    parts = []
    if wide:
        names = f"{_label(wide[0])} … {_label(wide[-1])}" if len(wide) > 2 else prose.join(_label(s) for s in wide)
        counts = {s["rows"] for s in wide}
        parts.append(f"{names} 各 {counts.pop()} 行" if len(counts) == 1
                     else prose.join(f"{_label(s)} {s['rows']} 行" for s in wide))
    seen = set()
    for s in shapes:
        base = _label(s).split("（")[0]
        if s["width"] == HEAD_DIM and base not in seen:
            seen.add(base)
            parts.append(f"{base} 为 {s['rows']}×{s['width']}")
    if any(s.get("dy_layout") == "heads_transposed" for s in shapes):
        parts.append("「dy 转置」的 dy 是 (B, heads, T, D) 张量转置出的非连续视图")
    return "，".join(parts)


def _ceiling_text(res) -> str:
    c = copy_ceiling(res)
    timer = "eager 计时" if c["timer"] == "eager" else "CUDA graph 计时"
    return f"本次测得最快的设备内拷贝：{_size(c['bytes'])}、{timer}，{c['gbps']:,.0f} GB/s"


def fastest_peer(times: dict, names) -> tuple[dict[str, float], str | None]:
    """{peer: median µs} for the named peers that ran, and the fastest of them (None if none ran)."""
    peers = {n: times[n]["median_us"] for n in names if n in times}
    return peers, min(peers, key=peers.get) if peers else None


def vs_best_peer(data, phase) -> list[dict]:
    """Per shape: ours, the fastest peer (HF, F.rms_norm, compile, Liger, quack) and peer ÷ ours."""
    res = data["results"]
    copy = copy_ceiling(res)["gbps"]
    out = []
    for s in res["shapes"]:
        ours = s[phase]["triton"]
        peers, best = fastest_peer(s[phase], PEERS)
        out.append({"label": _label(s), "ours_us": ours["median_us"], "of_copy": ours["gbps"] / copy,
                    "peer": best, "peer_us": peers[best], "ratio": peers[best] / ours["median_us"],
                    "hf_ratio": peers["hf"] / ours["median_us"] if "hf" in peers else None})
    return out


def at(labels) -> str:
    """'在 H=1024、k_norm 上' (no space after a full-width parenthesis)."""
    return f"在 {prose.glue(prose.join(labels), '上')}"


def compare_sentence(rows, subject="生产版", other="最快的对手", labels=None) -> str:
    """How ``subject`` compares with ``other`` over the shapes: faster, tied (within 1 %) or slower, and where."""
    faster = [r for r in rows if r["ratio"] >= 1 + TIE]
    tied = [r for r in rows if 1 - TIE < r["ratio"] < 1 + TIE]
    slower = [r for r in rows if r["ratio"] <= 1 - TIE]
    if len(faster) == len(rows):
        top = max(rows, key=lambda r: r["ratio"])
        return (f"在全部 {len(rows)} 个形状上快于{other}，{other}用时是{subject}的 "
                f"{prose.times_span(r['ratio'] for r in rows)} 倍（差距最大在 {top['label']}）")
    clauses = []
    if faster:
        clauses.append(f"{at(r['label'] for r in faster)}快于{other}（{other}用时是{subject}的 "
                       f"{prose.times_span(r['ratio'] for r in faster)} 倍）")
    if tied:
        clauses.append(f"{at(r['label'] for r in tied)}与{other}持平（相差不到 1%）")
    if slower:
        who = (f"（{prose.join(dict.fromkeys((labels or ZH)[r['peer']] for r in slower))}）"
               if "peer" in slower[0] else "")
        clauses.append(f"{at(r['label'] for r in slower)}比{other}{who}慢 "
                       f"{prose.pct_span(1 / r['ratio'] - 1 for r in slower)}")
    return "，".join(clauses)


def _table(data, phase):
    rows = vs_best_peer(data, phase)
    f = common.fmt
    body = [[r["label"], f(r["ours_us"]), prose.pct(r["of_copy"]), ZH[r["peer"]], f(r["peer_us"]), prose.times(r["ratio"])]
            for r in rows]
    table = common.md_table(["形状", "生产版（µs）", "占拷贝上限", "最快的对手", "对手（µs）", "对手 ÷ 生产版"], body, "lrrlrr")
    takeaway = (f"{PHASE_ZH[phase]}：生产版在 {len(rows)} 个形状上达到拷贝上限的 "
                f"{prose.pct_span(r['of_copy'] for r in rows)}；{compare_sentence(rows)}。")
    moved = "读 x、写 y" if phase == "fwd" else "forward 读 x、写 y，backward 读 x 和 dy、写 dx"
    caption = (f"bf16，{rows_caption(data['results']['shapes'])}。时间为每次调用的 GPU 时间：CUDA graph 重放、"
               f"轮换输入（不复用 L2）的中位数。字节按最少计（{moved}）；拷贝上限为{_ceiling_text(data['results'])}。")
    return prose.page(table, caption, takeaway)


def _contender_table(data, phase, caption):
    """One column per contender in the data (6 columns at most: with quack's, HF eager's goes and the
    caption says how much slower it was)."""
    shapes = data["results"]["shapes"]
    names = [n for n in PEERS + ["triton"] if any(n in s[phase] for s in shapes)]
    dropped = ""
    if len(names) > 5:
        names.remove("hf")
        ratios = [s[phase]["hf"]["median_us"] / s[phase]["triton"]["median_us"] for s in shapes
                  if "hf" in s[phase] and "triton" in s[phase]]
        dropped = f"HF eager 未列出（用时是生产版的 {prose.times_span(ratios, 1)} 倍）。" if ratios else ""
    body = [[_label(s)] + [common.fmt(s[phase][n]["median_us"]) if n in s[phase] else "—" for n in names] for s in shapes]
    table = common.md_table(["形状"] + [ZH[n] for n in names], body)
    return prose.page(table, caption + f"bf16，{rows_caption(shapes)}。{dropped}")


def _all_table(data, phase):
    return _contender_table(data, phase, f"{PHASE_ZH[phase]} 每次调用的 GPU 时间（µs）：CUDA graph 重放、轮换输入"
                                         "（不复用 L2）的中位数；")


def _eager_table(data):
    return _contender_table(data, "fwd_bwd_eager", "forward + backward 每次 eager 调用的时间（µs）："
                            "triton.testing.do_bench 中位数，调用间清空 L2，含主机开销（Python、autograd、kernel 启动）；")


def _naive_table(data):
    shapes = data["results"]["shapes"]
    f = common.fmt
    body = [[_label(s), f(s["fwd"]["naive"]["median_us"]), f(s["fwd"]["triton"]["median_us"]),
             f(s["fwd_bwd"]["naive"]["median_us"]), f(s["fwd_bwd"]["triton"]["median_us"])] for s in shapes]
    table = common.md_table(["形状", "教学版 forward（µs）", "生产版 forward（µs）", "教学版 fwd+bwd（µs）",
                             "生产版 fwd+bwd（µs）"], body)
    sentences = []
    for phase in ("fwd", "fwd_bwd"):
        rows = [{"label": _label(s), "ratio": s[phase]["naive"]["median_us"] / s[phase]["triton"]["median_us"]}
                for s in shapes]
        close = [r for r in rows if r["ratio"] < 1.5]
        slow = [r for r in rows if r["ratio"] >= 1.5]
        parts = []
        if close:
            gap = max(abs(r["ratio"] - 1) for r in close)
            where = at(r["label"] for r in close) if slow else f"在全部 {len(rows)} 个形状上"
            parts.append(f"{where}与生产版相差不超过 {prose.pct(gap, 1)}")
        if slow:
            where = at(r["label"] for r in slow) if close else f"在全部 {len(rows)} 个形状上"
            parts.append(f"{where}慢得多，用时是生产版的 {prose.times_span((r['ratio'] for r in slow), 1)} 倍")
        sentences.append(f"{PHASE_ZH[phase]} {'，'.join(parts)}")
    takeaway = "教学版（一个 program 处理一行）：" + "；".join(sentences) + "。"
    caption = (f"bf16，{rows_caption(shapes)}。每次调用的 GPU 时间：CUDA graph 重放、轮换输入（不复用 L2）的中位数。")
    return prose.page(table, caption, takeaway)


def copy_candidates(res) -> list[dict]:
    """The copies ``copy_ceiling`` chooses from, grouped as the methods page lists them."""
    large = res["copy"]
    graph_timed = "calls_per_graph" in large
    out = [{"name": "大块拷贝", "bytes": _size(large["bytes"]), "timer": "CUDA graph 重放" if graph_timed else "eager（do_bench）",
            "gbps": [large["gbps"]]}]
    if "eager" in large:
        out.append({"name": "大块拷贝", "bytes": _size(large["bytes"]), "timer": "eager（do_bench）",
                    "gbps": [large["eager"]["gbps"]]})
    same = [s for s in res["shapes"] if graph_timed and "calls_per_graph" in s["copy_same_bytes"]]
    if same:
        out.append({"name": f"与各形状 forward 同字节的拷贝（{len(same)} 个）",
                    "bytes": prose.span((s["bytes_fwd"] for s in same), _size), "timer": "CUDA graph 重放",
                    "gbps": [s["copy_same_bytes"]["gbps"] for s in same]})
    return out


def _copy_table(data):
    res = data["results"]
    ceiling = copy_ceiling(res)["gbps"]
    body = [[c["name"], c["bytes"], c["timer"], prose.span(c["gbps"], lambda v: f"{v:,.0f}"),
             "是" if ceiling in c["gbps"] else "—"] for c in copy_candidates(res)]
    table = common.md_table(["候选", "字节", "计时方式", "带宽（GB/s）", "作为拷贝上限"], body, "lllrl")
    caption = ("设备内拷贝 dst.copy_(src)，带宽 = 读 + 写的字节 ÷ 时间；拷贝上限取本次运行测得最快的一次，"
               "各表的「占拷贝上限」都以它为分母。")
    return prose.page(table, caption)


def _same_size_table(data):
    shapes = data["results"]["shapes"]
    if not all("calls_per_graph" in s["copy_same_bytes"] for s in shapes):
        return None  # only comparable when the copy was timed like the kernels
    body = [[_label(s), f"{s['bytes_fwd'] / 1e6:.0f}", f"{s['copy_same_bytes']['gbps']:,.0f}",
             f"{s['fwd']['triton']['gbps']:,.0f}", prose.pct(s["fwd"]["triton"]["gbps"] / s["copy_same_bytes"]["gbps"])]
            for s in shapes]
    table = common.md_table(["形状", "字节（MB）", "同字节拷贝（GB/s）", "生产版 forward（GB/s）",
                             "生产版 forward 占同字节拷贝"], body)
    caption = (f"同字节拷贝：把 x 拷贝一次，读写的字节与 forward 相同，与 kernel 一样在 CUDA graph 里计时；"
               f"bf16，{rows_caption(shapes)}。")
    return prose.page(table, caption)




def _short_label(shape):
    """Axis label: the table's label with the transposed-dy marker on a line of its own."""
    return _label(shape).replace("（", "\n（")


def _bandwidth_plot(data):
    return bandwidth_bars(data, CONTENDERS, ZH, "RMSNorm")


def bandwidth_bars(data, contenders, labels, op, figsize=(10, 7.2)):
    """% of the copy ceiling per shape and contender (bars in ``contenders`` order, named by
    ``labels``): forward above, forward + backward below. Data laid out as rmsnorm.json."""
    plt = common.plot_style()
    res = data["results"]
    shapes = res["shapes"]
    ceiling = copy_ceiling(res)["gbps"]
    fig, axes = plt.subplots(2, 1, figsize=figsize, sharex=True)
    names = [n for n in contenders if any(n in s["fwd"] for s in shapes)]
    width = 0.84 / len(names)
    for ax, phase, title in ((axes[0], "fwd", "forward"), (axes[1], "fwd_bwd", "forward + backward")):
        for i, name in enumerate(names):
            values = [100 * s[phase][name]["gbps"] / ceiling if name in s[phase] else 0 for s in shapes]
            ax.bar([k + (i - (len(names) - 1) / 2) * width for k in range(len(shapes))], values, width,
                   label=labels.get(name, name), color=common.SERIES_COLORS[i % len(common.SERIES_COLORS)])
        ax.axhline(100, color="#D98F92", linestyle="--", linewidth=1.2)
        ax.text(len(shapes) - 0.5, 100, "拷贝上限", va="bottom", ha="right", color="#C0777A", fontsize=9)
        ax.set_ylim(0, 112)
        ax.set_yticks(range(0, 101, 20))
        ax.set_ylabel("有效带宽（占拷贝上限 %）")
        ax.set_title(f"{op} {title}，bf16", fontsize=10, loc="left")
        ax.grid(axis="x", visible=False)
    axes[1].set_xticks(range(len(shapes)), [_short_label(s) for s in shapes])
    axes[0].legend(loc="lower center", bbox_to_anchor=(0.5, 1.1), ncol=len(names), fontsize=9)
    fig.text(0.5, 0.03, f"拷贝上限：本次运行最快的显存拷贝，{ceiling:,.0f} GB/s（读 + 写）；字节数按最少访存计",
             ha="center", va="top", fontsize=8)
    return common.svg_of(fig)


def _rstd_table(data):
    entries = data["results"]["rstd"]
    shapes = [{"rows": r["rows"], "width": r["width"]} for r in entries]
    body = [[_label(s), common.fmt(r["saved_us"]), common.fmt(r["recomputed_us"]),
             prose.times(r["recomputed_us"] / r["saved_us"]), f"{r['rstd_bytes'] / 2**20:.2f}"]
            for s, r in zip(shapes, entries)]
    table = common.md_table(["形状", "保存 rstd（µs）", "重算 rstd（µs）", "重算 ÷ 保存", "rstd 显存（MiB）"], body)
    caption = (f"只计 backward：CUDA graph 重放的 GPU 时间中位数；rstd 每行一个 fp32。bf16，{rows_caption(shapes)}。")
    return prose.page(table, caption)


def render(data: dict) -> dict[str, str]:
    out = {
        "rmsnorm_fwd.md": _table(data, "fwd"),
        "rmsnorm_fwdbwd.md": _table(data, "fwd_bwd"),
        "rmsnorm_fwd_all.md": _all_table(data, "fwd"),
        "rmsnorm_fwdbwd_all.md": _all_table(data, "fwd_bwd"),
        "rmsnorm_naive.md": _naive_table(data),
        "rmsnorm_copy.md": _copy_table(data),
        "rmsnorm_same_size.md": _same_size_table(data),
        "rmsnorm_rstd.md": _rstd_table(data),
        "rmsnorm_eager.md": _eager_table(data),
        "rmsnorm_bandwidth.svg": _bandwidth_plot(data),
    }
    return {name: text for name, text in out.items() if text is not None}


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
        print(record.save(NAME, payload))
