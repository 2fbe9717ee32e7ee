"""loss.json -> the fused loss's tables: lm_head + causal-LM cross-entropy, every contender side by side.

* ``loss_table.md``: at the 8-layer step's shape (the run's first), a row per contender that ran: forward +
  backward in ms, its time ÷ ours (above 1: ours is faster), peak memory above the inputs, and how far its
  loss and its weight gradient are from the fp32 reference. The caption names the contenders that did not
  run, with why.
* ``loss_sizes.md``: a row per Qwen3 hidden size: ours' forward + backward in ms, the GEMM floor where the run
  measured it, and each peer's time ÷ ours.
* ``loss_chunks.md``: ours at each chunk size of the sweep, at the step's shape: time, peak memory and the
  chunk's logits buffer.
* ``loss_targets.md``: the targets of issue "the fusion set, part 2", each met or missed, from the step's
  shape: time <= every peer's (level within the run's tie rule counts as met), peak memory <= Liger's and
  within 10 % of Cut Cross-Entropy's; and every contender whose loss is off the reference by more than 1 %.
"""
from __future__ import annotations

import re

from bench.report import prose, tables
from bench.report.names import LOSS_LABELS, tie

NAME = "loss"
PHASE = "fwd_bwd"
WRONG_LOSS = 0.01  # a loss this far (relative) from the fp32 reference is wrong, not rounded
CCE_MEMORY_SLACK = 1.10  # the target: peak memory within 10 % of Cut Cross-Entropy's


def sweep_chunk(name: str) -> int | None:
    """The chunk size of the record's sweep contender ``ours_cNNN`` (its naming); None otherwise."""
    match = re.fullmatch(r"ours_c(\d+)", name)
    return int(match.group(1)) if match else None


def label(name: str) -> str:
    if sweep_chunk(name) is not None:
        return f"本站（chunk {sweep_chunk(name)}）"
    return LOSS_LABELS.get(name, name)


def gib(nbytes) -> str:
    return "—" if nbytes is None else f"{nbytes / 2**30:.2f}"


def step_shape(data) -> dict:
    return data["results"]["shapes"][0]


def timed(entry) -> dict:
    return entry[PHASE]


def why_not(reason: str) -> str:
    if reason.startswith("ModuleNotFoundError"):
        return "未安装"
    if "GPU only" in reason:
        return "只在 GPU 上运行"
    if "has no" in reason:
        return "此版 torch 没有"
    return reason[:60]


def skipped_caption(data) -> str:
    reasons = data["results"]["skipped"]
    if not reasons:
        return ""
    return "没有运行：" + "；".join(f"{label(n)}（{why_not(r)}）" for n, r in reasons.items())


def table(data) -> str:
    entry, cfg = step_shape(data), data["config"]
    times = timed(entry)
    ours = times[cfg["ours"]]["median_us"]
    order = [n for n in [*cfg["peers"], cfg["ours"], *cfg.get("ours_variants", [])] if n in times]
    f = tables.fmt
    body = [[label(n), f(times[n]["median_us"] / 1e3), prose.times(times[n]["median_us"] / ours),
             gib(times[n]["peak_bytes"]), f"{times[n]['loss_rel_err']:.1e}",
             f"{times[n]['grad_weight']['norm_err']:.1e}"] for n in order]
    headers = ["实现", "fwd+bwd ms", "÷ 本站", "峰值 GiB", "loss 误差", "dW 误差"]
    parts = [f"{entry['label']}，{cfg['tokens']:,} 个 token，词表 {cfg['vocab']:,}",
             tables.dtype_short(cfg["dtype"]),
             "峰值为调用期间比调用前多占的显存：调用前已有输入和上一次调用留下的一份梯度（调用开始时释放、由这次的梯度取代），"
             "所以它是输入和一份梯度之外的显存（logits 或其分块，以及实现自己多留的缓冲）",
             "误差相对 fp32 参考（loss 为相对误差，dW 为范数相对误差）", skipped_caption(data)]
    return prose.page(tables.md_table(headers, body), "，".join(p for p in parts if p) + "。")


def default_chunk(entry: dict, cfg: dict) -> int:
    """The chunk the code's default config used at this shape (``ours`` ran with it)."""
    return entry["ours_config"]["chunk_tokens"]


def swept(entry: dict, cfg: dict) -> dict[int, float]:
    """{chunk: forward + backward µs} of the chunks this run swept at this shape."""
    times = timed(entry)
    return {c: times[f"ours_c{c}"]["median_us"] for c in cfg["chunk_sweep"] if f"ours_c{c}" in times}


