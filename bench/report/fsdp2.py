"""fsdp2.json -> the methods page's FSDP2 table and plot, and the figures of the hand-written readings of the methods
page and of 番外 §七 (``values``: {{ fsdp2.NAME }}; their words: tests/test_readings_fusion.py,
tests/test_readings_fused_add.py)."""
from __future__ import annotations

import copy

from bench.report import prose, tables
from bench.report.loss_curve import loss_plot
from bench.report.names import CONTROL_DIFF, TRAINING_LABELS, precision_zh

NAME = "fsdp2"
# Files written before the word "contender" and the fused kernel's own id list the contenders as "arms" and
# call the fused add + RMSNorm "fused"; they gated every contender but HF (the reference) and the control
# (the noise floor).
LEGACY_IDS = {"fused": "triton_fused_add"}
BEFORE_RECORDED = {"gated": ["triton", "triton_fused_add"]}


def contender_id(name: str) -> str:
    """A contender's id, whichever name the file it comes from uses."""
    return LEGACY_IDS.get(name, name)


def current(data) -> dict:
    """``data`` in today's words: "contenders" for "arms", each contender under its id."""
    if "arms" not in data["config"]:
        return data
    data = copy.deepcopy(data)
    cfg, results = data["config"], data["results"]
    cfg["contenders"] = [contender_id(a) for a in cfg.pop("arms")]
    if "gated" in cfg:
        cfg["gated"] = [contender_id(a) for a in cfg["gated"]]
    for variant in cfg["variants"]:
        results[variant] = {contender_id(a): r for a, r in results[variant].items()}
    results["unavailable"] = [contender_id(a) for a in results["unavailable"]]
    results["errors"] = ["/".join((v, contender_id(a))) for v, a in (e.split("/") for e in results["errors"])]
    return data


def config(data) -> dict:
    """The run's config, with what a file from before a key was recorded used in its place."""
    return BEFORE_RECORDED | current(data)["config"]


VERDICT = {"hf": "基准", "control": "噪声底"}
STATUS_ZH = {"unavailable": "不可用", "error": "出错", "skipped": "未运行"}


def _ok(data: dict, variant: str) -> list[str]:
    """The contenders that trained at ``variant``, in the run's order."""
    return [a for a in config(data)["contenders"] if data["results"][variant][a]["status"] == "ok"]


def _where(variant: str, contender: str) -> str:
    """'bf16 权重下的本站 RMSNorm'."""
    return prose.glue(precision_zh(variant), "下的") + TRAINING_LABELS[contender]


def article_facts(data: dict) -> dict:
    """The facts behind the methods page's FSDP2 reading, all from the data file: what was gated and passed, and the
    largest final-loss difference from HF (and the control's)."""
    data = current(data)
    cfg, results, env = config(data), data["results"], data["environment"]
    variants, gated_ids = cfg["variants"], cfg["gated"]
    gated = [(v, a) for v in variants for a in gated_ids if results[v][a]["status"] == "ok"]
    worst = max(gated, key=lambda va: results[va[0]][va[1]]["gate"]["final_rel_diff"], default=None)
    return {
        "gpus": cfg["world_size"], "gpu": (env.get("gpu") or "").replace("NVIDIA ", "") or None,
        "steps": cfg["steps"], "variants": [precision_zh(v) for v in variants],
        # every gated contender that could run here (not unavailable, not left out of a quick run) was gated
        "all_gated": len(gated) == sum(results[v][a]["status"] not in ("unavailable", "skipped")
                                       for v in variants for a in gated_ids),
        "passed": results["passed"],
        "failed": [_where(v, a) for v, a in gated if not results[v][a]["gate"]["passed"]],
        "worst_final_rel_diff": results[worst[0]][worst[1]]["gate"]["final_rel_diff"] if worst else None,
        "worst": _where(*worst) if worst else None,
        "control_final_rel_diff": max((results[v]["control"]["gate"]["final_rel_diff"] for v, _ in gated),
                                      default=None),
    }


def matrix_tflop_per_gpu(data: dict, variants) -> float:
    """Each GPU's matrix work per step, TFLOP: 6 x the whole model's parameters x that GPU's tokens (the model
    as HF's contender in ``variants`` counted it, the most of them)."""
    data = current(data)
    cfg, results = config(data), data["results"]
    tokens_per_gpu = cfg["batch"] // cfg["world_size"] * cfg["seq_len"]
    params = max(results[v]["hf"]["parameters_per_rank"][0] for v in variants) * cfg["world_size"]
    return 6 * params * tokens_per_gpu / 1e12


