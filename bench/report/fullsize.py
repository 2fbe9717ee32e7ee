"""fullsize.json -> the reader's job: Qwen3-8B at full depth, trained as readers train it, contender by contender.

* ``fullsize_table.md`` (a report: ``render(data)``, from fullsize.json alone): one row per contender, its step
  time with the 95 % interval, tokens/s, MFU against the GPU's dense bf16 peak (names.DENSE_BF16_PEAK_TFLOPS), the speed-up
  over HF eager and the peak memory; the caption states the setup from the record's config.
* ``values(data)`` ({{ fullsize.NAME }}): the figures of the hand-written readings (篇 2 §6.2, the home page,
  番外 §六 on the fused add against the plain kernel).

The intervals here come from one process per contender, so they leave out process-to-process variation; two
contenders are ranked only when their intervals are disjoint *and* their medians differ by more than the smallest
difference the multi-process 8-layer step run can resolve (step.json ``config["resolution"]``); otherwise they are
level (:func:`level`, :func:`tiers`: the order the pages write by hand, checked by the readings tests).
"""
from __future__ import annotations

from bench.report import prose, tables
from bench.report.names import DENSE_BF16_PEAK_TFLOPS
from bench.report.step import disjoint

NAME = "fullsize"

# The contenders as this page names them (names.py's STEP_LABELS name the 8-layer run's).
LABELS = {
    "eager": "HF eager",
    "compile": "regional torch.compile",
    "liger": "Liger 全套补丁",
    "triton": "本站 RMSNorm",
    "triton_fused_add": "本站 RMSNorm + 融合残差加法",
    "liger_triton": "Liger 全套 + 本站 RMSNorm",
    "compile_liger_flce": "regional compile + Liger FLCE",
    "quack": "quack RMSNorm",
    "fusion_set": "本站融合集（不含 loss）",
    "fusion_set_loss": "本站融合集 + 融合 loss",
    "fusion_set_loss_compile": "本站融合集 + 融合 loss + regional compile",
}

# The contenders whose patches fuse the residual add.
FUSED_ADD_CONTENDERS = ("triton_fused_add", "fusion_set", "fusion_set_loss", "fusion_set_loss_compile")

# What the record's config says, in the caption's words. A config string not listed here fails the render:
# a changed setup needs new words, never the old ones.
CONFIG_ZH = {
    "optimizer": {"torch.optim.AdamW(fused=True), bf16 parameters, gradients and states":
                  "参数、梯度与 AdamW（fused）状态都是 bf16"},
    "checkpointing": {"gradient_checkpointing_enable(use_reentrant=False), every decoder layer":
                      "每个 decoder 层都开激活检查点（use_reentrant=False）"},
    "step": {"forward with labels (loss) + backward + AdamW(fused) step + zero_grad(set_to_none=True); "
             "activation checkpointing on every decoder layer":
             "一步 = 带 labels 的 forward + backward + AdamW 更新 + zero_grad"},
    "fused_add_boundary": {"the sum into a layer that checkpointing runs, the un-added pair otherwise": ""},
    "compile_scope": {"regional: torch.compile on each decoder layer and on the final norm":
                      "regional compile = 每个 decoder 层和最后的 norm 各自 torch.compile"},
    "interval": {"95% bootstrap of the median over the timed steps (one process)":
                 "区间为中位数的 95% bootstrap 区间（在这一个进程的计时步上重抽样）"},
    "flops": {"per token: 6 x matmul parameters (decoder projections + lm_head) + 6 x layers x T x heads x "
              "head_dim; recomputation not counted":
              "模型 FLOPs 每 token = 6 ×（各层投影与 lm_head 的矩阵乘参数量）+ 6 × 层数 × T × 头数 × head_dim，"
              "检查点的重算不计"},
}


def label(contender: str) -> str:
    return LABELS.get(contender, contender)


def config_zh(cfg: dict, key: str) -> str:
    try:
        return CONFIG_ZH[key][cfg[key]]
    except KeyError:
        raise KeyError(f"fullsize.json config[{key!r}] = {cfg.get(key)!r} has no words in bench/report/fullsize.py "
                       "CONFIG_ZH") from None


