"""What the renderers share: markdown tables, number formats, the environment box, and plots.

Plots are SVG text made with :func:`svg_of` so that rendering is deterministic.
"""
from __future__ import annotations

import io
import pathlib
import re

from bench import ROOT

GENERATED_DIR = ROOT / "docs" / "generated"

# HF pastel palette shared with the mermaid diagrams (docs/assets/palette.css).
PASTEL_FILL = {"yellow": "#FDE8A9", "green": "#D4E8CF", "blue": "#CFE0F3", "pink": "#F6CED0", "purple": "#E3D7F0"}
PASTEL_LINE = {"yellow": "#E7C56D", "green": "#94C18A", "blue": "#8AB0DB", "pink": "#D98F92", "purple": "#A98BCB"}
SERIES_COLORS = ["#8AB0DB", "#D98F92", "#94C18A", "#E7C56D", "#A98BCB", "#7FC4C0", "#C49A6C", "#999999"]


# ---------------------------------------------------------------- rendering helpers

# Kernel categories (snippets/p1_profile_step.py KERNEL_CATEGORIES) as tables and plots name them.
CATEGORY_ZH = {
    "GEMM": "矩阵乘（GEMM）", "attention": "注意力", "elementwise": "逐元素", "reduction": "归约",
    "copy / cast / layout": "拷贝/类型转换", "softmax / loss": "softmax/loss", "Triton (Inductor)": "Triton（Inductor）",
    "other": "其他",
}
# The five fusable points of snippets/p1_roofline.py.
FUSION_POINT_ZH = {"RMSNorm": "RMSNorm", "RoPE": "RoPE", "SwiGLU": "SwiGLU", "QKV merge": "QKV 合并",
                   "Attention softmax": "注意力 softmax"}
ENV_LABELS = {"driver": "驱动", "cuda": "CUDA", "torch": "torch", "triton": "triton", "transformers": "transformers",
              "liger_kernel": "liger-kernel", "quack": "quack-kernels", "python": "Python"}


def _distinct(values) -> str:
    """Each distinct non-empty value once, in order of appearance."""
    seen = []
    for value in values:
        if value and value not in seen:
            seen.append(value)
    return "、".join(seen) or "—"


def _gpu_text(env: dict) -> str:
    if not env.get("gpu"):
        return "CPU"
    details = [f"{env['sm_count']} 个 SM" if env.get("sm_count") else None,
               f"显存 {env['gpu_memory_gib']:g} GiB" if env.get("gpu_memory_gib") else None]
    details = "，".join(d for d in details if d)
    return env["gpu"] + (f"（{details}）" if details else "")


def env_box(envs: list[dict], extra_keys=()) -> str:
    """The article's one "实验环境" admonition, from the environment blocks of its data files.

    A version that differs between the files lists each distinct value; dates become a range.
    """
    def item(key):
        return f"{ENV_LABELS.get(key, key)}：{_distinct(str(e[key]) if e.get(key) else None for e in envs)}"

    dates = sorted({str(e["date"])[:10] for e in envs if e.get("date")})
    date = "—" if not dates else dates[0] if len(dates) == 1 else f"{dates[0]} 至 {dates[-1]}"
    hardware = [f"GPU：{_distinct(_gpu_text(e) for e in envs)}", item("driver"), item("cuda")]
    software = [item(key) for key in ("torch", "triton", "transformers", *extra_keys)] + [f"测量日期：{date}"]
    # Two short lines: the hardware, then the software and the date.
    return '!!! info "实验环境"\n\n' + "".join(f"    {' · '.join(line)}\n\n" for line in (hardware, software)).rstrip("\n") + "\n"


def provenance_table(records: dict[str, dict]) -> str:
    """数据文件 | 提交 | 测量日期 | 重新生成的命令, one row per file name -> the data it came with."""
    rows = []
    for name, data in records.items():
        env = data["environment"]
        rows.append([f"`{name}`", f"`{str(env.get('git_commit', ''))[:7]}`", str(env.get("date", ""))[:10],
                     f"`{env.get('command', '')}`"])
    return md_table(["数据文件", "提交", "测量日期", "重新生成的命令"], rows, align="llll")


def dtype_short(dtype: str) -> str:
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(dtype, dtype)


