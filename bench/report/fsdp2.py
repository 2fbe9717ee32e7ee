"""fsdp2.json -> the methods page's FSDP2 table and plot, and 篇2 §六's one sentence on it."""
from __future__ import annotations

from bench.report import prose, tables
from bench.report.loss_curve import loss_plot, variant_zh

NAME = "fsdp2"
# What the runs before the experiment recorded it used (bench/exp_fsdp2.py then): the contenders held to
# HF by the gate (HF is the reference, the control the noise floor).
BEFORE_RECORDED = {"gated": ["triton", "fused"]}


def config(data) -> dict:
    """The run's config, with what a file from before a key was recorded used in its place."""
    return BEFORE_RECORDED | data["config"]


ARM_ZH = {"hf": "HF 原版", "control": "对照组（只舍入一次）", "triton": "生产版 RMSNorm", "fused": "融合残差加 + RMSNorm"}
PLOT_LABELS = {"hf": "HF 原版", "triton": "生产版 RMSNorm", "fused": "融合残差加 + RMSNorm"}
PLOT_DIFFS = {"control": "对照组 − HF（对照组：正确、只舍入一次的 RMSNorm）", "triton": "生产版 RMSNorm − HF",
              "fused": "融合残差加 + RMSNorm − HF"}


VERDICT = {"hf": "基准", "control": "噪声底"}
STATUS_ZH = {"unavailable": "不可用", "error": "出错"}


def _ok(data: dict, variant: str) -> list[str]:
    """The contenders that trained at ``variant``, in the run's order."""
    return [a for a in data["config"]["arms"] if data["results"][variant][a]["status"] == "ok"]


def _where(variant: str, arm: str) -> str:
    """'bf16 权重下的生产版 RMSNorm'."""
    return prose.glue(variant_zh(variant), "下的") + ARM_ZH[arm]


def article_facts(data: dict) -> dict:
    """The facts behind 篇2 §六's FSDP2 sentence, all from the data file: what was gated and passed, the
    largest final-loss difference from HF (and the control's), step time relative to HF, peak memory."""
    cfg, results, env = config(data), data["results"], data["environment"]
    variants, patched = cfg["variants"], cfg["gated"]
    gated = [(v, a) for v in variants for a in patched if results[v][a]["status"] == "ok"]
    worst = max(gated, key=lambda va: results[va[0]][va[1]]["gate"]["final_rel_diff"], default=None)
    ok = [(v, a) for v in variants for a in cfg["arms"] if results[v][a]["status"] == "ok"]
    return {
        "gpus": cfg["world_size"], "gpu": (env.get("gpu") or "").replace("NVIDIA ", "") or None,
        "steps": cfg["steps"], "variants": [variant_zh(v) for v in variants],
        "arms_gated": [ARM_ZH[a] for a in patched if any(a == b for _, b in gated)],
        "all_gated": len(gated) == len(patched) * len(variants),
        "passed": results["passed"],
        "gate_passed": [_where(v, a) for v, a in gated if results[v][a]["gate"]["passed"]],
        "failed": [_where(v, a) for v, a in gated if not results[v][a]["gate"]["passed"]],
        "unavailable": [ARM_ZH[a] for a in results["unavailable"]],
        "errors": [_where(v, a) for v in variants for a in cfg["arms"] if results[v][a]["status"] == "error"],
        "worst_final_rel_diff": results[worst[0]][worst[1]]["gate"]["final_rel_diff"] if worst else None,
        "worst": _where(*worst) if worst else None,
        "control_final_rel_diff": max((results[v]["control"]["gate"]["final_rel_diff"] for v, _ in gated),
                                      default=None),
        "step_vs_hf": {_where(v, a): max(results[v][a]["median_step_ms"]) / max(results[v]["hf"]["median_step_ms"])
                       for v, a in ok if a != "hf"},
        "peak_gib": {_where(v, a): max(results[v][a]["peak_gib"]) for v, a in ok
                     if None not in results[v][a]["peak_gib"]},
    }


