"""The one vocabulary of the reports: what every contender, phase, precision setting, kernel category and
fusion point is called in Chinese, its colour in a plot, and the named rules by which two times are level.

A contender is one of the things a run compares. Its id is the data's key and means the same
implementation in every file (bench/harness/contenders.py builds the op-level ones): ``triton`` is this
project's RMSNorm kernel, ``triton_fused_add`` its fused residual add + RMSNorm, ``naive`` the teaching
kernel, ``hf`` HF's Qwen3RMSNorm as shipped. A contender has one colour in every plot; its label may read
longer where it is more than an op (a whole model patched: :data:`STEP_LABELS`, :data:`TRAINING_LABELS`).
"""
from __future__ import annotations

from typing import NamedTuple

# HF pastel palette shared with the mermaid diagrams (docs/assets/stylesheets/palette.css).
PASTEL_FILL = {"yellow": "#FDE8A9", "green": "#D4E8CF", "blue": "#CFE0F3", "pink": "#F6CED0", "purple": "#E3D7F0"}
PASTEL_LINE = {"yellow": "#E7C56D", "green": "#94C18A", "blue": "#8AB0DB", "pink": "#D98F92", "purple": "#A98BCB"}

# ---------------------------------------------------------------- contenders

# One colour per contender, whichever plot draws it: the palette's hues in tones strong enough for thin
# lines and narrow bars on white and on the dark page. Our kernels are the palette's Triton blue (the fused
# one a blue-green, the teaching one a light blue), torch.compile its library green, HF the plain grey.
COLOURS = {
    "hf": "#7F7F7F",
    "torch_rms_norm": "#D4A020",
    "compile_hf": "#4E9A47",
    "liger": "#8A63C8",
    "quack": "#D35C68",
    "naive": "#91BDE6",
    "triton": "#2C6DB8",
    "triton_fused_add": "#12898B",
    "unfused": "#A27850",
    "control": "#B9539F",
    "triton_rmsnorm": "#6FA8DC",
    "triton_qk_rope": "#1F4E8C",
    "triton_swiglu": "#3D5A98",
    "three_gemms": "#5E5E5E",
    "compile_three": "#2E7A3A",
    "merged_gemm": "#C77A1E",
    "fusion_set": "#0B3C78",
    "fusion_set_loss": "#E0662A",
}

# Op level (rmsnorm, width_sweep, fused_add; the conclusion's rows): the kernels side by side.
OP_LABELS = {
    "hf": "HF eager", "torch_rms_norm": "F.rms_norm", "compile_hf": "torch.compile(HF)", "liger": "Liger",
    "quack": "quack", "naive": "教学版", "triton": "本站实现", "triton_fused_add": "融合版",
    "unfused": "本站 RMSNorm + torch 加法",
    "triton_rmsnorm": "本站 RMSNorm + HF RoPE", "triton_qk_rope": "本站 QK-norm + RoPE",
    "triton_swiglu": "本站 SwiGLU",
    "three_gemms": "HF 三个 GEMM", "compile_three": "torch.compile(三个 GEMM)", "merged_gemm": "合并 QKV GEMM",
}
# A whole training step (step): HF patched one way or another.
STEP_LABELS = {
    "eager": "HF eager",
    "torch_rmsnorm": "HF + F.rms_norm",
    "triton_fwd": "本站 RMSNorm（只换 forward）",
    "triton": "本站 RMSNorm（forward + backward）",
    "triton_fused_add": "本站 RMSNorm + 融合残差加法",
    "compile": "torch.compile",
    "triton_compile": "本站 RMSNorm + torch.compile",
    "liger": "Liger（全套补丁）",
    "triton_qk_rope": "本站 RMSNorm + QK-norm/RoPE 融合",
    "triton_liger_rope": "本站 RMSNorm + Liger RoPE",
    "triton_swiglu": "本站 RMSNorm + SwiGLU 融合",
    "triton_liger_swiglu": "本站 RMSNorm + Liger SwiGLU",
    "fusion_set": "本站整套融合",
    "liger_no_loss": "Liger（不含 loss）",
    "fusion_set_loss": "本站整套 + 融合 loss",
    "liger_compile": "Liger（全套补丁）+ torch.compile",
    "fusion_set_loss_compile": "本站整套 + 融合 loss + torch.compile",
}
# The fused loss's contenders (loss): lm_head + causal-LM cross-entropy.
LOSS_LABELS = {"hf_eager": "HF eager", "compile": "torch.compile", "liger": "Liger", "liger_compile": "Liger + compile",
               "cce": "Cut CE", "torch_chunked": "F.linear_cross_entropy", "ours": "本站",
               "ours_compile": "本站 + compile", "ours_unchecked": "本站（不检查标签）"}
# The loss gate under FSDP2 (fsdp2): rows, sentences and legend.
TRAINING_LABELS = {"hf": "HF 原版", "control": "对照组（只舍入一次）", "triton": "本站 RMSNorm",
                   "triton_fused_add": "融合残差加 + RMSNorm", "fusion_set": "本站整套",
                   "fusion_set_loss": "本站整套 + 融合 loss", "liger": "Liger（全套补丁）"}
