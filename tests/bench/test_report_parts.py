"""The report package's shared parts: ops (the copy ceiling, shape labels, the comparison words), prose,
tables (the 实验环境 box, provenance), names (one colour per contender, the tie rules), render."""
from __future__ import annotations

import pytest

from bench import store
from bench.report import names, plots, prose
from bench.report.ops import compare_sentence, copy_ceiling, rows_caption, shape_label
from bench.report.render import MissingData, loader, render_all
from bench.report.tables import env_box, provenance_table
from bench_fixtures import as_if_on_a_gpu, fixture

P1 = ("p1_compile", "p1_profile", "p1_roofline")


def test_copy_ceiling_is_the_fastest_copy_timed_like_the_kernels():
    def shape(nbytes, gbps, graph=True):
        return {"bytes_fwd": nbytes, "copy_same_bytes": {"gbps": gbps} | ({"calls_per_graph": 12} if graph else {})}

    graph_run = {"copy": {"gbps": 2700.0, "bytes": 2**32, "calls_per_graph": 12},
                 "shapes": [shape(10**8, 3900.0), shape(3 * 10**8, 4150.0)]}
    assert copy_ceiling(graph_run) == {"gbps": 4150.0, "bytes": 3 * 10**8, "timer": "CUDA graph", "shape": None,
                                      "large_copy_gbps": 2700.0, "large_copy_bytes": 2**32,
                                      "large_copy_timer": "CUDA graph"}
    # The same 4 GiB copy timed eagerly, when faster, is the ceiling.
    with_eager = graph_run | {"copy": graph_run["copy"] | {"eager": {"gbps": 4240.0}}}
    assert copy_ceiling(with_eager)["gbps"] == 4240.0 and copy_ceiling(with_eager)["timer"] == "eager"
    # A large copy timed eagerly (no CUDA graph) is not compared with graph-timed small copies.
    eager_run = {"copy": {"gbps": 4250.0, "bytes": 2**32}, "shapes": [shape(10**8, 4400.0, graph=False)]}
    assert copy_ceiling(eager_run)["gbps"] == 4250.0


def test_shape_labels_come_from_the_data():
    assert shape_label({"label": "H=4096", "rows": 16384, "width": 4096}) == "H=4096"
    assert shape_label({"label": "q 64x128", "rows": 64, "width": 128, "dy_layout": "heads_transposed"}) \
        == "q_norm（dy 转置）"
    assert shape_label({"label": "k_norm 131072x128", "rows": 131072, "width": 128}) == "k_norm"
    # entries written before they carried a label: the head norms by row count, the rest by width
    assert shape_label({"rows": 524288, "width": 128}) == "q_norm"
    assert shape_label({"rows": 16384, "width": 1024}) == "H=1024"
    shapes = [{"label": f"H={w}", "rows": 16384, "width": w} for w in (1024, 2048, 4096)] + [
        {"label": "q_norm 524288x128", "rows": 524288, "width": 128}]
    assert rows_caption(shapes) == "H=1024 … H=4096 各 16384 行，q_norm 为 524288×128"


def test_comparison_words_follow_the_data_and_the_tie_rule():
    rows = [{"label": "H=1024", "ratio": 1.2, "peer": "liger"}, {"label": "H=2048", "ratio": 1.005, "peer": "liger"},
            {"label": "k_norm", "ratio": 0.8, "peer": "compile_hf"}]
    text = compare_sentence(rows, 0.01)
    assert "在 H=1024 上快于" in text and "在 H=2048 上与最快的对比方案持平（相差不到 1%）" in text
    assert "在 k_norm 上比最快的对比方案（torch.compile(HF)）慢 25%" in text
    assert "全部" in compare_sentence([dict(r, ratio=1.5) for r in rows], 0.01)
    assert "（相差不到 2%）" in compare_sentence([dict(r, ratio=1.015) for r in rows], 0.02)


def test_one_colour_per_contender_and_named_tie_rules():
    labelled = set(names.OP_LABELS) | set(names.TRAINING_LABELS) | set(names.LOSS_CURVE_LEGEND)
    assert labelled <= set(names.COLOURS)
    assert len(set(names.COLOURS.values())) == len(names.COLOURS)  # no two contenders share a colour
    assert {rule.within for rule in names.TIE_RULES.values()} == {0.0, 0.01, 0.02}
    assert names.tie({"tie_rule": "within_2pct"}) == 0.02
    with pytest.raises(KeyError):
        names.tie({"tie_rule": "within_3pct"})


