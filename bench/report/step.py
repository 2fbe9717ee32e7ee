"""step.json -> 篇2 §六's training-step tables and plot: step time per contender, the RMSNorm share, the fused add.

The step-time and RMSNorm-share tables carry no sentence: the methods page reads them in hand-written prose with
``values`` ({{ step.NAME }}), and tests/test_readings_methods.py checks its words with :func:`level` and
:func:`faster`."""
from __future__ import annotations

from bench.report import plots, prose, tables
from bench.report.names import PASTEL_LINE, STEP_LABELS, tie

NAME = "step"
# What the runs before the experiment recorded these used (bench/exp_step.py then): the contender every
# step is compared with, ours, and the tie rule of the step times.
BEFORE_RECORDED = {"baseline": "eager", "ours": "triton", "tie_rule": "within_1pct"}


def config(data) -> dict:
    """The run's config, with what a file from before a key was recorded used in its place."""
    return BEFORE_RECORDED | data["config"]


def contender_rows(data: dict) -> list[dict]:
    """One row per contender of the run: its step time, spread, peak memory, speed-up over the baseline
    and RMSNorm share (``status`` and ``reason`` for one that did not run)."""
    rows = []
    results = data["results"]
    base = results.get(config(data)["baseline"], {})
    base_ms = base.get("median_ms") if base.get("status") == "ok" else None
    for contender, record in results.items():
        row = {"contender": contender, "label": record.get("label", contender), "status": record["status"]}
        if record["status"] == "ok":
            step = record["median_ms"]
            profile = record.get("profile") or {}
            rms = profile.get("rmsnorm_ms")
            lo, hi = record.get("ci95_ms") or (record["min_ms"], record["max_ms"])  # older files: min–max
            row.update(step=step, lo=lo, hi=hi, interval="ci95_ms" in record, gpu=profile.get("device_ms"),
                       processes=record.get("processes", 1), peak=record.get("peak_gib"),
                       loss=record.get("loss"), tokens_per_s=record.get("tokens_per_s"),
                       speedup=base_ms / step if base_ms else None, rms=rms,
                       share=rms / step if rms is not None else None,
                       without=step - rms if rms is not None else None,
                       bound=step / (step - rms) if rms is not None and rms < step else None,
                       method=profile.get("method"))
        else:
            row["reason"] = record.get("reason", "")
        rows.append(row)
    return rows


FUSED_ADD = "triton_fused_add"  # its RMSNorm time includes the residual adds it absorbed
# RMSNorm under 5 % of a step: fusing more into it cannot move the step much (番外 §六's "只占 … 能省的本就不多",
# checked against it by tests/test_readings_fused_add.py)
SMALL_SHARE = 0.05


def label(contender: str) -> str:
    return STEP_LABELS.get(contender, contender)


def geometry_zh(data: dict) -> str:
    """'Qwen3-8B 几何、8 层'."""
    cfg = data["config"]
    return f"Qwen3-{cfg['model']['size']} 几何、{cfg.get('geometry', {}).get('num_hidden_layers')} 层"


def interval_head(data: dict) -> str:
    return "95% 区间（ms）" if config(data)["tie_rule"] == "ci95_disjoint" else "区间（ms）"


def timing_zh(data: dict) -> str:
    """How the step times were taken, and what the run can resolve."""
    cfg = config(data)
    if cfg["tie_rule"] != "ci95_disjoint":
        return f"CUDA event 计时，{cfg['warmup']} 步预热后 {cfg['timed_steps']} 步的中位数。"
    late, rounds = cfg.get("late_rounds") or [], cfg.get("rounds", 1)
    text = (f"CUDA event 计时：每档 {rounds} 个新进程、各 {cfg['timed_steps']} 步（{cfg['warmup']} 步预热，各档交错），"
            "中位数与 95% 区间（两级 bootstrap，见测法页）；区间重叠算持平")
    if cfg.get("resolution") is not None:
        text += f"，本次能分辨的最小差约为一步的 {prose.pct(cfg['resolution'], 1)}"
    text += "。GPU 时间取自第 1 轮一个 profiler 记录的 step。"
    if late:
        text += prose.glue(prose.join(label(c) for c in late), "的第 3 轮事后补跑。")
    short = {name: sum(r.get("status") == "ok" for r in record.get("rounds", []))
             for name, record in data["results"].items() if isinstance(record, dict) and record.get("rounds")}
    short = {name: n for name, n in short.items() if 0 < n < rounds}
    if short:
        text += prose.glue(prose.join(f"{label(name)}只跑了 {n} 轮" for name, n in short.items()),
                           "（其余轮次超出时间预算，未计入）。")
    return text


