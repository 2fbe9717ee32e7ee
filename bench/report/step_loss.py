"""step_loss.json -> the whole set with its loss against Liger's full patch, eager and with regional
torch.compile: the step table, each pair's relation (ranked only where the 95 % intervals are disjoint), the
eager target (the set's step <= ``eager_target`` x Liger's, peak memory <= Liger's) and every first-step loss
that is off the others'."""
from __future__ import annotations

import statistics

from bench.report import prose, tables
from bench.report.step import caption, contender_rows, interval_head, label, relation

NAME = "step_loss"
WRONG_LOSS = 0.01  # a first-step loss this far (relative) from the contenders' median is wrong, not rounded


def rows_by_contender(data: dict) -> dict[str, dict]:
    return {r["contender"]: r for r in contender_rows(data) if r["status"] == "ok"}


def pair_sentence(data: dict) -> str:
    cfg, rows = data["config"], rows_by_contender(data)
    clauses = []
    for ours, theirs in cfg["pairs"]:
        a, b = rows.get(ours), rows.get(theirs)
        if not a or not b:
            clauses.append(f"{label(ours)}对{label(theirs)}：未比较（有一档没有运行）")
            continue
        clauses.append(prose.glue(label(ours), relation(a, b, cfg, label(theirs))))
    return "；".join(clauses) + "。"


def eager_target(data: dict) -> dict:
    """{"ratio": ours / Liger, "time": met, "memory": met}; None values where a side did not run."""
    cfg, rows = data["config"], rows_by_contender(data)
    ours, liger = rows.get(cfg["ours"]), rows.get(cfg["baseline"])
    if not ours or not liger:
        return {"ratio": None, "time": None, "memory": None}
    memory = None if ours["peak"] is None or liger["peak"] is None else ours["peak"] <= liger["peak"]
    ratio = ours["step"] / liger["step"]
    return {"ratio": ratio, "time": ratio <= cfg["eager_target"], "memory": memory}


def wrong_losses(data: dict) -> list[str]:
    """The contenders whose first-step loss is off the median of all of them by more than WRONG_LOSS."""
    rows = [r for r in rows_by_contender(data).values() if r["loss"] is not None]
    if len(rows) < 3:
        return []
    middle = statistics.median(r["loss"] for r in rows)
    return [f"{label(r['contender'])}（{r['loss']:.6g}，其余档的中位数 {middle:.6g}）" for r in rows
            if abs(r["loss"] / middle - 1) > WRONG_LOSS]


def targets_text(data: dict) -> str:
    word = {True: "达到", False: "未达到", None: "未比较（有一档没有运行）"}
    target, cfg = eager_target(data), data["config"]
    ratio = f"（{prose.times(target['ratio'], 3)}）" if target["ratio"] is not None else ""
    wrong = wrong_losses(data)
    return "\n".join([
        f"- eager：{label(cfg['ours'])}的 step 不超过{label(cfg['baseline'])}的 "
        f"{prose.times(cfg['eager_target'])}{ratio}：{word[target['time']]}；峰值显存不超过它：{word[target['memory']]}。",
        f"- {pair_sentence(data)}",
        "- 第一步的 loss 偏离其余档超过 1% 的：" + ("；".join(wrong) if wrong else "没有") + "。",
    ]) + "\n"


def render(data: dict) -> dict[str, str]:
    f = tables.fmt
    cfg = data["config"]
    base = rows_by_contender(data).get(cfg["baseline"])
    body = []
    for r in contender_rows(data):
        if r["status"] != "ok":
            body.append([label(r["contender"]), f"未运行：{r['status']}", "—", "—", "—", "—"])
            continue
        ratio = r["step"] / base["step"] if base else None
        body.append([label(r["contender"]), f(r["step"], 4), f"{f(r['lo'], 4)} – {f(r['hi'], 4)}",
                     prose.times(ratio, 3) if ratio else "—", f(r["peak"], 3) if r["peak"] is not None else "—",
                     f"{r['loss']:.6g}" if r["loss"] is not None else "—"])
    table = tables.md_table(["档位", "step（ms）", interval_head(data), f"÷ {label(cfg['baseline'])}",
                             "峰值显存（GiB）", "第一步 loss"], body, "lrrrrr")
    return {"step_loss_table.md": prose.page(table, caption(data) + "峰值显存为 torch.cuda.max_memory_allocated。"),
            "step_loss_targets.md": targets_text(data)}


def values(data: dict) -> dict[str, str]:
    """The named values the fused-loss page writes into its prose ({{ step_loss.NAME }})."""
    cfg, rows = data["config"], rows_by_contender(data)
    out = {"gpu": data["environment"]["gpu"].removeprefix("NVIDIA ").removesuffix(" HBM3")}
    for name, row in rows.items():
        out[f"{name}_ms"] = f"{tables.fmt(row['step'], 4)} ms"
        out[f"{name}_ci"] = f"{tables.fmt(row['lo'], 4)}–{tables.fmt(row['hi'], 4)} ms"
        out[f"{name}_peak"] = f"{row['peak']:.1f} GiB"
    ours, liger = rows[cfg["ours"]], rows[cfg["baseline"]]
    out["ours_vs_liger"] = prose.times(ours["step"] / liger["step"], 3)
    out["ours_faster_than_liger"] = prose.pct(1 - ours["step"] / liger["step"], 1)
    out["ours_extra_peak"] = f"{ours['peak'] - liger['peak']:.1f} GiB"
    return out
