"""The 番外二 page (docs/qwen3-qk-rope-swiglu.md) and its methods section: the words around fusion.json's tables.

A summary (``render_summary(load)``; bench/report/render.py finds it like the summary_p<n> modules). It reads
fusion.json, step_fusion.json (the fusion set in a training step) and two committed H200 diagnostics next to
them (``diag-qk-probe-*.log``, ``diag-swiglu-probe-*.log``: each prints JSON lines after its script), and renders

* fusion_page_env.md: the 实验环境 box (both data files' environments);
* fusion_page_step.md: the reading of the step table (step_fusion.py's), ranked only where 95 % intervals are
  disjoint;
* fusion_page_qkv.md: the merged QKV projection's result and the step time it could save (fusion.json's qkv
  kernel against step_fusion.json's resolution);
* fusion_page_qk.md, fusion_page_swiglu.md: the sentences under the page's two forward + backward tables;
* fusion_page_fma.md: what FMA contraction did to the QK kernel's bits (the QK probe);
* fusion_page_swiglu_bits.md, fusion_page_swiglu_probe.md: the SwiGLU probe's bits and times;
* fusion_page_probe_table.md, fusion_page_provenance.md: the methods page's probe table and data files;

and ``summary_values(load)``, the figures the page's hand-written 要点 writes ({{ fusion.NAME }}).

The tables themselves are bench/report/fusion.py's (``fusion_<kernel>_<phase>.md``). Every number and every
comparison word below is computed from the data; "faster", "level" and "slower" follow the run's tie rule.
"""
from __future__ import annotations

import json

from bench import store
from bench.report import prose, tables
from bench.report import step_fusion
from bench.report.fusion import gemm_rows, is_gemm, peers as fusion_peers, rows as fusion_rows
from bench.report.names import OP_LABELS, tie
from bench.report.ops import at, by_tie
from bench.report.render import MissingData
from bench.report.step import label as step_label
from bench.report.step import level

NAME_QK, NAME_SWIGLU = "qk_rope", "swiglu"
NAME_QKV = "qkv"
PROBES = {"qk": "diag-qk-probe-", "swiglu": "diag-swiglu-probe-"}
# The SwiGLU probe's variants (its JSON keys), as the methods page's table names them.
VARIANTS = {"shipped": "本站（libdevice expf + IEEE 除法）", "div_approx": "近似除法",
            "fast_math": "近似除法 + 近似 exp（tl.exp）"}


# ---------------------------------------------------------------- fusion.json

def shares(data, kernel, phase) -> list[dict]:
    """Per shape: its label, every contender's share of the copy ceiling, and every peer's time ÷ ours
    (fusion.py's rows, the tables' own numbers)."""
    return [{"label": r["label"], "of_copy": r["all_of_copy"], "ratios": r["ratios"]}
            for r in fusion_rows(data, kernel, phase)]


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


# ---------------------------------------------------------------- step_fusion.json

def _name(contender) -> str:
    return step_label(contender)


def _liger_of(cfg, ours) -> str:
    return next(theirs for mine, theirs in cfg["pairs"] if mine == ours)


def step_facts(step) -> dict:
    """The step table's answers: each tier's speed-up over the baseline (``gain``, base ÷ tier) and whether its
    95 % interval is disjoint from the baseline's (``apart``), each pair's verdict, the resolution."""
    cfg = step["config"]
    rows = step_fusion.rows_by_contender(step)
    base = rows[cfg["baseline"]]
    ok = {n: r for n, r in rows.items() if r["status"] == "ok"}
    return {"cfg": cfg, "rows": rows, "base": base,
            "gain": {n: base["step"] / r["step"] for n, r in ok.items()},
            "apart": {n: not level(r, base, cfg) for n, r in ok.items()},
            "wins": step_fusion.wins(step), "resolution": cfg.get("resolution")}


def _layers(cfg) -> int:
    return cfg["model"].get("num_hidden_layers") or cfg["geometry"]["num_hidden_layers"]


