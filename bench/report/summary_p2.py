"""Artifacts of 篇2 that read several data files: environment, provenance, key points, conclusion.

``render_summary(load)`` is called by ``bench/report/render.py`` with ``load(name) -> data`` (it raises
when a data file is missing, and the whole summary is then skipped). Every number and every
comparison word below is computed from the data, so the prose cannot drift from the tables.
"""
from __future__ import annotations

import re

from bench import store
from bench.report import prose, rmsnorm, tables
from bench.report.fsdp2 import contender_id
from bench.report.names import OP_LABELS, STEP_LABELS, TRAINING_LABELS, precision_zh
from bench.report.p1_roofline import ridge_flop_per_byte
from bench.report.step import config as step_config
from bench.report.step import contender_rows, geometry_zh

DATA = ("rmsnorm", "tuning", "step", "loss_curve")
# Data files of issue 13's additions, listed (provenance, environment box) once they are committed:
# width_sweep.json: RMSNorm at 43 hidden sizes 256..65536 (bench/exp_width_sweep.py);
# fused_add.json: fused residual add + RMSNorm at Qwen3's hidden sizes (bench/exp_fused_add.py);
# fused_add_sweep.json: the fused add at width_sweep's 43 widths (bench/exp_fused_add_sweep.py);
# compile.json: both modules eager vs torch.compile (bench/exp_compile.py).
OPTIONAL_DATA = ("width_sweep", "fused_add", "fused_add_sweep", "compile", "fullsize", "host", "step_fusion")

OUTCOME_ZH = {"passed": "通过", "failed": "失败", "skipped": "跳过", "error": "出错", "errors": "出错"}


def log_outcome(text: str) -> str:
    """'48 通过，1 失败' from pytest's summary line; '门限 amp 通过，bf16 未通过' from a loss-curve log;
    one verdict per precision setting and patch from an FSDP2 log."""
    summaries = re.findall(r"^[= ]*(\d+ (?:passed|failed)[^\n]*?) in [\d.]+s", text, re.MULTILINE)
    if summaries:
        counts = re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", summaries[-1])
        return "，".join(f"{n} {OUTCOME_ZH[kind]}" for n, kind in counts)
    gates = re.findall(r"\[loss_curve\] (\w+): gate (PASSED|FAILED)", text)
    if gates:
        return "门限：" + "，".join(prose.glue(precision_zh(v), "通过" if g == "PASSED" else "未通过") for v, g in gates)
    gates = re.findall(r"\[fsdp2\] (\w+)/(\w+): (?:gate )?(PASSED|FAILED|ERROR)", text)
    if gates:
        verdicts = {"PASSED": "通过", "FAILED": "未通过", "ERROR": "出错"}
        return "门限：" + "，".join(prose.glue(f"{precision_zh(v)} {TRAINING_LABELS[contender_id(a)]}", verdicts[g])
                                  for v, a, g in gates)
    return ""


def p2_logs(gpu: str) -> list[tuple[str, str]]:
    """(file, description) of every log committed under docs/data/<gpu>/: its note in logs.json
    (``python -m bench.logs add``) and the outcome read from the log itself."""
    folder = store.gpu_folder(gpu)
    described = store.load_logs(gpu)
    names = sorted(p.name for p in folder.glob("*.log"))
    missing = [n for n in names if n not in described]
    if missing:
        raise KeyError(f"describe these logs: python -m bench.logs add docs/data/{gpu}/FILE --kind KIND --note ...: "
                       f"{missing}")
    gone = sorted(set(described) - set(names))
    if gone:
        raise KeyError(f"docs/data/{gpu}/{store.LOGS_FILE} describes logs that are not there: {gone}")
    out = []
    for name in names:
        outcome = log_outcome((folder / name).read_text(encoding="utf-8", errors="replace"))
        out.append((name, described[name]["note"] + (f"（{outcome}）" if outcome else "")))
    return out


def _h4096(rms: dict) -> dict:
    return next(s for s in rms["results"]["shapes"] if s["width"] == 4096 and s["dy_layout"] == "contiguous")


def _names(contenders) -> str:
    """'torch.compile、Liger（全套补丁）', spaced for the CJK word that follows."""
    return prose.glue(prose.join(STEP_LABELS.get(c, c) for c in contenders), "")


def _steps(data: dict) -> dict[str, dict]:
    return {r["contender"]: r for r in contender_rows(data) if r["status"] == "ok"}


