"""The one vocabulary of the reports: what the things they show are called in Chinese, and their colours."""

# HF pastel palette shared with the mermaid diagrams (docs/assets/stylesheets/palette.css).
PASTEL_FILL = {"yellow": "#FDE8A9", "green": "#D4E8CF", "blue": "#CFE0F3", "pink": "#F6CED0", "purple": "#E3D7F0"}
PASTEL_LINE = {"yellow": "#E7C56D", "green": "#94C18A", "blue": "#8AB0DB", "pink": "#D98F92", "purple": "#A98BCB"}

# Kernel categories (snippets/p1_profile_step.py KERNEL_CATEGORIES) as tables and plots name them.
CATEGORY_ZH = {
    "GEMM": "矩阵乘（GEMM）", "attention": "注意力", "elementwise": "逐元素", "reduction": "归约",
    "copy / cast / layout": "拷贝/类型转换", "softmax / loss": "softmax/loss", "Triton (Inductor)": "Triton（Inductor）",
    "other": "其他",
}
# The five fusable points of snippets/p1_roofline.py.
FUSION_POINT_ZH = {"RMSNorm": "RMSNorm", "RoPE": "RoPE", "SwiGLU": "SwiGLU", "QKV merge": "QKV 合并",
                   "Attention softmax": "注意力 softmax"}
