"""Rendering of the 篇1 experiments (bench/exp_p1_*.py) from committed --quick CPU fixtures.

The H200 data is rendered by ``python -m bench.render``; these tests check that rendering
is deterministic, labelled, and says what the article relies on, without a GPU.
"""
import copy
import json
import pathlib

import pytest

from bench import common, exp_p1_compile, exp_p1_profile, exp_p1_roofline

FIXTURES = pathlib.Path(__file__).parent / "fixtures"
MODULES = {"p1_profile": exp_p1_profile, "p1_roofline": exp_p1_roofline, "p1_compile": exp_p1_compile}


SMALL_TRACE = FIXTURES / "traces" / "p1_profile_small_trace.json"


def fixture(name):
    data = json.loads((FIXTURES / f"{name}.json").read_text(encoding="utf-8"))
    if name == "p1_profile":  # the timeline reads the trace saved next to the JSON: a hand-made GPU trace
        data["results"]["main"].update(trace_file=SMALL_TRACE.name, trace_bytes=SMALL_TRACE.stat().st_size)
    return data


@pytest.fixture(autouse=True)
def data_dir_with_the_small_trace(tmp_path, monkeypatch):
    for gpu in ("cpu", "h200"):
        (tmp_path / gpu).mkdir()
        (tmp_path / gpu / SMALL_TRACE.name).write_bytes(SMALL_TRACE.read_bytes())
    monkeypatch.setattr(common, "DATA_DIR", tmp_path)
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
    env = common.env_line(data["environment"])
    for rel, text in first.items():
        assert rel.startswith("p1_"), rel  # no clash with the other experiments' artifacts
        if rel.endswith(".md"):
            assert text.startswith("|") and env in text, rel
        elif rel.endswith(".svg"):
            assert text.startswith("<?xml") and text.rstrip().endswith("</svg>"), rel
            assert "<text" not in text and any("（" in t for t in common.svg_texts(text)), rel  # glyphs, units
        else:
            assert rel.endswith(".txt") and text.endswith("\n"), rel


def test_profile_tables_say_what_the_article_relies_on():
    out = exp_p1_profile.render(fixture("p1_profile"))
    assert "| `Qwen3RMSNorm` | 145 |" in out["p1_static_modules.md"]
    assert "| RMSNorm | 145 | 4 × 36 + 1 = 145 |" in out["p1_export_patterns.md"]
    assert "| `Qwen3MLP` | ✅ |" in out["p1_fx_trace.md"] and "| `Qwen3Attention` | ❌ |" in out["p1_fx_trace.md"]
    assert out["p1_decoder_layer_forward.txt"].startswith("# transformers ")
    assert "self.input_layernorm" in out["p1_decoder_layer_forward.txt"]
    assert "(0-35): 36 x Qwen3DecoderLayer" in out["p1_model_repr.txt"]
    launch = out["p1_profile_launch.md"]
    for row in ("kernels per training step", "step time without the profiler", "gaps between kernels longer than",
                "longest run of consecutive"):
        assert row in launch
    assert "CPU launches ahead" not in launch  # only a GPU trace has a GPU range
    assert "CPU launches ahead" in exp_p1_profile.render(as_if_on_a_gpu(fixture("p1_profile")))["p1_profile_launch.md"]


def test_sweep_rows_follow_the_data():
    data = fixture("p1_profile")
    table = exp_p1_profile.render(data)["p1_profile_sweep.md"]
    rows = [line for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [int(r.split("|")[1]) for r in rows] == [e["tokens"] for e in data["results"]["sweep"]]


def test_roofline_tables_follow_the_counts():
    data = fixture("p1_roofline")
    out = exp_p1_roofline.render(data)
    counts = out["p1_roofline_counts.md"]
    for point in data["results"]["points"]:
        assert f"| {point['name']} | {point['eager']['kernels']} → {point['fused']['kernels']} |" in counts
    assert "ridge point" in out["p1_roofline_ceilings.md"]
    labels = common.svg_texts(out["p1_roofline.svg"])
    assert any(t.startswith("算术强度（FLOP/字节") for t in labels) and any("（TFLOP/s" in t for t in labels)


def test_compile_tables_and_generated_code():
    data = as_if_on_a_gpu(fixture("p1_compile"))
    out = exp_p1_compile.render(data)
    table = out["p1_compile.md"]
    for label in exp_p1_compile.CONTENDERS.values():
        assert label in table
    forward = out["p1_inductor_rmsnorm_fwd.txt"]
    assert forward.startswith("# Generated by torch ") and "rsqrt" in forward
    first_kernel = data["results"]["rmsnorm"]["graphs"]["forward"][0]["name"]
    assert f"# kernel {first_kernel}" in forward
    kernels = out["p1_compile_kernels.md"]
    assert all(f"`{k['name']}`" in kernels for k in data["results"]["layer_kernels"]["forward"])


def test_timeline_links_the_layers_launches_to_its_kernels(data_dir_with_the_small_trace):
    """Drawn from the trace next to the JSON: the hand-made trace has 3 launches in decoder_layer.1 that started
    GPU work (a reduction, a memset, a GEMM); one shared time axis; a wrong or missing trace fails loudly."""
    data = as_if_on_a_gpu(fixture("p1_profile"))
    texts = common.svg_texts(exp_p1_profile.render(data)["p1_profile_layer_timeline.svg"])
    assert "decoder_layer.1 forward：3 次启动，每条细线连起一次启动和它启动的 kernel（按 correlation id）" in texts
    assert {"GEMM", "归约", "拷贝/类型转换", "CPU：启动调用", "GPU：kernel"} <= set(texts)
    assert "注意力" not in texts  # only categories that ran are in the legend
    assert "时间（µs，从 decoder_layer.1 forward 在 CPU 上开始计）" in texts
    assert any(t.startswith("斜线 = GPU 空等（间隔 > 10 µs），共 19 µs") for t in texts)  # 71 → 90; 68 → 70 is short
    trace = data_dir_with_the_small_trace / "h200" / SMALL_TRACE.name
    trace.write_bytes(trace.read_bytes() + b"\n")
    with pytest.raises(RuntimeError, match="not the trace of this run"):
        exp_p1_profile.render(data)
    trace.unlink()
    with pytest.raises(RuntimeError, match="is missing"):
        exp_p1_profile.render(data)
