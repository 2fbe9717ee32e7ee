"""Artifacts of 篇2 that read several data files: environment, provenance, key points, conclusion.

``render_summary(load)`` is called by ``bench/report/render.py`` with ``load(name) -> data`` (it raises
when a data file is missing, and the whole summary is then skipped). Every number and every
comparison word below is computed from the data, so the prose cannot drift from the tables.
"""
from __future__ import annotations

import re

from bench import store
from bench.report import fullsize, fused_add, prose, rmsnorm, tables
from bench.report.fsdp2 import contender_id
from bench.report.names import OP_LABELS, STEP_LABELS, TRAINING_LABELS, precision_zh, tie
from bench.report.p1_roofline import ridge_flop_per_byte
from bench.report.rmsnorm import vs_best_peer
from bench.report.step import config as step_config
from bench.report.step import contender_rows, fused_add_takeaway, geometry_zh
from bench.report.step import faster as step_faster, level as step_level, relation as step_relation

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


def _full_ok(full: dict | None) -> dict[str, dict]:
    return {r["contender"]: r for r in fullsize.rows(full) if r["status"] == "ok"} if full else {}


def _full_words(full: dict) -> str:
    return f"完整的 {full['config']['geometry']['num_hidden_layers']} 层模型（AdamW、激活检查点）"


def _full_liger(full: dict | None, resolution: float) -> str:
    """'；完整的 36 层模型（…）上每秒 token 数是 HF eager 的 1.27×，再换上本站 RMSNorm 是 1.28×（与它持平）'."""
    ok = _full_ok(full)
    base, liger = ok.get("eager"), ok.get("liger")
    if not base or not liger:
        return ""
    text = f"；{_full_words(full)}上每秒 token 数是 HF eager 的 {prose.times(liger['speedup'])}"
    both = ok.get("liger_triton")
    if both:
        text += f"，再换上本站 RMSNorm 是 {prose.times(both['speedup'])}"
        text += "（与它持平）" if fullsize.level(both, liger, resolution) else ""
    if base.get("peak") is not None and liger.get("peak") is not None:  # the memory claim at full size
        only = "只" if base["peak"] - liger["peak"] < 0.1 * base["peak"] else ""
        text += (f"，峰值显存{only}从 {tables.fmt(base['peak'], 3)} GiB 降到 {tables.fmt(liger['peak'], 3)} GiB"
                 f"（少 {base['peak'] - liger['peak']:.1f} GiB）")
    return text


def _full_ours(full: dict | None) -> str:
    ok = _full_ok(full)
    base, ours = ok.get("eager"), ok.get("triton")
    if not base or not ours:
        return ""
    return f"；{_full_words(full)}上每秒 token 数是 {prose.times(ours['speedup'])}"


def _host_clause(host: dict | None) -> str:
    """'（GPU 时间；算上主机开销，单次调用在 3 个形状上比 F.rms_norm 慢 2.2–3.7 倍，训练 step 里被 GPU 工作盖住，见 §6.2）'."""
    if not host:
        return ""
    slower = [s["fwd_bwd"]["triton"]["wall_us"] / s["fwd_bwd"]["torch_rms_norm"]["wall_us"]
              for s in host["results"]["shapes"] if {"triton", "torch_rms_norm"} <= set(s["fwd_bwd"])]
    slower = [r for r in slower if r > 1]
    if not slower:
        return "（GPU 时间；算上主机开销也不比 F.rms_norm 慢）"
    return (f"（GPU 时间；算上主机开销，单次调用在 {len(slower)} 个形状上比 F.rms_norm 慢 "
            f"{prose.times_span(slower, 1)} 倍，训练 step 里被 GPU 工作盖住，见 §6.2）")


