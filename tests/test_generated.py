"""Every figure in docs/ comes from measured data.

(a) Generated artifacts. ``bench.render.render_all()`` turns each data file
    ``docs/data/h200/<NAME>.json`` into tables and plots; every one of them must be
    committed under ``docs/generated/`` byte for byte (a hand edit fails), and
    nothing else may sit there unless another generator owns it (``OTHER_GENERATORS``:
    file name -> the test that regenerates and compares it).

(b) The number rule. A benchmark-like number is a number followed by a unit of
    time, size, bandwidth, throughput, ratio or share: ns, µs/us, ms, s, min, 秒,
    毫秒, 微秒, 纳秒, 分钟, KB…TB, KiB…TiB, MB/s…TB/s, GiB/s, FLOP/s with a
    prefix, TFLOPS, tokens/s, it/s, %, ％, 百分点, ×/x and 倍 (a × or x followed
    by another number, as in ``4096×128`` or ``36×4``, is a shape or a product
    and does not count). In a hand-written table, a cell that starts with a
    number also counts when its column header names a unit or a measured
    quantity (ms, GB/s, %, speed-up, time, 耗时, 带宽, ...).

    No such number may be typed into an article (``docs/**/*.md`` outside
    ``docs/generated/``): tables and figures come in through
    ``--8<-- "docs/generated/..."`` includes and image links. Not scanned: include
    lines, code fences in a programming or config language (python, sh, bash,
    yaml, json, ...; text, console output and mermaid fences ARE scanned), HTML
    comments, YAML front matter.

    A number that is not a measurement of this project (a vendor's datasheet
    figure, a gate threshold, a peer's published claim) is allowed when the
    author says so with a marker that carries a reason:
    ``<!-- number-ok: reason -->``. At the end of a line, it covers that line;
    on a line of its own, it covers the next block (the lines up to the next
    blank line, e.g. a whole paragraph or table).

(c) Every data file records its environment (gpu, driver, cuda, torch, triton,
    transformers, git_commit, date, command), a config and results; data under
    ``docs/data/h200/`` was measured on an H200 and is not a ``--quick`` run.

With no data committed yet, (a) and (c) check nothing for missing data; the rule
and the comparison logic are still exercised on fixtures below.
"""
from __future__ import annotations

import json
import pathlib
import re

import pytest

from bench import common
from bench.render import render_all

ROOT = common.ROOT
DOCS = ROOT / "docs"
GENERATED = common.GENERATED_DIR
FIXTURES = pathlib.Path(__file__).parent / "fixtures"