def caption(data: dict) -> str:
    cfg = data["config"]
    g = cfg.get("geometry", {})
    return (f"{geometry_zh(data)}（hidden {g.get('hidden_size')}、intermediate {g.get('intermediate_size')}、"
            f"head_dim {g.get('head_dim')}、词表 {g.get('vocab_size')}），B={cfg['batch']}，T={cfg['seq_len']}，"
            f"{cfg['dtype']}，{cfg.get('attention', 'sdpa')} 注意力，激活检查点"
            f"{'开' if cfg['activation_checkpointing'] else '关'}；一步 = zero_grad + 带 labels 的 forward + backward，"
            f"不含优化器更新；" + timing_zh(data))


def _ok(rows: list[dict]) -> dict[str, dict]:
    return {r["contender"]: r for r in rows if r["status"] == "ok"}


def disjoint(a: tuple[float, float], b: tuple[float, float]) -> bool:
    """Two intervals that do not overlap (the rule of bench/harness/stats.py; reports import nothing from the
    measuring side)."""
    return a[1] < b[0] or b[1] < a[0]


def level(a: dict, b: dict, cfg: dict) -> bool:
    """Two contenders' steps count as level: with the ci95_disjoint rule, unless their 95 % intervals are
    disjoint; with a ratio rule (older files), within its distance from 1."""
    if cfg["tie_rule"] == "ci95_disjoint":
        return not disjoint((a["lo"], a["hi"]), (b["lo"], b["hi"]))
    return abs(a["step"] / b["step"] - 1) < tie(cfg)


def faster(a: dict, b: dict, cfg: dict) -> bool:
    """``a``'s step is shorter than ``b``'s by more than the run can resolve."""
    return a["step"] < b["step"] and not level(a, b, cfg)


def interval_zh(row: dict) -> str:
    """'415.3–420.9 ms' : the row's 95 % interval."""
    return f"{tables.fmt(row['lo'], 4)}–{tables.fmt(row['hi'], 4)} ms"


def relation(a: dict, b: dict, cfg: dict, name_b: str) -> str:
    """'比 B 快 2.3%（区间 …，不重叠）' or '与 B 持平（95% 区间重叠：…）'."""
    lead = " " if name_b[:1].isascii() and name_b[:1].isalnum() else ""  # CJK, then a Latin name: a space
    if level(a, b, cfg):
        if cfg["tie_rule"] == "ci95_disjoint":
            return prose.glue(f"与{lead}{name_b}", f"持平（95% 区间 {interval_zh(a)} 与 {interval_zh(b)} 重叠）")
        return prose.glue(f"与{lead}{name_b}", f"持平（相差不到 {prose.pct(tie(cfg))}）")
    ratio = a["step"] / b["step"]
    return prose.glue(f"比{lead}{name_b}", f"{'慢' if ratio > 1 else '快'} {prose.pct(abs(ratio - 1), 1)}")


def fused_add_step(data: dict, rows: list[dict]) -> str:
    """The fused residual add at step level: a table of HF eager, Triton, Triton + fused add, with its caption (番外
    §六 writes the reading by hand from ``values``; tests/test_readings_fused_add.py checks its words)."""
    ok = _ok(rows)
    cfg = config(data)
    ours = ok.get(cfg["ours"])
    f = tables.fmt
    body = []
    for contender in (cfg["baseline"], cfg["ours"], FUSED_ADD):
        r = ok.get(contender)
        if r:
            body.append([label(contender), f(r["step"], 4), f"{f(r['lo'], 4)} – {f(r['hi'], 4)}",
                         prose.times(r["speedup"]) if r["speedup"] else "—",
                         prose.times(ours["step"] / r["step"]) if ours else "—"])
    table = tables.md_table(["档位", "step（ms，中位数）", interval_head(data), "相对 HF eager", "相对本站 RMSNorm"], body, "lrrrr")
    return prose.page(table, "相对 = 对方的 step ÷ 该档的 step，大于 1 表示该档更快。" + caption(data))


