"""Rules for the reader's edition of the two articles (the methods pages may say more).

* Length: the Han characters of prose of each article stay under a limit
  (``tests/tools/prose_count.py``, limits in its ``LIMITS``).
* No machinery: an article, with its includes expanded (code and generated tables too),
  names no commit hash, log file, ``PERF_LOG``, ``pragma`` or ``CI``, and carries no HTML
  comment other than the test markers (``pytest-codeblocks``, ``pytest.mark``) and
  ``number-ok`` reasons.
* The built site (one strict build per test run, ``docs_tools.built_site``):
  no HTML comment inside any page's ``<article>`` (docs/hooks/strip_comments.py), and every
  code block caption ``snippets/x.py…`` links to the complete file, served byte for byte
  (docs/hooks/snippet_links.py).
"""
from __future__ import annotations

import importlib.util
import re

import pytest

import code_count
import docs_tools
import prose_count

ARTICLES = ["docs/qwen3-fusion.md", "docs/triton-rmsnorm.md", "docs/triton-rmsnorm-fused-add.md",
            "docs/qwen3-qk-rope-swiglu.md", "docs/qwen3-fused-loss.md"]

# Words and marks an article must not show. Boundaries are ASCII-only: in Python a Han
# character is a word character, so \b would miss "CI上".
_NOT_ALNUM_BEFORE, _NOT_ALNUM_AFTER = r"(?<![0-9A-Za-z_])", r"(?![0-9A-Za-z_])"
MACHINERY = {
    "commit hash": re.compile(_NOT_ALNUM_BEFORE + r"(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}"
                              + _NOT_ALNUM_AFTER),
    "log file": re.compile(r"[^\s`'\"()（）]+\.log" + r"(?![0-9A-Za-z_(])"),
    "PERF_LOG": re.compile(r"PERF_LOG"),
    "pragma": re.compile(r"pragma", re.IGNORECASE),
    "CI": re.compile(_NOT_ALNUM_BEFORE + r"CI" + _NOT_ALNUM_AFTER),
    "HTML comment": re.compile(r"<!--(?!\s*(pytest-codeblocks:|pytest\.mark\.|number-ok:))"),
}


def machinery_hits(line: str) -> list[tuple[str, str]]:
    """(kind, matched text) for each piece of machinery on one line."""
    return [(kind, m.group(0)) for kind, pattern in MACHINERY.items() for m in pattern.finditer(line)]


def machinery_report(text: str, page: str) -> list[str]:
    """Every hit in ``text``, named by page line; lines from an include also name the include."""
    report = []
    for lineno, line in enumerate(text.split("\n"), 1):
        target = docs_tools.INCLUDE_TARGET.search(line)
        if target and not line.lstrip().startswith(";"):
            try:
                included = docs_tools.expand(line).split("\n")
            except Exception:  # a missing include is test_page_expands' failure
                included = docs_tools.expand(line, lenient=True).split("\n")
            for k, part in enumerate(included, 1):
                for kind, found in machinery_hits(part):
                    report.append(f"{page}:{lineno} (via {target.group(1)}, line {k}): {kind} {found!r}: "
                                  f"{part.strip()[:120]}")
            continue
        for kind, found in machinery_hits(line):
            report.append(f"{page}:{lineno}: {kind} {found!r}: {line.strip()[:120]}")
    return report


# ------------------------------------------------------------------ length

@pytest.mark.parametrize("page", ARTICLES)
def test_article_prose_length(page):
    count, limit = prose_count.count_page(docs_tools.ROOT / page), prose_count.LIMITS[page]
    print(f"\n{page}: {count} Han characters of prose (limit {limit})")
    if count > limit:
        pytest.fail(f"{page}: {count} Han characters of prose, limit {limit} "
                    f"({count - limit} over; python tests/tools/prose_count.py {page})", pytrace=False)


METHODS_PAGES = ["docs/qwen3-fusion-methods.md", "docs/triton-rmsnorm-methods.md",
                 "docs/triton-rmsnorm-extras-methods.md"]