def test_prose_helpers():
    assert prose.pct_span([0.855, 0.951]) == "86%–95%"
    assert prose.pct_span([0.951, 0.95]) == "95%"
    assert prose.times_span([1.111, 2.109]) == "1.11–2.11"
    assert prose.glue("autocast", "下") == "autocast 下" and prose.glue("Liger（全套补丁）", "下") == "Liger（全套补丁）下"
    assert prose.page("| a |\n", "说明", "结论。") == "结论。\n\n| a |\n\n*说明*\n"


def test_env_box_lists_each_distinct_value_and_the_date_range():
    envs = [fixture(name)["environment"] for name in P1]
    on_gpu = as_if_on_a_gpu(fixture("p1_profile"))["environment"] | {
        "sm_count": 132, "gpu_memory_gib": 139.8, "torch": "9.9.9", "date": "2026-12-01T00:00:00Z"}
    box = env_box(envs + [on_gpu], extra_keys=("liger_kernel",))
    lines = box.splitlines()
    assert lines[:2] == ['!!! info "实验环境"', ""] and lines[3] == ""
    hardware, software = lines[2].strip().split(" · "), lines[4].strip().split(" · ")
    assert all(line.startswith("    ") for line in (lines[2], lines[4])) and len(lines) == 5
    assert hardware == ["GPU：CPU、NVIDIA H200（132 个 SM，显存 139.8 GiB）", "驱动：000.00", f"CUDA：{on_gpu['cuda']}"]
    assert f"torch：{envs[0]['torch']}、9.9.9" in software
    assert f"triton：{envs[0]['triton']}" in software  # one value where the files agree
    assert f"liger-kernel：{envs[0]['liger_kernel']}" in software
    assert software[-1] == "测量日期：2026-11-29 至 2026-12-01"
    assert envs[0]["git_commit"][:7] not in box
    assert "liger" not in env_box(envs) and "测量日期：2026-11-29\n" in env_box(envs)


def test_provenance_table_names_commit_and_date_not_the_command():
    """The command (often the measuring machine's own paths) stays in the data file; bench/README.md regenerates."""
    records = {f"{name}.json": fixture(name) for name in P1}
    table = provenance_table(records)
    assert table.splitlines()[0] == "| 数据文件 | 提交 | 测量日期 |"
    for name, data in records.items():
        env = data["environment"]
        assert f"| `{name}` | `{env['git_commit'][:7]}` | {env['date'][:10]} |" in table
        assert env["command"] not in table


def test_render_skips_what_has_no_data(monkeypatch, tmp_path):
    """No data for a GPU: nothing to render, and a summary's load raises MissingData (the summary is skipped)."""
    monkeypatch.setattr(store, "DATA_DIR", tmp_path)
    assert render_all("h200") == {}
    with pytest.raises(MissingData):
        loader("h200")("rmsnorm")


def _plot(width_in, height_in, fontsize):
    plt = plots.plot_style()
    fig, ax = plt.subplots(figsize=(width_in, height_in))
    ax.plot([1, 2], [1, 2])
    ax.set_xlabel("时间（ms）")
    ax.text(1, 1, "小字注释", fontsize=fontsize)
    return plots.svg_of(fig)


def test_plot_text_sizes_come_from_the_glyph_groups():
    """Each string's font size is read off its glyph group's scale(s -s) (s × 100 points); a plot is shown at
    its natural size (1 pt = 4/3 px) up to the column's 688 px; legible() names small text and a tall plot."""
    svg = _plot(plots.FIGURE_WIDTH, 3.0, 7)
    sizes = dict(plots.svg_text_sizes(svg))
    assert sizes["小字注释"] == pytest.approx(7) and sizes["时间（ms）"] == pytest.approx(10)
    seen = plots.shown(svg)
    assert seen["smallest"] == "小字注释" and seen["width_px"] <= plots.COLUMN_PX
    assert seen["smallest_px"] < plots.MIN_TEXT_PX and "小字注释" in plots.legible(svg)[0]
    assert plots.legible(_plot(plots.FIGURE_WIDTH, 3.0, plots.SMALL)) == []
    tall = plots.legible(_plot(plots.FIGURE_WIDTH, 6.0, plots.SMALL))
    assert len(tall) == 1 and "px tall at 688 px wide" in tall[0]
    narrow = plots.shown(_plot(3.0, 2.0, plots.SMALL))  # narrower than the column: natural size, 1 pt = 4/3 px
    assert narrow["width_px"] < plots.COLUMN_PX and narrow["smallest_px"] == pytest.approx(plots.SMALL * 4 / 3)


