"""docs/triton-rmsnorm.md: checks specific to 篇2 that the generic docs tests do not make."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "triton-rmsnorm.md"
LINE_RANGE_INCLUDE = re.compile(r'--8<--\s+"(?P<path>[^":]+):(?P<start>\d+):(?P<end>\d+)"')


def test_line_range_includes_show_only_imports():
    """A few blocks include a file's import lines by line number: they must not drift onto code."""
    found = 0
    for match in LINE_RANGE_INCLUDE.finditer(PAGE.read_text(encoding="utf-8")):
        lines = (ROOT / match["path"]).read_text(encoding="utf-8").splitlines()
        selected = lines[int(match["start"]) - 1:int(match["end"])]
        assert selected, match.group(0)
        for line in selected:
            assert line == "" or re.match(r"(import|from) \w", line), f"{match.group(0)} now covers: {line!r}"
        assert re.match(r"(import|from) ", selected[0]) and re.match(r"(import|from) ", selected[-1])
        found += 1
    assert found >= 4


def test_no_seed_figures_survive():
    """The draft's wrong count and impossible timings must not come back."""
    text = PAGE.read_text(encoding="utf-8")
    body = text.split("## 附：与初稿相比改了什么")[0]  # the closing note quotes the draft on purpose
    for phrase in ("73 个", "612 ms", "592 ms", "577 ms", "505 ms", "448 ms", "420 μs", "180 μs"):
        assert phrase not in body, phrase
