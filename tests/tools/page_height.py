"""A browser-free estimate of a page's height at 1280 px, for the methods pages' height budget.

The browser check (tests/test_browser.py) measures every page; without Chromium it skips. This proxy reads
the page as MkDocs does (includes expanded, values substituted) and sums what takes height in Material's
1280-px layout: table rows, lines of running text (about ``CHARS_PER_LINE`` characters a line), open code
lines, plots, diagrams and headings. Folded blocks (``???``) count their title only. The weights come from a
least-squares fit to Chromium's heights of this site's 11 pages and of 篇 2's methods page before issue 45
(136,151 px); the estimate is 1.00–1.38 times the browser's height on those 12 pages (``CALIBRATION``), so it
is a coarse, mostly high, proxy.

    python tests/tools/page_height.py docs/triton-rmsnorm-methods.md
"""
from __future__ import annotations

import pathlib
import re
import sys

import docs_tools

CHARS_PER_LINE = 48       # CJK-width characters in one line of the 1280-px content column
PX = {"text_line": 52, "table_row": 48, "code_line": 27, "plot": 420, "diagram": 600, "heading": 40,
      "block": 30, "page": 400}
# (page, Chromium's px at 1280, this estimate) when the weights were set
CALIBRATION = [("index", 2940, 3880), ("how-we-test", 6613, 9146), ("qwen3-fused-loss", 9497, 11879),
               ("qwen3-fusion-methods", 13358, 15630), ("qwen3-fusion", 23740, 27042),
               ("qwen3-qk-rope-swiglu", 11397, 12964), ("triton-rmsnorm-extras-methods", 15994, 17094),
               ("triton-rmsnorm-fused-add", 9771, 12106), ("triton-rmsnorm-methods", 24487, 26236),
               ("triton-rmsnorm", 24605, 29079), ("use-in-training", 3753, 4827),
               ("triton-rmsnorm-methods before issue 45", 136151, 136370)]
WIDE = re.compile(r"[\u2e80-\u9fff\uf900-\ufaff\uff00-\uffef]")


def _width(text: str) -> float:
    """Display width in CJK characters: a CJK character counts 1, any other character about a half."""
    wide = len(WIDE.findall(text))
    return wide + (len(text) - wide) / 2


def features(markdown: str) -> dict[str, int]:
    out = dict.fromkeys(PX, 0)
    out["page"] = 1
    lines = markdown.split("\n")
    i, folded = 0, None
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        indent = len(line) - len(line.lstrip())
        if folded is not None and stripped and indent <= folded:
            folded = None
        if folded is not None:
            i += 1
            continue
        fence = re.match(r"\s*(`{3,})\s*(\w*)", line)
        if fence:
            ticks, lang = fence.group(1), fence.group(2)
            j = i + 1
            while j < len(lines) and not lines[j].strip().startswith(ticks):
                j += 1
            if lang == "mermaid":
                out["diagram"] += 1
            else:
                out["code_line"] += max(j - i - 1, 1)
                out["block"] += 1
            i = j + 1
            continue
        if stripped.startswith("???"):  # a folded block: its title only
            out["block"] += 1
            folded = indent
        elif stripped.startswith("|"):
            if not re.fullmatch(r"\|[\s:|-]+\|", stripped):
                cells = [c for c in stripped.strip("|").split("|")]
                widest = max((_width(c) for c in cells), default=0)
                out["table_row"] += max(1, round(widest / 14))  # long cells wrap
        elif stripped.startswith("#"):
            out["heading"] += 1
        elif re.match(r"\s*!?\[!\[", stripped) or re.match(r"\s*!\[", stripped):
            out["plot"] += 1
        elif stripped.startswith("!!!"):
            out["block"] += 1
        elif stripped and not stripped.startswith("<!--"):
            text = re.sub(r"\]\([^)]*\)", "]", re.sub(r"<!--.*?-->", "", stripped))
            out["text_line"] += max(1, -(-int(_width(text)) // CHARS_PER_LINE))
        i += 1
    return out


def estimate(markdown: str) -> int:
    return sum(PX[k] * n for k, n in features(markdown).items())


def estimate_page(path: str | pathlib.Path) -> int:
    text = pathlib.Path(path).read_text(encoding="utf-8")
    return estimate(docs_tools.expand(text))


if __name__ == "__main__":
    for name in sys.argv[1:]:
        print(f"{name}: about {estimate_page(name):,} px at 1280 px")