def default_vs_fastest(entry: dict, cfg: dict) -> tuple[int, float] | None:
    """(the fastest swept chunk, the default chunk's time ÷ its time − 1); None without the default in the sweep."""
    chunks = swept(entry, cfg)
    default = default_chunk(entry, cfg)
    if default not in chunks:
        return None
    fastest = min(chunks, key=chunks.get)
    return fastest, chunks[default] / chunks[fastest] - 1


def floor_ratio(entry: dict, name: str) -> float | None:
    """A contender's forward + backward ÷ the shape's GEMM floor; None where the run did not time the floor."""
    floor = entry.get("gemm_floor", {}).get("total_us")
    times = timed(entry)
    return times[name]["median_us"] / floor if floor and name in times else None


SIZE_PEERS = ("compile", "liger", "hf_eager")


def sizes_table(data) -> str:
    """A row per hidden size: ours (the default config), the GEMM floor (the three full-size GEMMs timed alone,
    where the run measured it) and each peer's time ÷ ours; the default chunks in the caption."""
    cfg = data["config"]
    body, chunks = [], []
    for entry in sorted(data["results"]["shapes"], key=lambda e: e["shape"]["hidden"]):
        times = timed(entry)
        chunks.append(default_chunk(entry, cfg))
        ours = times[cfg["ours"]]["median_us"]
        models = entry.get("models") or ""
        floor = entry.get("gemm_floor", {}).get("total_us")
        body.append([f"{entry['label']}（{models}）" if models else entry["label"], tables.fmt(ours / 1e3),
                     tables.fmt(floor / 1e3) if floor else "—",
                     *(prose.times(times[n]["median_us"] / ours) if n in times else "—" for n in SIZE_PEERS)])
    headers = ["形状（Qwen3）", "本站 ms", "GEMM 下限 ms", *(f"{label(n)} ÷ 本站" for n in SIZE_PEERS)]
    used = "、".join(f"{c:,}" for c in sorted(set(chunks)))
    floor_words = ("GEMM 下限是三个完整的 N × V × H GEMM（logits、d_hidden、d_W）单独计时之和，"
                   if any(e.get("gemm_floor") for e in data["results"]["shapes"]) else "这次运行没有单独测 GEMM 下限；")
    return prose.page(tables.md_table(headers, body),
                      f"forward + backward；本站用默认配置（块为 {used} 个 token）；"
                      f"{floor_words}比值大于 1 表示本站更快。")


def chunks_table(data) -> str:
    entry, cfg = step_shape(data), data["config"]
    times = timed(entry)
    body = [[f"{chunk:,}", tables.fmt(times[f"ours_c{chunk}"]["median_us"] / 1e3),
             gib(times[f"ours_c{chunk}"]["peak_bytes"]), f"{chunk * cfg['vocab'] * 2 / 2**20:,.0f}"]
            for chunk in cfg["chunk_sweep"] if f"ours_c{chunk}" in times]
    default = entry["ours_config"]["chunk_tokens"]
    return prose.page(tables.md_table(["chunk（token）", "fwd+bwd ms", "峰值 GiB", "logits 缓冲 MiB"], body),
                      f"{entry['label']}；这次运行时的默认 chunk 为 {default:,} 个 token（表 1 的“本站”行）。")


def targets(data) -> dict:
    """name -> met (True / False), with the two memory targets; None where a side did not run."""
    entry, cfg = step_shape(data), data["config"]
    times = timed(entry)
    ours = times[cfg["ours"]]
    out = {}
    for name in cfg["peers"]:
        if name in times:
            out[f"time:{name}"] = ours["median_us"] <= times[name]["median_us"] * (1 + tie(cfg))
    for name, slack in (("liger", 1.0), ("cce", CCE_MEMORY_SLACK)):
        theirs = times.get(name, {}).get("peak_bytes")
        out[f"memory:{name}"] = None if theirs is None or ours["peak_bytes"] is None \
            else ours["peak_bytes"] <= slack * theirs
    return out


def wrong_losses(data) -> list[str]:
    """'Liger + compile 在 H=4096 的 loss 是 5728.5（参考 12.75）' for every loss off the reference."""
    out = []
    for entry in data["results"]["shapes"]:
        for phase in ("fwd", "fwd_bwd"):
            for name, stats in entry[phase].items():
                if stats["loss_rel_err"] > WRONG_LOSS:
                    where = "forward" if phase == "fwd" else "forward + backward"
                    said = prose.glue(label(name), f"在 {entry['label']} 的 loss 是 {stats['loss']}")
                    out.append(f"{said}（参考 {entry['reference']['loss']:.4g}，{where}）")
    return sorted(set(out))