def _setup(step) -> str:
    cfg = step["config"]
    return f"Qwen3-{cfg['model']['size']} 几何、{_layers(cfg)} 层，B={cfg['batch']}，T={cfg['seq_len']}"


def _tier(facts, name) -> str:
    """'1.047 倍（95% 区间不重叠）' or '1.009 倍，区间与它重叠，算持平': a tier's speed over the baseline's, ranked
    only when the 95 % intervals are disjoint."""
    if name not in facts["gain"]:
        return "未运行"
    speed = f"{facts['gain'][name]:.3f} 倍"
    return f"{speed}（95% 区间不重叠）" if facts["apart"][name] else f"{speed}，区间与它重叠，算持平"


def _pairs_clause(facts) -> str:
    """Each of our kernels against Liger's in the same tier, then the set against Liger's patch."""
    cfg, wins = facts["cfg"], facts["wins"]
    single = [ours for ours, _ in cfg["pairs"] if ours != cfg["ours"]]

    def verdict(ours):
        return "持平" if wins.get(ours) is None else ("快" if wins[ours] else "慢")

    def phrase(subject, other, word):
        return f"{subject}与 {other}持平" if word == "持平" else f"{subject}比 {other}{word}"

    if all(wins.get(o) is None for o in single):
        text = "QK-norm + RoPE、SwiGLU 各自与 Liger 同一档的 kernel 持平"
    else:
        text = "，".join(phrase(f"{step_fusion.PAIR_WORDS[o]} ", "Liger 同一档的 kernel ", verdict(o))
                        for o in single)
    whole, same = _name(_liger_of(cfg, cfg["ours"])), verdict(cfg["ours"])
    return text + "，" + (f"整套与 {whole}也持平" if same == "持平" else phrase("整套", whole, same))


def step_sentence(step) -> str:
    """The reading under the step table (whose own sentence gives the pairs against Liger): what the set and
    each kernel alone buy over the RMSNorm patch, and the smallest difference the run resolves."""
    facts = step_facts(step)
    cfg = facts["cfg"]
    ours = facts["rows"][cfg["ours"]]
    text = (f"以只打 RMSNorm 补丁的一步的速度为 1：本站整套是 {_tier(facts, cfg['ours'])}；单加 QK-norm + RoPE 是 "
            f"{_tier(facts, 'triton_qk_rope')}；单加 SwiGLU 是 {_tier(facts, 'triton_swiglu')}。")
    if facts["resolution"] is not None:
        text += (f"这个实验能分辨约一步的 {prose.pct(facts['resolution'], 1)}"
                 f"（约 {tables.fmt(facts['resolution'] * ours['step'], 2)} ms），更小的差别不作排名。")
    return text + "\n"


# ---------------------------------------------------------------- the merged QKV projection

def qkv_saving(data, step) -> dict | None:
    """At the step experiment's model: the forward + backward time one merged GEMM saves over HF's three, per
    layer and per step (× the step's layers), next to the smallest step difference the step experiment resolves."""
    if NAME_QKV not in data["results"]["kernels"] or not is_gemm(data, NAME_QKV):
        return None
    cfg = step["config"]
    size = cfg["model"]["size"]
    row = next((r for r in gemm_rows(data, NAME_QKV, "fwd_bwd") if r["models"] == size), None)
    if row is None or cfg.get("resolution") is None:
        return None
    ours = step_fusion.rows_by_contender(step).get(cfg["ours"], {})
    if ours.get("status") != "ok":
        return None
    layers = _layers(cfg)
    per_layer_us = row["base_us"] - row["merged_us"]
    return {"label": row["label"], "size": size, "layers": layers, "per_layer_us": per_layer_us,
            "per_step_ms": per_layer_us * layers / 1000, "step_ms": ours["step"],
            "resolution_ms": cfg["resolution"] * ours["step"],
            "share": per_layer_us * layers / 1000 / ours["step"]}


