"""篇1's cross-experiment artifacts, from p1_profile, p1_roofline and p1_compile together.

* p1_env.md: the article's one "实验环境" box;
* p1_provenance.md: which commit and command produced each data file (methods page);
* p1_keypoints.md: the article's "要点" box; every number in it is computed here from the data.

``bench/report/render.py`` calls :func:`render_summary` and skips it when a data file is missing.
"""
from __future__ import annotations

from bench import store
from bench.report import prose, tables
from bench.report.names import CATEGORY_ZH, FUSION_POINT_ZH
from bench.report.p1_profile import norms_per_layer

DATA = ("p1_profile", "p1_roofline", "p1_compile")
SMALL_KERNELS = ("elementwise", "reduction", "copy / cast / layout")  # the categories fusion targets


def ratio_text(ratio: float) -> str:
    """'快 1.34×' or '慢 1.05×': a speed ratio (old time / new time) in words."""
    return f"快 {tables.fmt(ratio)}×" if ratio >= 1 else f"慢 {tables.fmt(1 / ratio)}×"


def _fwd_bwd_ratio(entry, name):
    contenders = entry["contenders"]
    return contenders["eager"]["fwd_bwd"]["median_us"] / contenders[name]["fwd_bwd"]["median_us"]


def rmsnorm_point(profile: dict, roofline: dict) -> str:
    static = profile["results"]["static"]
    layers, norms = static["num_hidden_layers"], static["modules"]["Qwen3RMSNorm"]
    per_layer = norms_per_layer(static)
    count = f"{per_layer} × {layers} + 1 = {norms}" if norms == per_layer * layers + 1 else f"{norms}"
    kernels = {p["name"]: p for p in roofline["results"]["points"]}["RMSNorm"]["eager"]["kernels"]
    return (f"先数清要融合的算子：Qwen3-{static['size']} 有 {count} 个 RMSNorm（每层 4 个，含 q_norm / k_norm，"
            f"再加输出前的 1 个），eager 下每个 RMSNorm 的 forward 拆成 {kernels} 个 kernel。")


def category_point(profile: dict) -> str:
    config, main = profile["config"], profile["results"]["main"]
    by_name = {c["category"]: c for c in main["categories"]}
    total_kernels = sum(c["kernels"] for c in main["categories"])
    gemm = 100 * by_name["GEMM"]["share"]
    small = [by_name[c] for c in SMALL_KERNELS if c in by_name]
    small_share = 100 * sum(c["share"] for c in small)
    small_kernels = sum(c["kernels"] for c in small)
    names = [CATEGORY_ZH[c["category"]] for c in small]
    names = "、".join(names[:-1]) + "与" + names[-1] if len(names) > 1 else "".join(names)
    count = f"{total_kernels} 个 kernel 里的 {small_kernels} 个"
    share = (f"合计只占 kernel 时间的 {small_share:.1f}%，却是 {count}" if small_kernels / total_kernels > small_share / 100
             else f"合计占 kernel 时间的 {small_share:.1f}%、{count}")
    return (f"在 profile 里盯住 GEMM 之间的小 kernel：一个训练 step（Qwen3-{config['size']} 层几何，T={config['seq_len']}）里，"
            f"{CATEGORY_ZH['GEMM']}占 kernel 时间的 {gemm:.1f}%；{names}{share}，它们正是融合的目标。")


def roofline_point(roofline: dict) -> str:
    points = {p["name"]: p for p in roofline["results"]["points"]}
    rms = points["RMSNorm"]
    before, after = rms["eager"]["bytes"], rms["fused"]["bytes"]
    speedups = {name: p["measured"]["eager"]["median_us"] / p["measured"]["fused"]["median_us"]
                for name, p in points.items() if {"eager", "fused"} <= set(p.get("measured", {}))}
    best = max(speedups, key=speedups.get)
    text = (f"动手之前用 roofline 估上限：RMSNorm 融合成 {rms['fused']['kernels']} 个 kernel 后，每层 4 个 RMSNorm "
            f"每 token 读写的显存从 {before:,.0f} 字节降到 {after:,.0f} 字节（原来的 {100 * after / before:.0f}%），"
            f"融合版实测{ratio_text(speedups['RMSNorm'])}")
    if best == "RMSNorm":
        return text + f"，是 {len(speedups)} 个融合点里融合版加速最大的。"
    return (text + f"；{len(speedups)} 个融合点里融合版加速最大的是 {FUSION_POINT_ZH.get(best, best)}"
            f"（{tables.fmt(speedups[best])}×）。")


def compile_point(profile: dict, compiled: dict) -> str:
    shapes = sorted(compiled["results"]["shapes"], key=lambda e: e["tokens"])
    large, small = shapes[-1], shapes[0]
    eager, fused = large["contenders"]["eager"], large["contenders"]["compile"]
    k_eager, k_fused = eager["launches_fwd_bwd"]["kernels"], fused["launches_fwd_bwd"]["kernels"]
    text = (f"先试 torch.compile：编译一个解码层，B={large['batch']}、T={large['seq_len']} 时 fwd+bwd "
            f"{ratio_text(_fwd_bwd_ratio(large, 'compile'))}，GPU kernel 从 {k_eager} 个"
            f"{'减到' if k_fused < k_eager else '变成'} {k_fused} 个")
    fewest = min(profile["results"]["sweep"], key=lambda e: e["tokens"])
    busy = 100 * fewest["launch"]["busy_us"] / (1e3 * fewest["step"]["median_ms"])
    if busy < 50:
        text += f"；token 很少时先解决 CPU 发射：每步 {fewest['tokens']} 个 token 时 GPU 忙碌占比只有 {busy:.0f}%"
    else:
        text += f"；每步 {fewest['tokens']} 个 token 时 GPU 忙碌占比为 {busy:.0f}%"
    if "cuda_graph" in small["contenders"] and small is not large:
        text += (f"，B={small['batch']}、T={small['seq_len']} 时 CUDA graph 让一个层的 fwd+bwd "
                 f"{ratio_text(_fwd_bwd_ratio(small, 'cuda_graph'))}（torch.compile "
                 f"{ratio_text(_fwd_bwd_ratio(small, 'compile'))}）")
    return text + "。"


def keypoints(profile: dict, roofline: dict, compiled: dict) -> str:
    bullets = [rmsnorm_point(profile, roofline), category_point(profile), roofline_point(roofline),
               compile_point(profile, compiled)]
    return '!!! abstract "要点"\n\n' + "".join(f"    - {b}\n" for b in bullets)


def provenance(profile: dict, roofline: dict, compiled: dict) -> str:
    records = {"p1_profile.json": profile, profile["results"]["main"]["trace_file"]: profile,
               "p1_roofline.json": roofline, "p1_compile.json": compiled}
    folder = f"docs/data/{store.gpu_slug(profile['environment'].get('gpu') or 'cpu')}/"
    return tables.provenance_table(records) + prose.caption(
        f"数据文件都在 `{folder}` 下；提交是测量时的 commit；从数据重新生成表格与图：`python -m bench.render`")


def render_summary(load) -> dict[str, str]:
    profile, roofline, compiled = (load(name) for name in DATA)
    return {
        "p1_env.md": tables.env_box([d["environment"] for d in (profile, roofline, compiled)]),
        "p1_provenance.md": provenance(profile, roofline, compiled),
        "p1_keypoints.md": keypoints(profile, roofline, compiled),
    }
