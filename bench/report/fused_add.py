"""fused_add.json -> the fused residual add + RMSNorm page's op-level tables and bandwidth plot, and the figures of
番外 §六–§七's hand-written readings (``values``: {{ fused_add.NAME }}; their words: tests/test_readings_fused_add.py).

The forward table (on the methods page) keeps its generated takeaway; the forward + backward table on the page has
none: the page writes its reading by hand."""
from __future__ import annotations

import copy

from bench.report import prose, tables
from bench.report.names import OP_LABELS, PHASES, tie
from bench.report.ops import (bandwidth_bars, by_tie, ceiling_text, compare_sentence, copy_ceiling,
                              ours_vs_peers, rows_caption)

NAME = "fused_add"
OURS = "triton_fused_add"
# Files written before the fused kernel had its own id call it "triton", the plain kernel's id.
LEGACY_OURS = "triton"
# What those runs used for what the experiment records now (bench/exp_fused_add.py then): the peers, the
# no-fusion baseline among them, the passes over the rows x width values each makes, the tie rule.
BEFORE_RECORDED = {"ours": OURS, "peers": ["unfused", "compile_hf", "liger", "quack"], "baseline": "unfused",
                   "passes": {"fused": {"fwd": 4, "fwd_bwd": 8}, "unfused": {"fwd": 5, "fwd_bwd": 11}},
                   "tie_rule": "within_1pct"}


def current(data) -> dict:
    """``data`` with the fused kernel under its own id: a file that calls it "triton" is read renamed."""
    if LEGACY_OURS not in data["config"]["contenders"]:
        return data
    data = copy.deepcopy(data)

    def rename(table):
        return {OURS if key == LEGACY_OURS else key: value for key, value in table.items()}

    data["config"]["contenders"] = [OURS if n == LEGACY_OURS else n for n in data["config"]["contenders"]]
    data["results"]["skipped"] = rename(data["results"].get("skipped", {}))
    for shape in data["results"]["shapes"]:
        for key in ("fwd", "fwd_bwd", "errors", "first_call_s"):
            if key in shape:
                shape[key] = rename(shape[key])
    return data


def config(data) -> dict:
    """The run's config, with what a file from before a key was recorded used in its place."""
    return BEFORE_RECORDED | current(data)["config"]


def vs_peers(data, phase) -> list[dict]:
    """Per shape: ours' time and share of the copy ceiling, each peer ÷ ours, the fastest peer."""
    data = current(data)
    cfg, res = config(data), data["results"]
    ceiling = copy_ceiling(res)["gbps"]
    return [{"label": s["label"]} | ours_vs_peers(s[phase], cfg, ceiling) for s in res["shapes"]]


def _not_measured(data) -> str:
    """Why ours has no result: the reason it was skipped, else 没有结果."""
    return current(data)["results"].get("skipped", {}).get(config(data)["ours"]) or "没有结果"


def liger_vs_unfused(data) -> list[tuple[str, float]]:
    """Per shape (forward + backward): Liger's fused add + RMSNorm time ÷ no fusion's, from the two ratios to ours
    (番外 §七's caveat on reaching for it); shapes missing either side are left out."""
    baseline = config(data)["baseline"]
    return [(r["label"], r["ratios"]["liger"] / r["ratios"][baseline]) for r in vs_peers(data, "fwd_bwd")
            if r["ratios"].get("liger") and r["ratios"].get(baseline)]


def _caption(data, phase) -> str:
    moved = ("读 x、r，写 s、y" if phase == "fwd"
             else "forward 读 x、r，写 s、y；backward 读 dy、ds、s，写 x 与 r 共同的梯度 dx")
    return (f"bf16，{rows_caption(data['results']['shapes'])}。时间为每次调用的 GPU 时间：CUDA graph 重放、轮换输入"
            f"（不复用 L2）的中位数。字节按最少计（{moved}）；拷贝上限为{ceiling_text(data['results'])}。")


def _table(data, phase) -> str:
    rows = vs_peers(data, phase)
    f = tables.fmt
    body = [[r["label"], f(r["ours_us"]), prose.pct(r["of_copy"]) if r["of_copy"] is not None else "—",
             OP_LABELS.get(r["peer"], "—"), f(r["peer_us"]), prose.times(r["ratio"]) if r["ratio"] else "—"] for r in rows]
    table = tables.md_table(["形状", "融合版（µs）", "占拷贝上限", "最快的对比方案", "对比方案（µs）", "对比方案 ÷ 融合版"], body, "lrrlrr")
    missing = "" if any(r["ratio"] is not None for r in rows) else f"融合版未测（{_not_measured(data)}）。"
    # both tables are read by hand: forward on the methods page, forward + backward on 番外 §六 (values)
    return prose.page(table, missing + _caption(data, phase))


