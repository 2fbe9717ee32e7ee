"""loss_curve.json -> 篇2 §六's loss-curve table, its detail and the plot: HF, ours and the control, with the gate."""
from __future__ import annotations

from bench.report import plots, prose, tables
from bench.report.names import COLOURS, LOSS_CURVE_DIFFS, LOSS_CURVE_LEGEND, precision_zh

NAME = "loss_curve"


def _caption(cfg: dict) -> str:
    m = cfg["geometry"]
    gate = cfg["gate"]
    schedule = "余弦衰减到十分之一" if "cosine" in cfg.get("optimizer", "") else "lr 不变"
    return (f"Qwen3 {m.get('num_hidden_layers')} 层，hidden {m.get('hidden_size')}，intermediate "
            f"{m.get('intermediate_size')}，head_dim {m.get('head_dim')}，字节词表 {m.get('vocab_size')}；训练 "
            f"{cfg['steps']} 步，每步 B={cfg['batch']}×T={cfg['seq_len']} 个 CPython {cfg['corpus']['python']} "
            f"标准库的字节；AdamW，峰值 lr {cfg['lr']}，{cfg['warmup']} 步预热后{schedule}。末段 loss = 最后 "
            f"{gate['final_window']} 步的均值；门限：末段差不超过 {100 * gate['final_rtol']:g}%，或对照末段差的两倍"
            f"（取大者，即末段阈值），每一步的相对差不超过 {100 * gate['step_rtol']:g}%，全部有限。"
            f"对照：只舍入一次的正确 RMSNorm。")


def render(data: dict) -> dict[str, str]:
    cfg, results = data["config"], data["results"]
    f = tables.fmt
    rows, detail = [], []
    for variant in cfg["variants"]:
        r = results[variant]
        g, c = r["gate"], r["control_gate"]
        rows.append([
            precision_zh(variant), f"{100 * g['final_rel_diff']:.3f}", f"{100 * c['final_rel_diff']:.3f}",
            f"{100 * g.get('final_limit', g['final_rtol']):.3f}",
            f"{100 * g['max_rel_diff']:.2f}（{100 * c['max_rel_diff']:.2f}）", "通过" if g["passed"] else "未通过",
        ])
        detail.append([
            precision_zh(variant), f(g["final_baseline"], 5), f(g["final_patched"], 5), f(g["max_abs_diff"], 3),
            f"{100 * c['max_rel_diff']:.2f}", f"{100 * g['step_rtol']:g}",
        ])
    table = tables.md_table(
        ["精度设置", "末段差：本站 RMSNorm vs HF（%）", "末段差：对照 vs HF（%）", "末段阈值（%）",
         "逐步最大相对差（%）：本站 RMSNorm（对照）", "判定"], rows, "lrrrrc")
    detail_table = tables.md_table(
        ["精度设置", "末段 loss：HF（nats）", "末段 loss：本站 RMSNorm（nats）", "逐步最大绝对差（nats）",
         "对照逐步最大相对差（%）", "逐步阈值（%）"], detail, "lrrrrr")
    return {"loss_curve.md": prose.page(table, _caption(cfg)),
            "loss_curve_detail.md": prose.page(detail_table, "loss 以每字节 nats 计；" + _caption(cfg)),
            "loss_curve.svg": _plot(data)}


def _plot(data: dict) -> str:
    cfg, results = data["config"], data["results"]
    return loss_plot({v: results[v]["losses"] for v in cfg["variants"]}, cfg["gate"]["step_rtol"])


def loss_plot(curves: dict[str, dict[str, list]], step_rtol: float, labels: dict = LOSS_CURVE_LEGEND,
              diffs: dict = LOSS_CURVE_DIFFS) -> str:
    """One column per precision setting (``curves``: precision -> contender -> losses): the loss curves of
    ``labels`` on top (HF solid, the others dashed), the relative differences from HF of ``diffs`` below,
    drawn in that order (the control under the kernels); each contender in its colour. The lower row's axis
    spans the gate's per-step limit (``step_rtol``, drawn as dotted lines) in every column, as its title says."""
    plt = plots.plot_style()
    variants = list(curves)
    fig, axes = plt.subplots(2, len(variants), figsize=(plots.FIGURE_WIDTH, 4.1), sharex=True, squeeze=False,
                             gridspec_kw={"height_ratios": [1, 1], "wspace": 0.22, "hspace": 0.35})
    limit = 100 * step_rtol
    for col, variant in enumerate(variants):
        losses = curves[variant]
        steps = list(range(1, len(losses["hf"]) + 1))
        top, bottom = axes[0][col], axes[1][col]
        for name, label in labels.items():
            if name in losses:
                top.plot(steps, losses[name], color=COLOURS[name], linewidth=1.4 if name == "hf" else 1.0,
                         linestyle="-" if name == "hf" else "--", label=label)
        top.set_title(precision_zh(variant), loc="left")
        for name, label in diffs.items():
            if name in losses:
                rel = [100 * (x - h) / h for x, h in zip(losses[name], losses["hf"])]
                bottom.plot(steps, rel, color=COLOURS[name], linewidth=0.8, label=label)
        for sign in (1, -1):
            bottom.axhline(sign * limit, color="#999999", linestyle=":", linewidth=1)
        bottom.set_ylim(-1.2 * limit, 1.2 * limit)
        bottom.set_yticks([-limit, -limit / 2, 0, limit / 2, limit])
        bottom.yaxis.set_major_formatter(plt.FuncFormatter(lambda v, _: f"{v:g}".replace("-", "−")))
        bottom.set_title(f"(x − HF) / HF，逐步门限 ±{limit:g}%", loc="left")
        bottom.set_xlabel("训练步数")
        if col == 0:
            top.set_ylabel("loss（nats/字节）")
            bottom.set_ylabel("与 HF 的相对差（%）")
    axes[0][0].legend(loc="upper right")
    handles, names = axes[1][0].get_legend_handles_labels()
    fig.legend(handles, names, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=2)
    return plots.svg_of(fig)


def values(data: dict) -> dict[str, str]:
    """{{ loss_curve.NAME }}: steps, settings, the largest final-loss difference from HF and the limit; the per-step
    gate's margin on this GPU (the methods page): the largest per-step difference from HF of the correct control
    and of ours over every precision setting, the per-step limit and the limit as a multiple of ours."""
    cfg, res = data["config"], data["results"]
    gates = [res[v]["gate"] for v in cfg["variants"]]
    step_max = max(g["max_rel_diff"] for g in gates)
    return {"steps": f"{cfg['steps']:,}", "settings": str(len(cfg["variants"])),
            "worst_final": prose.pct(max(g["final_rel_diff"] for g in gates), 2),
            "limit": prose.pct(max(g.get("final_limit", g["final_rtol"]) for g in gates), 1),
            "step_max": prose.pct(step_max, 2),
            "control_step_max": prose.pct(max(res[v]["control_gate"]["max_rel_diff"] for v in cfg["variants"]), 2),
            "step_limit": prose.pct(cfg["gate"]["step_rtol"]), "step_margin": f"{cfg['gate']['step_rtol'] / step_max:.2f}"}
