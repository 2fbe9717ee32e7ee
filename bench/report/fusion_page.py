"""The 番外二 page (docs/qwen3-qk-rope-swiglu.md) and its methods section: the words around fusion.json's tables.

A summary (``render_summary(load)``; bench/report/render.py finds it like the summary_p<n> modules). It reads
fusion.json, step_fusion.json (the fusion set in a training step) and two committed H200 diagnostics next to
them (``diag-qk-probe-*.log``, ``diag-swiglu-probe-*.log``: each prints JSON lines after its script), and renders

* fusion_page_env.md: the 实验环境 box (both data files' environments);
* fusion_page_probe_table.md, fusion_page_provenance.md: the methods page's probe table and data files;

and ``summary_values(load)``, the figures the page's hand-written 要点 and readings write ({{ fusion.NAME }}),
among them the merged QKV projection's saving per step (fusion.json's qkv kernel against step_fusion.json's
resolution), what FMA contraction did to the QK kernel's bits (the QK probe), the SwiGLU probe's bits and times,
and the methods page's readings of the forward and QKV tables (``methods_values``); tests/test_readings_fusion.py,
tests/test_readings_extras.py and tests/test_readings_methods.py check their comparison words against the data.

The tables themselves are bench/report/fusion.py's (``fusion_<kernel>_<phase>.md``).
"""
from __future__ import annotations

import json

from bench import store
from bench.report import prose, tables
from bench.report import step_fusion
from bench.report.fusion import (by_peer_tie, gemm_by_tie, gemm_rows, is_gemm, peers as fusion_peers,
                                 rows as fusion_rows)
from bench.report.names import OP_LABELS, tie
from bench.report.render import MissingData

NAME_QK, NAME_SWIGLU = "qk_rope", "swiglu"
NAME_QKV = "qkv"
PROBES = {"qk": "diag-qk-probe-", "swiglu": "diag-swiglu-probe-"}
# The SwiGLU probe's variants (its JSON keys), as the methods page's table names them.
VARIANTS = {"shipped": "本站（libdevice expf + IEEE 除法）", "div_approx": "近似除法",
            "fast_math": "近似除法 + 近似 exp（tl.exp）"}


# ---------------------------------------------------------------- the merged QKV projection

def _layers(cfg) -> int:
    return cfg["model"].get("num_hidden_layers") or cfg["geometry"]["num_hidden_layers"]


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


def _widths(sw: dict) -> list[str]:
    return sorted(sw["shipped"], key=int)


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


def probes(data) -> tuple[dict, dict]:
    """The QK probe's and the SwiGLU probe's printed JSON, from the data's GPU folder."""
    folder = store.gpu_folder(store.gpu_slug(data["environment"].get("gpu") or "cpu"))
    return tuple(probe_output((folder / probe_name(folder, k)).read_text(encoding="utf-8")) for k in ("qk", "swiglu"))


def swiglu_probe(sw: dict) -> dict:
    """The SwiGLU probe at its widest width: how much faster approximate exp and division make ours (forward,
    backward), and how much slower its forward then still is than torch.compile(HF)'s (below 0: faster)."""
    width = _widths(sw)[-1]
    shipped, fast = sw["shipped"][width], sw["fast_math"][width]
    return {"width": width, "fwd_gain": 1 - fast["fwd_us"] / shipped["fwd_us"],
            "bwd_gain": 1 - fast["bwd_us"] / shipped["bwd_us"],
            "behind": fast["fwd_us"] / shipped["compile_fwd_us"] - 1}


def render_summary(load) -> dict[str, str]:
    data, step = load("fusion"), load(step_fusion.NAME)
    _, sw = probes(data)
    return {
        "fusion_page_env.md": env_box(data, step),
        "fusion_page_probe_table.md": probe_table(sw),
        "fusion_page_provenance.md": provenance(data, step),
    }


def methods_values(data) -> dict[str, str]:
    """The methods page's readings of the forward tables and of the QKV merge's two tables: per kernel and the run's
    tie rule, the shapes where ours (the merged GEMM) is faster, level or slower (``<key>_<phase>_<group>``); for the
    memory-bound kernels' forward, the fastest peer's time ÷ ours (``…_ratio``), its names (``…_peers``) and how much
    slower ours is (``…_slower_by``); for the merge, its time ÷ the three GEMMs' (``…_ratio``) and torch.compile's
    (``qkv_<phase>_compile_ratio``)."""
    out = {}
    for kernel, key in ((NAME_QK, "qk"), (NAME_SWIGLU, "swiglu")):
        for group, rows_ in by_peer_tie(data, kernel, "fwd").items():
            if rows_:
                out[f"{key}_fwd_{group}"] = prose.join(r["label"] for r in rows_)
                out[f"{key}_fwd_{group}_ratio"] = prose.times_span(r["ratio"] for r in rows_)
                out[f"{key}_fwd_{group}_peers"] = " 或 ".join(dict.fromkeys(OP_LABELS[r["peer"]] for r in rows_))
                if group == "slower":
                    out[f"{key}_fwd_slower_by"] = prose.pct_span(1 / r["ratio"] - 1 for r in rows_)
    if NAME_QKV in data["results"]["kernels"]:
        for phase in ("fwd", "fwd_bwd"):
            for group, rows_ in gemm_by_tie(data, NAME_QKV, phase).items():
                if rows_:
                    out[f"qkv_{phase}_{group}"] = prose.join(r["label"] for r in rows_)
                    out[f"qkv_{phase}_{group}_ratio"] = prose.times_span(r["ratio"] for r in rows_)
            out[f"qkv_{phase}_compile_ratio"] = prose.times_span(
                r["others"]["compile_three"] for r in gemm_rows(data, NAME_QKV, phase) if "compile_three" in r["others"])
    return out