def peak_tflops(data: dict) -> float | None:
    """The dense bf16 peak of the run's GPU (the MFU denominator), or None for a GPU without one on record."""
    return DENSE_BF16_PEAK_TFLOPS.get(data["environment"].get("gpu"))


def mfu(record: dict, peak: float | None) -> float | None:
    """Model FLOPs per second over the GPU's dense bf16 peak (the usual MFU), or None."""
    return record["model_tflops"] / peak if peak and record.get("model_tflops") else None


def rows(data: dict) -> list[dict]:
    """One row per contender, in the run's order: step median and interval, tokens/s, MFU, speed-up, peak."""
    cfg, results = data["config"], data["results"]
    base = results.get(cfg["baseline"], {})
    base_ms = base.get("median_ms") if base.get("status") == "ok" else None
    out, peak = [], peak_tflops(data)
    for contender in cfg["contenders"]:
        record = results.get(contender, {"status": "skipped"})
        row = {"contender": contender, "label": label(contender), "status": record.get("status")}
        if row["status"] == "ok":
            step = record["median_ms"]
            lo, hi = record["ci95_ms"]
            row.update(step=step, lo=lo, hi=hi, tokens_per_s=record.get("tokens_per_s"), mfu=mfu(record, peak),
                       peak=record.get("peak_gib"), speedup=base_ms / step if base_ms else None)
        out.append(row)
    return out


def step_cell(row: dict) -> str:
    f = tables.fmt
    return f"{f(row['step'], 4)}（{f(row['lo'], 4)}–{f(row['hi'], 4)}）"


def caption(data: dict) -> str:
    cfg, env = data["config"], data["environment"]
    g = cfg["geometry"]
    params = next((r["parameters"] for r in data["results"].values() if r.get("parameters")), None)
    model = (f"Qwen3-{cfg['model']['size']} 全部 {g['num_hidden_layers']} 层"
             + (f"（{params / 1e9:.2f} B 参数）" if params else "")
             + f"，B×T = {cfg['batch']}×{cfg['seq_len']}")
    parts = [
        model,
        config_zh(cfg, "optimizer"),
        config_zh(cfg, "checkpointing"),
        f"每档一个新进程，{cfg['warmup']} 步预热后计时 {cfg['timed_steps']} 步",
        (f"MFU 的分母是 {env['gpu'].replace('NVIDIA ', '')} 的 bf16 稠密峰值 {peak:,.0f} TFLOP/s（数据手册）"
         + (f"，同一次运行实测的 8192³ bf16 矩阵乘是 {tables.fmt(ceiling)} TFLOP/s"
            if (ceiling := cfg.get("gemm_ceiling_tflops")) else "")
         if (peak := peak_tflops(data)) else "没有这张卡的 bf16 峰值，MFU 未算"),
        f"{env['gpu']} 上测量；区间、FLOPs 与排序规则见测法页",
    ]
    fused = [r for r in rows(data) if r["contender"] in FUSED_ADD_CONTENDERS and r["status"] == "ok"]
    if fused and "fused_add_boundary" not in cfg:  # measured before the patch passed sums into checkpointed layers
        parts.append(prose.join(r["label"] for r in fused) + ("一行" if len(fused) == 1 else "几行")
                     + "测的是把残差加法跨层融合的旧补丁：层与层之间传两个张量，激活检查点在每个层边界多存一个（番外 §七）")
    elif fused:
        config_zh(cfg, "fused_add_boundary")  # a boundary rule the words below do not know fails the render
    return "；".join(parts) + "。"


def table(data: dict) -> str:
    f = tables.fmt
    body = []
    for row in rows(data):
        if row["status"] != "ok":
            body.append([row["label"], "未运行", "—", "—", "—", "—"])
            continue
        body.append([row["label"], step_cell(row),
                     f"{row['tokens_per_s']:,.0f}" if row["tokens_per_s"] is not None else "—",
                     prose.pct(row["mfu"], 1) if row["mfu"] is not None else "—",
                     prose.times(row["speedup"]) if row["speedup"] else "—",
                     f(row["peak"]) if row["peak"] is not None else "—"])
    headers = ["档位", "step（ms，中位数与 95% 区间）", "tokens/s", "MFU", "相对 HF eager", "峰值显存（GiB）"]
    return tables.md_table(headers, body, "lrrrrr")