def render(data: dict) -> dict[str, str]:
    rows = contender_rows(data)
    f = tables.fmt

    step_rows, detail_rows = [], []
    for r in rows:
        if r["status"] != "ok":
            step_rows.append([label(r["contender"]), f"未运行：{r['status']}", "—", "—", "—", "—"])
            detail_rows.append([label(r["contender"]), "—", "—"])
            continue
        step_rows.append([
            label(r["contender"]), f(r["step"], 4), f"{f(r['lo'], 4)} – {f(r['hi'], 4)}",
            f(r["gpu"], 4) if r["gpu"] is not None else "—",
            prose.times(r["speedup"]) if r["speedup"] else "—", f(r["peak"], 3) if r["peak"] is not None else "—",
        ])
        detail_rows.append([label(r["contender"]), f"{r['tokens_per_s']:,.0f}", f"{r['loss']:.4f}"])
    step_table = tables.md_table(["档位", "step（ms，中位数）", interval_head(data), "GPU 时间（ms / step）",
                                  "相对 HF eager", "峰值显存（GiB）"], step_rows, "lrrrrr")
    cfg = data["config"]
    detail_table = tables.md_table(["档位", "tokens/s", "第一步 loss"], detail_rows, "lrr")

    share_rows = []
    for r in rows:
        if r["status"] != "ok":
            continue
        if r["rms"] is None:
            share_rows.append([label(r["contender"]), f(r["step"], 4), "分不开（被 Inductor 融合）", "—", "—", "—"])
            continue
        share_rows.append([
            label(r["contender"]), f(r["step"], 4), f(r["rms"], 3), prose.pct(r["share"], 1), f(r["without"], 4),
            prose.times(r["bound"], 3) if r["bound"] else "—",
        ])
    share_table = tables.md_table(["档位", "step（ms）", "RMSNorm（ms / step）", "RMSNorm 占比", "RMSNorm 为零时（ms）",
                                   "Amdahl 上限"], share_rows, "lrrrrr")

    skipped = [f"{label(r['contender'])}：{r['status']}（{r['reason']}）" for r in rows if r["status"] != "ok"]
    not_run = ("未运行的档位：" + "；".join(skipped) + "。") if skipped else ""
    return {
        "step_time.md": prose.page(step_table, caption(data) + "峰值显存为 torch.cuda.max_memory_allocated。" + not_run),
        "step_detail.md": prose.page(detail_table, f"tokens/s = B×T ÷ step 中位数（一步 {cfg['batch'] * cfg['seq_len']} 个 "
                                     "token）；第一步 loss：同一随机初始化、同一批数据上的交叉熵，各档位应几乎相同。"),
        "step_rmsnorm_share.md": prose.page(
            share_table,
            "RMSNorm 时间取自一个 profiler 记录的 step：各 norm 模块 forward 范围内的 kernel，加上按 autograd 序号对应的 "
            "backward 节点的 kernel；编译的档位按 kernel 名统计。Amdahl 上限 = step ÷（step − RMSNorm）。"
            + (f"{label(FUSED_ADD)}的 RMSNorm 时间包含融合进去的残差加法。" if FUSED_ADD in _ok(rows) else "")
            + caption(data)),
        "step_fused_add.md": fused_add_step(data, rows),
        "step_time.svg": _plot(rows, data),
    }


def _plot(rows: list[dict], data: dict) -> str:
    plt = plots.plot_style()
    ok = [r for r in rows if r["status"] == "ok"]
    fig, ax = plt.subplots(figsize=(7.2, 0.34 * max(len(ok), 1) + 1.0))
    labels = [STEP_LABELS.get(r["contender"], r["label"]) for r in ok][::-1]
    y = list(range(len(ok)))
    rms = [r["rms"] or 0.0 for r in ok][::-1]
    rest = [r["step"] - (r["rms"] or 0.0) for r in ok][::-1]
    ax.barh(y, rest, color=PASTEL_LINE["blue"], label="其余部分")
    ax.barh(y, rms, left=rest, color=PASTEL_LINE["pink"], label="RMSNorm（profiler 实测）")
    for yi, r in zip(y, ok[::-1]):
        note = "" if r["rms"] is not None else "（RMSNorm 已融合，无法单独计时）"
        ax.text(r["step"], yi, f" {r['step']:.0f} ms{note}", va="center", fontsize=plots.SMALL, color="#777777")
    ax.set_yticks(y, labels)
    ax.set_xlabel("训练 step 时间（ms，中位数；越短越好）")
    ax.set_xlim(0, max([r["step"] for r in ok] or [1]) * 1.5)
    ax.grid(axis="y", visible=False)
    ax.legend(loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=2)
    cfg = data["config"]
    ax.set_title(f"Qwen3 {cfg['model']['size']} 的层形状，{cfg['model']['num_hidden_layers']} 层，"
                 f"B={cfg['batch']}，T={cfg['seq_len']}，forward + backward")
    return plots.svg_of(fig)


def values(data: dict) -> dict[str, str]:
    """The named values the pages write into their prose ({{ step.NAME }}): each contender's step, interval,
    speed-up over HF eager and peak memory; the resolution; RMSNorm's share and the Amdahl bound."""
    cfg, out = config(data), {"resolution": prose.pct(config(data)["resolution"], 1)}
    ok = _ok(contender_rows(data))
    for name, row in ok.items():
        out[f"{name}_ms"] = f"{tables.fmt(row['step'], 4)} ms"
        out[f"{name}_ci"] = f"{tables.fmt(row['lo'], 4)}–{tables.fmt(row['hi'], 4)} ms"
        out[f"{name}_speedup"] = prose.times(row["speedup"])
        if row["peak"] is not None:
            out[f"{name}_peak"] = f"{tables.fmt(row['peak'], 3)} GiB"
        if row["share"] is not None:
            out[f"{name}_share"] = prose.pct(row["share"], 1)
            out[f"{name}_rms"] = f"{tables.fmt(row['rms'], 3)} ms"
    base = ok[cfg["baseline"]]
    out["eager_bound"] = prose.times(base["bound"], 3)
    out["triton_vs_torch"] = prose.pct(1 - ok["triton"]["step"] / ok["torch_rmsnorm"]["step"], 1)
    return out
