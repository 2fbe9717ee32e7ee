"""篇1's cross-experiment artifacts, from p1_profile, p1_roofline and p1_compile together.

* p1_env.md: the article's one "实验环境" box;
* p1_provenance.md: which commit and command produced each data file (methods page);
* p1_conclusion.md: §八's table of the fusion points ranked by the time they save per layer, ties where the
  p20–p80 intervals of the savings overlap (the sentence above it is the page's own);

and ``summary_values(load)``: the figures 篇 1's hand-written 要点, §3.2's reading of the profiled step, §五's
bullets and §八 write ({{ p1.NAME }}), among them §五's other runs' GEMM rates (fullsize.json's 8192³ GEMM, fusion.json's QKV GEMMs, when committed) and
the ridge point at the highest.

``bench/report/render.py`` calls :func:`render_summary` and skips it when a data file is missing.
"""
from __future__ import annotations

from bench import store
from bench.report import prose, tables
from bench.report.names import FUSION_POINT_ZH
from bench.report.p1_profile import norms_per_layer
from bench.report.p1_roofline import ridge_flop_per_byte
from bench.report.render import MissingData

DATA = ("p1_profile", "p1_roofline", "p1_compile")
SMALL_KERNELS = ("elementwise", "reduction", "copy / cast / layout")  # the categories fusion targets


def _fwd_bwd_ratio(entry, name):
    contenders = entry["contenders"]
    return contenders["eager"]["fwd_bwd"]["median_us"] / contenders[name]["fwd_bwd"]["median_us"]


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


def profile_overhead(profile: dict) -> dict:
    """§3.2: the profiled step against the unprofiled ones (ms): the profiled step's kernel span, busy and idle
    time, the unprofiled steps' median and p80, and the most the GPU can idle in the median step (its length less
    the same kernel time)."""
    launch, step = profile["results"]["main"]["launch"], profile["results"]["main"]["step"]
    busy_ms = launch["busy_us"] / 1e3
    return {"span_ms": launch["span_us"] / 1e3, "busy_ms": busy_ms, "idle_ms": launch["idle_us"] / 1e3,
            "busy_fraction": launch["busy_fraction"], "step_ms": step["median_ms"], "step_p80_ms": step["p80_ms"],
            "unprofiled_idle_ms": max(step["median_ms"] - busy_ms, 0.0),
            "unprofiled_busy_fraction": busy_ms / step["median_ms"]}


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


def conclusion(profile: dict, roofline: dict) -> str:
    """§八: the fusion points ranked by the time they save per layer, with a takeaway sentence and a caption."""
    c = roofline["config"]
    rows = ranked(savings(roofline))
    table_rows = [["—" if r["rank"] is None else r["rank"], _per_layer(r["name"], profile), tables.fmt(r["eager_us"]),
                   tables.fmt(r["fused_us"]), tables.fmt(r["saved_us"]),
                   f"{tables.fmt(r['low_us'])} 至 {tables.fmt(r['high_us'])}"] for r in rows]
    headers = ["名次", "融合点", "HF eager（µs）", "融合后（µs）", "每层省下（µs）", "省下的区间（µs）"]
    left_out = [_point_zh(p["name"]) for p in roofline["results"]["points"]
                if p["name"] not in {r["name"] for r in rows}]
    return tables.md_table(headers, table_rows, align="clrrrr") + prose.caption(
        f"一个解码层的 forward，Qwen3-{c['size']} 几何，{tables.dtype_short(c['dtype'])}，B={c['batch']}、T={c['seq_len']}"
        f"（{c['tokens']:,} 个 token）；融合后是 torch.compile 编译的同一段 HF 代码，QKV 合并是拼接权重后的一次 GEMM",
        "省下 = 两者中位数之差；区间从 eager 的 20% 分位减融合后的 80% 分位，到 eager 的 80% 分位减融合后的 20% 分位，"
        "与上一名的区间重叠就算持平，区间碰到 0 就不排名",
        "只计 forward" + (f"；{prose.glue(prose.join(left_out), '不在表里')}：它在 B={c['softmax_batch']} 下测，"
                         "Qwen3 默认的 sdpa 已经把它融合好了" if left_out else ""), sep="；")


def other_gemm_rates(fullsize: dict | None, fusion: dict | None) -> dict[str, float]:
    """{"fullsize": TFLOP/s, "qkv": TFLOP/s} of the bf16 GEMM rates other runs recorded, where committed:
    fullsize.json's 8192³ GEMM (its MFU denominator) and the fastest QKV projection GEMM of fusion.json (any form,
    forward)."""
    out = {}
    ceiling = (fullsize or {}).get("config", {}).get("gemm_ceiling_tflops")
    if ceiling:
        out["fullsize"] = ceiling
    rates = [stats["tflops"] for entry in (fusion or {}).get("results", {}).get("kernels", {}).get("qkv", [])
             for stats in entry["fwd"].values() if isinstance(stats, dict) and stats.get("tflops")]
    if rates:
        out["qkv"] = max(rates)
    return out


def ridge_at(roofline: dict, tflops: float) -> float:
    """The ridge point (FLOP per byte) at a matmul rate of ``tflops`` and the roofline's copy bandwidth."""
    return tflops * 1e12 / (roofline["results"]["ceilings"]["copy"]["gbps"] * 1e9)