def qkv_sentence(data, step) -> str:
    within = tie(data["config"])
    both = gemm_rows(data, NAME_QKV, "fwd_bwd")
    fwd = gemm_rows(data, NAME_QKV, "fwd")
    faster = [r for r in both if r["ratio"] <= 1 - within]
    text = (f"合并后 forward 的用时是三个 GEMM 的 {prose.times_span(r['ratio'] for r in fwd)} 倍，"
            f"forward + backward 是 {prose.times_span(r['ratio'] for r in both)} 倍"
            f"（{len(both)} 个形状中 {len(faster)} 个快 2% 以上）。")
    saving = qkv_saving(data, step)
    if saving:
        text += (f"在一步训练的设置下（Qwen3-{saving['size']}，{saving['label']}，{saving['layers']} 层），"
                 f"每层省 {tables.fmt(saving['per_layer_us'], 2)} µs，一步共省 {tables.fmt(saving['per_step_ms'], 2)} ms，"
                 f"约一步的 {prose.pct(saving['share'], 2)}，远小于那个实验能分辨的 "
                 f"{tables.fmt(saving['resolution_ms'], 2)} ms。")
    return text + "\n"


def env_box(data, step) -> str:
    envs = [data["environment"], step["environment"]]
    versions = sorted({str(e.get("torch", "")).split("+")[0] for e in envs})
    note = f"单算子与一步训练的对比都只在 torch {prose.join(versions)} 上测过。"
    return tables.env_box(envs, extra_keys=("liger_kernel",), note=note)


def liger_norm_share(data, rms) -> dict | None:
    """How much of Liger's QK-norm + RoPE time (forward + backward) its RMSNorm alone takes: for the fusion
    shape whose q rows and k rows are the row counts of rmsnorm.json's 128-wide shapes (contiguous dy), Liger's
    RMSNorm time on those two shapes (another run, the same CUDA-graph timer) over its time here; None when no
    shape matches or Liger is missing."""
    norms = {s["rows"]: s["fwd_bwd"].get("liger") for s in (rms or {}).get("results", {}).get("shapes", [])
             if s.get("width") == 128 and s.get("dy_layout", "contiguous") == "contiguous"}
    for entry in data["results"]["kernels"][NAME_QK]:
        shape, liger = entry["shape"], entry["fwd_bwd"].get("liger")
        q, k = (norms.get(entry["rows"] * shape[h]) for h in ("q_heads", "kv_heads"))
        if liger and q and k:
            norm_us = q["median_us"] + k["median_us"]
            return {"label": entry["label"], "norm_us": norm_us, "liger_us": liger["median_us"],
                    "share": norm_us / liger["median_us"]}
    return None


def _step_rope_words(step) -> str:
    """'Liger 的 RoPE 与本站的 kernel 持平' (or which is faster): the QK tier of the step against Liger's RoPE
    tier, by the step's 95 % intervals; '' when either did not run."""
    if not step:
        return ""
    ours = next((o for o, _ in step["config"]["pairs"] if o != step["config"]["ours"] and "rope" in o), None)
    rows = step_fusion.rows_by_contender(step)
    theirs = dict(step["config"]["pairs"]).get(ours)
    if not ours or any(rows.get(n, {}).get("status") != "ok" for n in (ours, theirs)):
        return ""
    won = step_fusion.wins(step)[ours]
    return {None: "Liger 的 RoPE 与本站的 kernel 持平", True: "本站的 kernel 比 Liger 的 RoPE 快",
            False: "Liger 的 RoPE 比本站的 kernel 快"}[won]


