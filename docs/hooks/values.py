"""MkDocs hook: numbers in hand-written prose are looked up from the measured data.

A page writes ``{{ loss.compile_ms }}`` where a number goes; ``python -m bench.render`` writes every report's named
values (``values(data)`` in bench/report/<name>.py, formatted with their units) to docs/generated/values.json, and
this hook puts them in before the page is rendered. An unknown name stops the build. The tests read pages through
the same substitution (tests/tools/docs_tools.py ``expand``), so a claim's quote is checked as the reader sees it.
"""
from __future__ import annotations

import json
import pathlib
import re

VALUES_FILE = pathlib.Path(__file__).resolve().parents[1] / "generated" / "values.json"
TOKEN = re.compile(r"\{\{\s*([a-z][a-z0-9_]*)\.([a-z][a-z0-9_]*)\s*\}\}")


def load(path: pathlib.Path = VALUES_FILE) -> dict:
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def substitute(markdown: str, values: dict, where: str = "page") -> str:
    """Every ``{{ report.name }}`` replaced by its value; KeyError naming the token and ``where`` if unknown."""
    def value(match):
        report, name = match.groups()
        try:
            return values[report][name]
        except KeyError:
            raise KeyError(f"{where}: no value {{{{ {report}.{name} }}}} in docs/generated/values.json "
                           "(python -m bench.render writes it)") from None

    return TOKEN.sub(value, markdown)


def on_page_markdown(markdown, page, config, files):  # noqa: ARG001 - MkDocs hook signature
    return substitute(markdown, load(), page.file.src_uri)
