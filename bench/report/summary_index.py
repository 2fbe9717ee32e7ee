"""The home page's headline figure, from step.json: what the site's patch (篇2's production RMSNorm, forward
and backward) does to one training step against HF eager, with the setup it was measured in.

``render_summary(load)`` is called by ``bench/report/render.py``; without step.json it is skipped. A
speed-up is said only where the two contenders' step-time ranges (``contender_rows``' lo–hi) do not overlap;
otherwise the headline says the two are level.
"""
from __future__ import annotations

from bench.report import prose, tables
from bench.report.step import config, contender_rows, geometry_zh, label

LINK = "triton-rmsnorm.md#62-分档-step-实测"


def _where(step: dict) -> str:
    """'1 张 H200 上'."""
    env = step["environment"]
    gpu = (env.get("gpu") or "").replace("NVIDIA ", "")
    return f"{env.get('gpu_count', 1)} 张 {gpu} 上" if gpu else "CPU 上"


def headline(step: dict) -> str:
    """One sentence: the baseline's and ours' step time, the speed-up, and the setup."""
    cfg = config(step)
    ok = {r["contender"]: r for r in contender_rows(step) if r["status"] == "ok"}
    base, ours = ok.get(cfg["baseline"]), ok.get(cfg["ours"])
    cfg_words = f"{tables.dtype_short(cfg['dtype'])}，B={cfg['batch']}，T={cfg['seq_len']}"
    where = f"{_where(step)}训练 {geometry_zh(step)}的模型（{cfg_words}）"
    more = f"与 torch.compile、Liger 的对比见[篇 2 §6.2]({LINK})"
    if not base or not ours:
        missing = prose.join(label(c) for c in (cfg["baseline"], cfg["ours"]) if c not in ok)
        return f"**实测：** {where}，{missing}没有结果；{more}。\n"
    f = tables.fmt
    # lo–hi: contender_rows' range of the timed steps (min–max); a faster claim needs them apart
    apart = ours["hi"] < base["lo"] or base["hi"] < ours["lo"]
    if apart:
        faster = ours["step"] < base["step"]
        result = (f"从 {label(cfg['baseline'])} 的 {f(base['step'], 4)} ms {'降到' if faster else '升到'} "
                  f"{f(ours['step'], 4)} ms，{'快' if faster else '慢'} "
                  f"{prose.times(max(ours['speedup'], 1 / ours['speedup']))}（两者各 {cfg['timed_steps']} 步的用时范围不重叠）")
    else:
        result = (f"是 {f(ours['step'], 4)} ms，{label(cfg['baseline'])} 是 {f(base['step'], 4)} ms，"
                  f"两者各 {cfg['timed_steps']} 步的用时范围重叠，算持平")
    return (f"**实测：** {where}，把 HF 的 RMSNorm 换成本站手写的 Triton kernel（forward + backward），"
            f"一步{result}；{more}。\n")


def render_summary(load) -> dict[str, str]:
    return {"index_headline.md": headline(load("step"))}
