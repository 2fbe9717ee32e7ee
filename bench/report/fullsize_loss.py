"""fullsize_loss.json -> the whole fusion set with its loss in the reader's job: Qwen3-8B at full depth.

* ``fullsize_loss_table.md``: fullsize.py's table (step with its 95 % interval, tokens/s, MFU, speed-up over HF
  eager, peak memory) for this run's contenders, and fullsize.py's caption.
* ``fullsize_loss_profile.md``: one profiled step per contender (bench/harness/step_profile.py), its GPU time by
  bucket, a column per contender so that a bucket compares along its row; then the launches, the GPU's busy time,
  its idle time between the first and the last kernel, and the profiled step's wall time.
* ``values(data)`` ({{ fullsize_loss.NAME }}): the figures the hand-written readings use (番外三, 篇 2's
  conclusion, the home page), the per-contender ones from fullsize.py.

Ranking: fullsize.py's rule (disjoint 95 % intervals and a difference above the 8-layer run's resolution).
"""
from __future__ import annotations

from bench.report import fullsize, prose, tables

NAME = "fullsize_loss"

# The profile table's columns (a site table has at most six): HF's step, the two the set is measured against,
# the set with its loss, eager and compiled. The other contenders' profiles stay in the record.
ORDER = ("eager", "compile", "liger", "fusion_set_loss", "fusion_set_loss_compile")
SHORT = {"eager": "HF eager", "compile": "regional compile", "liger": "Liger 全套",
         "fusion_set_loss": "本站 + loss", "fusion_set_loss_compile": "本站 + loss + compile"}
BUCKET_ZH = {
    "GEMM": "矩阵乘（GEMM）",
    "attention": "注意力",
    "this site's Triton kernels": "本站的 Triton kernel",
    "Liger's Triton kernels": "Liger 的 Triton kernel",
    "Inductor (torch.compile)": "Inductor 生成的 kernel",
    "optimizer": "AdamW",
    "softmax / loss": "softmax 与 loss",
    "reduction": "归约",
    "copy / cast / layout": "拷贝、转换与换布局",
    "elementwise": "PyTorch 的逐元素 kernel",
    "other": "其他",
}
# The 0.92 x target of the fused set + loss against Liger's full patch.
STEP_TARGET = 0.92


def ok_rows(data: dict) -> dict[str, dict]:
    return {r["contender"]: r for r in fullsize.rows(data) if r["status"] == "ok"}


def profiled(data: dict) -> list[str]:
    """The profile table's contenders that ran and have a profiled step, in its order."""
    results = data["results"]
    return [c for c in ORDER if results.get(c, {}).get("status") == "ok" and results[c].get("profile")]


def bucket_ms(profile: dict, bucket: str) -> float:
    return profile["buckets"].get(bucket, {}).get("total_us", 0.0) / 1e3


def profile_table(data: dict) -> str:
    names = profiled(data)
    profiles = [data["results"][c]["profile"] for c in names]
    used = [b for b in BUCKET_ZH if any(b in p["buckets"] for p in profiles)]
    unknown = {b for p in profiles for b in p["buckets"]} - set(BUCKET_ZH)
    if unknown:
        raise KeyError(f"fullsize_loss.json: buckets without words in bench/report/fullsize_loss.py: {sorted(unknown)}")
    f = tables.fmt
    body = [[BUCKET_ZH[b], *(f(bucket_ms(p, b), 3) for p in profiles)] for b in used]
    body += [
        ["GPU 忙（所有 kernel 区间的并集）", *(f(p["busy_us"] / 1e3, 4) for p in profiles)],
        ["GPU 空闲（第一个到最后一个 kernel 之间）", *(f(p["gpu_idle_us"] / 1e3, 3) for p in profiles)],
        ["这一步的墙钟时间（开着 profiler）", *(f(p["wall_us"] / 1e3, 4) for p in profiles)],
        ["kernel 启动次数", *(f"{p['launches']:,}" for p in profiles)],
    ]
    headers = ["ms", *(SHORT[c] for c in names)]
    return tables.md_table(headers, body, "l" + "r" * len(names))


def profile_caption(data: dict) -> str:
    cfg = data["config"]
    return ("计时的步之后，每档在同一个进程里再用 torch.profiler 跑一步，按 kernel 名归类（归类规则见测法页）："
            "各行是这一步里该类 kernel 的 GPU 时间之和。开着 profiler 的一步比计时的步慢，"
            f"所以空闲时间是上限。{data['environment']['gpu']} 上测量，B×T = {cfg['batch']}×{cfg['seq_len']}。")


def render(data: dict) -> dict[str, str]:
    out = {"fullsize_loss_table.md": prose.page(fullsize.table(data), fullsize.caption(data))}
    if profiled(data):
        out["fullsize_loss_profile.md"] = prose.page(profile_table(data), profile_caption(data))
    return out


def non_gemm_ms(profile: dict) -> float:
    """The profiled step's GPU time outside GEMM and attention, plus the GPU's idle time inside the step."""
    return sum(bucket_ms(profile, b) for b in profile["buckets"] if b not in ("GEMM", "attention")) \
        + profile["gpu_idle_us"] / 1e3


def values(data: dict) -> dict[str, str]:
    """fullsize.py's per-contender values; the set + loss against Liger's full patch (the ratio, the 0.92 x
    target and how far it is) and regional compile; the profile's figures the readings use."""
    cfg, ok = data["config"], ok_rows(data)
    f = tables.fmt
    out = {"gpu": data["environment"]["gpu"].removeprefix("NVIDIA ").removesuffix(" HBM3"),
           "layers": str(cfg["geometry"]["num_hidden_layers"]), **fullsize.contender_values(data)}
    ours, liger, compiled = ok["fusion_set_loss"], ok["liger"], ok["compile"]
    out["ours_vs_liger"] = prose.times(ours["step"] / liger["step"], 3)
    out["ours_tps_gain_vs_liger"] = prose.pct(ours["tokens_per_s"] / liger["tokens_per_s"] - 1, 1)
    out["ours_tps_gain_vs_compile"] = prose.pct(ours["tokens_per_s"] / compiled["tokens_per_s"] - 1, 1)
    out["target_ms"] = f"{f(STEP_TARGET * liger['step'], 4)} ms"
    out["target_short"] = f"{f(ours['step'] - STEP_TARGET * liger['step'], 3)} ms"
    out["compile_cost"] = f"{f(ok['fusion_set_loss_compile']['step'] - ours['step'], 3)} ms"
    for name in ok:
        profile = data["results"][name].get("profile")
        if not profile:
            continue
        out[f"{name}_launches"] = f"{profile['launches']:,}"
        out[f"{name}_gemm_kernels"] = f"{profile['buckets'].get('GEMM', {}).get('kernels', 0):,}"
        out[f"{name}_non_gemm"] = f"{f(non_gemm_ms(profile), 3)} ms"
        for bucket, key in (("GEMM", "gemm"), ("optimizer", "adamw"), ("this site's Triton kernels", "our_kernels"),
                            ("elementwise", "elementwise")):
            out[f"{name}_{key}"] = f"{f(bucket_ms(profile, bucket), 3)} ms"
    return out
