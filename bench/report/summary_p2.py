"""Artifacts of 篇2 that read several data files: environment, provenance, key points, conclusion.

``render_summary(load)`` is called by ``bench/report/render.py`` with ``load(name) -> data`` (it raises
when a data file is missing, and the whole summary is then skipped). Every number and every
comparison word below is computed from the data, so the prose cannot drift from the tables.
"""
from __future__ import annotations

import re

from bench import store
from bench.report import fused_add, prose, rmsnorm, tables
from bench.report.fsdp2 import contender_id
from bench.report.names import OP_LABELS, STEP_LABELS, TRAINING_LABELS, precision_zh, tie
from bench.report.p1_roofline import ridge_flop_per_byte
from bench.report.rmsnorm import vs_best_peer
from bench.report.step import config as step_config
from bench.report.step import contender_rows, fused_add_takeaway, geometry_zh

DATA = ("rmsnorm", "tuning", "step", "loss_curve")
# Data files of issue 13's additions, listed (provenance, environment box) once they are committed:
# width_sweep.json: RMSNorm at 43 hidden sizes 256..65536 (bench/exp_width_sweep.py);
# fused_add.json: fused residual add + RMSNorm at Qwen3's hidden sizes (bench/exp_fused_add.py).
OPTIONAL_DATA = ("width_sweep", "fused_add")

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


def keypoints(rms: dict, step: dict, loss: dict) -> list[str]:
    points = []
    fwd = vs_best_peer(rms, "fwd")
    peers = prose.join(dict.fromkeys(OP_LABELS[r["peer"]] for r in fwd))
    slow = [r for r in fwd if r["ratio"] < 1]
    fast = [r for r in fwd if r["ratio"] > 1]
    detail = []
    if slow:
        worst = min(slow, key=lambda r: r["ratio"])
        detail.append(f"最多慢 {prose.pct(1 / worst['ratio'] - 1)}（{worst['label']}）")
    if fast:
        best = max(fast, key=lambda r: r["ratio"])
        detail.append(f"最多快 {prose.pct(best['ratio'] - 1)}（{best['label']}）")
    points.append(f"forward：生产版达到拷贝上限的 {prose.pct_span(r['of_copy'] for r in fwd)}，"
                  f"与最快的对手（{peers}）{'互有快慢' if slow and fast else '相比'}：{'，'.join(detail)}。")

    both = vs_best_peer(rms, "fwd_bwd")
    if all(r["ratio"] > 1 for r in both):
        text = (f"forward + backward：生产版在全部 {len(both)} 个形状上最快，最快的对手用时是它的 "
                f"{prose.times_span(r['ratio'] for r in both)} 倍")
    else:
        text = f"forward + backward：生产版{rmsnorm.compare(rms, both)}"
    if all(r["hf_ratio"] for r in both):
        text += f"，HF eager 是 {prose.times_span((r['hf_ratio'] for r in both), 1)} 倍"
    points.append(text + "。")

    ok, cfg = _steps(step), step_config(step)
    base, ours = ok.get(cfg["baseline"]), ok.get(cfg["ours"])
    if base and ours:
        text = f"训练 step（{geometry_zh(step)}）：生产版是 HF eager 的 {prose.times(ours['speedup'])}"
        if base["share"] is not None and ours["share"] is not None:
            text += f"，RMSNorm 占比从 {prose.pct(base['share'], 1)} 降到 {prose.pct(ours['share'], 1)}"
        faster = [t for t in ("compile", "liger") if t in ok and ok[t]["step"] < ours["step"]]
        if faster:
            text += (f"；{_names(faster)}更快"
                     f"（{'、'.join(prose.times(ok[t]['speedup']) for t in faster)}），因为它们融合的不止 RMSNorm")
        points.append(text + "。")
    if base and "triton_fwd" in ok:
        gain = ok["triton_fwd"]["speedup"]
        points.append(f"只换 forward、backward 仍走 autograd：step 是 HF eager 的 {prose.times(gain)}，"
                      + ("没有收益。" if gain < 1 + tie(cfg) else "收益小于两者都换。"))

    cfg, res = loss["config"], loss["results"]
    variants = cfg["variants"]
    passed = all(res[v]["gate"]["passed"] for v in variants)
    parts = []
    for v in variants:
        g, c = res[v]["gate"], res[v]["control_gate"]
        control = ("对照与 HF 逐位相同" if c["final_rel_diff"] == 0 and c["max_abs_diff"] == 0
                   else f"对照 {prose.pct(c['final_rel_diff'], 3)}")
        parts.append(f"{prose.glue(precision_zh(v), '下')}生产版 {prose.pct(g['final_rel_diff'], 3)}、{control}")
    limit = max(res[v]["gate"].get("final_limit", res[v]["gate"]["final_rtol"]) for v in variants)
    points.append(f"loss 曲线：{cfg['steps']} 步，{len(variants)} 种精度设置"
                  + ("都通过门限" if passed else "并未都通过门限")
                  + f"；末段 loss 与 HF 的差：{'；'.join(parts)}（阈值 {prose.pct(limit, 1)}）。")
    return points


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
    text = (f"H=4096 的 RMSNorm forward + backward：生产版 {f(ours)} µs，HF eager 用时是它的 {op['hf'] / ours:.1f} 倍，"
            f"最快的对手 {OP_LABELS[best]} 是 {peers[best] / ours:.2f} 倍")
    mine = ok.get(cfg["ours"])
    if base and mine:
        text += (f"；放进 {geometry_zh(step)}的训练 step，生产版把 step 从 {f(base['step'], 4)} ms "
                 f"{'降到' if mine['step'] < base['step'] else '变成'} {f(mine['step'], 4)} ms"
                 f"（{prose.times(mine['speedup'])}）")
        faster = [t for t in ("compile", "liger") if t in ok and ok[t]["step"] < mine["step"]]
        if faster:
            text += (f"，{_names(faster)}更快"
                     f"（{'、'.join(prose.times(ok[t]['speedup']) for t in faster)}），它们融合的不止 RMSNorm")
        if "triton_compile" in ok and "compile" in ok:
            ratio = ok["triton_compile"]["step"] / ok["compile"]["step"]
            relation = (f"持平（相差不到 {prose.pct(tie(cfg))}）" if abs(ratio - 1) < tie(cfg)
                        else f"{'慢' if ratio > 1 else '快'} {prose.pct(abs(ratio - 1))}")
            text += f"；生产版 + torch.compile 与单独的 torch.compile {relation}"
    caption = (f"RMSNorm 列：{shape['rows']}×{shape['width']}，bf16，CUDA graph 重放的 GPU 时间中位数。"
               f"训练 step 列：{geometry_zh(step)}，B={step['config']['batch']}，T={step['config']['seq_len']}，"
               "一步 = zero_grad + forward + backward；Liger 一行的 step 用的是 apply_liger_kernel_to_qwen3() 的全套补丁"
               "（RoPE、RMSNorm、SwiGLU、融合线性交叉熵），不只是 RMSNorm；torch.compile 是逐个 decoder 层的区域编译。")
    return prose.page(table, caption, text + "。")