# Files under docs/generated/ written by something other than bench.render, and the test that checks each.
OTHER_GENERATORS = {
    "graph_break_explain.txt": "tests/test_p2_graph_break.py",
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


# An axis label names its unit in full-width parentheses: "step 时间（ms）", "有效带宽（占拷贝上限 %）".
UNIT_LABEL = re.compile(r"（[^）]*(ms|µs|%|GB/s|TFLOP/s|FLOP/字节|nats/字节)[^）]*）")


def test_plots_are_chinese_glyph_paths_of_the_pinned_font():
    """Every committed plot draws its text as outlines of the pinned Noto Sans SC (it renders the same with no
    font installed), keeps each string in an XML comment, labels an axis with its unit, speaks Chinese, and uses
    no character the font lacks (matplotlib would take that glyph from another font)."""
    from matplotlib import ft2font

    charmap = ft2font.FT2Font(str(common.cjk_font_path())).get_charmap()
    plots = sorted(GENERATED.glob("*.svg"))
    assert plots
    for path in plots:
        svg = path.read_text(encoding="utf-8")
        assert "<text" not in svg and "font-family" not in svg, f"{path.name}: text must be glyph paths"
        assert 'id="NotoSansSC-Regular-' in svg and "DejaVu" not in svg, f"{path.name}: glyphs of another font"
        texts = common.svg_texts(svg)
        assert any(UNIT_LABEL.search(t) for t in texts), f"{path.name}: no axis label with its unit"
        assert any(re.search(r"[\u4e00-\u9fff]", t) for t in texts), f"{path.name}: no Chinese text"
        missing = sorted({c for t in texts for c in t if not c.isspace() and ord(c) not in charmap})
        assert not missing, f"{path.name}: characters missing from {common.FONT_FILE}: {missing}"


def test_plots_fail_clearly_without_the_font(monkeypatch):
    monkeypatch.setattr(common, "FONT_MODULE", "no_such_font_package")
    with pytest.raises(RuntimeError, match=common.FONT_PACKAGE):
        common.plot_style()


def test_an_installed_copy_of_the_family_cannot_replace_the_pinned_file(monkeypatch):
    """A system font with the same family name (here a stand-in file) is dropped, so findfont sees only the pin."""
    import dataclasses

    from matplotlib import font_manager

    pinned = common.cjk_font_path()
    manager = font_manager.fontManager
    impostor = dataclasses.replace(font_manager.ttfFontProperty(font_manager.get_font(font_manager.findfont(
        "DejaVu Sans"))), name=font_manager.FontProperties(fname=pinned).get_name())
    monkeypatch.setattr(manager, "ttflist", [impostor] + manager.ttflist)
    plt = common.plot_style()
    assert pathlib.Path(font_manager.findfont(font_manager.FontProperties(family=plt.rcParams["font.family"]))) \
        == pinned
    assert impostor not in manager.ttflist


def _experiment_modules():
    from bench.render import experiment_modules

    return {m.NAME: m for m in experiment_modules()}


@pytest.mark.parametrize("name", ["step", "loss_curve"])
def test_render_is_deterministic_and_labelled(name):
    """Render a committed fixture (a --quick CPU run) twice: same bytes, a table with a Chinese header and no
    environment footer (the page's 实验环境 box has it), labelled axes."""
    module = _experiment_modules()[name]
    data = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    first, second = module.render(data), module.render(json.loads(json.dumps(data)))
    assert first == second
    commit = str(data["environment"]["git_commit"])[:7]
    for rel, text in first.items():
        if rel.endswith(".md"):
            header = next(line for line in text.splitlines() if line.startswith("|"))
            assert re.search(r"[\u4e00-\u9fff]", header), f"{rel}: header without Chinese: {header}"
            assert commit not in text and data["environment"]["torch"] not in text, f"{rel}: environment footer"
            assert "GPU:" not in text, f"{rel}: the environment goes in the article's env box, not under a table"
        elif rel.endswith(".svg"):
            assert text.startswith("<?xml") and "</svg>" in text
            assert any(UNIT_LABEL.search(t) for t in common.svg_texts(text)), f"{rel}: axis units missing"
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
        assert artifacts["p1_provenance.md"].startswith("| 数据文件 | 提交 | 测量日期 | 重新生成的命令 |")


def test_env_box_and_provenance_table_build_from_environment_blocks():
    data = json.loads((FIXTURES / "step.json").read_text(encoding="utf-8"))
    env = data["environment"]
    box = common.env_box([env], extra_keys=("liger_kernel",))
    assert box.startswith('!!! info "实验环境"\n\n    GPU：')
    assert f" · transformers：{env['transformers']} · " in box and box.endswith(f" · 测量日期：{env['date'][:10]}\n")
    table = common.provenance_table({"step.json": data})
    assert f"| `step.json` | `{env['git_commit'][:7]}` | {env['date'][:10]} | `{env['command']}` |" in table


# ---------------------------------------------------------------- (b) the number rule

_NUM = r"(?<![A-Za-z0-9_.])\d+(?:,\d{3})*(?:\.\d+)?(?:[eE][-+]?\d+)?"
_UNITS = (
    r"[nµμu]s|ms|s|min|秒|毫秒|微秒|纳秒|分钟"
    r"|[KMGTP]i?B(?:/s)?|[KMGTP]B/s"
    r"|[KMGTP]?FLOP/s|[KMGTP]?FLOPS|tokens?/s|tok/s|it/s|samples?/s"
    r"|%|％|百分点|倍"
)
_VALUE_WITH_UNIT = re.compile(rf"{_NUM}\s*(?:{_UNITS})(?![A-Za-z0-9/])")
_RATIO = re.compile(rf"{_NUM}\s*[×xX](?![A-Za-z0-9])(?!\s*\d)")
_HEADER_UNIT = re.compile(
    r"(?<![A-Za-z])(?:[nµμu]s|ms|s|GB/s|TB/s|GiB|GB|MiB|MB|%|×|倍|FLOP/s|TFLOPS|tokens/s)(?![A-Za-z])"
    r"|speed-?up|time|latency|bandwidth|throughput|memory|耗时|时间|带宽|吞吐|加速|显存|占比",
    re.IGNORECASE,
)
_STARTS_WITH_NUMBER = re.compile(r"^\s*[~≈约<>≤≥]?\s*[-+]?\d")
_MARKER = re.compile(r"<!--\s*number-ok:\s*(.*?)\s*-->")
_CODE_FENCE_LANGS = {"python", "py", "python3", "sh", "bash", "shell", "zsh", "yaml", "yml", "toml", "json",
                     "ini", "cfg", "diff", "c", "cpp", "cuda", "javascript", "js", "css", "html", "make", "dockerfile"}
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})\s*([^\s`{]*)")


def hand_typed_numbers(text: str) -> list[tuple[int, str, str]]:
    """(line number, offending text, line) for every benchmark-like number outside the allowed places."""
    lines = text.splitlines()
    findings = []
    exempt = [False] * len(lines)
    skip = [False] * len(lines)

    # Front matter, fences, comments, includes: mark lines that are not scanned.
    i = 0
    if lines and lines[0].strip() == "---":
        end = next((j for j in range(1, len(lines)) if lines[j].strip() in ("---", "...")), None)
        if end is not None:
            for j in range(end + 1):
                skip[j] = True
            i = end + 1
    fence, fence_is_code, in_include_block = None, False, False
    for j in range(i, len(lines)):
        line = lines[j]
        stripped = line.strip()
        match = _FENCE.match(line)
        if fence is None and match:
            fence = match.group(1)[0] * 3
            fence_is_code = match.group(2).lower() in _CODE_FENCE_LANGS
            skip[j] = True
            continue
        if fence is not None:
            if stripped.startswith(fence) and not stripped.strip("`~"):
                fence = None
                skip[j] = True
            else:
                skip[j] = fence_is_code
            if not fence_is_code and stripped.startswith("--8<--"):
                skip[j] = True
            continue
        if stripped == "--8<--":
            in_include_block = not in_include_block
            skip[j] = True
            continue
        if in_include_block or stripped.startswith("--8<--"):
            skip[j] = True

    # Markers: inline covers the line; alone on a line, it covers the next block.
    for j, line in enumerate(lines):
        if skip[j]:
            continue
        for reason in _MARKER.findall(line):
            if len(reason) < 2:
                findings.append((j + 1, "number-ok marker without a reason", line))
        if not _MARKER.search(line):
            continue
        if _MARKER.sub("", line).strip():
            exempt[j] = True
            continue
        k = j + 1
        while k < len(lines) and not lines[k].strip():
            k += 1
        while k < len(lines) and lines[k].strip():
            exempt[k] = True
            k += 1

    # HTML comments (possibly multi-line) are not text.
    visible = _strip_comments(lines)

    # Tables: a numeric cell under a header that names a unit or a measured quantity.
    j = 0
    while j < len(lines):
        if not skip[j] and _is_row(visible[j]) and j + 1 < len(lines) and _is_separator(visible[j + 1]):
            header = _cells(visible[j])
            unit_columns = {c for c, cell in enumerate(header) if _HEADER_UNIT.search(cell)}
            k = j + 2
            while k < len(lines) and not skip[k] and _is_row(visible[k]):
                if not exempt[k] and not exempt[j]:
                    for c, cell in enumerate(_cells(visible[k])):
                        if c in unit_columns and _STARTS_WITH_NUMBER.match(cell):
                            findings.append((k + 1, f"{cell.strip()} (column '{header[c].strip()}')", lines[k]))
                k += 1
            j = k
        else:
            j += 1

    # Prose, lists, headings, table cells: value + unit anywhere.
    for j, line in enumerate(visible):
        if skip[j] or exempt[j]:
            continue
        for pattern in (_VALUE_WITH_UNIT, _RATIO):
            for match in pattern.finditer(line):
                findings.append((j + 1, match.group(0), lines[j]))
    return sorted(set(findings))


def _strip_comments(lines: list[str]) -> list[str]:
    text = "\n".join(lines)
    text = re.sub(r"<!--.*?-->", lambda m: "\n" * m.group(0).count("\n"), text, flags=re.DOTALL)
    out = text.split("\n")
    return out + [""] * (len(lines) - len(out))


def _is_row(line: str) -> bool:
    return line.strip().startswith("|")


def _is_separator(line: str) -> bool:
    return bool(re.fullmatch(r"\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*", line))


def _cells(line: str) -> list[str]:
    return line.strip().strip("|").split("|")


def _articles():
    return sorted(p for p in DOCS.rglob("*.md") if GENERATED not in p.parents)


@pytest.mark.parametrize("page", _articles(), ids=lambda p: str(p.relative_to(DOCS)))
def test_no_hand_typed_benchmark_numbers(page):
    findings = hand_typed_numbers(page.read_text(encoding="utf-8"))
    report = "\n".join(f"  {page.relative_to(ROOT)}:{n}: {hit!r} in: {line.strip()[:120]}" for n, hit, line in findings)
    assert not findings, (
        "benchmark-like numbers typed into an article; include them from docs/generated/ "
        "(bench/exp_*.py renders them from docs/data/h200/), or mark a non-measured figure with "
        "<!-- number-ok: reason -->:\n" + report)


@pytest.mark.parametrize("text", [
    "HF eager 一步要 484 ms。",
    "前向 69.9 µs，反向 791us",
    "带宽约 3.8 TB/s（90% 的拷贝带宽）",
    "峰值显存 69.7 GiB",
    "Triton 版快 1.3×。",
    "快了 2.1x, 比 eager",
    "加速 1.8 倍",
    "一步 0.45 s",
    "约 12 毫秒",
    "吞吐 35,000 tokens/s",
    "989 TFLOP/s 的 bf16 峰值",
    "- 列表项：占 5.2％",
    "## 结果：快 12%",
    "![快 1.2× 的图](generated/x.svg)",
    "行内代码也算 `484 ms`",
    "| setup | step (ms) |\n|---|---|\n| HF eager | 484 |",
    "| 形状 | 耗时 |\n| :-- | --: |\n| H=4096 | ~862 |",
    "```text\nstep time 484.4 ms\n```",
    "```mermaid\nflowchart LR\n  a[\"HF 484 ms\"] --> b\n```",
    "<!-- number-ok: -->\n数据表 4.8 TB/s",
])
def test_number_rule_flags(text):
    assert hand_typed_numbers(text), text


@pytest.mark.parametrize("text", [
    "Qwen3-8B 有 36 层，每层 4 个 RMSNorm，共 145 个。",
    "形状 16384×4096，q_norm 是 524288 × 128；36×4+1 = 145。",
    "H=4096, head_dim = 128, BLOCK_SIZE=1024, num_warps=8, fp32/bf16, sm_90, H200, 0x1F",
    "第 3 步 (step 3) 与 100 steps、2 sections、1st",
    '--8<-- "docs/generated/step_time.md"',
    "--8<--\ndocs/generated/a.md\ndocs/generated/b.md\n--8<--",
    "```python\nprint(f'{ms:.1f} ms')  # 484 ms\n```",
    "```bash\nsleep 5s && echo 100%\n```",
    "<!-- 484 ms 写在注释里不显示 -->",
    "<!--\n多行注释 484 ms\n-->",
    "H200 的 HBM3e 带宽为 4.8 TB/s。 <!-- number-ok: NVIDIA H200 datasheet -->",
    "<!-- number-ok: gate thresholds, not measurements -->\n最终 loss 相差不超过 0.5%，\n每步不超过 5%。",
    "<!-- number-ok: vendor table -->\n\n| GPU | bandwidth |\n|---|---|\n| H200 | 4.8 TB/s |",
    "| model | hidden | layers |\n|---|---|---|\n| 8B | 4096 | 36 |",
    "---\ntitle: 1.2× faster\n---\n正文",
    "![step time](generated/step_time.svg)",
    "$6 \\times 8.2\\times10^{9}$ FLOP",
])
def test_number_rule_allows(text):
    assert not hand_typed_numbers(text), hand_typed_numbers(text)


def test_marker_covers_only_the_next_block():
    text = "<!-- number-ok: datasheet -->\n带宽 4.8 TB/s\n\n实测 3.8 TB/s"
    assert [n for n, _, _ in hand_typed_numbers(text)] == [4]


# ---------------------------------------------------------------- (c) data files

def _data_files():
    return sorted((DOCS / "data").rglob("*.json")) if (DOCS / "data").exists() else []


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


def test_copy_ceiling_is_the_fastest_copy_timed_like_the_kernels():
    from bench.exp_rmsnorm import copy_ceiling

    def shape(nbytes, gbps, graph=True):
        return {"bytes_fwd": nbytes, "copy_same_bytes": {"gbps": gbps} | ({"calls_per_graph": 12} if graph else {})}

    graph_run = {"copy": {"gbps": 2700.0, "bytes": 2**32, "calls_per_graph": 12},
                 "shapes": [shape(10**8, 3900.0), shape(3 * 10**8, 4150.0)]}
    assert copy_ceiling(graph_run) == {"gbps": 4150.0, "bytes": 3 * 10**8, "timer": "CUDA graph",
                                      "large_copy_gbps": 2700.0, "large_copy_bytes": 2**32,
                                      "large_copy_timer": "CUDA graph"}
    # The same 4 GiB copy timed eagerly, when faster, is the ceiling.
    with_eager = graph_run | {"copy": graph_run["copy"] | {"eager": {"gbps": 4240.0}}}
    assert copy_ceiling(with_eager)["gbps"] == 4240.0 and copy_ceiling(with_eager)["timer"] == "eager"
    # A large copy timed eagerly (no CUDA graph) is not compared with graph-timed small copies.
    eager_run = {"copy": {"gbps": 4250.0, "bytes": 2**32}, "shapes": [shape(10**8, 4400.0, graph=False)]}
    assert copy_ceiling(eager_run)["gbps"] == 4250.0
