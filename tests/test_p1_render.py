"""Rendering of the 篇1 reports (bench/report/p1_*.py) from committed --quick CPU fixtures.

The H200 data is rendered by ``python -m bench.render``; these tests check that rendering
is deterministic, labelled, and says what the article relies on, without a GPU.
"""
import copy
import json
import pathlib
import re
import shutil

import pytest

from bench import store
from bench.report import p1_compile as report_p1_compile
from bench.report import p1_profile as report_p1_profile
from bench.report import p1_roofline as report_p1_roofline
from bench.report import plots, summary_p1
from bench.report.names import CATEGORY_ZH, FUSION_POINT_ZH, LAYER_LABELS
from bench.report.render import MissingData, loader
from bench.report.tables import env_box, fmt, provenance_table

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
MODULES = {"p1_profile": report_p1_profile, "p1_roofline": report_p1_roofline, "p1_compile": report_p1_compile}
CJK = re.compile(r"[\u4e00-\u9fff]")


SMALL_TRACE = FIXTURES / "traces" / "p1_profile_small_trace.json"


def fixture(name):
    data = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    if name == "p1_profile":  # the timeline reads the trace saved next to the JSON: a hand-made GPU trace
        data["results"]["main"].update(trace_file=SMALL_TRACE.name, trace_bytes=SMALL_TRACE.stat().st_size)
    return data


@pytest.fixture(autouse=True)
def data_dir_with_the_small_trace(tmp_path, monkeypatch):
    """A data folder holding the committed data plus the hand-made trace the fixtures point to."""
    for gpu in ("cpu", "h200"):
        folder = tmp_path / gpu
        source = store.DATA_DIR / gpu
        if source.is_dir():
            shutil.copytree(source, folder)
        folder.mkdir(exist_ok=True)
        (folder / SMALL_TRACE.name).write_bytes(SMALL_TRACE.read_bytes())
    monkeypatch.setattr(store, "DATA_DIR", tmp_path)
    return tmp_path


def as_if_on_a_gpu(data):
    """The fixture with the fields only a GPU run fills in, to exercise those branches."""
    data = copy.deepcopy(data)
    data["environment"].update(gpu="NVIDIA H200", driver="000.00", cuda="13.0")
    if data["experiment"] == "p1_compile":
        for entry in data["results"]["shapes"]:
            entry["contenders"]["cuda_graph"] = copy.deepcopy(entry["contenders"]["eager"])
    if data["experiment"] == "p1_profile":
        data["results"]["main"]["layer"]["gpu_lag_us"] = 1234.0
    return data


@pytest.mark.parametrize("name", sorted(MODULES))
@pytest.mark.parametrize("gpu", [False, True])
def test_render_is_deterministic_and_labelled(name, gpu):
    data = fixture(name)
    data = as_if_on_a_gpu(data) if gpu else data
    assert data["config"]["quick"] is True  # fixtures are smoke-test data, never published
    first = MODULES[name].render(data)
    assert first == MODULES[name].render(json.loads(json.dumps(data)))
    for rel, text in first.items():
        assert rel.startswith("p1_"), rel  # no clash with the other experiments' artifacts
        if rel.endswith(".md"):
            assert text.startswith("|"), rel
            header = text.splitlines()[0]
            assert header.count("|") - 1 <= 6 and CJK.search(header), f"{rel}: at most 6 columns, Chinese headers"
            assert_no_environment_footer(text, data["environment"], rel)
        elif rel.endswith(".svg"):
            assert text.startswith("<?xml") and text.rstrip().endswith("</svg>"), rel
            assert "<text" not in text and any("（" in t for t in plots.svg_texts(text)), rel  # glyphs, units
        else:
            assert rel.endswith(".txt") and text.endswith("\n"), rel


def assert_no_environment_footer(text, env, rel):
    """The environment lives in one box per article (p1_env.md), not under every table."""
    assert str(env["git_commit"])[:7] not in text, f"{rel}: a commit hash under a table"
    assert "GPU:" not in text and f"torch {env['torch']}" not in text, f"{rel}: an environment footer"