def keypoints(rms: dict, step: dict, loss: dict, full: dict | None = None, host: dict | None = None) -> list[str]:
    """The 要点 box: what to do first, each point with one or two numbers from the data; ``full``
    (fullsize.json), where measured, adds the full-depth job's figures."""
    points = []
    ok, cfg = _steps(step), step_config(step)
    base, ours = ok.get(cfg["baseline"]), ok.get(cfg["ours"])
    both_compiled = "compile" in ok and "triton_compile" in ok
    if "compile" in ok:
        text = f"能编译就先用 torch.compile：{geometry_zh(step)}的一步是 HF eager 的 {prose.times(ok['compile']['speedup'])}"
        if both_compiled:
            text += ("；把本站实现放进编译过的层里，一步"
                     + ("再快" if step_faster(ok["triton_compile"], ok["compile"], cfg) else "不再更快")
                     + f"（{prose.times(ok['triton_compile']['speedup'])}）")
        points.append(text + "。")
    if "liger" in ok and base and ok["liger"]["peak"] is not None and base["peak"] is not None:
        points.append(f"要换掉整套算子、省下 logits 的显存，用 Liger 的全套补丁：一步 {prose.times(ok['liger']['speedup'])}，"
                      f"峰值显存从 {tables.fmt(base['peak'], 3)} GiB 降到 {tables.fmt(ok['liger']['peak'], 3)} GiB"
                      "（8 层、不含优化器）"
                      + _full_liger(full, cfg.get("resolution") or 0.0) + "。")
    fwd, both = vs_best_peer(rms, "fwd"), vs_best_peer(rms, "fwd_bwd")
    level, slowest = tie(rmsnorm.config(rms)), max(1 / r["ratio"] - 1 for r in fwd)
    fwd_vs_peer = (f"与最快的对比方案持平（相差不到 {prose.pct(level)}）" if all(abs(1 - r["ratio"]) <= level for r in fwd)
                   else f"与最快的对比方案持平或最多慢 {prose.pct(slowest)}" if all(r["ratio"] <= 1 + level for r in fwd)
                   else rmsnorm.compare(rms, fwd))
    text = (f"不编译时，手写的价值在 backward：forward 达到拷贝上限的 {prose.pct_span(r['of_copy'] for r in fwd)}，"
            f"{fwd_vs_peer}；forward + backward ")
    if all(r["ratio"] > 1 for r in both):
        text += (f"在全部 {len(both)} 个形状上最快，最快的对比方案用时是它的 {prose.times_span(r['ratio'] for r in both)} 倍")
    else:
        text += rmsnorm.compare(rms, both)
    text += _host_clause(host)
    if base and ours:
        text += f"；换进训练，一步是 HF eager 的 {prose.times(ours['speedup'])}"
        if "torch_rmsnorm" in ok:
            text += f"（F.rms_norm {prose.times(ok['torch_rmsnorm']['speedup'])}）"
        text += _full_ours(full)
    points.append(text + "。")
    # No point on the forward-only tier: its backward recomputes the forward, so it gains nothing by construction,
    # and the fairer variant (keep rstd, differentiate with a few torch ops) was not measured (篇2 §5.2).

    lcfg, res = loss["config"], loss["results"]
    variants = lcfg["variants"]
    passed = all(res[v]["gate"]["passed"] for v in variants)
    worst = max(res[v]["gate"]["final_rel_diff"] for v in variants)
    limit = max(res[v]["gate"].get("final_limit", res[v]["gate"]["final_rtol"]) for v in variants)
    points.append(f"手写之后用 fp64 gradcheck 和带对照组的 loss 曲线把关：{lcfg['steps']} 步、{len(variants)} 种精度设置"
                  + ("都通过门限" if passed else "并未都通过门限")
                  + f"，末段 loss 与 HF 最多差 {prose.pct(worst, 2)}（阈值 {prose.pct(limit, 1)}）。")
    return points


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
    takeaway = "每个库融合的范围不同：注意力交给 sdpa 或 FlashAttention，整套算子看 Liger，单个 RMSNorm 有 F.rms_norm、quack、transformers 的 kernel hub 和手写几条路。"
    return prose.page(tables.md_table(["库", "融合了什么", "限制", "本站实测（H200）"], rows, "llll"), caption, takeaway)


