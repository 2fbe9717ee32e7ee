"""Every figure in docs/ comes from measured data.

(a) Generated artifacts. ``bench.render.render_all()`` turns each data file
    ``docs/data/h200/<NAME>.json`` into tables and plots; every one of them must be
    committed under ``docs/generated/`` byte for byte (a hand edit fails), and
    nothing else may sit there unless another generator owns it (``OTHER_GENERATORS``:
    file name -> the test that regenerates and compares it).

(b) Every data file records its environment (gpu, driver, cuda, torch, triton,
    transformers, git_commit, date, command), a config and results; data under
    ``docs/data/h200/`` was measured on an H200 and is not a ``--quick`` run.

With no data committed yet, (a) and (b) check nothing for missing data; the
comparison logic is still exercised on fixtures below. The number rule for pages is in
tests/tools/docs_numbers.py.
"""
from __future__ import annotations

import json
import pathlib
import re

import pytest

import bench
from artifacts import UNIT_LABEL
from bench import store
from bench.report import plots, tables
from bench.report.render import GENERATED_DIR, render_all

ROOT = bench.ROOT
DOCS = ROOT / "docs"
GENERATED = GENERATED_DIR
FIXTURES = pathlib.Path(__file__).parent / "fixtures"

# Files under docs/generated/ written by something other than bench.render, and the test that checks each.
OTHER_GENERATORS = {
    "graph_break_explain.txt": "tests/test_graph_break_demo.py",
    "p1_torchinfo.txt": "tests/test_p1_static_read.py",
}

REQUIRED_ENV = ("gpu", "driver", "cuda", "torch", "triton", "transformers", "git_commit", "date", "command")


# ---------------------------------------------------------------- (a) generated artifacts

def compare_generated(expected: dict[pathlib.Path, str], folder: pathlib.Path, other: dict[str, str]):
    """(missing, stale, orphans) of ``folder`` against the expected {path: text}."""
    missing = sorted(str(p) for p in expected if not p.exists())
    stale = sorted(str(p) for p, text in expected.items() if p.exists() and p.read_text(encoding="utf-8") != text)
    present = {p for p in folder.rglob("*") if p.is_file()} if folder.exists() else set()
    orphans = sorted(str(p) for p in present
                     if p not in expected and str(p.relative_to(folder)) not in other)
    return missing, stale, orphans


def test_committed_artifacts_match_the_data():
    missing, stale, orphans = compare_generated(render_all(), GENERATED, OTHER_GENERATORS)
    hint = "run `python -m bench.render` and commit docs/generated/ (never edit it by hand)"
    assert not missing, f"missing generated artifacts ({hint}): {missing}"
    assert not stale, f"generated artifacts differ from what the data renders to ({hint}): {stale}"
    assert not orphans, f"files in docs/generated/ that no data renders and no generator owns: {orphans}"


def test_other_generators_are_tested():
    for name, test in OTHER_GENERATORS.items():
        source = (ROOT / test).read_text(encoding="utf-8")
        assert name in source, f"{test} must regenerate and compare docs/generated/{name}"


def test_compare_generated_finds_every_kind_of_drift(tmp_path):
    good, edited, absent, owned = (tmp_path / n for n in ("good.md", "edited.md", "absent.svg", "owned.txt"))
    good.write_text("| a |\n", encoding="utf-8")
    edited.write_text("| 1.0 ms |\n", encoding="utf-8")  # hand edit of a generated table
    owned.write_text("x", encoding="utf-8")
    (tmp_path / "old_plot.svg").write_text("<svg/>", encoding="utf-8")  # no longer rendered
    expected = {good: "| a |\n", edited: "| 2.0 ms |\n", absent: "<svg/>"}
    missing, stale, orphans = compare_generated(expected, tmp_path, {"owned.txt": "t"})
    assert missing == [str(absent)]
    assert stale == [str(edited)]
    assert orphans == [str(tmp_path / "old_plot.svg")]
    assert compare_generated({good: "| a |\n"}, tmp_path, {"owned.txt": "", "edited.md": "", "old_plot.svg": ""}) \
        == ([], [], [])




