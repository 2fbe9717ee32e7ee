"""The claims ledgers (docs/data/claims/*.json): the words of each article, proven like its numbers.

Each row quotes a technical claim of an article and names its evidence. This test fails when:

* an article has no ledger, or a row lacks a claim, a place, a status or evidence, or its
  status is not the kind of one of its pieces of evidence;
* a quote is not on the page verbatim (the page with its includes expanded, so generated
  sentences count too; HTML comments, ``**`` and runs of whitespace are ignored);
* a test named as evidence is not collected by pytest (``file::name`` matches its
  parametrized cases too);
* a data key does not resolve in its file under docs/data/;
* a source line does not hold its text, where that package is installed at the version
  named (the others must still give a URL and the text; the count of lines checked here
  is printed);
* a citation has no https URL.

``test_the_checker_catches_a_broken_ledger`` breaks a copy of a real ledger in each of
these ways and requires a report for every break.
"""
from __future__ import annotations

import copy
import importlib.metadata
import importlib.util
import json
import pathlib
import re
import subprocess
import sys

import pytest

import docs_tools
from bench.report import claims as summary_claims

ARTICLES = ["docs/qwen3-fusion.md", "docs/triton-rmsnorm.md", "docs/triton-rmsnorm-fused-add.md",
            "docs/qwen3-qk-rope-swiglu.md", "docs/qwen3-fused-loss.md"]
LEDGERS = summary_claims.ledgers()
_COMMENT = re.compile(r"<!--.*?-->", re.S)


def normalised(text: str) -> str:
    return re.sub(r"\s+", " ", _COMMENT.sub("", text).replace("**", "")).strip()


def page_text(page: str) -> str:
    # lenient: a missing include is test_docs_codeblocks.py::test_page_expands' failure, not this one's
    return normalised(docs_tools.expand((docs_tools.ROOT / page).read_text(encoding="utf-8"), lenient=True))


def collected_ids(ids: set[str], session_ids: set[str]) -> set[str]:
    """The ids among ``ids`` that pytest collects: from this session, else by --collect-only."""
    def found(wanted, pool):
        return {i for i in wanted if i in pool or any(p.startswith(i + "[") for p in pool)}

    have = found(ids, session_ids)
    missing = ids - have
    if missing:
        # collect whole files: one id that does not exist must not hide the others (pytest stops at it)
        files = sorted({i.split("::")[0] for i in missing if (docs_tools.ROOT / i.split("::")[0]).exists()})
        result = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                                 *files], cwd=docs_tools.ROOT, capture_output=True, text=True)
        pool = {line.strip() for line in result.stdout.splitlines() if "::" in line}
        have |= found(missing, pool)
    return have


def source_file(package: str, path: str) -> pathlib.Path | None:
    """The file ``path`` of an installed distribution, or None when it is not installed."""
    try:
        dist = importlib.metadata.distribution(package)
    except importlib.metadata.PackageNotFoundError:
        return None
    located = pathlib.Path(dist.locate_file(path))
    return located if located.exists() else None


def installed_version(package: str) -> str | None:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return None


def ledger_problems(name: str, ledger: dict, pages: dict[str, str], collected: set[str],
                    checked_sources: list | None = None) -> list[str]:
    """Every problem of one ledger; ``pages`` maps page -> normalised expanded text."""
    problems = []
    page = ledger.get("page")
    if page not in pages:
        return [f"{name}: page {page!r} is not an article"]
    if not ledger.get("title"):
        problems.append(f"{name}: no title")
    rows = ledger.get("claims") or []
    if not rows:
        problems.append(f"{name}: no claims")
    for number, row in enumerate(rows, 1):
        where = f"{name} row {number}"
        claim = row.get("claim", "")
        if not claim or not row.get("where"):
            problems.append(f"{where}: needs a claim and a place")
        elif normalised(claim) not in pages[page]:
            problems.append(f"{where}: not on {page} verbatim: {claim[:80]!r}")
        evidence = row.get("evidence") or []
        if not evidence:
            problems.append(f"{where}: no evidence")
            continue
        try:
            kinds = [summary_claims.evidence_kind(e) for e in evidence]
        except ValueError as error:
            problems.append(f"{where}: {error}")
            continue
        status = row.get("status")
        if status not in summary_claims.STATUS_KIND:
            problems.append(f"{where}: status {status!r} is not one of {sorted(summary_claims.STATUS_KIND)}")
        elif summary_claims.STATUS_KIND[status] not in kinds:
            problems.append(f"{where}: status {status!r} but no {summary_claims.STATUS_KIND[status]} evidence")
        for item, kind in zip(evidence, kinds):
            if kind == "test" and item["test"] not in collected:
                problems.append(f"{where}: test {item['test']} is not collected by pytest")
            elif kind == "data":
                file = docs_tools.DOCS / "data" / item["data"]
                if not file.exists():
                    problems.append(f"{where}: no data file docs/data/{item['data']}")
                    continue
                try:
                    summary_claims.resolve(json.loads(file.read_text(encoding="utf-8")), item["key"])
                except (KeyError, TypeError) as error:
                    problems.append(f"{where}: data docs/data/{item['data']}: {error}")
            elif kind == "source":
                for field in ("path", "line", "text", "url"):
                    if not item.get(field):
                        problems.append(f"{where}: source evidence without {field}")
                package, _, version = item["source"].partition(" ")
                if installed_version(package) == version:
                    file = source_file(package, item.get("path", ""))
                    lines = file.read_text(encoding="utf-8").splitlines() if file else []
                    line = item.get("line", 0)
                    if not 0 < line <= len(lines) or item.get("text", "") not in lines[line - 1]:
                        problems.append(f"{where}: {item['source']} {item.get('path')}:{line} does not hold "
                                        f"{item.get('text')!r}")
                    elif checked_sources is not None:
                        checked_sources.append(f"{item['source']} {item['path']}:{line}")
            elif kind == "cite" and not str(item["cite"]).startswith("https://"):
                problems.append(f"{where}: citation without an https URL: {item['cite']!r}")
    return problems


