"""RMSNorm at every hidden size: 40 widths from 256 to 16384 and 3 beyond, forward and forward+backward.

    python -m bench.run_all width_sweep                        # on a GPU -> docs/data/<gpu>/width_sweep.json
    BENCH_WIDTHS=256,3000,65536 python -m bench.run_all width_sweep   # a subset of WIDTHS

Contenders, each with its default launch config: this project's ``rms_norm``, ``F.rms_norm``,
``torch.compile`` of HF's Qwen3RMSNorm (one static graph per width: dynamic=False, dynamo reset
before each width, and ``fail_on_recompile_limit_hit`` so that a fallback to eager is never timed
as "compile"), Liger's functional rms_norm (casting mode llama, in_place=False) and quack's rmsnorm.
A contender that cannot run here is in ``results["skipped"]`` with the reason; one that fails at a
width has its error string in that width's ``errors`` and the sweep goes on.

16384 rows, bf16, eps 1e-6. Timed as in exp_rmsnorm (``harness.op_timing.time_contender``: CUDA-graph replays
over rotating input sets), bytes from ``harness.op_timing.min_bytes``, % of the run's 4 GiB copy
(``sweep_ceiling``). No eager timer: the budget (about 4 minutes on an H200) goes to the
compiles, which each width records (``first_call_s``: the first calls' wall time per contender;
``compiles``: dynamo graphs and Triton kernels of ours built so far).
"""
from __future__ import annotations

import argparse
import contextlib
import math
import os
import time

import torch

import rmsnorm_triton
from bench import common, exp_rmsnorm, prose
from bench.exp_rmsnorm import ZH, fastest_peer
from bench.harness import mode, record
from bench.harness.contenders import rmsnorm_contenders
from bench.harness.op_timing import add_gbps, large_copy, min_bytes, rmsnorm_inputs, shape_entry, time_contender
from bench.harness.shapes import BENCH_TOKENS
from qwen3_configs import QWEN3_SIZES

NAME = "width_sweep"
ROWS = BENCH_TOKENS  # 16384
EPS = 1e-6
DTYPE = torch.bfloat16

# Hidden sizes of open models: Qwen3 from snippets/qwen3_configs.py, the others are the default
# hidden_size of a text config class in the installed transformers 5.17 (file under
# transformers/models/; the model is the checkpoint that class's docstring names, or its family).
MODEL_WIDTHS = {
    **{hidden: "、".join(f"Qwen3-{s}" for s, (h, *_) in QWEN3_SIZES.items() if h == hidden)
       for hidden, *_ in QWEN3_SIZES.values()},
    2304: "Gemma 2",  # gemma2/configuration_gemma2.py Gemma2Config
    2880: "gpt-oss-20b",  # gpt_oss/configuration_gpt_oss.py GptOssConfig
    3072: "Gemma-7B、Phi-3-mini",  # gemma/configuration_gemma.py GemmaConfig, phi3/configuration_phi3.py
    3584: "Qwen2.5-Omni-7B",  # qwen2_5_omni/configuration_qwen2_5_omni.py Qwen2_5OmniTextConfig
    4544: "Falcon-7B",  # falcon/configuration_falcon.py FalconConfig
    6144: "GPT-NeoX-20B、LongCat-Flash",  # gpt_neox/configuration_gpt_neox.py, longcat_flash/configuration_longcat_flash.py
    7168: "DeepSeek-V3",  # deepseek_v3/configuration_deepseek_v3.py DeepseekV3Config
    8192: "Command R",  # cohere/configuration_cohere.py CohereConfig
}
MODEL_WIDTHS[4096] += "、Llama-2-7B、Mistral-7B"  # llama/configuration_llama.py, mistral/configuration_mistral.py
MODEL_WIDTHS[5120] += "、Llama-4-Scout"  # llama4/configuration_llama4.py Llama4TextConfig
WIDTHS = sorted({
    *MODEL_WIDTHS,
    256, 512, 16384,  # powers of two (with 1024 ... 8192 above)
    384, 640, 768, 896, 1152, 1280, 1536, 1792, 5376, 10240, 12288, 14336,  # multiples of 128
    300, 520, 1000, 1500, 2000, 3000, 5000, 6000, 7000, 10000, 12000, 16383,  # not multiples of 128
    24576, 32768, 65536,  # past MAX_COLS: one row no longer fits in registers
})
QUICK_WIDTHS = [256, 300, 1000, rmsnorm_triton.MAX_COLS + 16]
QUICK_ROWS = 16
CONTENDERS = ["triton", "torch_rms_norm", "compile_hf", "liger", "quack"]
PEERS = CONTENDERS[1:]
TIE = 0.02  # level with the best peer: within 2 %
TARGETS = {"fwd": 0.85, "fwd_bwd": 0.75}  # of the copy ceiling, at widths >= TARGET_FROM
TARGET_FROM = 1024
REPLAYS = 15  # graph replays per timing (exp_rmsnorm: 25): the sweep's budget goes to compiles


