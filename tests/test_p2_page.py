"""docs/triton-rmsnorm.md: checks specific to 篇2 that the generic docs tests do not make."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "triton-rmsnorm.md"
LINE_RANGE_INCLUDE = re.compile(r'--8<--\s+"(?P<path>[^":]+):(?P<start>\d+):(?P<end>\d+)"')
IMPORT = re.compile(r"(import|from) \w")
SECTION_MARKER = re.compile(r"^\s*#\s*-+8<-+\s*\[(start|end):")


def test_line_range_includes_hold_only_imports():
    """Files show their imports through a named `imports` section; a line range left on the
    page must still select import lines only (section markers are dropped by pymdownx), so
    that it cannot drift into code when the file changes.
    """
    for match in LINE_RANGE_INCLUDE.finditer(PAGE.read_text(encoding="utf-8")):
        lines = (ROOT / match["path"]).read_text(encoding="utf-8").splitlines()
        selected = lines[int(match["start"]) - 1:int(match["end"])]
        code = [line for line in selected if line.strip() and not SECTION_MARKER.match(line)]
        assert code and all(IMPORT.match(line) for line in code), f"{match.group(0)} selects {selected}"


def test_no_seed_figures_survive():
    """The draft's wrong count and impossible timings must not come back."""
    text = PAGE.read_text(encoding="utf-8")
    body = text.split("## 附：与初稿相比改了什么")[0]  # the closing note quotes the draft on purpose
    for phrase in ("73 个", "612 ms", "592 ms", "577 ms", "505 ms", "448 ms", "420 μs", "180 μs"):
        assert phrase not in body, phrase