@pytest.fixture(scope="module")
def pages():
    return {page: page_text(page) for page in ARTICLES}


@pytest.fixture(scope="module")
def collected(request):
    wanted = {e["test"] for ledger in LEDGERS.values() for row in ledger.get("claims", [])
              for e in row.get("evidence", []) if "test" in e}
    return collected_ids(wanted, {item.nodeid for item in request.session.items})


def test_every_article_has_a_ledger():
    assert sorted(ledger["page"] for ledger in LEDGERS.values()) == sorted(ARTICLES)


@pytest.mark.parametrize("name", sorted(LEDGERS))
def test_ledger_rows_are_proven(name, pages, collected):
    checked = []
    problems = ledger_problems(name, LEDGERS[name], pages, collected, checked)
    rows = LEDGERS[name]["claims"]
    statuses = {s: sum(r.get("status") == s for r in rows) for s in summary_claims.STATUS_ZH}
    print(f"\n{LEDGERS[name]['page']}: {len(rows)} claims in the ledger {statuses}; "
          f"{len(checked)} source lines checked against installed packages")
    if problems:
        pytest.fail(f"{len(problems)} unproven claim(s) in docs/data/claims/{name}.json:\n  "
                    + "\n  ".join(problems), pytrace=False)


def test_the_checker_catches_a_broken_ledger(pages):
    name = "triton-rmsnorm"
    ledger = copy.deepcopy(LEDGERS[name])
    kinds = {summary_claims.evidence_kind(e): (r, e) for r in ledger["claims"] for e in r["evidence"]}
    assert {"test", "data", "cite"} <= set(kinds), "the sample ledger needs test, data and cite evidence"
    ledger["claims"][0]["claim"] += "（这句不在页面上）"
    kinds["test"][1]["test"] = "tests/test_rmsnorm_triton.py::test_that_does_not_exist"
    kinds["data"][1]["key"] += "/no_such_key"
    kinds["cite"][1]["cite"] = "http://example.com"
    ledger["claims"].append({"claim": "无证据的论断", "where": "§一", "status": "tested", "evidence": []})
    collected = collected_ids({kinds["test"][1]["test"]}, set())
    problems = ledger_problems(name, ledger, pages, collected)
    for expected in ("not on docs/triton-rmsnorm.md verbatim", "test_that_does_not_exist is not collected",
                     "no_such_key", "citation without an https URL", "no evidence"):
        assert any(expected in p for p in problems), (expected, problems)


def test_resolve_reads_paths_indexes_and_selectors():
    data = {"results": {"shapes": [{"label": "H=1024", "fwd": {"us": 1.5}}, {"label": "H=4096"}]}}
    assert summary_claims.resolve(data, "results/shapes[label=H=1024]/fwd/us") == 1.5
    assert summary_claims.resolve(data, "results/shapes/1/label") == "H=4096"
    for bad in ("results/none", "results/shapes[label=H=2048]", "results/shapes/5"):
        with pytest.raises(KeyError):
            summary_claims.resolve(data, bad)


def test_source_lines_of_installed_packages_are_found():
    assert importlib.util.find_spec("transformers") is not None
    version = installed_version("transformers")
    file = source_file("transformers", "transformers/models/qwen3/modeling_qwen3.py")
    assert version and file and "class Qwen3RMSNorm" in file.read_text(encoding="utf-8")