# The browser check (tests/test_browser.py::test_every_page_fits_the_height_limit) holds every page to 25,000 px
# at 1280 px; without Chromium it skips. This budget is on tests/tools/page_height.py's estimate, which reads
# 1.00-1.38x the browser's height (its CALIBRATION): 27,000 passes the methods pages as they are (at most about
# 26,200, for a 24,500-px page) and fails 篇 2's methods page before issue 45 (about 136,000) five times over.
METHODS_HEIGHT_BUDGET = 27_000


@pytest.mark.parametrize("page", METHODS_PAGES)
def test_methods_pages_fit_the_height_budget(page):
    import page_height

    estimate = page_height.estimate_page(docs_tools.ROOT / page)
    print(f"\n{page}: about {estimate:,} px at 1280 px by the proxy (budget {METHODS_HEIGHT_BUDGET:,})")
    assert estimate <= METHODS_HEIGHT_BUDGET, (
        f"{page}: about {estimate:,} px at 1280 px (budget {METHODS_HEIGHT_BUDGET:,}): move logs, history and "
        "ledgers to the repository, or fold a reference table (python tests/tools/page_height.py PAGE)")


def test_the_height_proxy_is_calibrated():
    """Every calibration page's estimate is within 1.00-1.38x its browser height, and the proxy still reads
    the old methods page (with its log table and three claims ledgers) far over the budget."""
    import page_height

    ratios = [estimate / measured for _, measured, estimate in page_height.CALIBRATION]
    assert 0.95 <= min(ratios) and max(ratios) <= 1.45, ratios
    old = [e for name, _, e in page_height.CALIBRATION if "before" in name][0]
    assert old > 4 * METHODS_HEIGHT_BUDGET


def test_every_article_has_a_limit():
    assert sorted(prose_count.LIMITS) == sorted(ARTICLES)
    assert sorted(code_count.LIMITS) == sorted(ARTICLES)


@pytest.mark.parametrize("page", ARTICLES)
def test_article_code_length(page):
    """Code in proportion to the words: the snippet lines a page shows stay under a limit."""
    count, limit = code_count.count_page(docs_tools.ROOT / page), code_count.LIMITS[page]
    print(f"\n{page}: {count} lines of code shown (limit {limit})")
    if count > limit:
        biggest = sorted(code_count.shown_code((docs_tools.ROOT / page).read_text(encoding="utf-8")),
                         key=lambda item: -item[2])[:5]
        pytest.fail(f"{page}: {count} lines of code shown, limit {limit}; largest includes: "
                    + ", ".join(f"{target} ({lines} lines, page line {line})" for line, target, lines in biggest),
                    pytrace=False)


def test_code_counter_counts_snippet_includes_only():
    page = """```python title="snippets/x.py"
--8<-- "snippets/triton_one_minute.py:kernel"
```

```text
--8<-- "docs/generated/graph_break_explain.txt"
```
"""
    [(line, target, lines)] = code_count.shown_code(page)
    assert (line, target) == (2, "snippets/triton_one_minute.py:kernel") and lines > 5


def test_prose_counter_counts_only_prose():
    page = "\n".join([
        "---", "title: 标题不算", "---",
        "# 标题",                                        # 2
        "正文一句。", "",                                  # 4
        "!!! note \"注意\"", "    提示内容",                # 2 + 4
        "```python", "# 代码注释", "```",
        "````markdown", "```mermaid", "图中文字", "```", "````",
        "~~~text", "输出", "~~~",
        "| 表头 | 列 |", "|---|---|", "| 数据 | 值 |",
        '--8<-- "docs/generated/表格.md"',
        "<!-- 注释 -->", "<!--", "多行注释", "-->",
        "见[链接文字](other.md#五反向)和![图注](generated/图.svg)。",  # 链接文字 见 和 图注 = 8
        "[参考]: https://example.com/路径",
        "网址 <https://example.com/路径> 不算。",            # 网址 不算 = 4
    ])
    assert prose_count.count_han(page) == 2 + 4 + 2 + 4 + 8 + 4
    assert prose_count.count_han("abc 123, 〇、。（）") == 0  # ASCII and CJK punctuation are not Han
    assert prose_count.count_han("    ```text\n    缩进的代码\n    ```\n后") == 1
    assert prose_count.count_han("```\n未闭合的代码块") == 0


def test_prose_counter_cli(capsys):
    assert prose_count.main(["docs/qwen3-fusion.md"]) == 0
    out = capsys.readouterr().out
    assert re.fullmatch(r"docs/qwen3-fusion\.md: \d+ Han characters of prose \(limit 2900\)\n", out), out