def values(data: dict) -> dict[str, str]:
    """{{ fsdp2.NAME }}: the figures of the hand-written readings: GPUs, steps, precision settings, the model's size,
    each GPU's matrix work per step, the largest final-loss difference from HF (where, and the control's), and each
    contender's step time per precision setting (``<variant>_<contender>_ms``, the larger of the GPUs' medians);
    ``fused_add_rate``: that matrix work (over the settings where HF and the fused patch both trained) spread over
    the fastest of their steps, what 番外 §七 compares with the GPU's peak."""
    data = current(data)
    cfg, results, f = config(data), data["results"], article_facts(data)
    m = cfg["geometry"]
    out = {"gpus": str(f["gpus"]), "steps": str(f["steps"]), "settings": str(len(f["variants"])),
           "layers": str(m["num_hidden_layers"]), "hidden": str(m["hidden_size"])}
    if f["gpu"]:
        out["gpu"] = f["gpu"]
    if f["worst"]:  # the largest final-loss difference from HF of a gated contender, and the control's
        out["worst_final"] = prose.pct(f["worst_final_rel_diff"], 3)
        out["worst_where"] = f["worst"]
        out["control_final"] = prose.pct(f["control_final_rel_diff"], 3)
    ran = [v for v in cfg["variants"] if results[v]["hf"]["status"] == "ok"]
    if ran:
        out["tflop"] = f"{matrix_tflop_per_gpu(data, ran):.2g} TFLOP"
    for v in cfg["variants"]:
        for a in cfg["contenders"]:
            if results[v][a]["status"] == "ok":
                out[f"{v}_{a}_ms"] = f"{tables.fmt(max(results[v][a]['median_step_ms']), 3)} ms"
    rate = fused_add_rate(data)
    if rate is not None:
        out["fused_add_rate"] = f"{rate:.2g} TFLOP/s"
    return out


def fused_add_rate(data: dict) -> float | None:
    """Each GPU's matrix work per step (TFLOP) over the fastest step of HF or the fused patch, in TFLOP/s, over the
    precision settings where both trained: the most the step's matrix work can ask of a GPU. None when neither
    setting has both."""
    data = current(data)
    cfg, results, fused = config(data), data["results"], "triton_fused_add"
    both = [v for v in cfg["variants"] if fused in results[v]
            and results[v][fused]["status"] == "ok" and results[v]["hf"]["status"] == "ok"]
    if not both:
        return None
    fastest = min(max(results[v][a]["median_step_ms"]) for v in both for a in ("hf", fused))
    return matrix_tflop_per_gpu(data, both) / (fastest / 1e3)


def _caption(data: dict) -> str:
    data = current(data)
    cfg, results = config(data), data["results"]
    m, gate = cfg["geometry"], cfg["gate"]
    errors = [f"{_where(v, a)}：{results[v][a]['reason']}" for v in cfg["variants"] for a in cfg["contenders"]
              if results[v][a]["status"] == "error"]
    return (f"{cfg['world_size']} 个进程（每卡一个），每个解码层与整个模型各调用一次 fully_shard；Qwen3 "
            f"{m['num_hidden_layers']} 层，hidden {m['hidden_size']}，字节词表 {m['vocab_size']}；{cfg['steps']} 步，"
            f"每步全局 B={cfg['batch']}（每卡 {cfg['batch'] // cfg['world_size']}）×T={cfg['seq_len']}，数据、种子、"
            f"学习率与 loss 曲线实验相同。末段 loss = 最后 {gate['final_window']} 步的均值，末段差是与 HF 的相对差，"
            f"括号里是末段阈值；逐步最大差是与 HF 同一步 loss 之差的最大绝对值；step 时间取两卡中位数中较大的一个"
            + "".join(f"。{e}" for e in errors))