def selected_widths(quick: bool = False) -> list[int]:
    """WIDTHS, or the comma-separated BENCH_WIDTHS (any positive widths: a subset to re-run)."""
    wanted = os.environ.get("BENCH_WIDTHS")
    if not wanted:
        return list(QUICK_WIDTHS if quick else WIDTHS)
    widths = [int(w) for w in wanted.split(",") if w.strip()]
    if not widths or min(widths) < 1:
        raise ValueError(f"BENCH_WIDTHS must list positive widths, got {wanted!r}")
    return widths


def _triton_kernels_built() -> int | None:
    """Compiled variants of ours' kernels so far (None under the interpreter, which compiles nothing)."""
    try:
        kernels = (rmsnorm_triton.rms_norm_fwd_kernel, rmsnorm_triton.rms_norm_bwd_kernel,
                   rmsnorm_triton.dw_reduce_kernel)
        return sum(len(cache[0]) for k in kernels for cache in k.device_caches.values())
    except Exception:
        return None


def run(args) -> dict:
    quick, on_gpu, _, device, _ = mode.gpu_or_quick(args, NAME, None, None)
    widths = selected_widths(quick)
    rows = QUICK_ROWS if quick else ROWS
    results = {"copy": large_copy(quick, device), "shapes": [], "skipped": {}}
    began = time.perf_counter()
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        for index, width in enumerate(widths):
            start = time.perf_counter()
            nbytes = min_bytes(rows, width)
            n_sets = 1 if quick else mode.rotating_input_sets(nbytes["fwd_bwd"], device)
            sets = [rmsnorm_inputs(rows, width, "contiguous", DTYPE, device, seed=100 * index + k)
                    for k in range(n_sets)]
            entry = shape_entry(f"H={width}", rows, width, nbytes, n_sets, 2 * rows * width * 2, device,
                                model=MODEL_WIDTHS.get(width))
            for name, (fn, weight) in rmsnorm_contenders(CONTENDERS, width, DTYPE, device, results["skipped"],
                                                         EPS).items():
                time_contender(entry, name, fn, weight, sets, eager=False, replays=REPLAYS)
            add_gbps(entry)
            entry["compiles"] = {"dynamo_graphs": torch._dynamo.utils.counters["stats"]["unique_graphs"],
                                 "triton_kernels_ours": _triton_kernels_built()}
            entry["wall_s"] = round(time.perf_counter() - start, 2)
            results["shapes"].append(entry)
            print(f"  H={width}: {entry['wall_s']:.1f} s (total {time.perf_counter() - began:.0f} s)"
                  + "".join(f"; {n} failed" for n in entry["errors"]), flush=True)
            sets.clear()
            if on_gpu:
                torch.cuda.empty_cache()
    config = {"dtype": "bfloat16", "eps": EPS, "rows": rows, "widths": widths, "contenders": CONTENDERS,
              "models": {str(w): m for w, m in MODEL_WIDTHS.items() if w in widths},
              "l2_bytes": mode.l2_cache_bytes(device), "liger_in_place": False,
              "compile": "torch.compile(Qwen3RMSNorm, dynamic=False), dynamo reset per width",
              "timer": f"median GPU time per call from {REPLAYS} CUDA-graph replays cycling over input sets >= 4x L2"}
    return {"config": config, "results": results}


