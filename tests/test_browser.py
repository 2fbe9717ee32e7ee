"""Open every page of the built site in headless Chromium, offline.

Fails on: a JavaScript error, a mermaid diagram that is not an SVG (or is mermaid's
error picture), and any request to a host other than the local test server.
Screenshots of every page, light and dark, go to artifacts/screenshots/.

Uses Debian's /usr/bin/chromium through Python playwright (no browser download).
The site is built fresh (``mkdocs build --strict``) into a temporary folder.
"""
from __future__ import annotations

import functools
import http.server
import os
import pathlib
import shutil
import subprocess
import sys
import threading
import urllib.parse

import pytest

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


def _chromium_or_skip():
    if pathlib.Path(CHROMIUM).exists():
        return CHROMIUM
    message = f"{CHROMIUM} not found: install Debian's chromium (apt-get install -y chromium)"
    if os.environ.get("CI"):
        pytest.fail(message, pytrace=False)
    pytest.skip(message)


@pytest.fixture(scope="session")
def built_site(tmp_path_factory) -> pathlib.Path:
    """A fresh strict build of the site (the same command as the README)."""
    site = tmp_path_factory.mktemp("site")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-25:])
        pytest.fail(f"mkdocs build --strict failed (last lines):\n{tail}", pytrace=False)
    return site


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
    return f"{stem}-{scheme}.png"


def _check_page(browser, server: str, path: str, scheme: str, site: pathlib.Path) -> list[str]:
    """Open one page; return the list of problems (empty when the page is clean)."""
    problems: list[str] = []
    local = urllib.parse.urlsplit(server).netloc
    context = browser.new_context(color_scheme=scheme, viewport={"width": 1280, "height": 900},
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
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        page.screenshot(path=str(SCREENSHOTS / _screenshot_name(path, scheme)), full_page=True)
    finally:
        context.close()
    return problems


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_pages_render_offline(browser, server, built_site, scheme):
    report = []
    for path in site_pages(built_site):
        problems = _check_page(browser, server, path, scheme, built_site)
        report += [f"{path} ({scheme}): {problem}" for problem in problems]
    if report:
        pytest.fail("browser check failed:\n  " + "\n  ".join(report), pytrace=False)


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
    result = subprocess.run(["git", "check-ignore", "-q", "artifacts/screenshots/x.png"], cwd=ROOT)
    assert result.returncode == 0, "artifacts/ must be in .gitignore"