def render(data: dict) -> dict[str, str]:
    data = current(data)
    cfg, results = config(data), data["results"]
    f = tables.fmt
    window = cfg["gate"]["final_window"]
    rows = []
    for variant in cfg["variants"]:
        for contender in cfg["contenders"]:
            r, name = results[variant][contender], f"{precision_zh(variant)}：{TRAINING_LABELS[contender]}"
            if r["status"] != "ok":
                rows.append([name, "—", "—", "—", STATUS_ZH[r["status"]], "—"])
                continue
            gate = r.get("gate")  # gated contenders: the gate; the control: its own report against HF
            rel = "—" if gate is None else f"{100 * gate['final_rel_diff']:.3f}" + (
                f"（{100 * gate['final_limit']:.3f}）" if contender in cfg["gated"] else "")
            rows.append([name, f(sum(r["losses"][-window:]) / window, 5),
                         "—" if gate is None else f(gate["max_abs_diff"], 3), rel,
                         VERDICT.get(contender) or ("通过" if gate["passed"] else "未通过"), f(max(r["median_step_ms"]), 3)])
    table = tables.md_table(["精度设置：实现", "末段 loss（nats/字节）", "与 HF 逐步最大差（nats）",
                             "末段差（%，阈值）", "判定", "step 时间（ms）"], rows, "lrrrcr")
    curves = {v: {a: results[v][a]["losses"] for a in _ok(data, v)} for v in cfg["variants"]}
    out = {}
    if "large" in data["results"]:
        out["fsdp2_large.md"] = large_table(data)
    return out | {"fsdp2.md": prose.page(table, _caption(data)),
            "fsdp2.svg": loss_plot(curves, cfg["gate"]["step_rtol"], *_legend(cfg))}


def _legend(cfg) -> tuple[dict, dict]:
    """The plot's labels: every contender's curve but the control's; the control's difference from HF,
    then each gated contender's."""
    curves = {a: TRAINING_LABELS[a] for a in cfg["contenders"] if a != "control"}
    diffs = {"control": CONTROL_DIFF, **{a: f"{TRAINING_LABELS[a]} − HF" for a in cfg["gated"]}}
    return curves, diffs


def large_table(data: dict) -> str:
    """The large geometry: a row per contender, the slowest rank's median step, host time, tokens/s per GPU,
    MFU against the GPU's dense bf16 peak, peak memory per rank, first-step loss."""
    from bench.report.names import DENSE_BF16_PEAK_TFLOPS

    large, results = data["config"]["large"], data["results"]["large"]
    peak_tflops = DENSE_BF16_PEAK_TFLOPS.get(data["environment"].get("gpu"))
    f, rows = tables.fmt, []
    for contender in large["contenders"]:
        r = results.get(contender, {"status": "skipped"})
        name = TRAINING_LABELS[contender]
        if r["status"] != "ok":
            rows.append([name, STATUS_ZH[r["status"]], "—", "—", "—", "—", "—"])
            continue
        mfu = (r["flops_per_token"] * r["tokens_per_s_per_gpu"] / 1e12 / peak_tflops) if peak_tflops else None
        peak = max(r["peak_gib"]) if all(p is not None for p in r["peak_gib"]) else None
        rows.append([name, f(max(r["median_step_ms"]), 4), f(max(r["median_host_ms"]), 4),
                     f(r["tokens_per_s_per_gpu"], 4), prose.pct(mfu, 1) if mfu is not None else "—",
                     f(peak, 3) if peak is not None else "—", f"{r['first_loss']:.5f}"])
    g = large["geometry"]
    caption = (f"Qwen3-{large['model']['size']} 几何、{g['num_hidden_layers']} 层（hidden {g['hidden_size']}），"
               f"每卡 {large['large_batch']} 条 × {large['seq_len']} token，{data['config']['world_size']} 卡 FSDP2"
               "（每个解码层和整个模型各 fully_shard 一次），bf16 参数、梯度与 AdamW 状态，每层激活检查点；"
               f"{large['large_warmup']} 步预热后计时 {large['large_steps']} 步，step 取各卡中位数里较大的一个；"
               "主机耗时是一步的 Python 调用返回所用的时间（step 里没有等 GPU 的操作）；MFU 以 GPU 的稠密 bf16 峰值为分母")
    table = tables.md_table(["档位", "step（ms）", "主机耗时（ms）", "tokens/s/GPU", "MFU", "峰值显存（GiB/卡）",
                             "第一步 loss"], rows, "lrrrrrr")
    return prose.page(table, caption)