def qk_sentence(data, rms=None, step=None) -> str:
    both = shares(data, NAME_QK, "fwd_bwd")
    rmsnorm_only = versus(both, "triton_rmsnorm")
    if not rmsnorm_only:
        return ""
    text = (f"只打篇 2 的 RMSNorm 补丁时，q、k 的 RoPE 仍是 HF eager 的一串 kernel：这一段 forward + backward 的用时是"
            f"本站融合 kernel 的 {prose.times_span(r['ratio'] for r in rmsnorm_only)} 倍。")
    norm = liger_norm_share(data, rms)
    if norm:
        text += (f"Liger 这一档是它的 RMSNorm 加它的 RoPE，慢主要慢在 RMSNorm：篇 2 在同样行数的 128 宽行上单测 Liger 的 "
                 f"RMSNorm（{norm['label']} 的 q 行和 k 行），forward + backward 合计 {tables.fmt(norm['norm_us'])} µs，"
                 f"占这里 Liger 一档 {tables.fmt(norm['liger_us'])} µs 的 {prose.pct(norm['share'])}。"
                 + (f"换进一步训练，{_step_rope_words(step)}（§六）。" if _step_rope_words(step) else ""))
    return text + "\n"


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

def provenance(data, step) -> str:
    """The two data files' rows (their logs are described in logs.json, which the methods page links)."""
    return tables.provenance_table({"fusion.json": data, "step_fusion.json": step})


def render_summary(load) -> dict[str, str]:
    data, step = load("fusion"), load(step_fusion.NAME)
    try:
        rms = load("rmsnorm")  # Liger's RMSNorm alone on 128-wide rows (qk_sentence)
    except MissingData:
        rms = None
    gpu = store.gpu_slug(data["environment"].get("gpu") or "cpu")
    folder = store.gpu_folder(gpu)
    names = {kind: probe_name(folder, kind) for kind in PROBES}
    qk, sw = (probe_output((folder / names[k]).read_text(encoding="utf-8")) for k in ("qk", "swiglu"))
    return {
        "fusion_page_env.md": env_box(data, step),
        "fusion_page_step.md": step_sentence(step),
        "fusion_page_qkv.md": qkv_sentence(data, step) if qkv_saving(data, step) else "",
        "fusion_page_qk.md": qk_sentence(data, rms, step),
        "fusion_page_swiglu.md": swiglu_sentence(data),
        "fusion_page_fma.md": fma_sentence(qk),
        "fusion_page_swiglu_bits.md": swiglu_bits_sentence(sw),
        "fusion_page_swiglu_probe.md": swiglu_probe_sentence(sw),
        "fusion_page_probe_table.md": probe_table(sw),
        "fusion_page_provenance.md": provenance(data, step),
    }


def summary_values(load) -> dict[str, dict[str, str]]:
    """{{ fusion.NAME }}: the op-level figures 番外二's hand-written 要点 and readings use, and the QKV merge's
    saving at the step's model (it reads step_fusion.json too)."""
    data, step = load("fusion"), load(step_fusion.NAME)
    out = {}
    for kernel, key in ((NAME_QK, "qk"), ("swiglu", "swiglu")):
        for phase in ("fwd", "fwd_bwd"):
            rows_ = fusion_rows(data, kernel, phase)
            for peer in fusion_peers(data, kernel):
                ratios = [r["ratios"][peer] for r in rows_ if peer in r["ratios"]]
                out[f"{key}_{phase}_{peer}_ratio"] = prose.times_span(ratios)
                out[f"{key}_{phase}_{peer}_slower"] = prose.pct_span(1 / x - 1 for x in ratios)
                out[f"{key}_{phase}_{peer}_of_copy"] = prose.pct_span(r["all_of_copy"][peer] for r in rows_)
            out[f"{key}_{phase}_of_copy"] = prose.pct_span(r["of_copy"] for r in rows_)
            out[f"{key}_shapes"] = str(len(rows_))
    saving = qkv_saving(data, step)
    out["qkv_step_ms"] = f"{tables.fmt(saving['per_step_ms'], 2)} ms"
    out["qkv_resolution_ms"] = f"{tables.fmt(saving['resolution_ms'], 2)} ms"
    return {"fusion": out}
