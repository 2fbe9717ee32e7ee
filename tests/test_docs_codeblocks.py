"""Execute every python code block of the docs, exactly as a reader sees it.

Each page under docs/ is expanded with pymdownx.snippets using the configuration
that mkdocs.yml gives the site build (read from mkdocs.yml, not copied), then
pytest-codeblocks' ``extract_from_buffer`` finds the blocks and their markers:

* ``<!--pytest.mark.skipif(..., reason="...")-->`` (any ``pytest.mark``) above a fence;
* ``<!--pytest-codeblocks:cont-->`` joins a block to the previous one;
* ``<!--pytest-codeblocks:expected-output-->`` compares stdout with the next fence;
* ``<!--pytest-codeblocks:importorskip(module)-->``.

Every block (GPU-only ones too, which a CPU run skips) is also checked with pyflakes:
a name that is used but never defined or imported fails, with page, line and includes.

Fences may carry a caption, ```` ```python title="snippets/x.py" ````: the info string
is normalised to ``python`` before extraction (pytest-codeblocks collects only the
exact word). Every block runs alone, from a file of its own in a fresh folder, as
``__main__`` -- as if the reader pasted it into a new script. ``bash``/``text``
blocks are not executed.
"""
from __future__ import annotations

import ast
import contextlib
import dataclasses
import io
import re
import runpy
import sys
import traceback

import pytest
from pyflakes import checker as pyflakes_checker
from pyflakes import messages as pyflakes_messages
from pytest_codeblocks.main import CodeBlock, extract_from_buffer

import docs_tools

SOURCE_LINE = re.compile(r'\bdata-docline="(\d+)"')


@dataclasses.dataclass
class DocBlock:
    page: str            # docs/how-we-test.md
    line: int            # line of the fence in the page (0 if it came from an include)
    caption: str         # title= of the fence, else the included snippet
    includes: str        # the --8<-- targets of the fence, e.g. snippets/x.py:section
    block: CodeBlock

    @property
    def where(self) -> str:
        label = ", ".join(x for x in (self.caption, self.includes) if x)
        return f"{self.page} line {self.line}" + (f" [{label}]" if label else "")

    @property
    def test_id(self) -> str:
        page = self.page.removeprefix("docs/")
        return f"{page}:L{self.line}" + (f" {self.includes}" if self.includes else "")


def collect(page, lenient: bool = False) -> list[DocBlock]:
    """The python blocks of one page after snippet expansion."""
    raw = page.read_text(encoding="utf-8")
    lines = raw.split("\n")
    raw_fences = {f.lineno: f for f in docs_tools.fences(raw) if f.language == "python"}
    for lineno in raw_fences:  # tag each fence with its line in the page; survives expansion
        lines[lineno - 1] += f' data-docline="{lineno}"'
    expanded = docs_tools.expand("\n".join(lines), lenient=lenient)
    normalised, python_fences = docs_tools.normalise_python_fences(expanded)
    out = []
    for block in extract_from_buffer(io.StringIO(normalised + "\n")):
        if block.syntax != "python":
            continue
        fence = python_fences.get(block.lineno)
        match = SOURCE_LINE.search(fence.info) if fence else None
        raw_fence = raw_fences.get(int(match.group(1))) if match else None
        out.append(DocBlock(
            page.relative_to(docs_tools.ROOT).as_posix(),
            raw_fence.lineno if raw_fence else 0,
            (raw_fence.title or "") if raw_fence else "",
            ", ".join(raw_fence.includes) if raw_fence else "",
            block,
        ))
    return out


def _collect_everything():
    params, errors = [], {}
    for page in docs_tools.doc_pages():
        rel = page.relative_to(docs_tools.ROOT).as_posix()
        try:
            blocks = collect(page)
        except Exception as error:  # reported by test_page_expands; still run the other blocks
            errors[rel] = f"{type(error).__name__}: {error}"
            try:
                blocks = collect(page, lenient=True)
            except Exception:
                continue
        for doc_block in blocks:
            marks = []
            for mark in doc_block.block.marks:
                try:
                    mark = eval(mark, {"sys": sys, "pytest": pytest})  # noqa: S307 - markers written in the docs
                except Exception as error:
                    errors[rel] = f"{doc_block.where}: bad marker <!--{mark}-->: {error}"
                    continue
                if mark.name in ("skip", "skipif"):  # say which block is skipped
                    reason = mark.kwargs.get("reason", "")
                    mark = getattr(pytest.mark, mark.name)(*mark.args, reason=f"{doc_block.where}: {reason}")
                marks.append(mark)
            params.append(pytest.param(doc_block, id=doc_block.test_id, marks=marks))
    return params, errors


