"""Read the docs the way MkDocs does: shared by the docs tests.

* :func:`snippets_config` takes the ``pymdownx.snippets`` settings from mkdocs.yml
  through MkDocs' own config loader (which understands the ``!!python/name:`` tags),
  so the tests expand pages with exactly the configuration of the site build.
* :func:`expand` runs the pymdownx.snippets preprocessor on one page.
* :func:`fences` finds fenced code blocks the way pytest-codeblocks does
  (backtick fences, nesting by fence length), keeping the full info string.
* :func:`built_site` builds the site once per test process (``mkdocs build --strict``)
  for every test that reads the HTML (browser check, hooks).
* :func:`normalise_python_fences` rewrites ```` ```python title="x" ```` to
  ```` ```python ```` because pytest-codeblocks only collects the exact info string.
"""
from __future__ import annotations

import atexit
import dataclasses
import functools
import importlib.util
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MKDOCS_YML = ROOT / "mkdocs.yml"

# Info strings that mean python to a reader. Only the exact word `python` is allowed
# (pytest-codeblocks collects nothing else); the others are reported as errors.
PYTHON_ALIASES = {"python", "py", "py3", "python3", "pycon", "ipython", "pyi"}
FENCE_OPEN = re.compile(r"^(?P<indent>[ \t]*)(?P<ticks>`{3,})[ \t]*(?P<info>[^`\n]*)$")
INCLUDE_LINE = re.compile(r"""^\s*-{1,}8<-{1,}(\s+("[^"\n]+"|'[^'\n]+'))?\s*$""")
INCLUDE_TARGET = re.compile(r"""-{1,}8<-{1,}\s+["']([^"'\n]+)["']""")


@functools.lru_cache(maxsize=1)
def mkdocs_config():
    """The validated MkDocs config of the site (same loader as ``mkdocs build``)."""
    from mkdocs.config import load_config

    cwd = os.getcwd()
    os.chdir(ROOT)  # mkdocs resolves relative paths (and pymdownx its base_path) from the cwd
    try:
        return load_config(str(MKDOCS_YML))
    finally:
        os.chdir(cwd)


def snippets_config() -> dict:
    """The ``pymdownx.snippets`` options as MkDocs hands them to Markdown, paths made absolute."""
    config = dict(mkdocs_config()["mdx_configs"].get("pymdownx.snippets", {}))
    base = config.get("base_path", ["."])
    base = [base] if isinstance(base, (str, os.PathLike)) else list(base)
    config["base_path"] = [str((ROOT / b).resolve()) for b in base]
    return config


def doc_pages() -> list[pathlib.Path]:
    """Every markdown file under docs/ that MkDocs turns into a page (exclude_docs honoured)."""
    exclude = mkdocs_config()["exclude_docs"]
    pages = []
    for path in sorted(DOCS.rglob("*.md")):
        rel = path.relative_to(DOCS).as_posix()
        if exclude is not None and exclude.match_file(rel):
            continue
        pages.append(path)
    return pages


def expand(text: str, lenient: bool = False) -> str:
    """Expand every ``--8<--`` include like the site build does (raises on a missing file/section).

    ``lenient=True`` drops missing includes instead of raising, so that the rest of a page
    can still be checked while one include is missing (the strict expansion still fails).
    """
    import markdown

    config = snippets_config()
    if lenient:
        config["check_paths"] = False
    md = markdown.Markdown(extensions=["pymdownx.snippets"], extension_configs={"pymdownx.snippets": config})
    expanded = "\n".join(md.preprocessors["snippet"].run(text.split("\n")))
    return _values_hook().substitute(expanded, _values_hook().load())  # as docs/hooks/values.py does


