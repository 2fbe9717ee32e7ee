"""docs/triton-rmsnorm.md: checks specific to 篇2 that the generic docs tests do not make."""
import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parents[1]
PAGE = ROOT / "docs" / "triton-rmsnorm.md"
LINE_RANGE_INCLUDE = re.compile(r'--8<--\s+"(?P<path>[^":]+):(?P<start>\d+):(?P<end>\d+)"')
IMPORT = re.compile(r"(import|from) \w")


def import_block(lines):
    """(first, last) 1-based line numbers of a module's top-level import block."""
    first = next(i for i, line in enumerate(lines) if IMPORT.match(line))
    last = first
    for i in range(first, len(lines)):
        if IMPORT.match(lines[i]):
            last = i
        elif lines[i].strip():
            break
    return first + 1, last + 1


def test_line_range_includes_are_exactly_the_import_block():
    """Blocks that show a file's imports include them by line number: the range must not drift.

    If this fails, the file's imports moved: update the range on the page to the one in the message.
    """
    found = 0
    for match in LINE_RANGE_INCLUDE.finditer(PAGE.read_text(encoding="utf-8")):
        lines = (ROOT / match["path"]).read_text(encoding="utf-8").splitlines()
        expected = import_block(lines)
        actual = (int(match["start"]), int(match["end"]))
        assert actual == expected, f'{match.group(0)}: use "{match["path"]}:{expected[0]}:{expected[1]}"'
        found += 1
    assert found >= 4


def test_no_seed_figures_survive():
    """The draft's wrong count and impossible timings must not come back."""
    text = PAGE.read_text(encoding="utf-8")
    body = text.split("## 附：与初稿相比改了什么")[0]  # the closing note quotes the draft on purpose
    for phrase in ("73 个", "612 ms", "592 ms", "577 ms", "505 ms", "448 ms", "420 μs", "180 μs"):
        assert phrase not in body, phrase