def _ratio_table(data) -> str:
    """Each peer ÷ ours, forward and forward + backward in one cell: 'fwd / fwd+bwd'."""
    fwd, both = vs_peers(data, "fwd"), vs_peers(data, "fwd_bwd")
    names = [n for n in config(data)["peers"] if any(n in r["ratios"] for r in fwd + both)]

    def cell(a, b, n):
        values = [r["ratios"].get(n) for r in (a, b)]
        return " / ".join(f"{v:.2f}×" if v else "—" for v in values)

    body = [[a["label"]] + [cell(a, b, n) for n in names] for a, b in zip(fwd, both)]
    table = tables.md_table(["形状"] + [f"{OP_LABELS[n]} ÷ 融合版" for n in names], body)
    return prose.page(table, "每格为 forward / forward + backward 的用时之比，大于 1 表示融合版更快；"
                             f"bf16，{rows_caption(data['results']['shapes'])}，CUDA graph 重放的 GPU 时间中位数。")


def passes(data) -> dict:
    """Passes over the rows x width values, {"fused": {phase: n}, "unfused": {phase: n}}."""
    return config(data)["passes"]


def byte_bound(data, phase: str) -> float:
    """How much faster the fusion can make a copy-bound add + norm: unfused passes ÷ fused passes."""
    return passes(data)["unfused"][phase] / passes(data)["fused"][phase]


def above_bound(data, phase: str) -> list[dict]:
    """Shapes where no fusion ÷ fused beats the byte bound, which holds only when both sides move their bytes
    equally fast: per shape, the ratio, its range from the two p20–p80 ranges (no fusion's p20 ÷ fused's p80
    to its p80 ÷ fused's p20), and each side's bandwidth over the bytes it moves (no fusion: the unfused
    passes)."""
    data = current(data)
    cfg = config(data)
    bound, ours, baseline = byte_bound(data, phase), cfg["ours"], cfg["baseline"]
    out = []
    for s in data["results"]["shapes"]:
        fused, unfused = s[phase].get(ours), s[phase].get(baseline)
        if not fused or not unfused or unfused["median_us"] / fused["median_us"] <= bound:
            continue
        moved = s[f"bytes_{phase}"]
        out.append({"label": s["label"], "ratio": unfused["median_us"] / fused["median_us"],
                    "range": (unfused["p20_us"] / fused["p80_us"], unfused["p80_us"] / fused["p20_us"]),
                    "fused_gbps": moved / (fused["median_us"] * 1e3),
                    "unfused_gbps": moved * byte_bound(data, phase) / (unfused["median_us"] * 1e3)})
    return out


def _above_bound_words(data, phase: str) -> str:
    """Why a measured ratio shows above the byte bound (at the two decimals the sentence prints), from the
    data: outside the noise (its p20–p80 range wholly above), no fusion moves its own bytes slower than the
    fused kernel moves its own; inside it, the noise."""
    bound = byte_bound(data, phase)
    rows = [r for r in above_bound(data, phase) if prose.times(r["ratio"]) != prose.times(bound)]
    parts = []
    for r in rows:
        text = f"{r['label']} 的 {prose.times_span([r['ratio']])} 倍高于 {prose.times(bound)}"
        if r["range"][0] > bound:
            text += (f"，不是测量波动（用时比的 p20–p80 区间 {prose.times_span(r['range'], 3)} 整个在它之上），"
                     f"而是不融合按它实际搬的字节只跑到 {r['unfused_gbps']:,.0f} GB/s，融合版 {r['fused_gbps']:,.0f} GB/s")
        else:
            text += f"，在用时比的 p20–p80 区间 {prose.times_span(r['range'], 3)} 之内，是测量波动"
        parts.append(text)
    return "；".join(parts)