# ------------------------------------------------------------------ machinery

@pytest.mark.parametrize("page", ARTICLES)
def test_article_shows_no_machinery(page):
    report = machinery_report((docs_tools.ROOT / page).read_text(encoding="utf-8"), page)
    if report:
        pytest.fail(f"{page} shows test/CI machinery to readers ({len(report)}):\n  " + "\n  ".join(report),
                    pytrace=False)


@pytest.mark.parametrize("line, kinds", [
    ("数据来自 commit f1fc235 的运行", ["commit hash"]),
    ("full hash 4a2f647e0b9c1d2e3f40516273849abcdef01234 here", ["commit hash"]),
    ("在f1fc235上", ["commit hash"]),
    ("见 run-5.log 与 bench/PERF_LOG.md", ["log file", "PERF_LOG"]),
    ("x = 1  # pragma: gpu only", ["pragma"]),
    ("CPU CI上跑", ["CI"]),
    ("（torch 2.13，CI 用）", ["CI"]),
    ("<!-- TODO: rewrite -->", ["HTML comment"]),
    ("<!--pytest-codeblocks:cont-->", []),
    ('<!--pytest.mark.skipif(not __import__("torch").cuda.is_available(), reason="GPU")-->', []),
    ("带宽 4.8 TB/s <!-- number-ok: datasheet -->", []),
    ("TRITON_INTERPRET=1 让 kernel 在 CPU 上跑", []),
    ("deadbeef cafebabe 1234567 12345678", []),             # no digit / no letter
    ("triton_red_fused_add_mean_mul_pow_rsqrt_0 sm90_xmma_gemm_bf16bf16 ampere_bf16_s16816gemm", []),
    ("y = torch.log(x); logging.log(1); CIFAR CIs DCI", []),
    ("#a8d8ea", []),
])
def test_machinery_matcher(line, kinds):
    assert [kind for kind, _ in machinery_hits(line)] == kinds


# ------------------------------------------------------------------ hooks and the built site