# The loss-curve plot's legend (loss_curve): the curves on top, the differences from HF below.
LOSS_CURVE_LEGEND = {"hf": "HF Qwen3RMSNorm", "triton": "本站 Triton RMSNorm"}
CONTROL_DIFF = "对照组 − HF（对照组：正确、只舍入一次的 RMSNorm）"
LOSS_CURVE_DIFFS = {"control": CONTROL_DIFF, "triton": "本站 RMSNorm − HF"}
# One decoder layer three ways (p1_compile).
LAYER_LABELS = {"eager": "eager（HF 原版）", "cuda_graph": "eager + CUDA graph", "compile": "torch.compile（Inductor）"}
# Each fusable point's HF code and its fused forms (p1_roofline).
# "flash" is the whole of sdpa (both attention GEMMs and the softmax), where the softmax point's other forms are
# its element-wise part alone: its FLOPs are the GEMMs', so it is labelled, never compared with them.
FUSION_LABELS = {"eager": "HF eager", "fused": "torch.compile", "flash": "sdpa：整个注意力（含两个矩阵乘）"}

# ---------------------------------------------------------------- what is measured

# A GPU's dense (no sparsity) bf16 tensor-core peak in TFLOP/s, from its datasheet: the denominator of MFU
# (NVIDIA H200 datasheet: 1,979 TFLOP/s with 2:4 sparsity, half of it dense). Not a measurement.
DENSE_BF16_PEAK_TFLOPS = {"NVIDIA H200": 989.0, "NVIDIA H100 80GB HBM3": 989.0}  # H100 SXM: the same figure

PHASES = {"fwd": "forward", "fwd_bwd": "forward + backward"}
PRECISIONS = {"amp": "fp32 权重 + bf16 autocast", "bf16": "bf16 权重", "fp32": "fp32"}  # the loss gate's settings
GRAPHS = {"forward": "前向", "backward": "反向"}  # an Inductor graph
# Kernel categories (snippets/p1_profile_step.py KERNEL_CATEGORIES) as tables and plots name them.
CATEGORY_ZH = {
    "GEMM": "矩阵乘（GEMM）", "attention": "注意力", "elementwise": "逐元素", "reduction": "归约",
    "copy / cast / layout": "拷贝/类型转换", "softmax / loss": "softmax/loss", "Triton (Inductor)": "Triton（Inductor）",
    "other": "其他",
}
CATEGORY_COLOURS = {
    "GEMM": "#8AB0DB", "attention": "#A98BCB", "elementwise": "#E7C56D", "reduction": "#D98F92",
    "copy / cast / layout": "#94C18A", "softmax / loss": "#7FC4C0", "Triton (Inductor)": "#C49A6C", "other": "#999999",
}
# The five fusable points of snippets/p1_roofline.py.
FUSION_POINT_ZH = {"RMSNorm": "RMSNorm", "RoPE": "RoPE", "SwiGLU": "SwiGLU", "QKV merge": "QKV 合并",
                   "Attention softmax": "注意力 softmax"}
# Series that are no contender (the roofline's fusion points), in order.
SERIES_COLOURS = ["#8AB0DB", "#D98F92", "#94C18A", "#E7C56D", "#A98BCB", "#7FC4C0", "#C49A6C", "#999999"]


# Liger's RMSNorm as the op-level runs call it (config["liger_in_place"] False): what its time includes
# (liger_kernel 0.8.5 ops/rms_norm.py rms_norm_backward: dX = torch.zeros_like(dY) when not in place).
LIGER_NOT_IN_PLACE = ("Liger 以 `in_place=False` 调用（默认的 `in_place=True` 把 dx 写进 dy，重放复用的 dy 会被改掉）；"
                      "0.8.5 的这条路径在 backward 里多一次整张量的 `zeros_like` 清零，Liger 自己的 Qwen3 补丁用默认值，"
                      "没有这一步。")


def precision_zh(precision: str) -> str:
    return PRECISIONS.get(precision, precision)


# ---------------------------------------------------------------- tie rules

class TieRule(NamedTuple):
    """Two times are level when their ratio is within ``within`` of 1."""
    within: float
    why: str


# An experiment names the rule its timings call for in its config (``"tie_rule"``); a name keeps its meaning
# once a data file records it: a new rule gets a new name.
TIE_RULES = {
    "within_1pct": TieRule(0.01, "medians of 25 CUDA-graph replays (op level) or of the timed steps: the 20-80 % "
                                 "spread of such a median is about 0.5 %"),
    "within_2pct": TieRule(0.02, "the width sweep's medians of 15 replays, its budget spent on 43 widths' compiles"),
    "fusion_2pct": TieRule(0.02, "the fusion set's op-level comparisons: level within 2 %, the targets' own rule"),
    # Step times from several processes: level unless the 95 % intervals of the medians are disjoint
    # (bench/harness/stats.py); ``within`` is unused by the reports that read intervals.
    "ci95_disjoint": TieRule(0.0, "step times of several processes: level unless their 95 % intervals are disjoint"),
}


def tie(config: dict) -> float:
    """The ratio distance from 1 that the run's tie rule (``config["tie_rule"]``) counts as level."""
    return TIE_RULES[config["tie_rule"]].within
