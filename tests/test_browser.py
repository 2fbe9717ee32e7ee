"""Open every page of the built site in headless Chromium, offline.

Fails on: a JavaScript error, a mermaid diagram that is not an SVG (or is mermaid's
error picture), and any request to a host other than the local test server.
At a desktop (1280x800) and a phone (390x844) viewport, fails on any table, code block,
image or diagram wider than the content column, and on a table that scrolls sideways;
a code block may scroll sideways on the phone only.
Screenshots of every page, light and dark, go to artifacts/screenshots/.
At 1280 px, every page is at most ``MAX_PAGE_HEIGHT_PX`` tall (articles, methods pages, home page …;
``tests/test_docs_reader.py`` keeps a cheap proxy of it without a browser), every string in a plot
renders at ``MIN_FIGURE_TEXT_PX`` or more, every diagram label at ``MIN_DIAGRAM_TEXT_PX`` or
more, and every diagram fits one 1280x800 screen; the measured heights are printed.

Uses Debian's /usr/bin/chromium through Python playwright (no browser download).
The site is built fresh (``mkdocs build --strict``) into a temporary folder.
"""
from __future__ import annotations

import functools
import html
import http.server
import os
import pathlib
import re
import shutil
import subprocess
import threading
import urllib.parse

import pytest

import docs_tools

pytestmark = pytest.mark.browser

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCREENSHOTS = ROOT / "artifacts" / "screenshots"
CHROMIUM = os.environ.get("CHROMIUM", "/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
    "--disable-dev-shm-usage",
]
RENDER_TIMEOUT_MS = 30_000

# Material renders each diagram into a *closed* shadow root; open it so the test can look inside.
OPEN_SHADOW_ROOTS = """
(() => {
  const attach = Element.prototype.attachShadow;
  Element.prototype.attachShadow = function (init) {
    return attach.call(this, Object.assign({}, init, { mode: "open" }));
  };
})();
"""

# Returns one entry per diagram: what it rendered to.
INSPECT_DIAGRAMS = """
() => {
  const words = (svg) => Array.from(svg.querySelectorAll("text, .nodeLabel, .error-text"))
    .map((t) => t.textContent.trim()).filter(Boolean).join(" | ").slice(0, 200);
  const out = [];
  for (const pre of document.querySelectorAll("pre.mermaid")) {
    out.push({ state: "not rendered", text: pre.textContent.slice(0, 200) });
  }
  for (const div of document.querySelectorAll("div.mermaid")) {
    const root = div.shadowRoot || div;
    const svg = root.querySelector("svg");
    if (!svg) { out.push({ state: "no svg", text: div.textContent.slice(0, 200) }); continue; }
    const box = svg.getBoundingClientRect();
    const isError = svg.getAttribute("aria-roledescription") === "error"
      || /Syntax error|Parse error/i.test(svg.textContent);
    out.push({
      state: isError ? "error svg" : (box.width > 10 && box.height > 10 ? "ok" : "empty svg"),
      text: words(svg),
      nodes: svg.querySelectorAll("g.node").length,
    });
  }
  // mermaid leaves its error picture in <body> when a render fails
  for (const svg of document.querySelectorAll("body > div svg[aria-roledescription='error'], body > svg[aria-roledescription='error']")) {
    out.push({ state: "mermaid error picture", text: words(svg) });
  }
  return out;
}
"""