# What each surveyed library fuses and its limits: words, checked in the libraries' source at the
# versions the environment box names (docs/data/claims/triton-rmsnorm.json); the figures come from the data.
SURVEY = [
    ("FlashAttention / sdpa", "注意力：分块计算，online softmax，分数矩阵不落显存",
     "flash-attn 要 Ampere 或更新的 GPU、fp16/bf16；sdpa 自己挑后端", None),
    ("Liger Kernel", "RMSNorm、RoPE、SwiGLU、fused linear cross-entropy",
     "补丁改写进程里的类，须在建模型之前（或经 `model=` 传入建好的模型）；`in_place=True` 改写 dY；Qwen3 补丁不用它的融合加法", "liger"),
    ("transformers kernel hub", "按层名换 forward：`Qwen3RMSNorm` 换成 Hub 上 kernels-community/liger-kernels 的 LigerRMSNorm",
     "要装 `kernels`（5.25 起必装，`from_pretrained` 默认启用；5.17 要传 `use_kernels=True`）", None),
    ("quack", "RMSNorm（可带残差）forward + backward，CuTe-DSL",
     "依赖 nvidia-cutlass-dsl（CUTLASS 的 Python DSL）", "quack"),
    ("Unsloth", "LoRA / QLoRA 的整套 kernel 与手动 backward", "须在 transformers 之前 import", None),
    ("xFormers", "memory-efficient attention、attention bias", "sdpa 已有同类后端", None),
    ("Apex", "FusedRMSNorm、FusedAdam 等", "CUDA 扩展要从源码编译", None),
    ("torch.compile", "一张图里相邻的逐元素与归约算子", "首步编译，形状变化要重编译；不跨图", "compile"),
    ("F.rms_norm", "RMSNorm forward + backward（CUDA）", "在 fp32 里乘完权重再舍入，低位与 HF 不同", "torch_rms_norm"),
]


def survey(rms: dict, step: dict) -> str:
    """篇2 §二's table: per library, what it fuses, its limits, and one figure this site measured."""
    shape = _h4096(rms)
    op = {n: v["median_us"] for n, v in shape["fwd_bwd"].items()}
    ours = op[rmsnorm.config(rms)["ours"]]
    ok = _steps(step)
    base = ok.get(step_config(step)["baseline"])
    op_name = {"liger": "liger", "quack": "quack", "compile": "compile_hf", "torch_rms_norm": "torch_rms_norm"}
    rows = []
    for name, fuses, limits, key in SURVEY:
        figure = "—（本站未测）"
        if key:
            parts = []
            if op_name[key] in op:
                parts.append(f"RMSNorm fwd+bwd {tables.fmt(op[op_name[key]])} µs")
            step_key = {"liger": "liger", "compile": "compile", "torch_rms_norm": "torch_rmsnorm"}.get(key)
            if step_key in ok and base:
                parts.append(f"一步 {prose.times(ok[step_key]['speedup'])}")
            figure = "；".join(parts) or figure
        rows.append([name, fuses, limits, figure])
    caption = (f"RMSNorm：{shape['rows']}×{shape['width']}，bf16，CUDA graph 重放的 GPU 时间"
               + (f"（同一形状上 HF eager 是 {tables.fmt(op['hf'])} µs，本站实现是 {tables.fmt(ours)} µs）"
                  if "hf" in op else f"（本站实现是 {tables.fmt(ours)} µs）")
               + f"；一步：{geometry_zh(step)}，相对 HF eager；Liger 的一步用全套补丁。")
    return prose.page(tables.md_table(["库", "融合了什么", "限制", "本站实测（H200）"], rows, "llll"), caption)


def conclusion(rms: dict, step: dict) -> str:
    shape = _h4096(rms)
    op = {n: v["median_us"] for n, v in shape["fwd_bwd"].items()}
    ok = _steps(step)
    # (op-level contender, step-level contender) of each row; a row without the op is named by its step
    rows_spec = [("hf", "eager"), ("torch_rms_norm", "torch_rmsnorm"), ("compile_hf", "compile"), ("liger", "liger"),
                 ("triton", "triton"), (None, "triton_compile")]
    f = tables.fmt
    rows = []
    for op_name, step_name in rows_spec:
        us = op.get(op_name) if op_name else None
        s = ok.get(step_name)
        rows.append([
            OP_LABELS[op_name] if op_name else STEP_LABELS[step_name], f(us) if us else "—", prose.times(op["hf"] / us, 1) if us and "hf" in op else "—",
            f(s["step"], 4) if s else "—", prose.times(s["speedup"]) if s and s["speedup"] else "—",
            f(s["peak"], 3) if s and s["peak"] is not None else "—",
        ])
    table = tables.md_table(["方案", "RMSNorm fwd+bwd（µs，H=4096）", "相对 HF eager", "训练 step（ms）", "相对 HF eager",
                             "峰值显存（GiB）"], rows, "lrrrrr")

    caption = (f"RMSNorm 列：{shape['rows']}×{shape['width']}，bf16，CUDA graph 重放的 GPU 时间中位数。"
               f"训练 step 列：{geometry_zh(step)}，B={step['config']['batch']}，T={step['config']['seq_len']}，"
               "一步 = zero_grad + forward + backward；Liger 一行的 step 用的是 apply_liger_kernel_to_qwen3() 的全套补丁"
               "（RoPE、RMSNorm、SwiGLU、融合线性交叉熵），不只是 RMSNorm；torch.compile 是逐个 decoder 层的区域编译。")
    return prose.page(table, caption)  # the words above it are the page's own (篇 2 §八)