def test_profile_tables_say_what_the_article_relies_on():
    out = report_p1_profile.render(fixture("p1_profile"))
    assert "| `Qwen3RMSNorm` | 145 |" in out["p1_static_modules.md"]
    assert "| RMSNorm | 145 | 4 × 36 + 1 = 145 |" in out["p1_export_patterns.md"]
    assert "| `Qwen3MLP` | ✅ |" in out["p1_fx_trace.md"] and "| `Qwen3Attention` | ❌ |" in out["p1_fx_trace.md"]
    assert out["p1_decoder_layer_forward.txt"].startswith("# transformers ")
    assert "self.input_layernorm" in out["p1_decoder_layer_forward.txt"]
    assert "(0-35): 36 x Qwen3DecoderLayer" in out["p1_model_repr.txt"]
    launch = out["p1_profile_launch.md"]
    for row in ("每个训练 step 的 kernel 数", "step 耗时（未开 profiler", "kernel 之间长于", "最长的一串连续"):
        assert row in launch
    assert "上界" in launch.splitlines()[-1]  # the caption says which rows the profiler inflates
    assert "CPU 发射领先 GPU" not in launch  # only a GPU trace has a GPU range
    assert "CPU 发射领先 GPU" in report_p1_profile.render(as_if_on_a_gpu(fixture("p1_profile")))["p1_profile_launch.md"]
    categories = out["p1_profile_categories.md"]
    for row in fixture("p1_profile")["results"]["main"]["categories"]:
        assert f"| {CATEGORY_ZH[row['category']]} | {row['kernels']} |" in categories