def targets_text(data) -> str:
    met = targets(data)
    word = {True: "达到", False: "未达到", None: "未比较（有一方没有运行）"}
    times = [f"{label(k.split(':')[1])}：{word[v]}" for k, v in met.items() if k.startswith("time:")]
    lines = [f"- 时间不超过每个对比方案：{'；'.join(times)}。",
             f"- 峰值显存不超过 Liger：{word[met['memory:liger']]}；在 Cut Cross-Entropy 的 1.1 倍以内："
             f"{word[met['memory:cce']]}。"]
    wrong = wrong_losses(data)
    lines.append("- loss 偏离 fp32 参考超过 1% 的：" + ("；".join(wrong) if wrong else "没有") + "。")
    return "\n".join(lines) + "\n"


def env_box(data: dict) -> str:
    versions = data["config"].get("versions", {})
    cce = versions.get("cut_cross_entropy")
    note = (f"Cut Cross-Entropy：{cce}。" if cce else "") + (
        f"torch {data['environment']['torch'].split('+')[0]} 没有 F.linear_cross_entropy（torch 2.13 起才有），这一档没有运行。")
    return tables.env_box([data["environment"]], extra_keys=("liger_kernel",), note=note)


def render(data: dict) -> dict[str, str]:
    return {"loss_env.md": env_box(data), "loss_table.md": table(data), "loss_sizes.md": sizes_table(data), "loss_chunks.md": chunks_table(data),
            "loss_targets.md": targets_text(data)}


def _ms(us: float) -> str:
    return f"{tables.fmt(us / 1e3)} ms"


def _gib(nbytes) -> str:
    return f"{nbytes / 2**30:.2f} GiB"


def values(data: dict) -> dict[str, str]:
    """The named values the fused-loss page writes into its prose ({{ loss.NAME }}), with their units."""
    cfg, entry = data["config"], step_shape(data)
    times = timed(entry)
    chunk = default_chunk(entry, cfg)
    ours = times[cfg["ours"]]["median_us"]
    out = {"gpu": data["environment"]["gpu"].removeprefix("NVIDIA ").removesuffix(" HBM3"),
           "torch": data["environment"]["torch"].split("+")[0], "tokens": f"{cfg['tokens']:,}",
           "vocab": f"{cfg['vocab']:,}", "step_hidden": f"{entry['shape']['hidden']:,}",
           "logits_gib": _gib(entry["logits_bytes"]), "chunk": f"{chunk:,}",
           "chunk_logits_gib": _gib(chunk * cfg["vocab"] * 2), "ours_ms": _ms(ours)}
    for name in ("hf_eager", "compile", "liger", "cce"):
        out[f"{name}_ms"] = _ms(times[name]["median_us"])
        out[f"{name}_peak"] = _gib(times[name]["peak_bytes"])
        out[f"{name}_vs_ours"] = prose.times(times[name]["median_us"] / ours)
    out["ours_compile_peak"] = _gib(times["ours_compile"]["peak_bytes"])
    out["ours_eager_peak"] = _gib(times[cfg["ours"]]["peak_bytes"])
    sweep = swept(entry, cfg)
    smallest = min(sweep)
    out["smallest_chunk_vs_fastest"] = prose.times(sweep[smallest] / min(sweep.values()), 1)
    out["smallest_chunk"] = f"{smallest:,}"
    out["smallest_chunk_peak"] = _gib(times[f"ours_c{smallest}"]["peak_bytes"])
    out["smallest_chunk_ms"] = _ms(sweep[smallest])
    shapes = data["results"]["shapes"]
    out["compile_vs_ours_range"] = prose.times_span(
        [timed(s)["compile"]["median_us"] / timed(s)[cfg["ours"]]["median_us"] for s in shapes])
    against = [r for r in (default_vs_fastest(s, cfg) for s in shapes) if r]
    if against:
        out["fastest_chunk"] = "、".join(f"{c:,}" for c in sorted({c for c, _ in against}))
        out["default_vs_fastest_range"] = prose.pct_span([gap for _, gap in against], 1)
    for key, contender in (("ours", cfg["ours"]), ("compile", "compile")):
        ratios = [r for r in (floor_ratio(s, contender) for s in shapes) if r]
        if ratios:
            out[f"{key}_vs_floor_range"] = prose.times_span(ratios)
    checked = [timed(s)[cfg["ours"]]["median_us"] / timed(s)["ours_unchecked"]["median_us"] - 1
               for s in data["results"]["shapes"]]
    out["check_cost_range"] = prose.pct_span(checked, 1)
    return out