def test_plots_are_chinese_glyph_paths_of_the_pinned_font():
    """Every committed plot draws its text as outlines of the pinned Noto Sans SC (it renders the same with no
    font installed), keeps each string in an XML comment, labels an axis with its unit, speaks Chinese, and uses
    no character the font lacks (matplotlib would take that glyph from another font)."""
    from matplotlib import ft2font

    charmap = ft2font.FT2Font(str(plots.cjk_font_path())).get_charmap()
    svgs = sorted(GENERATED.glob("*.svg"))
    assert svgs
    for path in svgs:
        svg = path.read_text(encoding="utf-8")
        assert "<text" not in svg and "font-family" not in svg, f"{path.name}: text must be glyph paths"
        assert 'id="NotoSansSC-Regular-' in svg and "DejaVu" not in svg, f"{path.name}: glyphs of another font"
        texts = plots.svg_texts(svg)
        assert any(UNIT_LABEL.search(t) for t in texts), f"{path.name}: no axis label with its unit"
        assert any(re.search(r"[\u4e00-\u9fff]", t) for t in texts), f"{path.name}: no Chinese text"
        missing = sorted({c for t in texts for c in t if not c.isspace() and ord(c) not in charmap})
        assert not missing, f"{path.name}: characters missing from {plots.FONT_FILE}: {missing}"


def test_plots_fail_clearly_without_the_font(monkeypatch):
    monkeypatch.setattr(plots, "FONT_MODULE", "no_such_font_package")
    with pytest.raises(RuntimeError, match=plots.FONT_PACKAGE):
        plots.plot_style()


def test_an_installed_copy_of_the_family_cannot_replace_the_pinned_file(monkeypatch):
    """A system font with the same family name (here a stand-in file) is dropped, so findfont sees only the pin."""
    import dataclasses

    from matplotlib import font_manager

    pinned = plots.cjk_font_path()
    manager = font_manager.fontManager
    impostor = dataclasses.replace(font_manager.ttfFontProperty(font_manager.get_font(font_manager.findfont(
        "DejaVu Sans"))), name=font_manager.FontProperties(fname=pinned).get_name())
    monkeypatch.setattr(manager, "ttflist", [impostor] + manager.ttflist)
    plt = plots.plot_style()
    assert pathlib.Path(font_manager.findfont(font_manager.FontProperties(family=plt.rcParams["font.family"]))) \
        == pinned
    assert impostor not in manager.ttflist


def _report_modules():
    from bench.report.render import report_modules

    return {m.NAME: m for m in report_modules()}


@pytest.mark.parametrize("name", ["step", "loss_curve"])
def test_render_is_deterministic_and_labelled(name):
    """Render a committed fixture (a --quick CPU run) twice: same bytes, a table with a Chinese header and no
    environment footer (the page's 实验环境 box has it), labelled axes."""
    module = _report_modules()[name]
    data = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    first, second = module.render(data), module.render(json.loads(json.dumps(data)))
    assert first == second
    commit = str(data["environment"]["git_commit"])[:7]
    for rel, text in first.items():
        if rel.endswith(".md"):
            header = next((line for line in text.splitlines() if line.startswith("|")), None)
            if header is not None:  # a sentence for an article has no table
                assert re.search(r"[\u4e00-\u9fff]", header), f"{rel}: header without Chinese: {header}"
            assert commit not in text and data["environment"]["torch"] not in text, f"{rel}: environment footer"
            assert "GPU:" not in text, f"{rel}: the environment goes in the article's env box, not under a table"
        elif rel.endswith(".svg"):
            assert text.startswith("<?xml") and "</svg>" in text
            assert any(UNIT_LABEL.search(t) for t in plots.svg_texts(text)), f"{rel}: axis units missing"
        else:
            pytest.fail(f"unexpected artifact type {rel}")