def test_every_committed_plot_reads_in_the_column():
    """Every plot under docs/generated/ (what bench.render writes: tests/test_generated.py) has text of at
    least 10 px as the site shows it and is at most 450 px tall shown 688 px wide."""
    from bench import ROOT

    svgs = sorted((ROOT / "docs" / "generated").glob("*.svg"))
    assert svgs
    problems = {svg.name: plots.legible(svg.read_text(encoding="utf-8")) for svg in svgs}
    assert not {name: p for name, p in problems.items() if p}


# The plots that draw contenders, each from the committed data: (report, file).
CONTENDER_PLOTS = [("rmsnorm", "rmsnorm_bandwidth.svg"), ("fused_add", "fused_add_bandwidth.svg"),
                   ("width_sweep", "width_sweep.svg"), ("width_sweep", "width_sweep_all.svg"),
                   ("loss_curve", "loss_curve.svg"), ("fsdp2", "fsdp2.svg")]


@pytest.mark.parametrize("report, name", CONTENDER_PLOTS)
def test_plots_take_each_contender_s_colour_from_names(report, name, monkeypatch):
    """Give every contender a colour no plot uses: each plot that draws contenders then draws each of them
    in that colour, so no report picks a contender's colour of its own."""
    import importlib

    module = importlib.import_module(f"bench.report.{report}")
    if not store.data_path(module.NAME).exists():
        pytest.skip(f"{module.NAME} data not committed")
    marked = {contender: f"#0{index:02d}0a0" for index, contender in enumerate(names.COLOURS)}
    for contender, colour in marked.items():
        monkeypatch.setitem(names.COLOURS, contender, colour)
    svg = module.render(store.load(module.NAME))[name]
    drawn = {contender for contender, colour in marked.items() if colour in svg}
    assert drawn, f"{name} draws no contender in its names.COLOURS colour"
    labels = set(plots.svg_texts(svg))
    every = [pair for table in (names.OP_LABELS, names.TRAINING_LABELS, names.LOSS_CURVE_LEGEND)
             for pair in table.items()]
    legend = {c for c, label in every if label in labels or f"最快的对比方案：{label}" in labels}
    assert legend <= drawn, f"{name}: {sorted(legend - drawn)} in the legend, not in their names.COLOURS colour"


def test_env_box_note_is_its_last_line():
    envs = [fixture(name)["environment"] for name in P1]
    box = env_box(envs, note="只对这些版本成立。")
    assert box.splitlines()[-2:] == ["", "    只对这些版本成立。"]
    assert env_box(envs).count("\n\n") == box.count("\n\n") - 1


def test_the_copy_ceiling_says_which_copy_it_is():
    """A ceiling from one shape's same-bytes copy names that shape and its size to a tenth of a GiB (1.6, not
    2 GiB), and what the large copy gave under both timers; a large copy is named by its size and timer."""
    from bench.report.ops import ceiling_text, size

    res = {"copy": {"gbps": 2713.3, "bytes": 4 * 2**30, "calls_per_graph": 12, "eager": {"gbps": 4236.9}},
           "shapes": [{"label": "I=12288", "bytes_fwd": 1_207_959_552,
                       "copy_same_bytes": {"gbps": 4257.06, "calls_per_graph": 12}},
                      {"label": "I=17408", "bytes_fwd": 1_711_276_032,
                       "copy_same_bytes": {"gbps": 4257.36, "calls_per_graph": 12}}]}
    assert ceiling_text(res) == ("本次测得最快的设备内拷贝：与 I=17408 的 forward 同字节数（1.6 GiB）的拷贝、CUDA graph 计时，"
                                 "4,257 GB/s（4 GiB 的拷贝是 CUDA graph 2,713 GB/s、eager 4,237 GB/s）")
    res["copy"]["eager"]["gbps"] = 4300.0
    assert ceiling_text(res) == "本次测得最快的设备内拷贝：4 GiB、eager 计时，4,300 GB/s"
    assert (size(4 * 2**30), size(1_711_276_032), size(336e6)) == ("4 GiB", "1.6 GiB", "336 MB")