# One entry per element that does not fit the content column (all <details> opened first).
INSPECT_OVERFLOW = """
(allowCodeScroll) => {
  for (const d of document.querySelectorAll("article details")) d.open = true;
  const column = document.querySelector("article.md-content__inner");
  const style = getComputedStyle(column);
  const width = column.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  const text = (el) => (el.textContent || el.getAttribute("alt") || el.getAttribute("src") || "")
    .replace(/\\s+/g, " ").trim().slice(0, 80);
  const probe = document.createElement("code");
  probe.textContent = "0".repeat(100);
  probe.style.cssText = "position:absolute;visibility:hidden;white-space:pre;padding:0";
  const firstCode = column.querySelector("pre > code");
  (firstCode ? firstCode.parentElement : column).appendChild(probe);
  const charWidth = probe.getBoundingClientRect().width / 100;
  probe.remove();
  const contentWidth = (el) => {
    const s = getComputedStyle(el);
    return el.clientWidth - parseFloat(s.paddingLeft) - parseFloat(s.paddingRight);
  };
  const longest = (el) => Math.max(0, ...el.textContent.split("\\n").map((l) => l.length));
  const out = [];
  const report = (kind, el, what) => out.push({ kind, what, text: text(el) });
  const tooWide = (el) => Math.max(el.scrollWidth, el.getBoundingClientRect().width) > width + 1;
  const scrolls = (el) => el.scrollWidth > el.clientWidth + 1;
  for (const table of column.querySelectorAll("table")) {
    const wrap = table.closest(".md-typeset__scrollwrap") || table.parentElement;
    const columns = table.rows.length ? table.rows[0].cells.length : 0;
    if (tooWide(table)) report("table", table, `${columns} columns, ${table.scrollWidth}px wide, column ${Math.round(width)}px`);
    else if (scrolls(wrap) || scrolls(table)) report("table", table, `${columns} columns, scrolls sideways (${wrap.scrollWidth}px in ${wrap.clientWidth}px)`);
  }
  // On a phone Material draws code blocks edge to edge (negative side margins): there a
  // code block may be as wide as the viewport, and may scroll inside.
  const codeLimit = allowCodeScroll ? window.innerWidth : width;
  for (const pre of column.querySelectorAll("pre:not(.mermaid)")) {
    const code = pre.querySelector("code") || pre;
    const box = pre.getBoundingClientRect();
    if (box.width > codeLimit + 1 || box.left < -1 || box.right > window.innerWidth + 1) {
      report("code block", pre, `${Math.round(box.width)}px wide, allowed ${Math.round(codeLimit)}px`);
    } else if (!allowCodeScroll && (scrolls(code) || scrolls(pre))) {
      report("code block", pre, `scrolls sideways: longest line ${longest(code)} characters, `
        + `${Math.floor(contentWidth(code) / charWidth)} fit (${code.scrollWidth}px in ${code.clientWidth}px)`);
    }
  }
  for (const img of column.querySelectorAll("img")) {
    if (tooWide(img)) report("image", img, `${Math.round(img.getBoundingClientRect().width)}px wide, column ${Math.round(width)}px`);
  }
  for (const div of column.querySelectorAll("div.mermaid")) {
    const svg = (div.shadowRoot || div).querySelector("svg");
    if (svg && svg.getBoundingClientRect().width > width + 1) report("diagram", div, `${Math.round(svg.getBoundingClientRect().width)}px wide, column ${Math.round(width)}px`);
    else if (scrolls(div)) report("diagram", div, `scrolls sideways (${div.scrollWidth}px in ${div.clientWidth}px)`);
  }
  const page = document.documentElement;
  if (page.scrollWidth > window.innerWidth + 1) out.push({ kind: "page", what: `scrolls sideways (${page.scrollWidth}px in ${window.innerWidth}px)`, text: "" });
  return out;
}
"""
# What a reader sees at 1280 px, for each article: the page height, each SVG plot (its
# displayed width, to scale the plot's own font sizes), and each diagram's height and the
# smallest label font as rendered (CSS font size times the SVG's scale).
INSPECT_READING = """
() => {
  const column = document.querySelector("article.md-content__inner");
  const plots = Array.from(column.querySelectorAll("img"))
    .filter((img) => /\\.svg(\\?|$)/.test(img.getAttribute("src") || ""))
    .map((img) => ({ src: img.getAttribute("src"), width: img.getBoundingClientRect().width,
                     linked: !!img.closest("a[href]") }));
  const diagrams = [];
  for (const div of column.querySelectorAll("div.mermaid")) {
    const svg = (div.shadowRoot || div).querySelector("svg");
    if (!svg) continue;
    const box = svg.getBoundingClientRect();
    const view = svg.viewBox && svg.viewBox.baseVal && svg.viewBox.baseVal.width ? svg.viewBox.baseVal.width : box.width;
    const scale = box.width / view;
    let smallest = Infinity, label = "";
    for (const el of svg.querySelectorAll(".nodeLabel, .edgeLabel, text")) {
      const words = el.textContent.trim();
      if (!words) continue;
      const size = parseFloat(getComputedStyle(el).fontSize) * scale;
      if (size < smallest) { smallest = size; label = words.slice(0, 40); }
    }
    diagrams.push({ height: box.height, width: box.width, smallest, label });
  }
  return { height: document.documentElement.scrollHeight, plots, diagrams };
}
"""
ARTICLE_PATHS = ["/qwen3-fusion/", "/triton-rmsnorm/", "/triton-rmsnorm-fused-add/", "/qwen3-qk-rope-swiglu/"]
MAX_ARTICLE_HEIGHT_PX = 25_000
MAX_PAGE_HEIGHT_PX = 25_000  # every page, methods pages included (issue 45)
MIN_FIGURE_TEXT_PX = 10
MIN_DIAGRAM_TEXT_PX = 12
MAX_DIAGRAM_HEIGHT_PX = 800
_SVG_VIEWBOX = re.compile(r'<svg[^>]*\bviewBox="[-\d.]+ [-\d.]+ ([\d.]+) [\d.]+"')
_SVG_TEXT = re.compile(r'<g id="text_\d+">\s*<!-- ((?:(?!-->).)*?) -->\s*<g [^>]*transform="[^"]*scale\(([\d.]+) -[\d.]+\)"', re.S)