def torch_rms_norm_sentence(rms: dict) -> str:
    """篇2 §2.5: F.rms_norm's forward against ours, on the wide rows and on the 128-wide q/k-norm rows."""
    ours, shapes = rmsnorm.config(rms)["ours"], rmsnorm.shapes_of(rms, "fwd")
    ratio = {id(s): s["fwd"]["torch_rms_norm"]["median_us"] / s["fwd"][ours]["median_us"] for s in shapes}
    narrow = [s for s in shapes if s["width"] <= 128]
    wide = [s for s in shapes if s["width"] > 128]
    q = max(narrow, key=lambda s: s["rows"])
    return (f"不编译时 `F.rms_norm` 的 forward 并不处处够快：Qwen3 的宽行上它的用时是本站实现的 "
            f"{prose.times_span((ratio[id(s)] for s in wide), 1)} 倍，{narrow[0]['width']} 宽的 q/k norm 行上是 "
            f"{prose.times_span((ratio[id(s)] for s in narrow), 1)} 倍"
            f"（q_norm 的 {q['rows']}×{q['width']}：{tables.fmt(q['fwd']['torch_rms_norm']['median_us'])} µs 对 "
            f"{tables.fmt(q['fwd'][ours]['median_us'])} µs）。\n")


def conclusion(rms: dict, step: dict) -> str:
    shape = _h4096(rms)
    op = {n: v["median_us"] for n, v in shape["fwd_bwd"].items()}
    ok, cfg = _steps(step), step_config(step)
    base = ok.get(cfg["baseline"])
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

    peers = {n: op[n] for n in rmsnorm.config(rms)["peers"] if n in op}
    best = min(peers, key=peers.get)
    ours = op[rmsnorm.config(rms)["ours"]]
    text = (f"H=4096 的 RMSNorm forward + backward：本站实现 {f(ours)} µs，HF eager 用时是它的 {op['hf'] / ours:.1f} 倍，"
            f"最快的对比方案 {OP_LABELS[best]} 是 {peers[best] / ours:.2f} 倍")
    mine = ok.get(cfg["ours"])
    if base and mine:
        text += (f"；放进 {geometry_zh(step)}的训练 step，本站实现把 step 从 {f(base['step'], 4)} ms "
                 f"{'降到' if mine['step'] < base['step'] else '变成'} {f(mine['step'], 4)} ms"
                 f"（{prose.times(mine['speedup'])}）")
        faster = [t for t in ("compile", "liger") if t in ok and step_faster(ok[t], mine, cfg)]
        if faster:
            text += (f"，{_names(faster)}更快"
                     f"（{'、'.join(prose.times(ok[t]['speedup']) for t in faster)}），它们融合的不止 RMSNorm")
        if "triton_compile" in ok and "compile" in ok:
            text += "；本站 RMSNorm + torch.compile " + step_relation(ok["triton_compile"], ok["compile"], cfg,
                                                               "单独的 torch.compile ")
    caption = (f"RMSNorm 列：{shape['rows']}×{shape['width']}，bf16，CUDA graph 重放的 GPU 时间中位数。"
               f"训练 step 列：{geometry_zh(step)}，B={step['config']['batch']}，T={step['config']['seq_len']}，"
               "一步 = zero_grad + forward + backward；Liger 一行的 step 用的是 apply_liger_kernel_to_qwen3() 的全套补丁"
               "（RoPE、RMSNorm、SwiGLU、融合线性交叉熵），不只是 RMSNorm；torch.compile 是逐个 decoder 层的区域编译。")
    return prose.page(table, caption, text + "。")


def fusion_set_bullet(fusion_step: dict) -> str:
    """§八's bullet on the whole fusion set (番外二), from step_fusion.json: the set against our RMSNorm alone and
    against Liger's patch without its loss, each '持平' unless the 95 % intervals are disjoint."""
    cfg = step_config(fusion_step)
    ok = {r["contender"]: r for r in contender_rows(fusion_step) if r["status"] == "ok"}
    base, ours, liger = (ok.get(name) for name in (cfg["baseline"], cfg["ours"], "liger_no_loss"))
    if not (base and ours and liger):
        return ""
    f = tables.fmt
    return (f"- **整套融合（[番外二](qwen3-qk-rope-swiglu.md)）：** RMSNorm、残差加法、QK-norm + RoPE、SwiGLU 一起换上，"
            f"step {f(ours['step'], 4)} ms，"
            + step_relation(ours, base, cfg, "只换 RMSNorm 的本站实现")
            + "；" + step_relation(ours, liger, cfg, "不含 loss 的 Liger 补丁") + "。\n")


