"""The home page's headline figure, from fullsize.json: what the site's RMSNorm (篇2's production kernel, forward
and backward) does to the reader's job, full-depth Qwen3-8B with AdamW and activation checkpointing, against HF
eager, in tokens per second, with the setup it was measured in.

``render_summary(load)`` is called by ``bench/report/render.py``; without fullsize.json it is skipped. A
speed-up is said only where the two contenders' 95 % intervals are disjoint and their medians differ by more
than the step experiment's resolvable difference (step.json ``config.resolution``: process-to-process spread,
which one process per contender cannot show); otherwise the headline says the two are level.
"""
from __future__ import annotations

from bench.report import prose, tables
from bench.report import fullsize

LINK = "triton-rmsnorm.md#62-分档-step-实测"
NAMES = {"eager": "HF eager", "triton": "本站 RMSNorm", "liger_triton": "Liger 全套补丁加本站 RMSNorm"}


def _where(data: dict) -> str:
    """'1 张 H200 上'."""
    env = data["environment"]
    gpu = (env.get("gpu") or "").replace("NVIDIA ", "")
    return f"{env.get('gpu_count', 1)} 张 {gpu} 上" if gpu else "CPU 上"


def headline(full: dict, step: dict) -> str:
    """One sentence: HF eager's and ours' tokens/s, the speed-up, MFU, and the setup."""
    cfg, res = full["config"], full["results"]
    resolution = step["config"].get("resolution") or 0.0
    g = cfg["geometry"]
    where = (f"{_where(full)}训练完整的 Qwen3-{cfg['model']['size']}（{g['num_hidden_layers']} 层，"
             f"{tables.dtype_short(cfg['dtype'])}，AdamW，激活检查点，每步 {cfg['batch']}×{cfg['seq_len']} 个 token）")
    more = f"与 torch.compile、Liger 的对比见[篇 2 §6.2]({LINK})"
    rows = {r["contender"]: r for r in fullsize.rows(full) if r["status"] == "ok"}
    base, ours = res.get(cfg["baseline"], {}), res.get(cfg["ours"], {})
    if base.get("status") != "ok" or ours.get("status") != "ok":
        missing = prose.join(NAMES[c] for c in (cfg["baseline"], cfg["ours"]) if res.get(c, {}).get("status") != "ok")
        return f"**实测：** {where}，{missing}没有结果；{more}。\n"
    f = lambda v: f"{v:,.0f}"  # noqa: E731
    if not fullsize.level(rows[cfg["ours"]], rows[cfg["baseline"]], resolution):
        ratio = ours["tokens_per_s"] / base["tokens_per_s"]
        result = (f"每秒 token 数从 {NAMES['eager']} 的 {f(base['tokens_per_s'])} {'升到' if ratio > 1 else '降到'} "
                  f"{f(ours['tokens_per_s'])}（{prose.times(ratio)}）")
        low, high = rows[cfg["baseline"]]["mfu"], rows[cfg["ours"]]["mfu"]  # against the GPU's dense bf16 peak
        if low is not None and high is not None:
            gpu = full["environment"]["gpu"].replace("NVIDIA ", "")
            result += (f"，MFU（按 {gpu} 的 bf16 稠密峰值 {fullsize.peak_tflops(full):,.0f} TFLOP/s 算）从 "
                       f"{prose.pct(low, 1)} 到 {prose.pct(high, 1)}")
    else:
        result = f"每秒 token 数 {f(ours['tokens_per_s'])}，与 {NAMES['eager']} 的 {f(base['tokens_per_s'])} 持平"
    both = res.get("liger_triton", {})
    if both.get("status") == "ok":
        result += (f"；与 Liger 的全套补丁叠加是 {f(both['tokens_per_s'])}"
                   f"（{prose.times(both['tokens_per_s'] / base['tokens_per_s'])}）")
    return (f"**实测：** {where}，把 HF 的 RMSNorm 换成本站手写的 Triton kernel（forward + backward），"
            f"{result}；{more}。\n")


def render_summary(load) -> dict[str, str]:
    return {"index_headline.md": headline(load("fullsize"), load("step"))}
