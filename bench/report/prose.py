"""Small helpers for the Chinese sentences and captions that bench/ generates next to its tables.

A generated table may start with a takeaway sentence computed from the same data
(so that words and numbers cannot drift apart) and end with a one-line italic caption
stating the setup. Ranges use an en dash; equal ends collapse to one value.
"""
from __future__ import annotations

from typing import Callable, Iterable


def join(items: Iterable[str]) -> str:
    return "、".join(items)


def glue(text: str, suffix: str) -> str:
    """text + suffix, with the space Chinese typesetting puts between a Latin letter or digit and a CJK word."""
    return f"{text} {suffix}" if text[-1:].isascii() and text[-1:].isalnum() else text + suffix


def span(values: Iterable[float], form: Callable[[float], str]) -> str:
    """'lo–hi' of the formatted values, or a single value when both ends format the same."""
    values = list(values)
    lo, hi = form(min(values)), form(max(values))
    return lo if lo == hi else f"{lo}–{hi}"


def pct(value: float, decimals: int = 0) -> str:
    return f"{100 * value:.{decimals}f}%"


def pct_span(values: Iterable[float], decimals: int = 0) -> str:
    """'86%–95%': each end carries its unit, like the tables."""
    return span(values, lambda v: pct(v, decimals))


def times(value: float, decimals: int = 2) -> str:
    return f"{value:.{decimals}f}×"


def times_span(values: Iterable[float], decimals: int = 2) -> str:
    """'1.11–2.11' (no unit: the sentence says 倍)."""
    return span(values, lambda v: f"{v:.{decimals}f}")


def italic(text: str) -> str:
    return f"*{text.strip()}*"


def caption(*parts: str, sep: str = "，") -> str:
    """The italic caption line to append to a table: the non-empty parts joined by ``sep``, ending in 。"""
    return "\n" + italic(sep.join(p for p in parts if p) + "。") + "\n"


def page(table: str, caption: str | None = None, takeaway: str | None = None) -> str:
    """Takeaway paragraph, table, italic caption: the layout of every generated table."""
    parts = [takeaway.strip()] if takeaway else []
    parts.append(table.rstrip("\n"))
    if caption:
        parts.append(italic(caption))
    return "\n\n".join(parts) + "\n"