def ridge_sentence(roofline: dict, fullsize: dict | None = None) -> str:
    """篇 1's ridge point; a range when another run (fullsize.json's 8192³ GEMM) measured a higher matmul rate."""
    r = roofline["results"]
    gpu = (roofline["environment"].get("gpu") or "GPU").replace("NVIDIA ", "")
    ridge = ridge_flop_per_byte(roofline)
    other = (fullsize or {}).get("config", {}).get("gemm_ceiling_tflops")
    high = other * 1e12 / (r["ceilings"]["copy"]["gbps"] * 1e9) if other else None
    if high and round(high) > round(ridge):
        text = f"{gpu} 的屋脊点实测在 {ridge:.0f}–{high:.0f} FLOP/字节之间（随那次运行的矩阵乘吞吐而变，篇 1 §五）"
    else:
        text = f"{gpu} 的屋脊点实测约为 {ridge:.0f} FLOP/字节（篇 1 §五）"
    norm = next((p for p in r.get("points", []) if p["name"] == "RMSNorm"), None)
    if norm:
        text += f"，RMSNorm 的算术强度约为 {norm['fused']['flops'] / norm['fused']['bytes']:.1f} FLOP/字节"
    return text + "。\n"


def fused_add_keypoints(fused: dict, step: dict) -> str:
    """The 要点 box of the fused residual add page: bytes, op-level gain, peers, and the step."""
    passes = fused_add.passes(fused)
    f, u = passes["fused"], passes["unfused"]
    points = ["已经在用 torch.compile 就不必手写：Inductor 会自己把注意力之后的残差加法和 norm 融在一起（篇 1 §六）；"
              "按层编译时，MLP 之后那次跨层的加法仍单独成 kernel，但它在一步里的分量很小（见最后一条）。",
              f"不编译时，融合能少搬数据：每个“残差加 → RMSNorm”合成一个 kernel，forward 读写整张量从 {u['fwd']} 遍"
              f"降到 {f['fwd']} 遍，backward 从 {u['fwd_bwd'] - u['fwd']} 遍降到 {f['fwd_bwd'] - f['fwd']} 遍。"]
    points += ["单算子" + (" " if p[:1].isascii() else "") + p + "。" for p in fused_add.gain_parts(fused)]
    rows = contender_rows(step)
    ok, cfg = _steps(step), step_config(step)
    fused_step, ours_step = ok.get("triton_fused_add"), ok.get(cfg["ours"])
    level = fused_step and ours_step and step_level(fused_step, ours_step, cfg)
    lead = "但换进训练几乎无感：" if level else "换进训练："
    points.append(lead + fused_add_takeaway(step, rows).replace("的一步训练：", "的一步训练里，", 1))
    return '!!! abstract "要点"\n\n' + "".join(f"    - {p}\n" for p in points)


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
    rms, step, loss = data["rmsnorm"], data["step"], data["loss_curve"]
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
        "p2_keypoints.md": '!!! abstract "要点"\n\n' + "".join(f"    - {p}\n" for p in keypoints(rms, step, loss, data.get("fullsize"), data.get("host"))),
        "p2_conclusion.md": conclusion(rms, step),
        "p2_survey.md": survey(rms, step),
        "p2_torch_rms_norm.md": torch_rms_norm_sentence(rms),
    }
    if "step_fusion" in data:
        out["p2_fusion_set.md"] = fusion_set_bullet(data["step_fusion"])
    if "fused_add" in data:
        out["fused_add_keypoints.md"] = fused_add_keypoints(data["fused_add"], step)
    try:
        out["p2_ridge.md"] = ridge_sentence(load("p1_roofline"), data.get("fullsize"))
    except FileNotFoundError:  # 篇1's roofline data not committed for this GPU
        pass
    return out
