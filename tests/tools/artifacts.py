"""What the tests check in generated artifacts: table headers, axis labels with units, Chinese text."""
from __future__ import annotations

import re

CJK = re.compile(r"[\u4e00-\u9fff]")
# An axis label names its unit in full-width parentheses: "step 时间（ms）", "有效带宽（占拷贝上限 %）".
UNIT_LABEL = re.compile(r"（[^）]*(ms|µs|%|GB/s|TFLOP/s|FLOP/字节|nats/字节)[^）]*）")


def tables(text: str) -> list[list[str]]:
    """The header cells of every markdown table in ``text``."""
    lines = text.splitlines()
    separator = re.compile(r"\|(\s*:?-+:?\s*\|)+")
    return [[c.strip() for c in line.strip().strip("|").split("|")]
            for line, below in zip(lines, lines[1:]) if line.startswith("|") and separator.fullmatch(below.strip())]


def takeaway(text: str) -> str:
    """The sentence a generated table starts with: one line of Chinese ending in 。, before the table."""
    first = text.split("\n\n")[0]
    assert CJK.search(first) and first.endswith("。") and "\n" not in first and not first.startswith("|"), first
    return first