def ridge_sentence(roofline: dict) -> str:
    r = roofline["results"]
    gpu = (roofline["environment"].get("gpu") or "GPU").replace("NVIDIA ", "")
    text = f"{gpu} 的屋脊点实测约为 {ridge_flop_per_byte(roofline):.0f} FLOP/字节（篇 1 §五）"
    norm = next((p for p in r.get("points", []) if p["name"] == "RMSNorm"), None)
    if norm:
        text += f"，RMSNorm 的算术强度约为 {norm['fused']['flops'] / norm['fused']['bytes']:.1f} FLOP/字节"
    return text + "。\n"


def fused_add_keypoints(fused: dict, step: dict) -> str:
    """The 要点 box of the fused residual add page: bytes, op-level gain, peers, and the step."""
    passes = fused_add.passes(fused)
    f, u = passes["fused"], passes["unfused"]
    points = [f"每个“残差加 → RMSNorm”融合成一个 kernel：forward 读写整张量从 {u['fwd']} 遍降到 {f['fwd']} 遍，"
              f"backward 从 {u['fwd_bwd'] - u['fwd']} 遍降到 {f['fwd_bwd'] - f['fwd']} 遍。"]
    points += ["单算子" + (" " if p[:1].isascii() else "") + p + "。" for p in fused_add.gain_parts(fused)]
    points.append(fused_add_takeaway(step, contender_rows(step)))
    return '!!! abstract "要点"\n\n' + "".join(f"    - {p}\n" for p in points)


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
    logs = tables.md_table(["文件", "内容"], [[f"`{name}`", text] for name, text in p2_logs(gpu)], "ll")
    out = {
        "p2_env.md": tables.env_box(envs, extra_keys=("liger_kernel",) + (("quack",) if any(e.get("quack") for e in envs)
                                                                          else ())),
        "p2_provenance.md": tables.provenance_table({f"{name}.json": d for name, d in (data | optional).items()})
        + f"\n篇2 的 GPU 日志（都在 `docs/data/{gpu}/` 下）：\n\n" + logs,
        "p2_keypoints.md": '!!! abstract "要点"\n\n' + "".join(f"    - {p}\n" for p in keypoints(rms, step, loss)),
        "p2_conclusion.md": conclusion(rms, step),
    }
    if "fused_add" in data:
        out["fused_add_keypoints.md"] = fused_add_keypoints(data["fused_add"], step)
    try:
        out["p2_ridge.md"] = ridge_sentence(load("p1_roofline"))
    except FileNotFoundError:  # 篇1's roofline data not committed for this GPU
        pass
    return out
