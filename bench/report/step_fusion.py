"""step_fusion.json -> 番外二's step table (with its caption) and the figures of the page's hand-written readings
({{ step_fusion.NAME }}): each of our kernels against Liger's in the same tier, and the set against Liger's patch
without its loss; ranked (``wins``) only where the 95 % intervals are disjoint. tests/test_readings_extras.py and
tests/test_readings_fusion.py check the page's words against the same rule."""
from __future__ import annotations

from bench.report import prose, tables
from bench.report.step import caption, interval_head, contender_rows, label, level

NAME = "step_fusion"


def rows_by_contender(data: dict) -> dict[str, dict]:
    return {r["contender"]: r for r in contender_rows(data)}


def wins(data: dict) -> dict[str, bool | None]:
    """ours -> True (faster, intervals disjoint), False (slower, disjoint), None (level or not run)."""
    cfg = data["config"]
    rows = rows_by_contender(data)
    out = {}
    for ours, theirs in cfg["pairs"]:
        a, b = rows.get(ours), rows.get(theirs)
        if not a or not b or a["status"] != "ok" or b["status"] != "ok" or level(a, b, cfg):
            out[ours] = None
        else:
            out[ours] = a["step"] < b["step"]
    return out


def render(data: dict) -> dict[str, str]:
    f = tables.fmt
    cfg = data["config"]
    rows = contender_rows(data)
    base = rows_by_contender(data).get(cfg["baseline"])
    body = []
    for r in rows:
        if r["status"] != "ok":
            body.append([label(r["contender"]), f"未运行：{r['status']}", "—", "—", "—", "—"])
            continue
        ratio = base["step"] / r["step"] if base and base["status"] == "ok" else None
        body.append([label(r["contender"]), f(r["step"], 4), f"{f(r['lo'], 4)} – {f(r['hi'], 4)}",
                     f(r["gpu"], 4) if r["gpu"] is not None else "—", prose.times(ratio, 3) if ratio else "—",
                     f(r["peak"], 3) if r["peak"] is not None else "—"])
    table = tables.md_table(["档位", "step（ms，中位数）", interval_head(data), "GPU 时间（ms / step）",
                             f"相对{label(cfg['baseline'])}", "峰值显存（GiB）"], body, "lrrrrr")
    return {"step_fusion_table.md": prose.page(table, caption(data) + "峰值显存为 torch.cuda.max_memory_allocated。")}


def values(data: dict) -> dict[str, str]:
    """{{ step_fusion.NAME }}: each contender's step and its speed over the RMSNorm-only baseline."""
    from bench.report.step import config

    rows = rows_by_contender(data)
    base = rows[config(data)["baseline"]]
    out = {"resolution_ms": f"{tables.fmt(base['step'] * config(data)['resolution'], 2)} ms"}
    for name, row in rows.items():
        out[f"{name}_ms"] = f"{tables.fmt(row['step'], 4)} ms"
        out[f"{name}_vs_base"] = prose.times(base["step"] / row["step"], 3)
        out[f"{name}_gain"] = prose.pct(base["step"] / row["step"] - 1, 1)
    return out
