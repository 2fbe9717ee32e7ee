"""The 番外二 page (docs/qwen3-qk-rope-swiglu.md) and its methods section: the words around fusion.json's tables.

A summary (``render_summary(load)``; bench/report/render.py finds it like the summary_p<n> modules). It reads
fusion.json and two committed H200 diagnostics next to it (``diag-qk-probe-*.log``, ``diag-swiglu-probe-*.log``:
each prints JSON lines after its script), and renders

* fusion_page_keypoints.md: the 要点 box;
* fusion_page_env.md: the 实验环境 box (fusion.json's environment);
* fusion_page_qk.md, fusion_page_swiglu.md: the sentences under the page's two forward + backward tables;
* fusion_page_fma.md: what FMA contraction did to the QK kernel's bits (the QK probe);
* fusion_page_swiglu_bits.md, fusion_page_swiglu_probe.md: the SwiGLU probe's bits and times;
* fusion_page_probe_table.md, fusion_page_provenance.md: the methods page's probe table, data file and logs.

The tables themselves are bench/report/fusion.py's (``fusion_<kernel>_<phase>.md``). Every number and every
comparison word below is computed from the data; "faster", "level" and "slower" follow the run's tie rule.
"""
from __future__ import annotations

import json
import re

from bench import store
from bench.report import prose, tables
from bench.report.fusion import flat
from bench.report.names import OP_LABELS, tie
from bench.report.ops import at, by_tie, copy_ceiling
from bench.report.render import MissingData
from bench.report.summary_p2 import log_outcome

NAME_QK, NAME_SWIGLU = "qk_rope", "swiglu"
# The page's bar for a fused kernel, forward + backward: the share of the copy ceiling that the 番外's fused
# residual add + RMSNorm is held to (a target, not a measurement).
TARGET_OF_COPY = 0.85
PROBES = {"qk": "diag-qk-probe-", "swiglu": "diag-swiglu-probe-"}
# The SwiGLU probe's variants (its JSON keys), as the methods page's table names them.
VARIANTS = {"shipped": "本站（libdevice expf + IEEE 除法）", "div_approx": "近似除法",
            "fast_math": "近似除法 + 近似 exp（tl.exp）"}


# ---------------------------------------------------------------- fusion.json

def _ceiling(data) -> float:
    """The copy ceiling of the run, over every kernel's shapes: the one fusion.py's tables divide by."""
    return copy_ceiling(flat(data["results"]))["gbps"]


def shares(data, kernel, phase) -> list[dict]:
    """Per shape: its label, every contender's share of the copy ceiling, and every peer's time ÷ ours."""
    ceiling, ours = _ceiling(data), data["config"]["kernels"][kernel]["ours"]
    out = []
    for s in data["results"]["kernels"][kernel]:
        times = s[phase]
        if ours not in times:
            continue
        mine = times[ours]["median_us"]
        out.append({"label": s["label"], "of_copy": {n: t["gbps"] / ceiling for n, t in times.items()},
                    "ratios": {n: t["median_us"] / mine for n, t in times.items() if n != ours}})
    return out


def versus(rows, peer) -> list[dict]:
    """label and ratio (peer's time ÷ ours) of the shapes where ``peer`` ran."""
    return [{"label": r["label"], "ratio": r["ratios"][peer]} for r in rows if peer in r["ratios"]]


def fastest(rows) -> list[dict]:
    """label, ratio and id of the fastest peer per shape."""
    out = []
    for r in rows:
        peer = min(r["ratios"], key=r["ratios"].get)
        out.append({"label": r["label"], "ratio": r["ratios"][peer], "peer": peer})
    return out


def _where(rows, total) -> str:
    return f"在全部 {total} 个形状上" if len(rows) == total else at(r["label"] for r in rows)