def md_table(headers: list[str], rows: list[list], align: str | None = None) -> str:
    """A GitHub-style markdown table. ``align`` is e.g. 'lrrr'."""
    align = align or "l" + "r" * (len(headers) - 1)
    marks = {"l": ":--", "r": "--:", "c": ":-:"}
    out = ["| " + " | ".join(headers) + " |", "| " + " | ".join(marks[a] for a in align) + " |"]
    for row in rows:
        out.append("| " + " | ".join(str(c) for c in row) + " |")
    return "\n".join(out) + "\n"


def fmt(value: float, digits: int = 3) -> str:
    """Significant-digit formatting that reads well in a table."""
    if value is None:
        return "—"
    if value == 0:
        return "0"
    magnitude = abs(value)
    if magnitude >= 10 ** digits:
        return f"{value:,.0f}"
    decimals = max(0, digits - 1 - int(f"{magnitude:e}".split("e")[1]))
    return f"{value:.{decimals}f}"


# The plots' one font: Noto Sans SC (SIL OFL 1.1, from notofonts/noto-cjk), shipped by the PyPI package
# pylopdf-fonts-zh-cn (pinned in requirements-test.txt). Loaded by file path, never looked up by name
# among the system's fonts, and written as glyph paths, so every machine renders the same bytes.
FONT_PACKAGE = "pylopdf-fonts-zh-cn"
FONT_MODULE = "pylopdf_fonts_zh_cn"
FONT_FILE = "NotoSansSC-Regular.otf"


def cjk_font_path() -> pathlib.Path:
    """The pinned Noto Sans SC file; RuntimeError naming the package when it is not installed."""
    import importlib.util

    spec = importlib.util.find_spec(FONT_MODULE)
    path = pathlib.Path(spec.origin).parent / FONT_FILE if spec and spec.origin else None
    if path is None or not path.is_file():
        raise RuntimeError(f"plots need the font {FONT_FILE} from the PyPI package {FONT_PACKAGE}: "
                           f"pip install -r requirements-test.txt (it pins {FONT_PACKAGE})")
    return path


def _use_font(path: pathlib.Path) -> str:
    """Register ``path`` with matplotlib as the only font of its family name; return that name."""
    from matplotlib import font_manager

    name = font_manager.FontProperties(fname=path).get_name()
    manager = font_manager.fontManager
    manager.ttflist = [f for f in manager.ttflist if f.name != name]  # an installed copy must not win
    manager.addfont(path)
    found = font_manager.findfont(font_manager.FontProperties(family=name), fallback_to_default=False)
    if pathlib.Path(found).resolve() != path.resolve():
        raise RuntimeError(f"matplotlib resolved {name!r} to {found}, not {path}")
    return name


def plot_style():
    """Matplotlib settings that give deterministic SVG readable on light and dark pages.

    Text is drawn as glyph outlines in the pinned CJK font (the string stays in an XML
    comment next to its glyphs: see :func:`svg_texts`), so no font needs to be installed
    to view a plot. No mathtext: ``$`` is a plain character.
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    plt.rcdefaults()
    family = _use_font(cjk_font_path())
    plt.rcParams.update({
        "svg.hashsalt": "qwen3-triton-docs",
        "svg.fonttype": "path",
        "font.family": [family],
        "text.parse_math": False,
        "font.size": 10,
        "figure.facecolor": "none",
        "axes.facecolor": "none",
        "savefig.facecolor": "none",
        "savefig.transparent": True,
        "text.color": "#777777",
        "axes.labelcolor": "#777777",
        "axes.titlecolor": "#666666",
        "axes.edgecolor": "#888888",
        "xtick.color": "#777777",
        "ytick.color": "#777777",
        "grid.color": "#888888",
        "grid.alpha": 0.3,
        "axes.grid": True,
        "axes.axisbelow": True,
        "legend.frameon": False,
        "axes.prop_cycle": matplotlib.cycler(color=SERIES_COLORS),
    })
    return plt


def svg_of(fig) -> str:
    """Serialize a figure to SVG text with no date or random ids."""
    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight", metadata={"Date": None, "Creator": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buffer.getvalue()


def svg_texts(svg: str) -> list[str]:
    """The strings of a plot made by :func:`svg_of`: matplotlib writes each one as an XML
    comment before its glyph paths (titles, axis labels, ticks, legend entries)."""
    import html

    return [html.unescape(t) for t in re.findall(r"<!-- (.*?) -->", svg, flags=re.S)]
