"""The claims ledgers: every technical claim an article makes, with its evidence.

One file per article, ``docs/data/claims/<page>.json``::

    {"page": "docs/triton-rmsnorm.md",
     "claims": [{"claim": "<words quoted verbatim from the page>",
                 "where": "§4.1",
                 "status": "tested" | "measured" | "source" | "cited",
                 "evidence": [{"test": "tests/test_x.py::test_name"},
                              {"data": "h200/rmsnorm.json", "key": "results/shapes[label=H=4096]/fwd"},
                              {"source": "transformers 5.17.0", "path": "transformers/models/qwen3/modeling_qwen3.py",
                               "line": 62, "text": "<what that line holds>", "url": "https://..."},
                              {"cite": "https://...", "title": "..."}]}]}

``status`` names the kind of the strongest evidence of the row, which must be among
its evidence. tests/test_claims.py proves every row: the quote is on the page, each
test is collected, each data key resolves, each source line holds its text (where the
package is installed at that version), each citation has a URL. This module renders
the ledgers into the methods pages' "论断与证据" tables.
"""
from __future__ import annotations

import json
import pathlib
import re

from bench import store
from bench.report.tables import md_table

LEDGER_FOLDER = "claims"  # under store.DATA_DIR, read when rendered (tests point DATA_DIR elsewhere)
KINDS = ("test", "data", "source", "cite")  # evidence kinds, strongest first
STATUS_KIND = {"tested": "test", "measured": "data", "source": "source", "cited": "cite"}
STATUS_ZH = {"tested": "测试", "measured": "实测数据", "source": "源码", "cited": "文献"}
_SELECTOR = re.compile(r"^(?P<name>[^\[\]]*)(\[(?P<field>[^=\]]+)=(?P<value>[^\]]*)\])?$")


def ledgers() -> dict[str, dict]:
    """{file stem: ledger} of every committed ledger."""
    return {path.stem: json.loads(path.read_text(encoding="utf-8"))
            for path in sorted((store.DATA_DIR / LEDGER_FOLDER).glob("*.json"))}


def resolve(data, key: str):
    """The value at ``key`` in a JSON document, or raise KeyError naming the missing part.

    ``key`` is a '/'-separated path; a part is a dict key, a list index, or
    ``name[field=value]``: the list ``name`` (or the current list when name is empty),
    then its one element whose ``field`` equals ``value``.
    """
    node = data
    for part in key.split("/"):
        match = _SELECTOR.match(part)
        name, field, value = match.group("name"), match.group("field"), match.group("value")
        if name:
            if isinstance(node, list) and name.lstrip("-").isdigit():
                index = int(name)
                if not -len(node) <= index < len(node):
                    raise KeyError(f"{key}: index {index} out of range ({len(node)} items)")
                node = node[index]
            elif isinstance(node, dict) and name in node:
                node = node[name]
            else:
                raise KeyError(f"{key}: no {name!r}")
        if field is not None:
            found = [item for item in node if isinstance(item, dict) and str(item.get(field)) == value] \
                if isinstance(node, list) else []
            if len(found) != 1:
                raise KeyError(f"{key}: {len(found)} items with {field}={value!r}")
            node = found[0]
    return node


def evidence_kind(evidence: dict) -> str:
    kinds = [kind for kind in KINDS if kind in evidence]
    if len(kinds) != 1:
        raise ValueError(f"evidence must have exactly one of {KINDS}: {evidence}")
    return kinds[0]


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def evidence_text(evidence: dict) -> str:
    kind = evidence_kind(evidence)
    if kind == "test":
        return f"测试 `{evidence['test']}`"
    if kind == "data":
        return f"数据 `{evidence['data']}` → `{evidence['key']}`"
    if kind == "source":
        return f"[{evidence['source']} `{evidence['path']}` 第 {evidence['line']} 行]({evidence['url']})"
    return f"[{evidence.get('title') or evidence['cite']}]({evidence['cite']})"


def render_table(ledger: dict) -> str:
    rows = [[_cell(row["claim"]), row["where"],
             "<br/>".join(_cell(evidence_text(e)) for e in row["evidence"]),
             STATUS_ZH[row["status"]]] for row in ledger["claims"]]
    counts = {status: sum(row["status"] == status for row in ledger["claims"]) for status in STATUS_ZH}
    summary = "、".join(f"{STATUS_ZH[s]} {n} 条" for s, n in counts.items() if n)
    intro = (f"[{ledger['title']}]({pathlib.Path(ledger['page']).name}) 的 {len(ledger['claims'])} 条技术论断，"
             f"每条都引自原文，附上支撑它的证据（{summary}）。")
    return intro + "\n\n" + md_table(["论断（原文）", "位置", "证据", "依据"], rows, align="lllc")


def render_summary(load) -> dict[str, str]:
    """claims_<page>.md for every ledger (``load`` is unused: the ledgers are not GPU data)."""
    return {f"claims_{stem}.md": render_table(ledger) for stem, ledger in ledgers().items()}
