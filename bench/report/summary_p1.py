"""篇1's cross-experiment artifacts, from p1_profile, p1_roofline and p1_compile together.

* p1_env.md: the article's one "实验环境" box;
* p1_provenance.md: which commit and command produced each data file (methods page);
* p1_keypoints.md: the article's "要点" box; every number in it is computed here from the data;
* p1_profile_overhead.md: §3.2's sentence on what the profiler adds to the profiled step's gaps;
* p1_swiglu_point.md: §五's SwiGLU bullet head, the time fusing it saves per layer;
* p1_gemm_spread.md: §五's sentence under the ceilings table: the roofline's matmul rate is one run of one
  shape; other runs measured more (fullsize.json's 8192³ GEMM, fusion.json's QKV GEMMs, when committed), and
  whether any fusion point changes side at the highest rate's ridge point;
* p1_conclusion.md: §八's ranking of the fusion points by the time they save per layer, ties where the
  p20–p80 intervals of the savings overlap.

``bench/report/render.py`` calls :func:`render_summary` and skips it when a data file is missing.
"""
from __future__ import annotations

from bench import store
from bench.report import prose, tables
from bench.report.names import CATEGORY_ZH, FUSION_POINT_ZH
from bench.report.p1_profile import norms_per_layer
from bench.report.p1_roofline import ridge_flop_per_byte
from bench.report.render import MissingData

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