def svg_text_sizes(svg: str) -> tuple[float, list[tuple[str, float]]]:
    """(viewBox width, [(string, font size in viewBox units)]) of a plot made by bench's svg_of.

    matplotlib draws each string as glyph outlines in a group scaled by font size / 100,
    after an XML comment holding the string.
    """
    width = float(_SVG_VIEWBOX.search(svg).group(1))
    return width, [(html.unescape(text), float(scale) * 100) for text, scale in _SVG_TEXT.findall(svg)]


def reading_problems(seen: dict, path: str, site: pathlib.Path) -> tuple[list[str], str]:
    """(problems, one measurement line) of one article, from INSPECT_READING at 1280x800."""
    problems, sizes = [], []
    if seen["height"] > MAX_ARTICLE_HEIGHT_PX:
        problems.append(f"{path}: {seen['height']} px tall at 1280 px, limit {MAX_ARTICLE_HEIGHT_PX}")
    for plot in seen["plots"]:
        file = (site / path.lstrip("/") / plot["src"]).resolve()
        view_width, texts = svg_text_sizes(file.read_text(encoding="utf-8"))
        scale = plot["width"] / view_width
        small = min(texts, key=lambda t: t[1]) if texts else ("", float("inf"))
        sizes.append(small[1] * scale)
        if small[1] * scale < MIN_FIGURE_TEXT_PX:
            problems.append(f"{path} {plot['src']}: text {small[0]!r} renders at {small[1] * scale:.1f} px "
                            f"(font {small[1]:.1f} in a {view_width:.0f}-wide plot shown {plot['width']:.0f} px "
                            f"wide), minimum {MIN_FIGURE_TEXT_PX}")
        if not plot["linked"]:
            problems.append(f"{path} {plot['src']}: the plot is not a link to its full-size file")
    for index, diagram in enumerate(seen["diagrams"], 1):
        if diagram["smallest"] < MIN_DIAGRAM_TEXT_PX:
            problems.append(f"{path} diagram {index}: label {diagram['label']!r} renders at "
                            f"{diagram['smallest']:.1f} px, minimum {MIN_DIAGRAM_TEXT_PX}")
        if diagram["height"] > MAX_DIAGRAM_HEIGHT_PX:
            problems.append(f"{path} diagram {index}: {diagram['height']:.0f} px tall, more than one "
                            f"screen ({MAX_DIAGRAM_HEIGHT_PX} px)")
    smallest_plot = f"{min(sizes):.1f}" if sizes else "-"
    smallest_label = f"{min(d['smallest'] for d in seen['diagrams']):.1f}" if seen["diagrams"] else "-"
    line = (f"{path}: {seen['height']} px tall at 1280 px (limit {MAX_ARTICLE_HEIGHT_PX}); "
            f"{len(seen['plots'])} plots, smallest text {smallest_plot} px; "
            f"{len(seen['diagrams'])} diagrams, smallest label {smallest_label} px, tallest "
            f"{max((d['height'] for d in seen['diagrams']), default=0):.0f} px")
    return problems, line


VIEWPORTS = {"desktop": {"width": 1280, "height": 800}, "phone": {"width": 390, "height": 844}}


def _chromium_or_skip():
    if pathlib.Path(CHROMIUM).exists():
        return CHROMIUM
    message = f"{CHROMIUM} not found: install Debian's chromium (apt-get install -y chromium)"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def built_site() -> pathlib.Path:
    """A fresh strict build of the site (the same command as the README), shared with the other docs tests."""
    try:
        return docs_tools.built_site()
    except docs_tools.BuildFailed as error:
        pytest.fail(str(error), pytrace=False)


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format, *args):  # noqa: A002 - signature fixed by the base class
        pass


@pytest.fixture(scope="session")
def server(built_site):
    handler = functools.partial(_QuietHandler, directory=str(built_site))
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}"
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(scope="session")
def browser():
    executable = _chromium_or_skip()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=executable, headless=True, args=CHROMIUM_ARGS)
        yield chromium
        chromium.close()


def site_pages(site: pathlib.Path) -> list[str]:
    """URL paths of every page: each index.html of the built site."""
    pages = []
    for path in site.rglob("index.html"):
        rel = path.parent.relative_to(site).as_posix()
        pages.append("/" if rel == "." else f"/{rel}/")
    return sorted(pages)