def takeaway(data: dict) -> str:
    f = article_facts(data)
    text = (f"{f['gpus']} 张 {f['gpu']} 上" if f["gpu"] else f"{f['gpus']} 个 CPU 进程") + f"用 FSDP2 训练 {f['steps']} 步"
    if f["arms_gated"]:
        if f["all_gated"] and not f["failed"]:
            text += "，" + prose.glue(prose.join(f["arms_gated"]), f"在 {len(f['variants'])} 种精度设置下都通过 loss 门限")
        else:
            text += f"，通过 loss 门限的：{prose.join(f['gate_passed']) or '无'}"
            text += f"；未通过的：{prose.join(f['failed'])}" if f["failed"] else ""
        text += (f"；末段 loss 与 HF 最多相差 {prose.pct(f['worst_final_rel_diff'], 3)}（{f['worst']}），"
                 f"对照组最多 {prose.pct(f['control_final_rel_diff'], 3)}")
    else:
        text += "，没有可判定的补丁"
    if f["errors"]:
        text += f"；出错：{prose.join(f['errors'])}"
    if f["unavailable"]:
        text += f"；{prose.join(f['unavailable'])}不可用"
    return text + "。"


def article_sentence(data: dict) -> str:
    """篇2 §六's one sentence on FSDP2, linked to the methods page."""
    f = article_facts(data)
    where = f"{f['gpus']} 张 {f['gpu']} " if f["gpu"] else f"{f['gpus']} 个 CPU 进程"
    if f["passed"] and f["all_gated"]:
        verdict = prose.glue(prose.join(f["arms_gated"]), f"在 {len(f['variants'])} 种精度设置下都通过了同一道 loss 门限")
        text = f"补丁在多卡训练里同样成立：{where}上用 FSDP2（`fully_shard`）训练 {f['steps']} 步，{verdict}"
    else:
        text = f"{where}上用 FSDP2（`fully_shard`）训练 {f['steps']} 步：" + takeaway(data).rstrip("。")
    return text + "（[测法与数据](triton-rmsnorm-methods.md#fsdp2-两卡训练)）。\n"


def _caption(data: dict) -> str:
    cfg, results = data["config"], data["results"]
    m, gate = cfg["geometry"], cfg["gate"]
    errors = [f"{_where(v, a)}：{results[v][a]['reason']}" for v in cfg["variants"] for a in cfg["arms"]
              if results[v][a]["status"] == "error"]
    return (f"{cfg['world_size']} 个进程（每卡一个），每个解码层与整个模型各调用一次 fully_shard；Qwen3 "
            f"{m['num_hidden_layers']} 层，hidden {m['hidden_size']}，字节词表 {m['vocab_size']}；{cfg['steps']} 步，"
            f"每步全局 B={cfg['batch']}（每卡 {cfg['batch'] // cfg['world_size']}）×T={cfg['seq_len']}，数据、种子、"
            f"学习率与 loss 曲线实验相同。末段 loss = 最后 {gate['final_window']} 步的均值，末段差是与 HF 的相对差，"
            f"括号里是末段阈值；逐步最大差是与 HF 同一步 loss 之差的最大绝对值；step 时间取两卡中位数中较大的一个"
            + "".join(f"。{e}" for e in errors))


def render(data: dict) -> dict[str, str]:
    cfg, results = config(data), data["results"]
    f = tables.fmt
    window = cfg["gate"]["final_window"]
    rows = []
    for variant in cfg["variants"]:
        for arm in cfg["arms"]:
            r, name = results[variant][arm], f"{variant_zh(variant)}：{ARM_ZH[arm]}"
            if r["status"] != "ok":
                rows.append([name, "—", "—", "—", STATUS_ZH[r["status"]], "—"])
                continue
            gate = r.get("gate")  # patched arms: the gate; the control: its own report against HF
            rel = "—" if gate is None else f"{100 * gate['final_rel_diff']:.3f}" + (
                f"（{100 * gate['final_limit']:.3f}）" if arm in cfg["gated"] else "")
            rows.append([name, f(sum(r["losses"][-window:]) / window, 5),
                         "—" if gate is None else f(gate["max_abs_diff"], 3), rel,
                         VERDICT.get(arm) or ("通过" if gate["passed"] else "未通过"), f(max(r["median_step_ms"]), 3)])
    table = tables.md_table(["精度设置：实现", "末段 loss（nats/字节）", "与 HF 逐步最大差（nats）",
                             "末段差（%，阈值）", "判定", "step 时间（ms）"], rows, "lrrrcr")
    curves = {v: {a: results[v][a]["losses"] for a in _ok(data, v)} for v in cfg["variants"]}
    return {"fsdp2.md": prose.page(table, _caption(data), takeaway(data)),
            "fsdp2_sentence.md": article_sentence(data),
            "fsdp2.svg": loss_plot(curves, cfg["gate"]["step_rtol"], PLOT_LABELS, PLOT_DIFFS)}
