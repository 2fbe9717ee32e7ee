"""Count the lines of code an article shows from ``snippets/``.

A page's code is what its ``python`` fences pull in with ``--8<--`` from files
under ``snippets/``, expanded exactly as the site build expands them. Counted: every
non-blank line of those sections, collapsed (``???``) blocks included, since they
are on the page too. Not counted: generated output (``docs/generated/`` includes,
``text`` fences), mermaid diagrams, tables and ``bash`` one-liners.

    python tests/tools/code_count.py docs/qwen3-fusion.md docs/triton-rmsnorm.md
"""
from __future__ import annotations

import pathlib
import sys

import docs_tools

# Upper bound of shown code lines per page, by path from the repository root.
LIMITS = {
    "docs/qwen3-fusion.md": 350,
    "docs/triton-rmsnorm.md": 450,
    "docs/triton-rmsnorm-fused-add.md": 150,
    "docs/qwen3-qk-rope-swiglu.md": 150,
    "docs/qwen3-fused-loss.md": 160,
}


def shown_code(text: str) -> list[tuple[int, str, int]]:
    """(page line, include target, non-blank lines) for each snippet include in a python fence."""
    out = []
    for fence in docs_tools.fences(text):
        if fence.language != "python":
            continue
        for offset, line in enumerate(fence.body, 1):
            target = docs_tools.INCLUDE_TARGET.search(line)
            if not target or not target.group(1).startswith("snippets/"):
                continue
            code = docs_tools.expand(line.strip())
            out.append((fence.lineno + offset, target.group(1),
                        sum(1 for row in code.split("\n") if row.strip())))
    return out


def count_code(text: str) -> int:
    return sum(lines for _, _, lines in shown_code(text))


def count_page(path: str | pathlib.Path) -> int:
    return count_code(pathlib.Path(path).read_text(encoding="utf-8"))


def report(path: str | pathlib.Path) -> str:
    return docs_tools.limit_line(path, count_page, LIMITS, "lines of code shown")


def main(argv: list[str]) -> int:
    return docs_tools.counter_main(argv, __doc__, report)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