def compare(rows, within, other) -> str:
    """How this site's kernel compares with ``other`` (a Latin name) over ``rows`` (ratio: other ÷ ours): the
    shapes where it is faster, level (the run's tie rule) and slower, the largest group first."""
    faster, level, slower = by_tie(rows, within)
    clauses = []
    if faster:
        clauses.append((len(faster), f"{_where(faster, len(rows))}快于 {other}（{other} 用时是本站的 "
                                     f"{prose.times_span(r['ratio'] for r in faster)} 倍）"))
    if level:
        clauses.append((len(level), f"{_where(level, len(rows))}与 {other} 持平（相差不到 {prose.pct(within)}）"))
    if slower:
        clauses.append((len(slower), f"{_where(slower, len(rows))}慢于 {other}（慢 "
                                     f"{prose.pct_span(1 / r['ratio'] - 1 for r in slower)}）"))
    return "，".join(text for _, text in sorted(clauses, key=lambda c: -c[0]))


def _of_copy(rows, name) -> list[float]:
    return [r["of_copy"][name] for r in rows if name in r["of_copy"]]


def _ours(data, kernel) -> str:
    return data["config"]["kernels"][kernel]["ours"]


def _target_clause(values) -> str:
    below = [v for v in values if v < TARGET_OF_COPY]
    target = prose.pct(TARGET_OF_COPY)
    if not below:
        return f"都达到了 {target} 的目标"
    if len(below) == len(values):
        return f"全部低于 {target} 的目标"
    return f"{len(below)} 个形状低于 {target} 的目标"


def qk_points(data) -> list[str]:
    within = tie(data["config"])
    both = shares(data, NAME_QK, "fwd_bwd")
    best = fastest(both)
    peers = {r["peer"] for r in best}
    other = OP_LABELS[peers.pop()] if len(peers) == 1 else "最快的对手"
    first = ("QK-norm + RoPE：q、k 两边的 RMSNorm、转置和 RoPE 合成一个 kernel（backward 另有一个归约 dW 的小 kernel），"
             "forward + backward "
             + compare(best, within, other))
    liger = versus(both, "liger")
    if liger:
        first += f"；Liger 用时是本站的 {prose.times_span(r['ratio'] for r in liger)} 倍"
    mine = _of_copy(both, _ours(data, NAME_QK))
    second = (f"但离拷贝上限还有距离：本站的 forward + backward 只达到拷贝上限的 {prose.pct_span(mine)}，"
              f"{_target_clause(mine)}")
    compiled = _of_copy(both, "compile_hf")
    if compiled:
        second += f"（{OP_LABELS['compile_hf']} 是 {prose.pct_span(compiled)}）"
    return [first + "。", second + "。"]


def swiglu_points(data) -> list[str]:
    within = tie(data["config"])
    both = shares(data, NAME_SWIGLU, "fwd_bwd")
    behind = all(r["ratio"] <= 1 - within for r in fastest(both))
    clauses = [compare(versus(both, peer), within, OP_LABELS[peer]) for peer in ("compile_hf", "liger")
               if versus(both, peer)]
    text = "SwiGLU：" + ("手写没有赢，" if behind else "") + "forward + backward " + "；".join(clauses)
    compiled = _of_copy(both, "compile_hf")
    if compiled:
        text += (f"。{OP_LABELS['compile_hf']} 已达到拷贝上限的 {prose.pct_span(compiled)}，本站是 "
                 f"{prose.pct_span(_of_copy(both, _ours(data, NAME_SWIGLU)))}")
    return [text + "。"]


def advice(data) -> str:
    """The last 要点: what to use, from the forward + backward comparisons (the run's tie rule)."""
    within = tie(data["config"])
    parts = []
    sw = shares(data, NAME_SWIGLU, "fwd_bwd")
    compiled, liger = versus(sw, "compile_hf"), versus(sw, "liger")
    if compiled and all(r["ratio"] <= 1 - within for r in compiled):
        text = f"SwiGLU 用 {OP_LABELS['compile_hf']}"
        liger_ahead = [r for r in liger if r["ratio"] <= 1 - within]
        if len(liger_ahead) * 2 > len(liger):
            text += f"，不编译时用 Liger（{len(liger)} 个宽度中 {len(liger_ahead)} 个比本站快）"
        parts.append(text)
    qk = fastest(shares(data, NAME_QK, "fwd_bwd")) + fastest(shares(data, NAME_QK, "fwd"))
    if qk and all(r["ratio"] >= 1 + within for r in qk):
        parts.append("QK-norm + RoPE 用本站的融合 kernel：单算子层面 forward 与 forward + backward 都比每个对手快；"
                     "换进一步训练能省多少，本页还没有测")
    return "建议：" + "。".join(parts) + "。"