def test_every_nav_page_is_built(built_site):
    pages = site_pages(built_site)
    assert "/" in pages and "/how-we-test/" in pages, pages


def _screenshot_name(path: str, scheme: str) -> str:
    stem = path.strip("/").replace("/", "__") or "index"
    return f"{stem}-{scheme}.jpg"


def _check_page(browser, server: str, path: str, scheme: str, site: pathlib.Path,
                inspect: bool = False) -> dict:
    """Open one page at 1280x800 and screenshot it. Returns {"problems": [...]} (empty when
    the page is clean); with ``inspect``, also what a reader sees there (``"reading"``,
    articles only) and what does not fit the column (``"overflow"``), from the same visit."""
    problems: list[str] = []
    seen: dict = {"problems": problems}
    local = urllib.parse.urlsplit(server).netloc
    context = browser.new_context(color_scheme=scheme, viewport=VIEWPORTS["desktop"],
                                  service_workers="block")
    context.add_init_script(OPEN_SHADOW_ROOTS)

    def guard(route):
        url = urllib.parse.urlsplit(route.request.url)
        if url.scheme in ("http", "https", "ws", "wss") and url.netloc != local:
            problems.append(f"request to another host: {route.request.url}")
            route.abort()
        else:
            route.continue_()

    context.route("**/*", guard)
    page = context.new_page()
    page.on("pageerror", lambda error: problems.append(f"page error: {error}"))
    page.on("console", lambda message: message.type == "error" and problems.append(f"console error: {message.text}"))
    page.on("requestfailed", lambda request: urllib.parse.urlsplit(request.url).netloc == local
            and problems.append(f"failed request: {request.url} ({request.failure})"))
    page.on("response", lambda response: response.status >= 400
            and problems.append(f"HTTP {response.status}: {response.url}"))

    try:
        page.goto(server + path, wait_until="load")
        html_file = site / path.lstrip("/") / "index.html"
        expected = html_file.read_text(encoding="utf-8").count('class="mermaid"')
        if expected:
            try:
                page.wait_for_function(
                    "n => document.querySelectorAll('pre.mermaid').length === 0"
                    " && document.querySelectorAll('div.mermaid').length >= n",
                    arg=expected, timeout=RENDER_TIMEOUT_MS,
                )
            except Exception:
                pass  # reported below, diagram by diagram
        page.wait_for_load_state("networkidle")
        diagrams = page.evaluate(INSPECT_DIAGRAMS)
        ok = [d for d in diagrams if d["state"] == "ok"]
        for index, diagram in enumerate(diagrams, 1):
            if diagram["state"] != "ok":
                problems.append(f"mermaid diagram {index}: {diagram['state']}: {diagram['text']!r}")
        if len(ok) != expected:
            problems.append(f"expected {expected} mermaid diagrams rendered to SVG, found {len(ok)}")
        if inspect:  # before the overflow check opens <details>
            seen["height"] = page.evaluate("document.documentElement.scrollHeight")
        if inspect and path in ARTICLE_PATHS:
            seen["reading"] = page.evaluate(INSPECT_READING)
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        # JPEG: 2.6 s against a PNG's 3.8 s for the 55,000-px methods page, and plenty to look at
        page.screenshot(path=str(SCREENSHOTS / _screenshot_name(path, scheme)), full_page=True,
                        type="jpeg", quality=80)
        if inspect:
            seen["overflow"] = page.evaluate(INSPECT_OVERFLOW, False)
    finally:
        context.close()
    return seen


@pytest.fixture(scope="session")
def light_desktop_visits(browser, server, built_site) -> dict[str, dict]:
    """Each page visited once, light, at 1280x800: the render check, the screenshot, the
    desktop column check and the articles' reading check all read this one visit."""
    return {path: _check_page(browser, server, path, "light", built_site, inspect=True)
            for path in site_pages(built_site)}


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_pages_render_offline(request, browser, server, built_site, scheme):
    if scheme == "light":
        visits = request.getfixturevalue("light_desktop_visits")
    else:
        visits = {path: _check_page(browser, server, path, scheme, built_site) for path in site_pages(built_site)}
    report = []
    for path, seen in visits.items():
        report += [f"{path} ({scheme}): {problem}" for problem in seen["problems"]]
    if report:
        pytest.fail("browser check failed:\n  " + "\n  ".join(report), pytrace=False)