# ---------------------------------------------------------------- rendering

PHASE_ZH = {"fwd": "forward", "fwd_bwd": "forward + backward"}
BUCKETS = [(256, 1023), (1024, 2047), (2048, 4095), (4096, 8191), (8192, 16384), (16385, None)]


def sweep_ceiling(res) -> dict:
    """The run's 4 GiB copy, the faster of its two timings (exp_rmsnorm.copy_ceiling without the
    same-size copies): a same-size copy is timed on one buffer pair, and below 4x L2 (about 200 MB,
    widths under ~3000) it runs from L2, up to 5.5 TB/s on the H200, which is no ceiling for a
    kernel whose inputs rotate out of L2."""
    return exp_rmsnorm.copy_ceiling({**res, "shapes": []})


def per_width(data, phase) -> list[dict]:
    """Per width: ours' and the best peer's share of the copy ceiling, peer ÷ ours (None where one is missing)."""
    res = data["results"]
    ceiling = sweep_ceiling(res)["gbps"]
    out = []
    for s in res["shapes"]:
        times = s[phase]
        peers, best = fastest_peer(times, PEERS)
        ours = times.get("triton")
        out.append({"width": s["width"], "label": s["label"], "model": s.get("model"),
                    "ours": ours["gbps"] / ceiling if ours else None,
                    "peer": best, "best_peer": times[best]["gbps"] / ceiling if best else None,
                    "ratio": peers[best] / ours["median_us"] if ours and best else None,
                    "error": s["errors"].get("triton")})
    return out


def sweep_facts(data) -> dict:
    """What the closing note and the article say about the sweep, from the data.

    ``{"widths", "ceiling_gbps", "skipped": {name: reason}, "fwd": {...}, "fwd_bwd": {...}}``; per direction:
    ``compared`` (widths with ours and a peer), ``level_or_ahead`` (peer ÷ ours >= 1 - TIE), ``behind``
    (widths, slowest first), ``worst`` ({"width", "ratio", "peer"}: lowest peer ÷ ours, or None),
    ``of_copy`` ([lowest, highest] share of ours), ``target`` and ``misses`` (widths >= TARGET_FROM
    where ours is below the target share), ``unsupported`` (widths where ours raised).
    """
    out = {"widths": len(data["results"]["shapes"]), "ceiling_gbps": sweep_ceiling(data["results"])["gbps"],
           "skipped": dict(data["results"].get("skipped", {}))}
    for phase, target in TARGETS.items():
        rows = per_width(data, phase)
        compared = [r for r in rows if r["ratio"] is not None]
        worst = min(compared, key=lambda r: r["ratio"], default=None)
        shares = [r["ours"] for r in rows if r["ours"] is not None]
        out[phase] = {
            "compared": len(compared),
            "level_or_ahead": sum(r["ratio"] >= 1 - TIE for r in compared),
            "behind": [r["width"] for r in sorted(compared, key=lambda r: r["ratio"]) if r["ratio"] < 1 - TIE],
            "worst": {"width": worst["width"], "ratio": worst["ratio"], "peer": worst["peer"]} if worst else None,
            "of_copy": [min(shares), max(shares)] if shares else None,
            "target": target,
            "misses": [r["width"] for r in rows if r["width"] >= TARGET_FROM and r["ours"] is not None
                       and r["ours"] < target],
            "unsupported": [r["width"] for r in rows if r["ours"] is None],
        }
    return out


def _widths(widths) -> str:
    return prose.join(f"H={w}" for w in widths)