def keypoints(data) -> str:
    points = qk_points(data) + swiglu_points(data) + [advice(data)]
    return '!!! abstract "要点"\n\n' + "".join(f"    - {p}\n" for p in points)


def env_box(data) -> str:
    env = data["environment"]
    torch_version = str(env.get("torch", "")).split("+")[0]
    note = (f"各项对比只在 torch {torch_version} 上测过；QK-norm + RoPE 的计时用的是整段关掉 FMA 收缩的那一版 kernel"
            "（§三）。")
    return tables.env_box([env], extra_keys=("liger_kernel",), note=note)


def qk_sentence(data) -> str:
    both = shares(data, NAME_QK, "fwd_bwd")
    rmsnorm_only = versus(both, "triton_rmsnorm")
    if not rmsnorm_only:
        return ""
    return (f"只打篇 2 的 RMSNorm 补丁时，q、k 的 RoPE 仍是 HF eager 的一串 kernel：这一段 forward + backward 的用时是"
            f"本站融合 kernel 的 {prose.times_span(r['ratio'] for r in rmsnorm_only)} 倍。\n")


def swiglu_sentence(data) -> str:
    both = shares(data, NAME_SWIGLU, "fwd_bwd")
    compiled = _of_copy(both, "compile_hf")
    text = f"{OP_LABELS['compile_hf']} 的 SwiGLU 达到拷贝上限的 {prose.pct_span(compiled)}"
    if max(compiled) > 1:
        text += "：拷贝是一读一写，SwiGLU 读得多、写得少，可以超过它"
    return text + "。\n"


# ---------------------------------------------------------------- the two probes

def probe_name(folder, kind) -> str:
    names = sorted(p.name for p in folder.glob(f"{PROBES[kind]}*.log"))
    if len(names) != 1:
        raise MissingData(f"{folder}: expected one {PROBES[kind]}*.log, found {names}")
    return names[0]


def probe_output(text: str) -> dict:
    """The JSON lines a probe printed (the ones after its script), merged: {variant: {...}}."""
    out = {}
    for line in text.splitlines():
        if line.startswith("{"):
            out.update(json.loads(line))
    return out


def fma_sentence(qk: dict) -> str:
    on, off = qk["fma_on"], qk["fma_off"]
    rope = "全部" if off["rope_stage_equal"] == 1 else f"{prose.pct(off['rope_stage_equal'], 1)} "
    text = (f"H200 上的一次诊断里，FMA 收缩打开时，融合 kernel 的 bf16 输出只有 {prose.pct(on['whole_equal'], 1)} "
            f"与 HF 逐位相同，差异出在 RoPE 一步（把 HF 的 RoPE 作用在本站归一化的结果上，也只有 "
            f"{prose.pct(on['rope_stage_equal'], 1)} 相同）；关掉收缩后，RoPE 一步{rope}相同，整体 "
            f"{prose.pct(off['whole_equal'], 3)} 相同")
    if off["whole_equal"] == off["norm_only_equal"] < 1:
        text += "，剩下的差异在归一化一步就已出现"
    return text + "。\n"


def _widths(sw: dict) -> list[str]:
    return sorted(sw["shipped"], key=int)


def swiglu_bits_sentence(sw: dict) -> str:
    shipped = sw["shipped"]
    widths = _widths(sw)
    ours = [shipped[w]["act_bits_equal"] for w in widths]
    compiled = [shipped[w]["compile_act_bits_equal"] for w in widths]
    same = "全部" if min(ours) == 1 else f"{prose.pct_span(ours, 3)}"
    names = prose.join(f"I={w}" for w in widths)
    return (f"H200 上 {names} 两个宽度的 act 与 HF eager {same}逐位相同，{OP_LABELS['compile_hf']} 的只有 "
            f"{prose.pct_span(compiled)}。\n")