def load_hook(name: str):
    spec = importlib.util.spec_from_file_location(name, docs_tools.DOCS / "hooks" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def site():
    try:
        return docs_tools.built_site()
    except docs_tools.BuildFailed as error:
        pytest.fail(str(error), pytrace=False)


def built_pages(site) -> list:
    return sorted(site.rglob("index.html"))


def article_html(path) -> str:
    text = path.read_text(encoding="utf-8")
    match = re.search(r"<article\b.*?</article>", text, re.DOTALL)
    assert match, f"{path}: no <article> element"
    return match.group(0)


def test_strip_comments_hook():
    strip = load_hook("strip_comments").strip_html_comments
    page = ('<p>带宽 4.8 TB/s <!-- number-ok: datasheet --></p>\n<!--pytest-codeblocks:cont-->\n'
            '<!--\nmulti\nline -->\n<pre><code>&lt;!-- shown in code --&gt;</code></pre>')
    assert strip(page) == '<p>带宽 4.8 TB/s </p>\n\n\n<pre><code>&lt;!-- shown in code --&gt;</code></pre>'


def test_no_html_comment_in_built_articles(site):
    problems = []
    for path in built_pages(site):
        html = article_html(path)
        for match in re.finditer(r"<!--.{0,80}", html, re.DOTALL):
            line = html.count("\n", 0, match.start()) + 1
            problems.append(f"{path.relative_to(site)}: <article> line {line}: {match.group(0)!r}")
    assert built_pages(site), "no page built"
    if problems:
        pytest.fail("HTML comments reached the site:\n  " + "\n  ".join(problems), pytrace=False)


def test_caption_link_hook():
    link = load_hook("snippet_links").link_captions
    known = {"snippets/a.py": "../snippets/a.py"}
    page = ('<span class="filename">snippets/a.py（用法）</span>'
            '<span class="filename">snippets/gone.py</span>'
            '<span class="filename">bench/x.py</span>')
    assert link(page, known.get) == ('<span class="filename"><a href="../snippets/a.py">snippets/a.py（用法）</a></span>'
                                     '<span class="filename">snippets/gone.py</span>'
                                     '<span class="filename">bench/x.py</span>')


CAPTION = re.compile(r'<span class="filename">(.*?)</span>', re.DOTALL)
CAPTION_LINK = re.compile(r'<a href="([^"]+)">(snippets/([\w.-]+\.py)[^<]*)</a>')


def test_captions_link_to_the_served_snippet(site):
    problems, linked = [], 0
    for path in built_pages(site):
        for caption in CAPTION.findall(path.read_text(encoding="utf-8")):
            match = CAPTION_LINK.fullmatch(caption)
            if not caption.startswith("snippets/") and not match:
                continue  # a caption that names no snippet
            if not match:
                problems.append(f"{path.relative_to(site)}: caption {caption!r} does not link to its file")
                continue
            href, _, name = match.groups()
            target = (path.parent / href).resolve()
            source = docs_tools.ROOT / "snippets" / name
            if target != (site / "snippets" / name).resolve():
                problems.append(f"{path.relative_to(site)}: caption {caption!r} links to {href}")
            elif not target.is_file() or target.read_bytes() != source.read_bytes():
                problems.append(f"{path.relative_to(site)}: {href} is missing or differs from snippets/{name}")
            else:
                linked += 1
    assert not problems, "\n".join(problems)
    assert linked >= 10, f"only {linked} caption links found"


def test_no_seed_figures_survive_in_the_articles():
    """The draft's wrong count and impossible timings must not come back (the methods page quotes them)."""
    for page in ARTICLES:
        text = (docs_tools.ROOT / page).read_text(encoding="utf-8")
        for phrase in ("73 个", "612 ms", "592 ms", "577 ms", "505 ms", "448 ms", "420 μs", "180 μs"):
            assert phrase not in text, f"{page}: {phrase}"


def test_every_page_links_the_repository_without_asking_github(site):
    """mkdocs.yml's repo_url (from REPO_URL) puts the repository link in every page's header, and the
    theme's repository partial is overridden so that no script asks api.github.com for its facts."""
    pages = sorted(site.rglob("*.html"))
    assert pages
    for html in pages:
        text = html.read_text(encoding="utf-8")
        if "md-header" not in text:
            continue  # the 404 page and redirects aside
        assert f'href="{docs_tools.TEST_REPO_URL}"' in text, f"{html.name}: no repository link"
        assert 'data-md-component="source"' not in text, f"{html.name}: the theme would fetch repository facts"


def test_the_site_serves_the_wheel(site):
    """The build's hook serves the fusion set's wheel, the same bytes the hook builds from snippets/."""
    package_wheel = load_hook("package_wheel")
    served = site / package_wheel.DOWNLOAD_URI
    assert served.is_file(), f"{package_wheel.DOWNLOAD_URI} is not in the built site"
    assert served.read_bytes() == package_wheel.build_wheel()


def test_values_hook_puts_the_measured_values_in():
    """{{ report.name }} in a page becomes the value bench.render wrote; an unknown one stops the build."""
    hook = load_hook("values")
    values = {"loss": {"ours_ms": "97.5 ms"}}
    assert hook.substitute("本站 {{ loss.ours_ms }}，{{loss.ours_ms}}。`{x}` {{ x }}", values) == \
        "本站 97.5 ms，97.5 ms。`{x}` {{ x }}"
    with pytest.raises(KeyError, match=r"docs/x.md: no value \{\{ loss.compile_ms \}\}"):
        hook.substitute("{{ loss.compile_ms }}", values, "docs/x.md")


def test_every_value_a_page_names_exists():
    """Every {{ report.name }} of every page is in docs/generated/values.json (the build would stop)."""
    hook = load_hook("values")
    values = hook.load()
    for page in docs_tools.doc_pages():
        hook.substitute(page.read_text(encoding="utf-8"), values, str(page))


def test_prose_counter_counts_measured_values_as_the_reader_sees_them(tmp_path):
    """A {{ report.name }} value counts with the Han characters it puts on the page."""
    values = docs_tools._values_hook().load()
    name, text = next((n, v) for n, v in values["host"].items() if prose_count.count_han(v))
    page = tmp_path / "page.md"
    page.write_text(f"慢于 {{{{ host.{name} }}}}。\n", encoding="utf-8")
    assert prose_count.count_page(page) == 2 + prose_count.count_han(text)