def profiled_model(profile: dict) -> str:
    """What the profiled step ran, so that a share of it is not read as a share of the whole model: few decoder
    layers, but the embedding and lm_head at full size."""
    config, layers = profile["config"], profile["results"]["static"]["num_hidden_layers"]
    return (f"Qwen3-{config['size']} 层几何，T={config['seq_len']}，{config['layers']} 个解码层加完整尺寸的 lm_head，"
            f"所以 lm_head 和交叉熵的比重比 {layers} 层的完整模型大")


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
    return (f"在 profile 里盯住 GEMM 之间的小 kernel：一个训练 step（{profiled_model(profile)}）里，"
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
            f"用 torch.compile 编译 HF 这几行，实测{ratio_text(speedups['RMSNorm'])}")
    if best == "RMSNorm":
        return text + f"，是 {len(speedups)} 个融合点里编译后加速最大的。"
    return (text + f"；{len(speedups)} 个融合点里编译后加速最大的是 {FUSION_POINT_ZH.get(best, best)}"
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


def cpu_note(profile: dict, roofline: dict, compiled: dict) -> str:
    """The 实验环境 box's CPU line: the host CPU where the records name it (bench/harness/record.py records it
    from now on), else that it was not recorded; either way which figures depend on it (the CPU-bound ones)."""
    records = {"p1_profile": profile, "p1_roofline": roofline, "p1_compile": compiled}
    named = [f"{e['cpu']}（{e['cpu_count']} 个逻辑 CPU）" if e.get("cpu_count") else e["cpu"]
             for e in (d["environment"] for d in records.values()) if e.get("cpu")]
    missing = [f"`{name}.json`" for name, d in records.items() if not d["environment"].get("cpu")]
    if not named:
        which = "这次运行的数据没有记录 CPU 型号"
    else:
        which = "、".join(dict.fromkeys(named)) + (f"（{prose.join(missing)} 没有记录）" if missing else "")
    fewest = min(profile["results"]["sweep"], key=lambda e: e["tokens"])["tokens"]
    small = min(compiled["results"]["shapes"], key=lambda e: e["tokens"])
    return (f"CPU：{which}。与它有关的是 CPU 受限的数字：每步 {fewest} 个 token 这类小 step 的时间与 GPU 忙碌占比"
            f"（§3.3），时间线上的发射节奏（§3.2），B={small['batch']}、T={small['seq_len']} 时 CUDA graph 与 "
            f"torch.compile 的加速（§六）")


def profile_overhead(profile: dict) -> str:
    """§3.2: the profiled step against the unprofiled one, so that the timeline's gaps read as an upper bound."""
    launch, step_ms = profile["results"]["main"]["launch"], profile["results"]["main"]["step"]["median_ms"]
    span_ms, busy_ms, idle_ms = launch["span_us"] / 1e3, launch["busy_us"] / 1e3, launch["idle_us"] / 1e3
    longer = (f"比不开 profiler 的 step 中位数 {tables.fmt(step_ms)} ms 长 {tables.fmt(span_ms - step_ms, 2)} ms"
              if span_ms > step_ms else f"不开 profiler 的 step 中位数是 {tables.fmt(step_ms)} ms")
    unprofiled_idle = max(step_ms - busy_ms, 0.0)
    return (f"这张图和 §3.3 的表取自同一个开着 profiler 的 step。profiler 在 CPU 上记录每个算子和每次发射，"
            f"这本身要花时间：这一步从第一个 kernel 到最后一个 kernel 跨了 {tables.fmt(span_ms)} ms，{longer}，"
            f"其中 GPU 空等 {tables.fmt(idle_ms)} ms（忙碌 {100 * launch['busy_fraction']:.1f}%）。"
            f"不开 profiler 时，同样 {tables.fmt(busy_ms)} ms 的 kernel 落在 {tables.fmt(step_ms)} ms 里，"
            f"空等最多 {tables.fmt(unprofiled_idle, 2)} ms（忙碌 {100 * busy_ms / step_ms:.1f}%）。"
            f"所以图上的空隙被 profiler 拉宽了，是上界：它指出空等可能出在哪里，总量以不开 profiler 的数字为准。\n")


def savings(roofline: dict) -> list[dict]:
    """Per decoder layer, forward: the time each fusion point saves (eager median − fused median) with the
    interval [eager p20 − fused p80, eager p80 − fused p20], for the points measured at the run's token count
    (attention softmax runs at B=1 and is already fused by sdpa: not ranked), largest saving first."""
    out = []
    for p in roofline["results"]["points"]:
        m = p.get("measured", {})
        if not {"eager", "fused"} <= set(m) or p["tokens"] != roofline["config"]["tokens"]:
            continue
        e, f = m["eager"], m["fused"]
        out.append({"name": p["name"], "eager_us": e["median_us"], "fused_us": f["median_us"],
                    "saved_us": e["median_us"] - f["median_us"],
                    "low_us": e["p20_us"] - f["p80_us"], "high_us": e["p80_us"] - f["p20_us"]})
    return sorted(out, key=lambda r: r["saved_us"], reverse=True)


def ranked(rows: list[dict]) -> list[dict]:
    """``rows`` (from :func:`savings`) with a ``rank``: a saving whose interval overlaps the one above it shares
    its rank (持平); a saving whose interval reaches 0 or below gets no rank (``None``): it saves nothing."""
    out, rank = [], 0
    for index, row in enumerate(rows):
        row = dict(row)
        if row["low_us"] <= 0:
            row["rank"] = None
        elif index and out[-1]["rank"] is not None and row["high_us"] >= out[-1]["low_us"]:
            row["rank"] = out[-1]["rank"]
        else:
            rank += 1
            row["rank"] = rank
        out.append(row)
    return out


def _point_zh(name: str) -> str:
    return FUSION_POINT_ZH.get(name, name)


def _how_many(name: str, profile: dict) -> str:
    """'每层 4 个' for RMSNorm (its point counts all the norms of a layer), '' for the others."""
    return f"每层 {norms_per_layer(profile['results']['static'])} 个" if name == "RMSNorm" else ""


def _per_layer(name: str, profile: dict) -> str:
    """'RMSNorm（每层 4 个）', 'RoPE': a fusion point as the ranking table names it."""
    many = _how_many(name, profile)
    return _point_zh(name) + (f"（{many}）" if many else "")


def _saved(row: dict, profile: dict) -> str:
    """'RMSNorm（每层 4 个，省 2,631 µs）'."""
    many = _how_many(row["name"], profile)
    return f"{_point_zh(row['name'])}（{many + '，' if many else ''}省 {tables.fmt(row['saved_us'])} µs）"


def swiglu_point(profile: dict, roofline: dict) -> str:
    """§五's SwiGLU bullet head: the absolute saving per layer next to its speed-up and RMSNorm's saving."""
    rows = {r["name"]: r for r in savings(roofline)}
    swiglu, rms = rows["SwiGLU"], rows.get("RMSNorm")
    text = (f"- **SwiGLU：每层 forward 只省 {tables.fmt(swiglu['saved_us'])} µs。** torch.compile 融合后快 "
            f"{tables.fmt(swiglu['eager_us'] / swiglu['fused_us'])}×，可 eager 一共才 {tables.fmt(swiglu['eager_us'])} µs")
    if rms:
        text += f"，而 RMSNorm 每层省 {tables.fmt(rms['saved_us'])} µs"
    return text + "。"  # no newline: the page continues the bullet on the next line


def conclusion(profile: dict, roofline: dict) -> str:
    """§八: the fusion points ranked by the time they save per layer, with a takeaway sentence and a caption."""
    c = roofline["config"]
    rows = ranked(savings(roofline))
    gaining = [r for r in rows if r["rank"] is not None]
    parts = []
    for rank in sorted({r["rank"] for r in gaining}):
        group = [r for r in gaining if r["rank"] == rank]
        names = prose.join(_saved(r, profile) for r in group)
        parts.append(names + ("，彼此持平" if len(group) > 1 else ""))
    order = ["先融合 " + parts[0]] + (["其次是 " + parts[1]] if len(parts) > 1 else []) + \
        (["再往后 " + prose.join(parts[2:]) + "，省得少"] if len(parts) > 2 else [])
    none = [_point_zh(r["name"]) for r in rows if r["rank"] is None]
    takeaway = "按每个解码层的 forward 省下的时间排，" + "；".join(order) + "。"
    if none:
        takeaway += f"{prose.join(none)}省下的时间与零分不开，不值得做。"
    fastest = max(rows, key=lambda r: r["eager_us"] / r["fused_us"])
    if gaining and fastest is not gaining[0]:
        takeaway += (f"排名看省下的时间，不看倍数：倍数最大的是 {_point_zh(fastest['name'])}"
                     f"（{tables.fmt(fastest['eager_us'] / fastest['fused_us'])}×），省得最多的是 "
                     f"{_point_zh(gaining[0]['name'])}。")
    if gaining and gaining[0]["name"] == "RMSNorm":
        takeaway += "篇 2 手写的，正是排第一的 RMSNorm。"
    table_rows = [["—" if r["rank"] is None else r["rank"], _per_layer(r["name"], profile), tables.fmt(r["eager_us"]),
                   tables.fmt(r["fused_us"]), tables.fmt(r["saved_us"]),
                   f"{tables.fmt(r['low_us'])} 至 {tables.fmt(r['high_us'])}"] for r in rows]
    headers = ["名次", "融合点", "HF eager（µs）", "融合后（µs）", "每层省下（µs）", "省下的区间（µs）"]
    left_out = [_point_zh(p["name"]) for p in roofline["results"]["points"]
                if p["name"] not in {r["name"] for r in rows}]
    return takeaway + "\n\n" + tables.md_table(headers, table_rows, align="clrrrr") + prose.caption(
        f"一个解码层的 forward，Qwen3-{c['size']} 几何，{tables.dtype_short(c['dtype'])}，B={c['batch']}、T={c['seq_len']}"
        f"（{c['tokens']:,} 个 token）；融合后是 torch.compile 编译的同一段 HF 代码，QKV 合并是拼接权重后的一次 GEMM",
        "省下 = 两者中位数之差；区间从 eager 的 20% 分位减融合后的 80% 分位，到 eager 的 80% 分位减融合后的 20% 分位，"
        "与上一名的区间重叠就算持平，区间碰到 0 就不排名",
        "只计 forward" + (f"；{prose.glue(prose.join(left_out), '不在表里')}：它在 B={c['softmax_batch']} 下测，"
                         "Qwen3 默认的 sdpa 已经把它融合好了" if left_out else ""), sep="；")


def other_gemm_rates(fullsize: dict | None, fusion: dict | None) -> list[tuple[str, float]]:
    """(what, TFLOP/s) of the bf16 GEMM rates other runs recorded: fullsize.json's 8192³ GEMM (its MFU
    denominator) and the fastest QKV projection GEMM of fusion.json (any form, forward)."""
    out = []
    ceiling = (fullsize or {}).get("config", {}).get("gemm_ceiling_tflops")
    if ceiling:
        out.append(("同一个 8192³ 的 bf16 矩阵乘在篇 2 完整模型实验的那次运行里", ceiling))
    rates = [stats["tflops"] for entry in (fusion or {}).get("results", {}).get("kernels", {}).get("qkv", [])
             for stats in entry["fwd"].values() if isinstance(stats, dict) and stats.get("tflops")]
    if rates:
        out.append(("番外二的 QKV 投影 GEMM 最高", max(rates)))
    return out


def gemm_spread(roofline: dict, fullsize: dict | None = None, fusion: dict | None = None) -> str:
    """Under §五's ceilings table: the matmul rate is one run of one shape, not a ceiling; the other runs' rates,
    the ridge point at the highest of them, and whether any fusion point changes side there."""
    ceilings = roofline["results"]["ceilings"]
    here = ceilings["matmul"]["tflops"]
    text = "矩阵乘这一行只是一次运行、一个形状的中位数，不是上限"
    others = other_gemm_rates(fullsize, fusion)
    if not others:
        return text + "。\n"
    text += "：" + "，".join(f"{what}测到 {tables.fmt(rate, 4)} TFLOP/s" for what, rate in others)
    top = max(rate for _, rate in others)
    if top <= here:
        return text + "。\n"
    ridge, high = ridge_flop_per_byte(roofline), top * 1e12 / (ceilings["copy"]["gbps"] * 1e9)
    moved = [FUSION_POINT_ZH.get(p["name"], p["name"]) for p in roofline["results"]["points"]
             if any((p[form]["intensity"] < ridge) != (p[form]["intensity"] < high) for form in ("eager", "fused"))]
    text += f"。按最高的 {tables.fmt(top, 4)} TFLOP/s 算，屋脊点是 {tables.fmt(high)} FLOP/字节，"
    return text + (f"{prose.join(moved)}会换到另一边。\n" if moved else "下表每个融合点落在哪一边都不变。\n")


def provenance(profile: dict, roofline: dict, compiled: dict) -> str:
    records = {"p1_profile.json": profile, profile["results"]["main"]["trace_file"]: profile,
               "p1_roofline.json": roofline, "p1_compile.json": compiled}
    folder = f"docs/data/{store.gpu_slug(profile['environment'].get('gpu') or 'cpu')}/"
    return tables.provenance_table(records) + prose.caption(
        f"数据文件都在 `{folder}` 下；提交是测量时的 commit；从数据重新生成表格与图：`python -m bench.render`")


def render_summary(load) -> dict[str, str]:
    profile, roofline, compiled = (load(name) for name in DATA)
    others = {}
    for name in ("fullsize", "fusion"):  # other runs' GEMM rates, where committed
        try:
            others[name] = load(name)
        except MissingData:
            others[name] = None
    return {
        "p1_gemm_spread.md": gemm_spread(roofline, others["fullsize"], others["fusion"]),
        "p1_env.md": tables.env_box([d["environment"] for d in (profile, roofline, compiled)],
                                    note=cpu_note(profile, roofline, compiled)),
        "p1_profile_overhead.md": profile_overhead(profile),
        "p1_swiglu_point.md": swiglu_point(profile, roofline),
        "p1_conclusion.md": conclusion(profile, roofline),
        "p1_provenance.md": provenance(profile, roofline, compiled),
        "p1_keypoints.md": keypoints(profile, roofline, compiled),
    }