@functools.lru_cache(maxsize=1)
def _values_hook():
    spec = importlib.util.spec_from_file_location("values_hook", DOCS / "hooks" / "values.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def reader_text(name: str) -> str:
    """A page of docs/ as the reader reads it: includes expanded, values put in, ``**`` dropped, whitespace folded."""
    text = expand((DOCS / name).read_text(encoding="utf-8"))
    return re.sub(r"\s+", " ", text.replace("**", ""))


def sentence(page: str, start: str, end: str = "。") -> str:
    """The one sentence of ``page`` (reader_text) that begins with ``start``, up to its ``end``."""
    assert page.count(start) == 1, f"{start!r} should begin exactly one sentence of the page"
    at = page.index(start)
    return page[at:page.index(end, at) + 1]


def values(report: str) -> dict:
    """The named values of one report, as the pages' {{ report.NAME }} read them."""
    return _values_hook().load()[report]


@dataclasses.dataclass
class Fence:
    lineno: int          # 1-based line of the opening fence
    indent: str
    ticks: str
    info: str            # full info string, e.g. 'python title="snippets/x.py"'
    body: list[str]      # lines between the fences

    @property
    def language(self) -> str:
        info = self.info.strip()
        if info.startswith("{"):  # {.python title="x"}
            match = re.match(r"\{\s*\.?([\w+-]+)", info)
            return match.group(1).lower() if match else ""
        return info.split()[0].lower() if info else ""

    @property
    def title(self) -> str | None:
        match = re.search(r"""title=(["'])(.*?)\1""", self.info)
        return match.group(2) if match else None

    @property
    def includes(self) -> list[str]:
        return [m.group(1) for line in self.body for m in [INCLUDE_TARGET.search(line)] if m]


def fences(text: str) -> list[Fence]:
    """Top-level fenced blocks in order (a fence closes on a line starting with as many backticks)."""
    out: list[Fence] = []
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        match = FENCE_OPEN.match(lines[i])
        if not match:
            i += 1
            continue
        ticks = match.group("ticks")
        body = []
        j = i + 1
        while j < len(lines) and not lines[j].lstrip().startswith(ticks):
            body.append(lines[j])
            j += 1
        out.append(Fence(i + 1, match.group("indent"), ticks, match.group("info").strip(), body))
        i = j + 1
    return out


def normalise_python_fences(text: str) -> tuple[str, dict[int, Fence]]:
    """Make every top-level ```` ```python <attrs> ```` fence exactly ```` ```python ````.

    Returns the new text and {line of the fence: Fence} for the python fences,
    so a test can name a block by its caption.
    """
    lines = text.split("\n")
    found = {}
    for fence in fences(text):
        if fence.language == "python":
            lines[fence.lineno - 1] = f"{fence.indent}{fence.ticks}python"
            found[fence.lineno] = fence
    return "\n".join(lines), found


TEST_REPO_URL = "https://github.com/example/qwen3-triton-docs"  # a GitHub address, never fetched


class BuildFailed(RuntimeError):
    pass


@functools.lru_cache(maxsize=1)
def built_site() -> pathlib.Path:
    """A fresh strict build of the site in a temporary folder, once per process (removed at exit).

    Raises :class:`BuildFailed` with the last lines of the build output.
    """
    site = pathlib.Path(tempfile.mkdtemp(prefix="site-"))
    atexit.register(shutil.rmtree, site, ignore_errors=True)
    # Built with a GitHub repository link, as the published site is, so that the browser check
    # sees any request the theme's repository widget would make.
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1", "REPO_URL": os.environ.get("REPO_URL", TEST_REPO_URL)}
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet", "--site-dir", str(site)],
        cwd=ROOT, capture_output=True, text=True, env=env,
    )
    if result.returncode != 0:
        tail = "\n".join((result.stdout + result.stderr).strip().splitlines()[-25:])
        raise BuildFailed(f"mkdocs build --strict failed (last lines):\n{tail}")
    return site


def limit_line(path, count_page, limits: dict, what: str) -> str:
    """A page counter's report line, 'docs/x.md: N <what> (limit L)': the page by its path from the
    repository root (as given when it lies elsewhere), its count, and its limit in ``limits``."""
    path = pathlib.Path(path)
    try:
        key = path.resolve().relative_to(ROOT).as_posix()
    except ValueError:
        key = path.as_posix()
    limit = limits.get(key)
    return f"{key}: {count_page(path)} {what} ({f'limit {limit}' if limit else 'no limit'})"


def counter_main(argv: list[str], usage: str, report) -> int:
    """A page counter's command line: ``report(page)`` printed for each page named, else the usage (exit 2)."""
    if not argv:
        print(usage.strip(), file=sys.stderr)
        return 2
    for name in argv:
        print(report(name))
    return 0