def summary_values(load) -> dict[str, dict[str, str]]:
    """{{ fusion.NAME }}: the op-level figures 番外二's hand-written 要点 and readings use, and the QKV merge's
    saving at the step's model (it reads step_fusion.json too)."""
    data, step = load("fusion"), load(step_fusion.NAME)
    out = {}
    for kernel, key in ((NAME_QK, "qk"), (NAME_SWIGLU, "swiglu")):
        for phase in ("fwd", "fwd_bwd"):
            rows_ = fusion_rows(data, kernel, phase)
            for peer in fusion_peers(data, kernel):
                ratios = [r["ratios"][peer] for r in rows_ if peer in r["ratios"]]
                out[f"{key}_{phase}_{peer}_ratio"] = prose.times_span(ratios)
                out[f"{key}_{phase}_{peer}_slower"] = prose.pct_span(1 / x - 1 for x in ratios)
                out[f"{key}_{phase}_{peer}_of_copy"] = prose.pct_span(r["all_of_copy"][peer] for r in rows_)
            out[f"{key}_{phase}_of_copy"] = prose.pct_span(r["of_copy"] for r in rows_)
            out[f"{key}_shapes"] = str(len(rows_))
    try:
        norm = liger_norm_share(data, load("rmsnorm"))  # Liger's RMSNorm alone on 128-wide rows
    except MissingData:
        norm = None
    if norm:
        out["liger_norm_shape"] = norm["label"]
        out["liger_norm_us"] = f"{tables.fmt(norm['norm_us'])} µs"
        out["liger_qk_us"] = f"{tables.fmt(norm['liger_us'])} µs"
        out["liger_norm_share"] = prose.pct(norm["share"])
    qk_best = [r["ratio"] for r in fusion_rows(data, NAME_QK, "fwd_bwd") if r["peer"]]
    sw_best = [r for r in fusion_rows(data, NAME_SWIGLU, "fwd_bwd") if r["peer"]]
    out["qk_fwd_bwd_best_ratio"] = prose.times_span(qk_best)
    out["swiglu_fwd_bwd_best_slower"] = prose.pct_span(1 / r["ratio"] - 1 for r in sw_best)
    out["swiglu_fwd_bwd_best_peers"] = " 或 ".join(dict.fromkeys(OP_LABELS[r["peer"]] for r in sw_best))
    qk, sw = probes(data)
    on, off = qk["fma_on"], qk["fma_off"]  # the QK probe: the bf16 outputs equal to HF's, contraction on / off
    out["fma_on_whole"] = prose.pct(on["whole_equal"], 1)
    out["fma_on_rope"] = prose.pct(on["rope_stage_equal"], 1)
    out["fma_off_whole"] = prose.pct(off["whole_equal"], 3)
    shipped, widths = sw["shipped"], _widths(sw)
    out["swiglu_probe_widths"] = prose.join(f"I={w}" for w in widths)
    out["swiglu_compile_bits"] = prose.pct_span(shipped[w]["compile_act_bits_equal"] for w in widths)
    probe = swiglu_probe(sw)
    out["swiglu_probe_width"] = f"I={probe['width']}"
    for name in ("fwd_gain", "bwd_gain", "behind"):
        out[f"swiglu_fast_{name}"] = prose.pct(abs(probe[name]))
    out |= methods_values(data)
    within = tie(data["config"])
    fwd, both = gemm_rows(data, NAME_QKV, "fwd"), gemm_rows(data, NAME_QKV, "fwd_bwd")
    out["qkv_fwd_ratio"] = prose.times_span(r["ratio"] for r in fwd)
    out["qkv_fwd_bwd_ratio"] = prose.times_span(r["ratio"] for r in both)
    out["qkv_shapes"] = str(len(both))
    out["qkv_faster"] = str(sum(r["ratio"] <= 1 - within for r in both))
    out["qkv_tie"] = prose.pct(within)
    saving = qkv_saving(data, step)
    out["qkv_step_model"] = f"Qwen3-{saving['size']}"
    out["qkv_step_layers"] = str(saving["layers"])
    out["qkv_step_share"] = prose.pct(saving["share"], 2)
    out["qkv_step_ms"] = f"{tables.fmt(saving['per_step_ms'], 2)} ms"
    out["qkv_resolution_ms"] = f"{tables.fmt(saving['resolution_ms'], 2)} ms"
    return {"fusion": out}
