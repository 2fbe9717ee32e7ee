"""Count the Han characters of prose in a markdown page.

Prose is what a reader reads as running text: headings, paragraphs, lists and
admonition bodies. Not counted: YAML front matter, fenced code blocks of any
language (mermaid and text too), table lines (starting with ``|``), ``--8<--``
include lines (the raw page is counted, never what an include pulls in), HTML
comments, and the URLs of links and images (their visible text counts). A measured
value written ``{{ report.name }}`` counts as the reader sees it (docs/hooks/values.py).

    python tests/tools/prose_count.py docs/qwen3-fusion.md docs/triton-rmsnorm.md
"""
from __future__ import annotations

import pathlib
import re
import sys

import docs_tools

# Upper bound of Han characters of prose per page, by path from the repository root.
LIMITS = {
    "docs/qwen3-fusion.md": 2900,
    "docs/triton-rmsnorm.md": 3400,
    "docs/triton-rmsnorm-fused-add.md": 1500,
    "docs/qwen3-qk-rope-swiglu.md": 1500,
    "docs/qwen3-fused-loss.md": 1500,
}

HAN = re.compile(r"[\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0003134f]")
FRONT_MATTER = re.compile(r"\A---[ \t]*\n.*?\n(---|\.\.\.)[ \t]*(\n|\Z)", re.DOTALL)
COMMENT = re.compile(r"<!--.*?-->", re.DOTALL)
FENCE = re.compile(r"^[ \t]*(`{3,}|~{3,})")
INCLUDE = re.compile(r"^\s*;?-+8<-+")
LINK_URL = re.compile(r"(!?\[[^\]]*\])\([^)]*\)")          # [text](url) and ![alt](url): keep the text
REFERENCE = re.compile(r"^\s*\[[^\]]+\]:\s*\S.*$")         # [label]: url "title"
AUTOLINK = re.compile(r"<[a-z][a-z0-9+.-]*:[^>\s]*>", re.IGNORECASE)


def prose(text: str) -> str:
    """The page with everything that is not prose removed."""
    text = FRONT_MATTER.sub("", text.replace("\r\n", "\n"), count=1)
    text = COMMENT.sub("", text)
    kept, fence = [], None
    for line in text.split("\n"):
        match = FENCE.match(line)
        if fence is not None:  # inside a fence: it closes on the same character, at least as long
            if match and match.group(1)[0] == fence[0] and len(match.group(1)) >= len(fence) \
                    and not line.strip()[len(match.group(1)):].strip():
                fence = None
            continue
        if match:
            fence = match.group(1)
            continue
        stripped = line.strip()
        if stripped.startswith("|") or INCLUDE.match(line) or REFERENCE.match(line):
            continue
        kept.append(line)
    text = "\n".join(kept)
    text = LINK_URL.sub(r"\1", text)
    return AUTOLINK.sub("", text)


def count_han(text: str) -> int:
    """Han characters (CJK Unified Ideographs) of prose in markdown ``text``."""
    return len(HAN.findall(prose(text)))


def count_page(path: str | pathlib.Path) -> int:
    """The page's prose with its measured values put in, as the site build does."""
    values = docs_tools._values_hook()
    return count_han(values.substitute(pathlib.Path(path).read_text(encoding="utf-8"), values.load(), str(path)))


def report(path: str | pathlib.Path) -> str:
    return docs_tools.limit_line(path, count_page, LIMITS, "Han characters of prose")


def main(argv: list[str]) -> int:
    return docs_tools.counter_main(argv, __doc__, report)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