def ridge_span(roofline: dict, fullsize: dict | None = None) -> tuple[float, float]:
    """篇 1's ridge point (FLOP per byte) and, when another run (fullsize.json's 8192³ GEMM) measured a higher
    matmul rate, the ridge point at that rate; (ridge, ridge) otherwise."""
    ridge = ridge_flop_per_byte(roofline)
    other = (fullsize or {}).get("config", {}).get("gemm_ceiling_tflops")
    high = other * 1e12 / (roofline["results"]["ceilings"]["copy"]["gbps"] * 1e9) if other else ridge
    return ridge, max(ridge, high)


def rmsnorm_intensity(roofline: dict) -> float:
    """The fused RMSNorm's arithmetic intensity in 篇 1's roofline (FLOP per byte)."""
    norm = next(p for p in roofline["results"]["points"] if p["name"] == "RMSNorm")
    return norm["fused"]["flops"] / norm["fused"]["bytes"]


def versions_note(envs: list[dict]) -> str:
    """The 实验环境 box's last line: the comparisons hold for the torch (and transformers) the data name; what
    newer releases do to the reader's baseline (transformers 5.25's hub kernels, torch 2.13's F.rms_norm), and
    where to read more."""
    torch_versions = sorted({str(e["torch"]).split("+")[0] for e in envs if e.get("torch")})
    hf_versions = sorted({str(e["transformers"]) for e in envs if e.get("transformers")})
    on = f"torch {'、'.join(torch_versions)}" + (f"、transformers {'、'.join(hf_versions)}" if hf_versions else "")
    return (f"各项对比只在 {on} 上测过；新版本会换掉你的基线。transformers 5.25 起 `from_pretrained` 默认启用 kernel hub，"
            "训练时在 CUDA 上把 RMSNorm 换成 Hub 上的 LigerRMSNorm，这时的“HF”更接近本文的 Liger 一档"
            "（`use_kernels=False` 换回 HF 原版）；torch 2.13 起 `F.rms_norm` 在 Hopper 上可能改走 PyTorch 内置的 quack "
            "kernel，要对照本文的 quack 一档。详见[测法页](triton-rmsnorm-methods.md#torch-与-triton-的版本)。")

def render_summary(load) -> dict[str, str]:
    data = {name: load(name) for name in DATA}
    try:  # the two-GPU FSDP2 run, from another machine: listed with the data files when committed
        optional = {"fsdp2": load("fsdp2")}
    except FileNotFoundError:
        optional = {}
    rms, step = data["rmsnorm"], data["step"]
    for name in OPTIONAL_DATA:
        try:
            data[name] = load(name)
        except FileNotFoundError:  # not measured yet
            pass
    envs = [d["environment"] for d in data.values()]
    gpu = store.gpu_slug(rms["environment"].get("gpu") or "cpu")
    p2_logs(gpu)  # every committed log is described in logs.json (the repository's log index, linked from the page)
    out = {
        "p2_env.md": tables.env_box(envs, extra_keys=("liger_kernel",) + (("quack",) if any(e.get("quack") for e in envs)
                                                                          else ()), note=versions_note(envs)),
        "p2_provenance.md": tables.provenance_table({f"{name}.json": d for name, d in (data | optional).items()}),
        "p2_conclusion.md": conclusion(rms, step),
        "p2_survey.md": survey(rms, step),
    }
    return out


def summary_values(load) -> dict[str, dict[str, str]]:
    """{{ p2.NAME }}: 篇 2 §4.4's ridge point (a range when fullsize.json's GEMM ran faster than 篇 1's) and
    RMSNorm's arithmetic intensity, both from 篇 1's roofline data."""
    roofline = load("p1_roofline")
    try:
        fullsize = load("fullsize")
    except FileNotFoundError:  # not measured on this GPU
        fullsize = None
    low, high = ridge_span(roofline, fullsize)
    return {"p2": {"ridge": prose.span([low, high], lambda v: f"{v:.0f}") + " FLOP/字节",
                   "rmsnorm_intensity": f"{rmsnorm_intensity(roofline):.1f} FLOP/字节"}}