def _wait_for_diagrams(page, site: pathlib.Path, path: str) -> None:
    expected = (site / path.lstrip("/") / "index.html").read_text(encoding="utf-8").count('class="mermaid"')
    if expected:
        page.wait_for_function(
            "n => document.querySelectorAll('pre.mermaid').length === 0"
            " && document.querySelectorAll('div.mermaid').length >= n",
            arg=expected, timeout=RENDER_TIMEOUT_MS,
        )
    page.wait_for_load_state("networkidle")


def overflow_problems(browser, server: str, site: pathlib.Path, viewport: str) -> list[str]:
    """Everything wider than the content column, page by page, at one viewport (light scheme).
    The desktop viewport's report comes from ``light_desktop_visits``; this is the phone's."""
    context = browser.new_context(color_scheme="light", viewport=VIEWPORTS[viewport], service_workers="block")
    context.add_init_script(OPEN_SHADOW_ROOTS)
    report = []
    try:
        for path in site_pages(site):
            page = context.new_page()
            page.goto(server + path, wait_until="load")
            _wait_for_diagrams(page, site, path)
            for item in page.evaluate(INSPECT_OVERFLOW, viewport == "phone"):
                report.append(f"{path} ({viewport}) {item['kind']}: {item['what']}: {item['text']!r}")
            page.close()
    finally:
        context.close()
    return report


@pytest.mark.parametrize("viewport", list(VIEWPORTS))
def test_nothing_wider_than_the_column(request, browser, server, built_site, viewport):
    if viewport == "desktop":
        visits = request.getfixturevalue("light_desktop_visits")
        report = [f"{path} (desktop) {item['kind']}: {item['what']}: {item['text']!r}"
                  for path, seen in visits.items() for item in seen["overflow"]]
    else:
        report = overflow_problems(browser, server, built_site, viewport)
    if report:
        pytest.fail(f"{len(report)} element(s) do not fit the content column:\n  " + "\n  ".join(report),
                    pytrace=False)


def test_articles_read_at_desktop_width(light_desktop_visits, built_site):
    """Height, plot text and diagram size of each article at 1280 px (printed, then checked)."""
    problems, lines = [], []
    for path in ARTICLE_PATHS:
        assert path in light_desktop_visits, f"{path} is not a page of the built site"
        found, line = reading_problems(light_desktop_visits[path]["reading"], path, built_site)
        problems += found
        lines.append(line)
    print("\n" + "\n".join(lines))
    if problems:
        pytest.fail(f"{len(problems)} reading problem(s) at 1280 px:\n  " + "\n  ".join(problems), pytrace=False)


def test_every_page_fits_the_height_limit(light_desktop_visits):
    """Every page of the site, as a reader opens it at 1280 px (folded blocks closed): at most
    ``MAX_PAGE_HEIGHT_PX`` tall. The heights are printed."""
    heights = {path: seen["height"] for path, seen in light_desktop_visits.items()}
    print("\n" + "\n".join(f"{path}: {h} px at 1280 px" for path, h in sorted(heights.items())))
    tall = {path: h for path, h in heights.items() if h > MAX_PAGE_HEIGHT_PX}
    assert not tall, f"pages taller than {MAX_PAGE_HEIGHT_PX} px at 1280 px: {tall}"


def test_plot_text_sizes_are_read_from_the_svg():
    svg = ('<svg width="200pt" viewBox="0 0 200 100">\n <g id="text_1">\n  <!-- 本站实现 -->\n'
           '  <g style="fill: #777" transform="translate(1 2) rotate(-90) scale(0.08 -0.08)">\n'
           '<g id="text_2">\n <!-- a &amp; b -->\n <g transform="translate(3 4) scale(0.1 -0.1)">')
    assert svg_text_sizes(svg) == (200.0, [("本站实现", 8.0), ("a & b", 10.0)])


def test_chinese_search_finds_pages(browser, server):
    context = browser.new_context(service_workers="block")
    page = context.new_page()
    try:
        page.goto(server + "/", wait_until="networkidle")
        page.locator("input.md-search__input").click()
        page.keyboard.type("覆盖率")
        # CJK text arrives as one insertText without key events, but Material reads the
        # query on "keyup": send one key that does not change the text.
        page.keyboard.press("End")
        results = page.locator(".md-search-result__item")
        results.first.wait_for(timeout=RENDER_TIMEOUT_MS)
        assert "how-we-test" in results.first.locator("a").first.get_attribute("href")
    finally:
        context.close()


def test_screenshots_folder_is_ignored_by_git():
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("not a git checkout")
    result = subprocess.run(["git", "check-ignore", "-q", "artifacts/screenshots/x.jpg"], cwd=ROOT)
    assert result.returncode == 0, "artifacts/ must be in .gitignore"