def takeaway(data) -> str:
    facts = sweep_facts(data)
    sentences = []
    for phase in TARGETS:
        f = facts[phase]
        if not f["compared"]:
            sentences.append(f"{PHASE_ZH[phase]}：没有生产版与对手都有结果的宽度。")
            continue
        worst = f["worst"]
        ratio = prose.times(worst["ratio"])
        gap = (f"最差在 H={worst['width']}，比 {ZH[worst['peer']]} 慢 {prose.pct(1 / worst['ratio'] - 1)}（{ratio}）"
               if worst["ratio"] < 1 else f"领先最少在 H={worst['width']}（{ZH[worst['peer']]} ÷ 生产版 {ratio}）")
        target = f"拷贝上限的 {prose.pct(f['target'])}"
        measured = [s["width"] for s in data["results"]["shapes"]
                    if s["width"] >= TARGET_FROM and s["width"] not in f["unsupported"]]
        misses = (f"宽度 ≥ {TARGET_FROM} 时低于{target}的有 {_widths(f['misses'])}" if f["misses"]
                  else f"宽度 ≥ {TARGET_FROM} 时都达到{target}" if measured else "")
        sentences.append(f"{PHASE_ZH[phase]}：生产版在 {f['compared']} 个宽度中的 {f['level_or_ahead']} 个上与最快的"
                         f"对手持平或更快（相差 {prose.pct(TIE)} 以内算持平），{gap}" + (f"；{misses}" if misses else "")
                         + "。")
    unsupported = facts["fwd"]["unsupported"]
    if unsupported:
        sentences.append(f"生产版在 {_widths(unsupported)} 上没有结果。")
    return "".join(sentences)


def _share_span(values) -> str:
    values = [v for v in values if v is not None]
    return prose.pct_span(values) if values else "—"


def _bucket_table(data) -> str:
    fwd, both = per_width(data, "fwd"), per_width(data, "fwd_bwd")
    body = []
    for low, high in BUCKETS:
        inside = [i for i, r in enumerate(fwd) if r["width"] >= low and (high is None or r["width"] <= high)]
        if not inside:
            continue
        worst = []
        for rows in (fwd, both):
            compared = [rows[i] for i in inside if rows[i]["ratio"] is not None]
            worst += [min(compared, key=lambda r: r["ratio"])] if compared else []
        low_one = min(worst, key=lambda r: r["ratio"]) if worst else None
        body.append([f"{low}–{high}" if high else f"> {low - 1}", f"{len(inside)}",
                     f"{_share_span(fwd[i]['ours'] for i in inside)}（{_share_span(fwd[i]['best_peer'] for i in inside)}）",
                     f"{_share_span(both[i]['ours'] for i in inside)}（{_share_span(both[i]['best_peer'] for i in inside)}）",
                     f"{low_one['label']}（{prose.times(low_one['ratio'])}）" if low_one else "—"])
    table = common.md_table(["宽度区间", "宽度数", "forward 占拷贝上限：生产版（最快对手）",
                             "fwd+bwd 占拷贝上限：生产版（最快对手）", "最差宽度（对手 ÷ 生产版）"], body, "lrrrl")
    return prose.page(table, caption(data), takeaway(data))


def caption(data) -> str:
    res, cfg = data["results"], data["config"]
    skipped = res.get("skipped", {})
    text = (f"{common.dtype_short(cfg['dtype'])}，每个宽度 {cfg['rows']} 行，共 {len(res['shapes'])} 个宽度。"
            f"每次调用的 GPU 时间：CUDA graph 重放、轮换输入（不复用 L2）的中位数；字节按最少计；拷贝上限为本次运行"
            f"测得最快的 4 GiB 设备内拷贝，{sweep_ceiling(res)['gbps']:,.0f} GB/s。最快对手：F.rms_norm、torch.compile(HF)、"
            "Liger、quack 中每个宽度最快的一个；最差宽度取两个方向里对手 ÷ 生产版最小的一次。")
    if skipped:
        text += f"未测：{prose.join(ZH.get(n, n) for n in skipped)}（在本机不能运行）。"
    return text