def gain_parts(data) -> list[str]:
    """The fusion's own gain at op level, per phase: fused vs unfused (a torch add, then the same norm kernels),
    against the ratio that the bytes set when both sides move bytes equally fast (and why a shape beats it);
    then the fused kernels against the fastest peer, forward + backward."""
    baseline = config(data)["baseline"]
    parts = []
    for phase in ("fwd", "fwd_bwd"):
        rows = [{"label": r["label"], "ratio": r["ratios"][baseline]} for r in vs_peers(data, phase)
                if r["ratios"].get(baseline)]
        if not rows:
            parts.append(f"{PHASES[phase]}：融合版或不融合的一方未测（{_not_measured(data)}）")
            continue
        above = _above_bound_words(data, phase)
        parts.append(prose.glue(PHASES[phase], f"按字节算（两边带宽相同）能快 {prose.times(byte_bound(data, phase))}，实测")
                     + compare_sentence(rows, tie(config(data)), subject="融合版", other="不融合")
                     + (f"；{above}" if above else ""))
    best = [r for r in vs_peers(data, "fwd_bwd") if r["ratio"] is not None]
    if best:
        parts.append("与最快的对比方案相比，forward + backward " + compare_sentence(best, tie(config(data)),
                                                                             subject="融合版"))
    return parts


def render(data: dict) -> dict[str, str]:
    data = current(data)
    return {"fused_add_fwd.md": _table(data, "fwd"), "fused_add_fwdbwd.md": _table(data, "fwd_bwd"),
            "fused_add_ratios.md": _ratio_table(data),
            "fused_add_bandwidth.svg": bandwidth_bars(data, data["config"]["contenders"], "残差加 + RMSNorm",
                                                      side_by_side=True)}


def values(data: dict) -> dict[str, str]:
    """{{ fused_add.NAME }}: passes over the tensor, the fused kernel against no fusion and the fastest peer; forward +
    backward: the tie rule, the shapes, those where ours beats the fastest peer by it and those level with it,
    and Liger's fused add + RMSNorm against no fusion (where slower, by how much, where faster); and the methods
    page's reading of the forward table (forward_values)."""
    data = current(data)
    p, baseline = passes(data), config(data)["baseline"]
    out = {"fwd_passes_unfused": str(p["unfused"]["fwd"]), "fwd_passes_fused": str(p["fused"]["fwd"]),
           "bwd_passes_unfused": str(p["unfused"]["fwd_bwd"] - p["unfused"]["fwd"]),
           "bwd_passes_fused": str(p["fused"]["fwd_bwd"] - p["fused"]["fwd"])}
    for phase in ("fwd", "fwd_bwd"):
        rows = vs_peers(data, phase)
        out[f"{phase}_unfused_ratio"] = prose.times_span(r["ratios"][baseline] for r in rows)
        out[f"{phase}_peer_ratio"] = prose.times_span(r["ratio"] for r in rows)
        out[f"{phase}_of_copy"] = prose.pct_span(r["of_copy"] for r in rows)
    within = tie(config(data))
    both = [r for r in vs_peers(data, "fwd_bwd") if r["ratio"] is not None]
    ahead, level, _ = by_tie(both, within)
    out["tie"] = prose.pct(within)
    out["fwd_bwd_shapes"] = str(len(both))
    out["fwd_bwd_ahead"] = str(len(ahead))
    out["fwd_bwd_level_at"] = prose.join(r["label"] for r in level)
    slower, _, faster = by_tie(liger_vs_unfused(data), within, ratio=lambda pair: pair[1])
    out["liger_slower"] = str(len(slower))
    out["liger_slower_ratio"] = prose.times_span(v for _, v in slower)
    out["liger_faster_at"] = prose.join(label for label, _ in faster)
    return out | forward_values(data)


def forward_values(data: dict) -> dict[str, str]:
    """The methods page's reading of the forward table: the shapes, the run's tie, and the shapes where the fused
    kernel is faster than, level with or slower than the fastest peer (``fwd_<faster|level|slower>``), with the
    peer's time ÷ ours where faster (``fwd_faster_ratio``) and how much slower where slower (``fwd_slower_by``)."""
    rows = [r for r in vs_peers(data, "fwd") if r["ratio"] is not None]
    faster, level, slower = by_tie(rows, tie(config(data)))
    out = {"fwd_shapes": str(len(rows)), "tie": prose.pct(tie(config(data)))}
    for name, group in (("faster", faster), ("level", level), ("slower", slower)):
        if group:
            out[f"fwd_{name}"] = prose.join(r["label"] for r in group)
    if faster:
        out["fwd_faster_ratio"] = prose.times_span(r["ratio"] for r in faster)
    if slower:
        out["fwd_slower_by"] = prose.pct_span(1 / r["ratio"] - 1 for r in slower)
    return out
