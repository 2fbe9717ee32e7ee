"""House rules of the docs that a build alone would not catch.

* No inline example code: a ``python`` block in a page holds only ``--8<--`` includes
  of files under snippets/ (a single line is the one exception). Python under another
  info string (``py``, ``python3``, ``pycon``, a ``~~~`` fence) is refused, because the
  docs code-block test would never run it.
* Includes name a section (``"snippets/x.py:name"``), never a line range
  (``"file:12:40"``, ``"file:12"``): a range silently shifts when the file changes.
* Every line of snippets/*.py fits the desktop code column (``MAX_SNIPPET_COLUMNS``),
  so no code block on a page scrolls sideways.
* Mermaid diagrams use the one HF pastel palette and only the classes it defines.
* The palette is the same in docs/assets/stylesheets/palette.css,
  docs/assets/mermaid/hf-pastel.mmd and bench/report/names.py.
* The pages speak the field's words, not the house's: none of ``HOUSE_WORDS`` appears in
  docs/**/*.md, in docs/generated/ or in a string of bench/report/*.py (which writes page text).
"""
from __future__ import annotations

import ast
import re
import unicodedata

import pytest

import docs_tools

PAGES = [p.relative_to(docs_tools.ROOT).as_posix() for p in docs_tools.doc_pages()]
PALETTE_MMD = docs_tools.DOCS / "assets" / "mermaid" / "hf-pastel.mmd"
PALETTE_CSS = docs_tools.DOCS / "assets" / "stylesheets" / "palette.css"
TILDE_PYTHON = re.compile(r"^\s*~{3,}\s*\{?\s*\.?(python|py|py3|python3|pycon|ipython)\b", re.IGNORECASE)
HEX = re.compile(r"#[0-9A-Fa-f]{3,8}\b")

HOW_TO_FIX = (
    "Inline example code is forbidden: put it in snippets/<file>.py between "
    "'# --8<-- [start:name]' and '# --8<-- [end:name]', test it under tests/, and include it with\n"
    '    ```python title="snippets/<file>.py"\n    --8<-- "snippets/<file>.py:name"\n    ```'
)


def inline_code_problems(text: str, page: str) -> list[str]:
    """Every way the markdown ``text`` breaks the no-inline-python rule."""
    problems = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if TILDE_PYTHON.match(line):
            problems.append(f"{page}:{lineno}: python in a ~~~ fence is never executed; use ```python")
    for fence in docs_tools.fences(text):
        where = f"{page}:{fence.lineno}"
        if fence.language in docs_tools.PYTHON_ALIASES - {"python"}:
            problems.append(f"{where}: info string '{fence.info}' is not collected by the docs test; "
                            "write ```python (add title=\"...\" for a caption)")
            continue
        if fence.language != "python":
            continue
        inline, in_block_include = [], False
        for line in fence.body:
            stripped = line.strip()
            if re.fullmatch(r"-{1,}8<-{1,}", stripped):  # block form: --8<-- / paths / --8<--
                in_block_include = not in_block_include
            elif stripped and not in_block_include and not docs_tools.INCLUDE_LINE.match(line):
                inline.append(stripped)
        if len(inline) >= 2 or (inline and fence.includes):
            problems.append(f"{where}: python block has {len(inline)} inline line(s), "
                            f"first: {inline[0]!r}.\n{HOW_TO_FIX}")
        for target in fence.includes:
            if not target.startswith("snippets/"):
                problems.append(f"{where}: python block includes '{target}'; code shown to readers "
                                "must come from a tested file under snippets/")
    return problems