def test_no_generated_table_carries_an_environment_footer():
    """Environment and commits live in one box and one provenance table per article, not under tables."""
    artifacts = {path.name: text for path, text in render_all().items()}
    for name, text in artifacts.items():
        if name.endswith(".md") and not name.endswith("_provenance.md"):
            assert not re.search(r"commit `[0-9a-f]{7}", text) and "GPU: " not in text, name
    if "p1_env.md" in artifacts:  # the 篇1 environment box and provenance table render from the data
        assert artifacts["p1_env.md"].startswith('!!! info "实验环境"')
        assert artifacts["p1_provenance.md"].startswith("| 数据文件 | 提交 | 测量日期 |")


def test_env_box_and_provenance_table_build_from_environment_blocks():
    data = json.loads((FIXTURES / "step.json").read_text(encoding="utf-8"))
    env = data["environment"]
    box = tables.env_box([env], extra_keys=("liger_kernel",))
    assert box.startswith('!!! info "实验环境"\n\n    GPU：')
    assert f" · transformers：{env['transformers']} · " in box and box.endswith(f" · 测量日期：{env['date'][:10]}\n")
    table = tables.provenance_table({"step.json": data})
    assert f"| `step.json` | `{env['git_commit'][:7]}` | {env['date'][:10]} |" in table


# ---------------------------------------------------------------- (b) data files

def _data_files():
    """Every record under docs/data/: not logs.json (the log index), not corrections.json (fields set right
    beside the records, bench/store.py) and not docs/data/claims/ (the claims ledgers, tests/test_claims.py)."""
    if not (DOCS / "data").exists():
        return []
    return sorted(p for p in (DOCS / "data").rglob("*.json")
                  if p.name not in (store.LOGS_FILE, store.CORRECTIONS_FILE)
                  and "claims" not in p.relative_to(DOCS / "data").parts)


def check_record(record: dict, gpu_folder: str) -> list[str]:
    problems = []
    env = record.get("environment")
    if not isinstance(env, dict):
        return ["no environment block"]
    for key in REQUIRED_ENV:
        if not env.get(key):
            problems.append(f"environment.{key} is missing or empty")
    for key in ("config", "results"):
        if not record.get(key):
            problems.append(f"no {key}")
    if gpu_folder == "h200":
        if "H200" not in str(env.get("gpu")):
            problems.append(f"data under h200/ measured on {env.get('gpu')!r}")
        if (record.get("config") or {}).get("quick"):
            problems.append("a --quick smoke run is not data")
    return problems


@pytest.mark.parametrize("path", _data_files(), ids=lambda p: str(p.relative_to(DOCS / "data")))
def test_data_file_records_its_environment(path):
    record = json.loads(path.read_text(encoding="utf-8"))
    problems = check_record(record, path.parent.name)
    assert not problems, f"{path.relative_to(ROOT)}: {problems}"


def test_check_record_rules():
    env = {k: "x" for k in REQUIRED_ENV} | {"gpu": "NVIDIA H200"}
    good = {"environment": env, "config": {"quick": False}, "results": {"a": 1}}
    assert check_record(good, "h200") == []
    assert check_record(good | {"environment": env | {"driver": None}}, "h200") == ["environment.driver is missing or empty"]
    assert check_record(good | {"config": {"quick": True}}, "h200") == ["a --quick smoke run is not data"]
    assert check_record(good | {"environment": env | {"gpu": None}}, "h200")
    assert check_record(good | {"results": {}}, "h200") == ["no results"]
    assert check_record({"config": {}, "results": {}}, "h200") == ["no environment block"]
    cpu_env = env | {"gpu": "NVIDIA H100"}
    assert check_record(good | {"environment": cpu_env}, "h100") == []


def test_fixtures_pass_the_data_checks():
    """The render fixtures are quick CPU runs: complete records, but they would be refused as H200 data."""
    for path in sorted(FIXTURES.glob("*.json")):
        record = json.loads(path.read_text(encoding="utf-8"))
        assert record["config"]["quick"] is True
        problems = check_record(record, "h200")
        assert "a --quick smoke run is not data" in problems, path