PAGES = [p.relative_to(docs_tools.ROOT).as_posix() for p in docs_tools.doc_pages()]
BLOCKS, EXPAND_ERRORS = _collect_everything()


@pytest.mark.parametrize("page", PAGES)
def test_page_expands(page):
    """Every --8<-- include resolves (missing file or section: the site build would fail too)."""
    if page in EXPAND_ERRORS:
        pytest.fail(f"{page}: {EXPAND_ERRORS[page]}", pytrace=False)


@pytest.mark.parametrize("doc_block", BLOCKS)
def test_codeblock(doc_block: DocBlock, tmp_path, monkeypatch):
    block = doc_block.block
    if block.importorskip:
        pytest.importorskip(block.importorskip)
    script = tmp_path / f"{pathlib_safe(doc_block.page)}_L{doc_block.line}.py"
    script.write_text(block.code, encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "argv", [str(script)])
    stdout = io.StringIO()
    try:
        with contextlib.redirect_stdout(stdout):
            runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exit_:
        if exit_.code not in (None, 0):
            pytest.fail(f"{doc_block.where}: exited with status {exit_.code}\n{stdout.getvalue()}", pytrace=False)
    except Exception:
        pytest.fail(f"{doc_block.where} failed when run as a reader would run it:\n"
                    f"{traceback.format_exc()}", pytrace=False)
    if block.expected_output is not None:
        expected, actual = block.expected_output, stdout.getvalue()
        if block.expected_output_ignore_whitespace:
            expected, actual = re.sub(r"\s+", "", expected), re.sub(r"\s+", "", actual)
        if expected != actual:
            pytest.fail(f"{doc_block.where}: printed output differs from the page.\n"
                        f"--- expected (on the page)\n{block.expected_output}"
                        f"--- actual\n{stdout.getvalue()}", pytrace=False)


UNDEFINED = (pyflakes_messages.UndefinedName, pyflakes_messages.UndefinedExport)


def undefined_names(code: str, filename: str = "<block>") -> list[str]:
    """pyflakes' undefined-name messages for ``code`` ("line N: undefined name 'x'"); other messages pass."""
    try:
        tree = ast.parse(code, filename=filename)
    except SyntaxError as error:
        return [f"line {error.lineno}: syntax error: {error.msg}"]
    found = pyflakes_checker.Checker(tree, filename=filename).messages
    return [f"line {m.lineno}: {m.message % m.message_args}"
            for m in sorted(found, key=lambda m: m.lineno) if isinstance(m, UNDEFINED)]


@pytest.mark.parametrize("doc_block", [pytest.param(p.values[0], id=p.id) for p in BLOCKS])
def test_codeblock_names_are_defined(doc_block: DocBlock):
    """Static check that also covers blocks skipped here (GPU only): every name is defined or imported."""
    problems = undefined_names(doc_block.block.code)
    if problems:
        pytest.fail(f"{doc_block.where}: the block as a reader copies it (joined with the blocks it "
                    f"continues) uses names it never defines:\n  " + "\n  ".join(problems), pytrace=False)


def test_undefined_name_check():
    assert undefined_names("y = torch.ones(3)\n") == ["line 1: undefined name 'torch'"]
    assert undefined_names("import torch\ny = torch.ones(3)\n") == []
    assert undefined_names("import os\nimport os\n") == []  # unused / redefined: not this check's business
    assert undefined_names("__all__ = ['missing']\n") == ["line 1: undefined name 'missing' in __all__"]
    assert undefined_names("def f(:\n")[0].startswith("line 1: syntax error")


def pathlib_safe(page: str) -> str:
    return re.sub(r"[^A-Za-z0-9_]+", "_", page.removeprefix("docs/").removesuffix(".md"))


def test_collector_sees_captioned_blocks_and_markers():
    """Guards the collector itself: the demo page's blocks are all found, with their markers."""
    demo = [param.values[0] for param in BLOCKS if param.values[0].page == "docs/how-we-test.md"]
    assert len(demo) >= 3, [b.test_id for b in demo]
    assert all(b.caption.startswith("snippets/proof_demo.py") for b in demo)
    assert all(b.includes.startswith("snippets/proof_demo.py:") for b in demo)
    assert any("def poisoned_like" in b.block.code and "def rms_norm_reference" in b.block.code
               for b in demo), "cont blocks were not joined to the block above"
    assert any(b.block.expected_output for b in demo), "expected-output marker not attached"
    assert any(any("cuda" in m for m in b.block.marks) for b in demo), "GPU skip marker not attached"
    assert all(b.line > 0 for b in demo)
