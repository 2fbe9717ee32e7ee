"""The plots' font, style and serialization: deterministic SVG, every string drawn as glyphs of one pinned font."""
from __future__ import annotations

import io
import pathlib
import re

from bench.report.names import SERIES_COLOURS

# The plots' one font: Noto Sans SC (SIL OFL 1.1, from notofonts/noto-cjk), shipped by the PyPI package
# pylopdf-fonts-zh-cn (pinned in requirements-test.txt). Loaded by file path, never looked up by name
# among the system's fonts, and written as glyph paths, so every machine renders the same bytes.
FONT_PACKAGE = "pylopdf-fonts-zh-cn"
FONT_MODULE = "pylopdf_fonts_zh_cn"
FONT_FILE = "NotoSansSC-Regular.otf"

# How the site shows a plot: an <img> in the content column at its natural size (1 pt = 4/3 px), at most
# COLUMN_PX wide: 688 px at a 1280-px desktop. Plots are drawn FIGURE_WIDTH inches wide, which bbox_inches="tight"
# trims to about 520 pt, so they show at about the column's width, 1 pt = 1.3 px. Text is at least SMALL points
# (legends, notes, annotations: about 12 px), and a plot shown COLUMN_PX wide is at most MAX_HEIGHT_PX tall.
COLUMN_PX = 688
MIN_TEXT_PX = 10
MAX_HEIGHT_PX = 450
FIGURE_WIDTH = 8.0
SMALL = 9


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
        "axes.titlesize": 10,
        "axes.labelsize": 10,
        "xtick.labelsize": SMALL,
        "ytick.labelsize": SMALL,
        "legend.fontsize": SMALL,
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
        "axes.prop_cycle": matplotlib.cycler(color=SERIES_COLOURS),
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


_VIEWBOX = re.compile(r'<svg[^>]*\bviewBox="[-\d.]+ [-\d.]+ ([\d.]+) ([\d.]+)"')
_GLYPHS = re.compile(r'<g id="text_\d+">\s*<!-- ((?:(?!-->).)*?) -->\s*<g [^>]*transform="[^"]*scale\(([\d.]+) -[\d.]+\)"',
                     re.S)


def svg_text_sizes(svg: str) -> list[tuple[str, float]]:
    """(string, font size in points) for each string of a plot made by :func:`svg_of`: its glyphs are drawn
    in a group scaled by ``scale(s -s)``, font size / 100 (the glyph outlines are 100 units tall)."""
    import html

    return [(html.unescape(text), 100 * float(scale)) for text, scale in _GLYPHS.findall(svg)]


def shown(svg: str) -> dict:
    """How the site shows a plot: ``width_px`` in a COLUMN_PX column, the smallest string and its size there
    (``smallest``, ``smallest_px``), and ``height_px``, its height when shown COLUMN_PX wide (a plot narrower
    than the column shows at its natural size, shorter than that)."""
    width, height = (float(v) for v in _VIEWBOX.search(svg).groups())
    width_px = min(COLUMN_PX, width * 4 / 3)
    sizes = svg_text_sizes(svg)
    text, size = min(sizes, key=lambda t: t[1]) if sizes else ("", float("inf"))
    return {"width_px": width_px, "height_px": height * COLUMN_PX / width, "smallest": text,
            "smallest_px": size * width_px / width}


def legible(svg: str) -> list[str]:
    """What stops a plot from reading in the column: text under MIN_TEXT_PX as shown, a height over
    MAX_HEIGHT_PX when shown COLUMN_PX wide."""
    seen = shown(svg)
    problems = []
    if seen["smallest_px"] < MIN_TEXT_PX:
        problems.append(f"{seen['smallest']!r} is {seen['smallest_px']:.1f} px at {seen['width_px']:.0f} px wide, "
                        f"less than {MIN_TEXT_PX}")
    if seen["height_px"] > MAX_HEIGHT_PX:
        problems.append(f"{seen['height_px']:.0f} px tall at {COLUMN_PX} px wide, more than {MAX_HEIGHT_PX}")
    return problems