def _plot(data) -> str:
    """% of the copy ceiling vs width (log2 axis), one line per contender; forward above, fwd+bwd below."""
    plt = common.plot_style()
    res = data["results"]
    shapes = res["shapes"]
    ceiling = sweep_ceiling(res)["gbps"]
    widths = [s["width"] for s in shapes]
    fig, axes = plt.subplots(2, 1, figsize=(10, 7.2), sharex=True)
    names = [n for n in CONTENDERS if any(n in s["fwd"] or n in s["fwd_bwd"] for s in shapes)]
    for ax, phase in zip(axes, ("fwd", "fwd_bwd")):
        for i, name in enumerate(names):
            values = [100 * s[phase][name]["gbps"] / ceiling if name in s[phase] else math.nan for s in shapes]
            ax.plot(widths, values, marker="o", markersize=3, linewidth=2.2 if name == "triton" else 1.2,
                    label=ZH.get(name, name), color=common.SERIES_COLORS[i % len(common.SERIES_COLORS)],
                    zorder=3 if name == "triton" else 2)
        ax.axhline(100, color="#D98F92", linestyle="--", linewidth=1.2)
        ax.axhline(100 * TARGETS[phase], color="#999999", linestyle=":", linewidth=1)
        ax.text(widths[0], 100 * TARGETS[phase], f"目标 {prose.pct(TARGETS[phase])}（宽度 ≥ {TARGET_FROM}）",
                va="bottom", ha="left", fontsize=8)
        ax.set_xscale("log", base=2)
        ax.set_ylim(0, 112)
        ax.set_yticks(range(0, 101, 20))
        ax.set_ylabel("有效带宽（占拷贝上限 %）")
        ax.set_title(f"RMSNorm {PHASE_ZH[phase]}，{common.dtype_short(data['config']['dtype'])}，"
                     f"{data['config']['rows']} 行", fontsize=10, loc="left")
    ticks = [w for w in (256, 512, 1024, 2048, 4096, 8192, 16384, 32768, 65536) if min(widths) <= w <= max(widths)]
    axes[1].set_xticks(ticks, [str(t) for t in ticks])
    axes[1].set_xlabel("隐藏维度 H（列数，对数坐标）")
    axes[0].legend(loc="lower center", bbox_to_anchor=(0.5, 1.1), ncol=len(names), fontsize=9)
    return common.svg_of(fig)


def article_sentence(data) -> str:
    """篇2 §七's summary of the sweep: how often ours is level or ahead, and where it falls behind most."""
    facts = sweep_facts(data)
    widths = [s["width"] for s in data["results"]["shapes"]]
    parts = []
    for phase in TARGETS:
        f = facts[phase]
        parts.append(prose.glue(PHASE_ZH[phase], f"在 {f['level_or_ahead']} 个宽度上与最快的对手持平或更快"))
    text = (f"在 {min(widths)} 到 {max(widths)} 的 {len(widths)} 个宽度上，" + "生产版的 " + "，".join(parts)
            + "（相差 2% 以内算持平）")
    worst = facts["fwd_bwd"]["worst"]
    if worst and worst["ratio"] < 1 - TIE:
        wide = [w for w in facts["fwd_bwd"]["behind"] if w > 12288]
        text += (f"；落后最多的是 forward + backward 在 H={worst['width']}，只有 {ZH[worst['peer']]} 速度的 "
                 f"{worst['ratio']:.2f}×")
        if wide:
            text += f"，落后的宽度里 {len(wide)} 个宽于 12288"
    return text + "。\n"


def render(data: dict) -> dict[str, str]:
    return {"width_sweep.md": _bucket_table(data), "width_sweep.svg": _plot(data),
            "width_sweep_article.md": article_sentence(data)}


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    payload = run(parser.parse_args())
    print(takeaway(payload))
    with contextlib.suppress(Exception):
        print(record.save(NAME, payload))