@pytest.mark.parametrize("page", PAGES)
def test_no_inline_python(page):
    text = (docs_tools.ROOT / page).read_text(encoding="utf-8")
    problems = inline_code_problems(text, page)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def test_inline_rule_catches_every_form():
    page = "\n".join([
        '```python title="snippets/a.py"', '--8<-- "snippets/a.py:part"', "```",   # ok
        "```python", "x = 1", "```",                                             # ok: one line
        "```python", "import torch", "x = torch.ones(3)", "```",                 # inline
        "```py", '--8<-- "snippets/a.py"', "```",                                # alias
        "~~~python", "print(1)", "~~~",                                          # tilde
        "```python", '--8<-- "bench/run.py"', "```",                             # not snippets/
        "````markdown", "```python", "a = 1", "b = 2", "```", "````",            # shown, not run: ok
    ])
    problems = inline_code_problems(page, "t.md")
    assert [p.split(":")[1] for p in problems] == ["14", "7", "11", "17"], problems


# ------------------------------------------------------------------ named sections only

LINE_RANGE = re.compile(r":[\d:,\s-]*\d[\d:,\s-]*$")  # file:12, file:12:40, file::40, file:1:3,5:6


def line_range_includes(text: str, page: str) -> list[str]:
    """Each ``--8<--`` include of ``text`` that selects lines by number instead of by section name."""
    problems = []
    for lineno, line in enumerate(text.split("\n"), 1):
        if line.lstrip().startswith(";"):  # ;--8<-- shows the include syntax, includes nothing
            continue
        for match in docs_tools.INCLUDE_TARGET.finditer(line):
            if LINE_RANGE.search(match.group(1)):
                problems.append(f"{page}:{lineno}: include '{match.group(1)}' selects lines by number; "
                                "mark a section '# --8<-- [start:name]' ... '[end:name]' and include 'file:name'")
    return problems


@pytest.mark.parametrize("page", PAGES)
def test_includes_name_sections(page):
    problems = line_range_includes((docs_tools.ROOT / page).read_text(encoding="utf-8"), page)
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


def test_line_range_rule():
    text = "\n".join([
        '--8<-- "snippets/a.py:part"',         # ok: a section
        '--8<-- "snippets/a.py:fwd2"',         # ok: a section name with a digit
        '--8<-- "docs/generated/t.md"',        # ok: a whole file
        '--8<-- "snippets/a.py:12:40"',        # range
        '    --8<-- "snippets/a.py:12"',       # one line, indented
        "--8<-- 'snippets/a.py::40'",          # open start
        ';--8<-- "snippets/a.py:1:3"',         # escaped: shown, not included
        '--8<-- "snippets/a.py:1:3,5:6"',      # several ranges
    ])
    assert [p.split(":")[1] for p in line_range_includes(text, "t.md")] == ["4", "5", "6", "8"]


# ------------------------------------------------------------------ snippet line width

# What fits the code column of a page on a 1280x800 desktop (the code font is sized so
# that about 90 characters fit): a longer snippet line makes its block scroll sideways.
MAX_SNIPPET_COLUMNS = 88
SNIPPETS = sorted((docs_tools.ROOT / "snippets").glob("*.py"))