def side_changes(roofline: dict, ridge: float) -> list[str]:
    """The fusion points (eager or fused form) on the other side of ``ridge`` than of the roofline's own."""
    own = ridge_flop_per_byte(roofline)
    return [p["name"] for p in roofline["results"]["points"]
            if any((p[form]["intensity"] < own) != (p[form]["intensity"] < ridge) for form in ("eager", "fused"))]


def provenance(profile: dict, roofline: dict, compiled: dict) -> str:
    records = {"p1_profile.json": profile, profile["results"]["main"]["trace_file"]: profile,
               "p1_roofline.json": roofline, "p1_compile.json": compiled}
    folder = f"docs/data/{store.gpu_slug(profile['environment'].get('gpu') or 'cpu')}/"
    return tables.provenance_table(records) + prose.caption(
        f"数据文件都在 `{folder}` 下；提交是测量时的 commit；从数据重新生成表格与图：`python -m bench.render`")


def render_summary(load) -> dict[str, str]:
    profile, roofline, compiled = (load(name) for name in DATA)
    return {
        "p1_env.md": tables.env_box([d["environment"] for d in (profile, roofline, compiled)],
                                    note=cpu_note(profile, roofline, compiled)),
        "p1_conclusion.md": conclusion(profile, roofline),
        "p1_provenance.md": provenance(profile, roofline, compiled),
    }


def summary_values(load) -> dict[str, dict[str, str]]:
    """{{ p1.NAME }}: the figures 篇 1's 要点 and §八 write in their hand-written sentences."""
    profile, roofline, compiled = (load(name) for name in DATA)
    static, main = profile["results"]["static"], profile["results"]["main"]
    by_cat = {c["category"]: c for c in main["categories"]}
    small = [by_cat[c] for c in SMALL_KERNELS if c in by_cat]
    points = {p["name"]: p for p in roofline["results"]["points"]}
    shapes = sorted(compiled["results"]["shapes"], key=lambda e: e["tokens"])
    large, tiny = shapes[-1], shapes[0]
    fewest = min(profile["results"]["sweep"], key=lambda e: e["tokens"])
    out = {"norms": str(static["modules"]["Qwen3RMSNorm"]), "layers": str(static["num_hidden_layers"]),
           "norm_kernels": str(points["RMSNorm"]["eager"]["kernels"]),
           "gemm_share": prose.pct(by_cat["GEMM"]["share"], 1),
           "small_share": prose.pct(sum(c["share"] for c in small), 1),
           "small_kernels": str(sum(c["kernels"] for c in small)),
           "kernels": str(sum(c["kernels"] for c in main["categories"])),
           "fewest_tokens": str(fewest["tokens"]),
           "fewest_busy": prose.pct(fewest["launch"]["busy_us"] / (1e3 * fewest["step"]["median_ms"])),
           "large_shape": f"B={large['batch']}、T={large['seq_len']}",
           "small_shape": f"B={tiny['batch']}、T={tiny['seq_len']}",
           "compile_large": f"{tables.fmt(_fwd_bwd_ratio(large, 'compile'))}×",
           "compile_small": f"{tables.fmt(_fwd_bwd_ratio(tiny, 'compile'))}×",
           "graph_small": f"{tables.fmt(_fwd_bwd_ratio(tiny, 'cuda_graph'))}×",
           "kernels_eager": str(large["contenders"]["eager"]["launches_fwd_bwd"]["kernels"]),
           "kernels_compile": str(large["contenders"]["compile"]["launches_fwd_bwd"]["kernels"])}
    over = profile_overhead(profile)  # §3.2: the profiled step next to the unprofiled ones
    out.update(profiled_span=f"{tables.fmt(over['span_ms'])} ms", step_median=f"{tables.fmt(over['step_ms'])} ms",
               profiled_extra=f"{tables.fmt(over['span_ms'] - over['step_ms'], 2)} ms",
               profiled_idle=f"{tables.fmt(over['idle_ms'])} ms", profiled_busy=prose.pct(over["busy_fraction"], 1),
               kernel_time=f"{tables.fmt(over['busy_ms'])} ms",
               unprofiled_idle=f"{tables.fmt(over['unprofiled_idle_ms'], 2)} ms",
               unprofiled_busy=prose.pct(over["unprofiled_busy_fraction"], 1))
    others = {}
    for name in ("fullsize", "fusion"):  # §五: other runs' GEMM rates, where committed
        try:
            others[name] = load(name)
        except MissingData:
            others[name] = None
    for name, rate in other_gemm_rates(others["fullsize"], others["fusion"]).items():
        out[f"gemm_{name}"] = f"{tables.fmt(rate, 4)} TFLOP/s"
    rates = other_gemm_rates(others["fullsize"], others["fusion"]).values()
    if rates:
        out["gemm_top_ridge"] = f"{tables.fmt(ridge_at(roofline, max(rates)))} FLOP/字节"
    for row in savings(roofline):
        key = "qkv" if row["name"].upper().startswith("QKV") else row["name"].lower()
        out[f"{key}_saved"] = f"{tables.fmt(row['saved_us'])} µs"
        out[f"{key}_speedup"] = f"{tables.fmt(row['eager_us'] / row['fused_us'])}×"
        out[f"{key}_eager"] = f"{tables.fmt(row['eager_us'])} µs"
    return {"p1": out}