def swiglu_probe_sentence(sw: dict) -> str:
    width = _widths(sw)[-1]
    shipped, fast = sw["shipped"][width], sw["fast_math"][width]
    fwd_gain, bwd_gain = 1 - fast["fwd_us"] / shipped["fwd_us"], 1 - fast["bwd_us"] / shipped["bwd_us"]
    behind = fast["fwd_us"] / shipped["compile_fwd_us"] - 1
    text = (f"慢在哪里还没有查清。一次诊断在 I={width} 上把 expf 和 IEEE 除法都换成近似版本：forward 只快了 "
            f"{prose.pct(fwd_gain)}，backward 快了 {prose.pct(bwd_gain)}")
    text += (f"，forward 仍比 {OP_LABELS['compile_hf']} 慢 {prose.pct(behind)}" if behind > 0
             else f"，forward 追上了 {OP_LABELS['compile_hf']}")
    return text + "。\n"


def probe_table(sw: dict) -> str:
    rows = []
    for variant, label in VARIANTS.items():
        for width in _widths(sw):
            r = sw[variant][width]
            rows.append([label, f"I={width}", tables.fmt(r["fwd_us"]), tables.fmt(r["bwd_us"]),
                         prose.pct(r["act_bits_equal"], 1)])
    for width in _widths(sw):
        r = sw["shipped"][width]
        rows.append([OP_LABELS["compile_hf"], f"I={width}", tables.fmt(r["compile_fwd_us"]), "—",
                     prose.pct(r["compile_act_bits_equal"], 1)])
    table = tables.md_table(["实现", "宽度", "forward（µs）", "backward（µs）", "act 与 HF eager 逐位相同"], rows,
                            "llrrr")
    return prose.page(table, "16384 行 bf16，`triton.testing.do_bench` 的中位数（含主机端开销，与正文的 CUDA graph "
                             "计时不同）；近似版本各在一个新进程里运行，backward 未与 HF 比对。")


# ---------------------------------------------------------------- provenance

def provenance(data, folder, probes: list[str]) -> str:
    """fusion.json's row and the logs that belong to the page: the run's own, the probes, the config sweep and
    the GPU test runs of the commits the data and the probes ran at."""
    described = store.load_logs(folder.name)
    commits = {str(data["environment"].get("git_commit", ""))[:7]}
    commits |= {re.sub(r".*-([0-9a-f]{7})\.log$", r"\1", name) for name in probes}
    names = sorted(n for n in described if "fusion" in n or n in probes
                   or any(n == f"gpu-tests-{c}.log" for c in commits))
    rows = []
    for name in names:
        outcome = log_outcome((folder / name).read_text(encoding="utf-8", errors="replace"))
        rows.append([f"`{name}`", described[name]["note"] + (f"（{outcome}）" if outcome else "")])
    return (tables.provenance_table({"fusion.json": data}) + f"\n番外二的 GPU 日志（都在 `docs/data/{folder.name}/` 下）：\n\n"
            + tables.md_table(["文件", "内容"], rows, "ll"))


def render_summary(load) -> dict[str, str]:
    data = load("fusion")
    gpu = store.gpu_slug(data["environment"].get("gpu") or "cpu")
    folder = store.gpu_folder(gpu)
    names = {kind: probe_name(folder, kind) for kind in PROBES}
    qk, sw = (probe_output((folder / names[k]).read_text(encoding="utf-8")) for k in ("qk", "swiglu"))
    return {
        "fusion_page_keypoints.md": keypoints(data),
        "fusion_page_env.md": env_box(data),
        "fusion_page_qk.md": qk_sentence(data),
        "fusion_page_swiglu.md": swiglu_sentence(data),
        "fusion_page_fma.md": fma_sentence(qk),
        "fusion_page_swiglu_bits.md": swiglu_bits_sentence(sw),
        "fusion_page_swiglu_probe.md": swiglu_probe_sentence(sw),
        "fusion_page_probe_table.md": probe_table(sw),
        "fusion_page_provenance.md": provenance(data, folder, list(names.values())),
    }