def columns(line: str) -> int:
    """Width of ``line`` in a monospace font: wide (CJK) characters take two columns."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in line)


def long_lines(text: str, name: str, limit: int = MAX_SNIPPET_COLUMNS) -> list[str]:
    """'name:line: N columns' for each line of ``text`` wider than ``limit``."""
    return [f"{name}:{lineno}: {columns(line)} columns (at most {limit})"
            for lineno, line in enumerate(text.split("\n"), 1) if columns(line) > limit]


def test_snippet_lines_fit_the_code_column():
    problems = [problem for path in SNIPPETS
                for problem in long_lines(path.read_text(encoding="utf-8"), f"snippets/{path.name}")]
    if problems:
        pytest.fail("snippet lines wider than the desktop code column; wrap them:\n"
                    + "\n".join(problems), pytrace=False)


def test_line_width_rule():
    fits = "x = " + "1" * (MAX_SNIPPET_COLUMNS - 4)
    text = "\n".join([
        "import torch",
        fits,                       # exactly the limit: ok
        fits + "2",                 # one over
        "# 篇" + "a" * (MAX_SNIPPET_COLUMNS - 3),  # at the limit in characters; 篇 is 2 wide
    ])
    assert long_lines(text, "a.py") == [
        f"a.py:3: {MAX_SNIPPET_COLUMNS + 1} columns (at most {MAX_SNIPPET_COLUMNS})",
        f"a.py:4: {MAX_SNIPPET_COLUMNS + 1} columns (at most {MAX_SNIPPET_COLUMNS})",
    ]
    assert SNIPPETS, "no snippets/*.py found"


# ------------------------------------------------------------------ mermaid palette

def palette_classes() -> dict[str, tuple[str, str]]:
    """classDef name -> (fill, stroke) from the one palette file."""
    classes = {}
    for line in PALETTE_MMD.read_text(encoding="utf-8").splitlines():
        match = re.match(r"\s*classDef\s+(\w+)\s+fill:(#\w+),stroke:(#\w+),color:(#\w+)\s*$", line)
        if match:
            classes[match.group(1)] = (match.group(2).upper(), match.group(3).upper())
    return classes


def allowed_colours() -> set[str]:
    colours = {c for pair in palette_classes().values() for c in pair}
    return colours | {"#333", "#333333", "#FFF", "#FFFFFF"}


def mermaid_blocks(page: str) -> list[docs_tools.Fence]:
    text = (docs_tools.ROOT / page).read_text(encoding="utf-8")
    try:
        expanded = docs_tools.expand(text)
    except Exception:  # test_docs_codeblocks.py::test_page_expands reports it; check the rest
        expanded = docs_tools.expand(text, lenient=True)
    return [f for f in docs_tools.fences(expanded) if f.language == "mermaid"]


@pytest.mark.parametrize("page", PAGES)
def test_mermaid_uses_the_palette(page):
    allowed = allowed_colours()
    problems = []
    for fence in mermaid_blocks(page):
        body = "\n".join(fence.body)
        defined = set(re.findall(r"^\s*classDef\s+([\w,]+)", body, re.MULTILINE))
        defined = {name for names in defined for name in names.split(",")}
        used = set(re.findall(r":::(\w+)", body))
        used |= set(re.findall(r"^\s*class\s+[\w,]+\s+(\w+)", body, re.MULTILINE))
        for name in sorted(used - defined):
            problems.append(f"diagram near expanded line {fence.lineno}: class '{name}' is not defined "
                            f"(include docs/assets/mermaid/hf-pastel.mmd; classes: {sorted(palette_classes())})")
        for line in body.split("\n"):
            if re.match(r"\s*(classDef|style|linkStyle)\b", line):
                for colour in HEX.findall(line):
                    if colour.upper() not in allowed:
                        problems.append(f"colour {colour} is not in the HF pastel palette: {line.strip()}")
    if problems:
        pytest.fail(f"{page}:\n  " + "\n  ".join(problems), pytrace=False)


def test_palette_is_defined_once_and_agrees_everywhere():
    from bench.report import names

    classes = palette_classes()
    assert set(classes) == {"decision", "library", "triton", "warn", "data", "plain"}
    css = PALETTE_CSS.read_text(encoding="utf-8").upper()
    css_vars = dict(re.findall(r"--HF-([A-Z]+(?:-LINE)?):\s*(#[0-9A-F]{6})", css))
    by_colour = {"decision": "YELLOW", "library": "GREEN", "triton": "BLUE", "warn": "PINK",
                 "data": "PURPLE", "plain": "GRAY"}
    for name, (fill, stroke) in classes.items():
        colour = by_colour[name]
        assert css_vars[colour] == fill and css_vars[f"{colour}-LINE"] == stroke, name
        if colour.lower() in names.PASTEL_FILL:
            assert names.PASTEL_FILL[colour.lower()].upper() == fill, f"bench/report/names.py {colour}"
            assert names.PASTEL_LINE[colour.lower()].upper() == stroke, f"bench/report/names.py {colour}"


# ------------------------------------------------------------------ the mkdocs hook

def test_hook_escapes_mermaid_source_once():
    import importlib.util

    spec = importlib.util.spec_from_file_location("mermaid_source", docs_tools.ROOT / "docs" / "hooks" / "mermaid_source.py")
    hook = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hook)
    escape_mermaid_sources = hook.escape_mermaid_sources

    page = '<p>a<br/>b</p><pre class="mermaid"><code>A["x<br/>y"] --> B & C</code></pre>'
    out = escape_mermaid_sources(page)
    assert out == '<p>a<br/>b</p><pre class="mermaid"><code>A["x&lt;br/&gt;y"] --&gt; B &amp; C</code></pre>'
    assert escape_mermaid_sources(out) == out  # idempotent


def test_collector_normalises_captions_only_outside_other_fences():
    text = "\n".join(['```python title="snippets/x.py" linenums="1"', "a = 1", "```",
                      "````markdown", '```python title="shown"', "b = 2", "```", "````"])
    normalised, found = docs_tools.normalise_python_fences(text)
    assert normalised.split("\n")[0] == "```python"
    assert normalised.split("\n")[4] == '```python title="shown"'
    assert list(found) == [1] and found[1].title == "snippets/x.py"


# ------------------------------------------------------------------ the field's words

# The house's words and what the field says instead (the editorial guide's table of terms).
HOUSE_WORDS = {
    "生产版": "本站实现, or the kernel's own name (本站的 RMSNorm kernel)",
    "对手": "对比方案 or 基线",
    "出货": "发布 or 采用",
    "梯子": "配置表",
    "账本": "论断与证据表",
    "起伏": "波动, or rewrite the sentence",
}
REPORTS = docs_tools.ROOT / "bench" / "report"
# Report modules whose strings another piece of work rewrites; each names why it is waived.
HOUSE_WORDS_WAIVED: dict[str, str] = {}


def house_words(text: str, name: str) -> list[str]:
    """'name:line: word (use ...)' for every house word in ``text``."""
    return [f"{name}:{lineno}: {word!r} (use {instead})"
            for lineno, line in enumerate(text.split("\n"), 1)
            for word, instead in HOUSE_WORDS.items() if word in line]


def python_strings(source: str) -> list[tuple[int, str]]:
    """(line, text) of every string constant of a module: docstrings, literals, f-string parts."""
    return [(node.lineno, node.value) for node in ast.walk(ast.parse(source))
            if isinstance(node, ast.Constant) and isinstance(node.value, str)]


def house_word_problems() -> list[str]:
    problems = []
    for path in sorted(docs_tools.DOCS.rglob("*")):
        if path.is_file() and (path.suffix == ".md" or "generated" in path.relative_to(docs_tools.DOCS).parts):
            name = path.relative_to(docs_tools.ROOT).as_posix()
            problems += house_words(path.read_text(encoding="utf-8"), name)
    for path in sorted(REPORTS.glob("*.py")):
        if path.name in HOUSE_WORDS_WAIVED:
            continue
        name = path.relative_to(docs_tools.ROOT).as_posix()
        for lineno, text in python_strings(path.read_text(encoding="utf-8")):
            problems += [f"{name}:{lineno}: {p.split(': ', 1)[1]}" for p in house_words(text, name)]
    return problems


def test_pages_and_report_strings_use_the_fields_words():
    problems = house_word_problems()
    if problems:
        pytest.fail(f"{len(problems)} house word(s) on the pages or in the text bench/report/ writes:\n"
                    + "\n".join(problems), pytrace=False)


def test_house_word_rule():
    assert house_words("本站实现更快\n生产版更快，对手慢", "a.md") == [
        "a.md:2: '生产版' (use 本站实现, or the kernel's own name (本站的 RMSNorm kernel))",
        "a.md:2: '对手' (use 对比方案 or 基线)"]
    source = '"""模块说明：账本。"""\nx = f"{1}梯子"  # 起伏 in a comment is no string\n'
    assert [(n, t) for n, t in python_strings(source)] == [(1, "模块说明：账本。"), (2, "梯子")]
    assert set(HOUSE_WORDS_WAIVED) <= {p.name for p in REPORTS.glob("*.py")}
