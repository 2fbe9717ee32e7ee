"""The number rule: no benchmark-like number typed into a page (see CONTRIBUTING.md, "Data checks").

A benchmark-like number is a number followed by a unit of time, size, bandwidth, throughput,
ratio or share (ns … min, 秒, KB … TiB, GB/s, TFLOP/s, tokens/s, %, 百分点, ×, 倍); a × or x
followed by another number is a shape or a product. In a hand-written table, a number under
a header that names a unit or a measured quantity counts too. Not scanned: include lines,
code fences in a programming or config language, HTML comments, YAML front matter.
``<!-- number-ok: reason -->`` allows a figure that is not a measurement of this project:
at the end of a line it covers that line; alone on a line, the next block.
"""
from __future__ import annotations

import re

_NUM = r"(?<![A-Za-z0-9_.])\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?"
_UNITS = (
    r"[nµμu]s|ms|s|min|秒|毫秒|微秒|纳秒|分钟"
    r"|[KMGTP]i?B(?:/s)?|[KMGTP]B/s"
    r"|[KMGTP]?FLOP/s|[KMGTP]?FLOPS|tokens?/s|tok/s|it/s|samples?/s"
    r"|%|％|百分点|倍"
)
_VALUE_WITH_UNIT = re.compile(rf"{_NUM}\s*(?:{_UNITS})(?![A-Za-z0-9/])")
_RATIO = re.compile(rf"{_NUM}\s*[×xX](?![A-Za-z0-9])(?!\s*\d)")
_HEADER_UNIT = re.compile(
    r"(?<![A-Za-z])(?:[nµμu]s|ms|s|GB/s|TB/s|GiB|GB|MiB|MB|%|×|倍|FLOP/s|TFLOPS|tokens/s)(?![A-Za-z])"
    r"|speed-?up|time|latency|bandwidth|throughput|memory|耗时|时间|带宽|吞吐|加速|显存|占比",
    re.IGNORECASE,
)
_STARTS_WITH_NUMBER = re.compile(r"^\s*[~≈约<>≤≥]?\s*[-+]?\d")
_MARKER = re.compile(r"<!--\s*number-ok:\s*(.*?)\s*-->")
_CODE_FENCE_LANGS = {"python", "py", "python3", "sh", "bash", "shell", "zsh", "yaml", "yml", "toml", "json",
                     "ini", "cfg", "diff", "c", "cpp", "cuda", "javascript", "js", "css", "html", "make", "dockerfile"}
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([^\s`{]*)")


def hand_typed_numbers(text: str) -> list[tuple[int, str, str]]:
    """(line number, offending text, line) for every benchmark-like number outside the allowed places."""
    lines = text.splitlines()
    findings = []
    exempt = [False] * len(lines)
    skip = [False] * len(lines)

    # Front matter, fences, comments, includes: mark lines that are not scanned.
    i = 0
    if lines and lines[0].strip() == "---":
        end = next((j for j in range(1, len(lines)) if lines[j].strip() in ("---", "...")), None)
        if end is not None:
            for j in range(end + 1):
                skip[j] = True
            i = end + 1
    fence, fence_is_code, in_include_block = None, False, False
    for j in range(i, len(lines)):
        line = lines[j]
        stripped = line.strip()
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)[0] * 3
            fence_is_code = match.group(2).lower() in _CODE_FENCE_LANGS
            skip[j] = True
            continue
        if fence is not None:
            if stripped.startswith(fence) and not stripped.strip("`~"):
                fence = None
                skip[j] = True
            else:
                skip[j] = fence_is_code
            if not fence_is_code and stripped.startswith("--8<--"):
                skip[j] = True
            continue
        if stripped == "--8<--":
            in_include_block = not in_include_block
            skip[j] = True
            continue
        if in_include_block or stripped.startswith("--8<--"):
            skip[j] = True

    # Markers: inline covers the line; alone on a line, it covers the next block.
    for j, line in enumerate(lines):
        if skip[j]:
            continue
        for reason in _MARKER.findall(line):
            if len(reason) < 2:
                findings.append((j + 1, "number-ok marker without a reason", line))
        if not _MARKER.search(line):
            continue
        if _MARKER.sub("", line).strip():
            exempt[j] = True
            continue
        k = j + 1
        while k < len(lines) and not lines[k].strip():
            k += 1
        while k < len(lines) and lines[k].strip():
            exempt[k] = True
            k += 1

    # HTML comments (possibly multi-line) are not text.
    visible = _strip_comments(lines)

    # Tables: a numeric cell under a header that names a unit or a measured quantity.
    j = 0
    while j < len(lines):
        if not skip[j] and _is_row(visible[j]) and j + 1 < len(lines) and _is_separator(visible[j + 1]):
            header = _cells(visible[j])
            unit_columns = {c for c, cell in enumerate(header) if _HEADER_UNIT.search(cell)}
            k = j + 2
            while k < len(lines) and not skip[k] and _is_row(visible[k]):
                if not exempt[k] and not exempt[j]:
                    for c, cell in enumerate(_cells(visible[k])):
                        if c in unit_columns and _STARTS_WITH_NUMBER.match(cell):
                            findings.append((k + 1, f"{cell.strip()} (column '{header[c].strip()}')", lines[k]))
                k += 1
            j = k
        else:
            j += 1

    # Prose, lists, headings, table cells: value + unit anywhere.
    for j, line in enumerate(visible):
        if skip[j] or exempt[j]:
            continue
        for pattern in (_VALUE_WITH_UNIT, _RATIO):
            for match in pattern.finditer(line):
                findings.append((j + 1, match.group(0), lines[j]))
    return sorted(set(findings))


def _strip_comments(lines: list[str]) -> list[str]:
    text = "\n".join(lines)
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.DOTALL)
    out = text.split("\n")
    return out + [""] * (len(lines) - len(out))


def _is_row(line: str) -> bool:
    return line.strip().startswith("|")


def _is_separator(line: str) -> bool:
    return bool(re.fullmatch(r"\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*", line))


def _cells(line: str) -> list[str]:
    return line.strip().strip("|").split("|")