def test_sweep_rows_follow_the_data():
    data = fixture("p1_profile")
    table = report_p1_profile.render(data)["p1_profile_sweep.md"]
    rows = [line for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [int(r.split("|")[1]) for r in rows] == [e["tokens"] for e in data["results"]["sweep"]]


def test_roofline_tables_follow_the_counts():
    data = fixture("p1_roofline")
    out = report_p1_roofline.render(data)
    counts = out["p1_roofline_counts.md"]
    for point in data["results"]["points"]:
        name = FUSION_POINT_ZH[point["name"]]
        assert f"| {name} | {point['eager']['kernels']} → {point['fused']['kernels']} |" in counts
    ridge = report_p1_roofline.ridge_flop_per_byte(data)
    assert ridge == pytest.approx(data["results"]["ridge_flop_per_byte"])
    assert f"| 屋脊点（矩阵乘吞吐 ÷ 拷贝带宽） | {fmt(ridge)} FLOP/字节 |" in out["p1_roofline_ceilings.md"]
    labels = plots.svg_texts(out["p1_roofline.svg"])
    assert any(t.startswith("算术强度（FLOP/字节") for t in labels) and any("（TFLOP/s" in t for t in labels)


def test_compile_tables_and_generated_code():
    data = as_if_on_a_gpu(fixture("p1_compile"))
    out = report_p1_compile.render(data)
    for table in (out["p1_compile.md"], out["p1_compile_fwd.md"]):
        for label in LAYER_LABELS.values():
            assert label in table
    shape = data["results"]["shapes"][0]
    forward_us = fmt(shape["contenders"]["compile"]["fwd"]["median_us"])
    assert f"| torch.compile（Inductor） | {forward_us} |" in out["p1_compile_fwd.md"]
    assert f"| {shape['compile_s']:.0f} |" in out["p1_compile_fwd.md"]
    forward = out["p1_inductor_rmsnorm_fwd.txt"]
    assert forward.startswith("# Generated by torch ") and "rsqrt" in forward
    first_kernel = data["results"]["rmsnorm"]["graphs"]["forward"][0]["name"]
    assert f"# kernel {first_kernel}" in forward
    kernels = out["p1_compile_kernels.md"]
    assert all(f"`{k['name']}`" in kernels for k in data["results"]["layer_kernels"]["forward"])


# ---------------------------------------------------------------- summaries: environment box, provenance, key points

def test_env_box_lists_each_distinct_value_and_the_date_range():
    envs = [fixture(name)["environment"] for name in sorted(MODULES)]
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


def test_provenance_table_names_commit_date_and_command():
    records = {f"{name}.json": fixture(name) for name in sorted(MODULES)}
    table = provenance_table(records)
    assert table.splitlines()[0] == "| 数据文件 | 提交 | 测量日期 | 重新生成的命令 |"
    for name, data in records.items():
        env = data["environment"]
        assert f"| `{name}` | `{env['git_commit'][:7]}` | {env['date'][:10]} | `{env['command']}` |" in table


def test_summaries_are_skipped_without_data():
    from bench.report.render import render_all

    with pytest.raises(MissingData):
        summary_p1.render_summary(loader("no-such-gpu"))
    assert render_all("no-such-gpu") == {}


@pytest.fixture(scope="module")
def committed():
    try:
        return {name: loader()(name) for name in summary_p1.DATA}
    except MissingData:
        pytest.skip("no committed 篇1 data")


def test_env_box_and_provenance_of_the_committed_data(committed):
    out = summary_p1.render_summary(loader())
    for data in committed.values():
        env = data["environment"]
        for key in ("gpu", "driver", "cuda", "torch", "triton", "transformers"):
            assert str(env[key]) in out["p1_env.md"], key
        assert env["date"][:10] in out["p1_env.md"] and env["git_commit"][:7] not in out["p1_env.md"]
        assert f"`{env['git_commit'][:7]}`" in out["p1_provenance.md"]
    trace = committed["p1_profile"]["results"]["main"]["trace_file"]
    assert f"| `{trace}` |" in out["p1_provenance.md"]


def test_keypoints_are_computed_from_the_data(committed):
    """Recompute some numbers without the code that wrote them; every other share or ratio is in a table."""
    from p1_profile_step import device_events, kernel_category, load_trace

    text = summary_p1.render_summary(loader())["p1_keypoints.md"]
    lines = text.splitlines()
    assert lines[:2] == ['!!! abstract "要点"', ""] and len(lines) == 6
    assert all(line.startswith("    - ") for line in lines[2:])

    # kernels of one eager RMSNorm: the profiled layer starts with input_layernorm, up to its first GEMM
    layer = committed["p1_profile"]["results"]["main"]["layer"]["device"]
    first_gemm = next(i for i, k in enumerate(layer) if k["category"] == "GEMM")
    norm = [k for k in layer[:first_gemm] if not k["kernel"].startswith("Memset")]
    assert f"拆成 {len(norm)} 个 kernel" in text

    # GEMM share and the small kernels, from the Perfetto trace instead of the JSON
    kernels = device_events(load_trace(store.data_path("p1_profile").with_name(
        committed["p1_profile"]["results"]["main"]["trace_file"])))
    time_by = {}
    for k in kernels:
        time_by[kernel_category(k["name"])] = time_by.get(kernel_category(k["name"]), 0.0) + k["dur"]
    total = sum(time_by.values())
    small = [k for k in kernels if kernel_category(k["name"]) in summary_p1.SMALL_KERNELS]
    small_share = 100 * sum(time_by.get(c, 0.0) for c in summary_p1.SMALL_KERNELS) / total
    assert f"占 kernel 时间的 {100 * time_by['GEMM'] / total:.1f}%" in text
    assert f"{small_share:.1f}%" in text and f"{len(kernels)} 个 kernel 里的 {len(small)} 个" in text

    # RMSNorm bytes after / before, and the compile speed-up, from the raw numbers
    rms = next(p for p in committed["p1_roofline"]["results"]["points"] if p["name"] == "RMSNorm")
    kept = f"{100 * rms['fused']['bytes'] / rms['eager']['bytes']:.0f}%"
    assert kept in text
    large = max(committed["p1_compile"]["results"]["shapes"], key=lambda e: e["batch"] * e["seq_len"])
    medians = {n: c["fwd_bwd"]["median_us"] for n, c in large["contenders"].items()}
    assert f"快 {fmt(medians['eager'] / medians['compile'])}×" in text

    tables = "".join(text for name in sorted(MODULES) for rel, text in MODULES[name].render(committed[name]).items()
                     if rel.endswith(".md"))
    for quoted in re.findall(r"\d[\d,.]*[%×]", text):
        assert quoted in tables or quoted in (f"{small_share:.1f}%", kept), f"{quoted}: not recomputed, not in a table"


def test_timeline_links_the_layers_launches_to_its_kernels(data_dir_with_the_small_trace):
    """Drawn from the trace next to the JSON: the hand-made trace has 3 launches in decoder_layer.1 that started
    GPU work (a reduction, a memset, a GEMM); one shared time axis; a wrong or missing trace fails loudly."""
    data = as_if_on_a_gpu(fixture("p1_profile"))
    texts = plots.svg_texts(report_p1_profile.render(data)["p1_profile_layer_timeline.svg"])
    assert "decoder_layer.1 forward：3 次启动，每条细线连起一次启动和它启动的 kernel（按 correlation id）" in texts
    assert {"GEMM", "归约", "拷贝/类型转换", "CPU：启动调用", "GPU：kernel"} <= set(texts)
    assert "注意力" not in texts  # only categories that ran are in the legend
    assert "时间（µs，从 decoder_layer.1 forward 在 CPU 上开始计）" in texts
    assert any(t.startswith("斜线 = GPU 空等（间隔 > 10 µs），共 19 µs") for t in texts)  # 71 → 90; 68 → 70 is short
    trace = data_dir_with_the_small_trace / "h200" / SMALL_TRACE.name
    trace.write_bytes(trace.read_bytes() + b"\n")
    with pytest.raises(RuntimeError, match="not the trace of this run"):
        report_p1_profile.render(data)
    trace.unlink()
    with pytest.raises(RuntimeError, match="is missing"):
        report_p1_profile.render(data)