def render(data: dict) -> dict[str, str]:
    return {"fullsize_table.md": prose.page(table(data), caption(data))}


# ---------------------------------------------------------------- the ranking (reads step.json's resolution)

def level(a: dict, b: dict, resolution: float) -> bool:
    """Level unless the 95 % intervals are disjoint and the medians differ by more than ``resolution``
    (a fraction of the faster one's step)."""
    fast, slow = sorted((a["step"], b["step"]))
    return not (disjoint((a["lo"], a["hi"]), (b["lo"], b["hi"])) and slow / fast - 1 > resolution)


def tiers(ok: list[dict], resolution: float) -> list[list[dict]]:
    """The contenders, fastest first, cut only where every contender before the cut is resolved faster than
    every contender after it: each cut is a ranking the data supports."""
    ordered = sorted(ok, key=lambda r: r["step"])
    out, current = [], []
    for k, row in enumerate(ordered):
        current.append(row)
        after = ordered[k + 1:]
        if after and all(not level(a, b, resolution) for a in ordered[:k + 1] for b in after):
            out.append(current)
            current = []
    if current:
        out.append(current)
    return out


FUSED = "triton_fused_add"


def contender_values(data: dict) -> dict[str, str]:
    """Per contender that ran: its step, tokens/s, MFU (where the GPU's peak is known), speed-up over HF eager
    and peak memory ({NAME}_ms, _tps, _mfu, _speedup, _peak)."""
    out = {}
    for row in rows(data):
        if row["status"] != "ok":
            continue
        name = row["contender"]
        out[f"{name}_ms"] = f"{tables.fmt(row['step'], 4)} ms"
        out[f"{name}_tps"] = f"{row['tokens_per_s']:,.0f}"
        if row["mfu"] is not None:
            out[f"{name}_mfu"] = prose.pct(row["mfu"], 1)
        out[f"{name}_speedup"] = prose.times(row["speedup"])
        out[f"{name}_peak"] = f"{tables.fmt(row['peak'], 3)} GiB"
    return out


def values(data: dict) -> dict[str, str]:
    """The named values of the full-size job ({{ fullsize.NAME }}): per contender its step, tokens/s, MFU (against
    the dense bf16 peak), speed-up over HF eager and peak memory; what Liger's patch saves in memory and what
    the fused add adds."""
    out = {"peak_tflops": f"{peak_tflops(data):,.0f} TFLOP/s", "layers": str(data["config"]["geometry"]["num_hidden_layers"]),
           **contender_values(data)}
    ok = {r["contender"]: r for r in rows(data) if r["status"] == "ok"}
    out["liger_saves"] = f"{ok['eager']['peak'] - ok['liger']['peak']:.1f} GiB"
    out["fused_add_extra_peak"] = f"{ok[FUSED]['peak'] - ok[data['config']['ours']]['peak']:.1f} GiB"
    boundary = boundary_bytes(data)
    out["boundaries"] = str(boundary["count"])
    out["boundary_tensor"] = f"{boundary['tensor'] / 2**20:.0f} MiB"
    out["boundary_total"] = f"{boundary['count'] * boundary['tensor'] / 2**30:.2f} GiB"
    return out


def boundary_bytes(data: dict) -> dict:
    """What a checkpointed layer keeps of an un-added pair beyond HF's one tensor: one batch x seq x hidden tensor
    at each of the L - 1 boundaries between layers (tests/test_qwen3_checkpointing.py measures the rule)."""
    cfg, g = data["config"], data["config"]["geometry"]
    element = {"bfloat16": 2, "float16": 2, "float32": 4}[cfg["dtype"]]
    return {"count": g["num_hidden_layers"] - 1, "tensor": cfg["batch"] * cfg["seq_len"] * g["hidden_size"] * element}
