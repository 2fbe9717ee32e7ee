"""bench/report/p1_profile.py from the committed --quick CPU fixture (and the same with the fields only a
GPU run fills in), and from a fresh quick run: deterministic, labelled, and saying what 篇1 relies on."""
from __future__ import annotations

import pytest

from bench.report import p1_profile, plots
from bench.report.names import CATEGORY_ZH
from bench_fixtures import SMALL_TRACE, as_if_on_a_gpu, check_p1_render, fixture

pytestmark = pytest.mark.usefixtures("data_dir_with_the_small_trace")


@pytest.mark.parametrize("gpu", [False, True])
def test_render_is_deterministic_and_labelled(gpu):
    data = fixture("p1_profile")
    check_p1_render(p1_profile, as_if_on_a_gpu(data) if gpu else data)


def test_profile_tables_say_what_the_article_relies_on():
    out = p1_profile.render(fixture("p1_profile"))
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
    assert "CPU 发射领先 GPU" in p1_profile.render(as_if_on_a_gpu(fixture("p1_profile")))["p1_profile_launch.md"]
    categories = out["p1_profile_categories.md"]
    for row in fixture("p1_profile")["results"]["main"]["categories"]:
        assert f"| {CATEGORY_ZH[row['category']]} | {row['kernels']} |" in categories


def test_sweep_rows_follow_the_data():
    data = fixture("p1_profile")
    table = p1_profile.render(data)["p1_profile_sweep.md"]
    rows = [line for line in table.splitlines() if line.startswith("| ") and line[2].isdigit()]
    assert [int(r.split("|")[1]) for r in rows] == [e["tokens"] for e in data["results"]["sweep"]]


def test_timeline_links_the_layers_launches_to_its_kernels(data_dir_with_the_small_trace):
    """Drawn from the trace next to the JSON: the hand-made trace has 3 launches in decoder_layer.1 that started
    GPU work (a reduction, a memset, a GEMM); one shared time axis; a wrong or missing trace fails loudly."""
    data = as_if_on_a_gpu(fixture("p1_profile"))
    texts = plots.svg_texts(p1_profile.render(data)["p1_profile_layer_timeline.svg"])
    assert "decoder_layer.1 forward：3 次启动，细线连起每次启动和它的 kernel" in texts  # no attention: no crop
    assert {"GEMM", "归约", "拷贝/类型转换", "CPU：启动调用", "GPU：kernel"} <= set(texts)
    assert "注意力" not in texts  # only categories that ran are in the legend
    assert "时间（µs，从 decoder_layer.1 forward 在 CPU 上开始计）" in texts
    assert "GPU 空等（间隔 > 10 µs），共 19 µs" in texts  # 71 → 90; 68 → 70 is short
    assert "最长空等 19 µs" in texts
    trace = data_dir_with_the_small_trace / "h200" / SMALL_TRACE.name
    trace.write_bytes(trace.read_bytes() + b"\n")
    with pytest.raises(RuntimeError, match="not the trace of this run"):
        p1_profile.render(data)
    trace.unlink()
    with pytest.raises(RuntimeError, match="is missing"):
        p1_profile.render(data)


def _with_attention(trace_file):
    """The hand-made trace with an attention kernel launched inside decoder_layer.1 from within the CPU's
    scaled_dot_product_attention op, and one launch after it; returns the trace's new size."""
    import json

    trace = json.loads(trace_file.read_text(encoding="utf-8"))
    events = trace["traceEvents"]
    events += [
        {"ph": "X", "cat": "cpu_op", "name": "aten::scaled_dot_product_attention", "ts": 1060, "dur": 30, "tid": 1},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1080, "dur": 5, "tid": 1,
         "args": {"correlation": 8}},
        {"ph": "X", "cat": "kernel", "name": "cudnn_generated_fort_native_sdpa_sm90_flash_fprop", "ts": 1210, "dur": 40,
         "tid": 7, "args": {"correlation": 8}},
        {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 1095, "dur": 4, "tid": 1,
         "args": {"correlation": 9}},
        {"ph": "X", "cat": "kernel", "name": "nvjet_tst_128x256_64x4_1x2_h_bz_coopA_TNT", "ts": 1260, "dur": 30, "tid": 7,
         "args": {"correlation": 9}},
    ]
    text = json.dumps(trace)
    trace_file.write_text(text, encoding="utf-8")
    return len(text.encode())


def test_the_timeline_ends_with_the_attention_kernel(data_dir_with_the_small_trace):
    """A layer that launched an attention kernel is drawn from its start up to and including that kernel: the
    launch after it is left out, the CPU's time in scaled_dot_product_attention and the longest GPU gap are
    named; the rule itself keeps every launch of a layer without attention."""
    data = as_if_on_a_gpu(fixture("p1_profile"))
    trace = data_dir_with_the_small_trace / "h200" / SMALL_TRACE.name
    data["results"]["main"]["trace_bytes"] = _with_attention(trace)
    texts = plots.svg_texts(p1_profile.render(data)["p1_profile_layer_timeline.svg"])
    assert "decoder_layer.1 forward 从开始到注意力 kernel：4 次启动，细线连起每次启动和它的 kernel" in texts
    assert "注意力" in texts and "sdpa：CPU 上 30 µs" in texts
    assert "最长空等 20 µs" in texts  # 1190 → 1210, before the attention kernel
    pairs = [{"category": c} for c in ("GEMM", "reduction", "attention", "GEMM")]
    assert p1_profile.timeline_crop(pairs) == (pairs[:3], pairs[2])
    assert p1_profile.timeline_crop(pairs[:2]) == (pairs[:2], None)


def _op(name, ts, dur=2):
    return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "tid": 1}


# decoder_layer.1 of the hand-made trace (1000-1100 on thread 1) as Qwen3's attention half runs it: its
# aten::mean at 1005 (the input norm), then three projections, each followed by ops, up to sdpa at 1060
QWEN3_OPS = [_op("aten::linear", 1018), _op("aten::pow", 1021), _op("aten::linear", 1024), _op("aten::pow", 1027),
             _op("aten::linear", 1036), _op("aten::mul", 1040), _op("aten::add", 1045, 5)]


def test_module_spans_name_the_ops_before_attention():
    """The layer's outermost ops up to sdpa, split at each aten::linear, named in HF's order; any other shape
    (here: one projection missing) names nothing; an op nested in another does not start a module."""
    layer = {"ph": "X", "cat": "user_annotation", "name": "decoder_layer.1", "ts": 1000, "dur": 100, "tid": 1}
    events = [layer, _op("aten::mean", 1005, 12), _op("aten::sum", 1006, 3)] + QWEN3_OPS
    spans = p1_profile.module_spans(events, layer, 60)
    assert [name for name, _, _ in spans] == list(p1_profile.PRE_ATTENTION_MODULES)
    assert spans[0] == ("input_layernorm", 5, 17) and spans[-1] == ("RoPE", 40, 50)
    assert p1_profile.module_spans(events[:3] + QWEN3_OPS[2:], layer, 60) == []
    assert p1_profile.module_spans(events, layer, 30) == []  # cut before v_proj


def test_label_rows_keep_labels_apart():
    """Labels go on level 0 when they fit, slide right along their span to clear a neighbour, and go up a level
    only when sliding would leave the span; none starts left of the axis."""
    assert p1_profile.label_rows([20, 20], [(0, 100), (100, 200)]) == [(0, 40.0), (0, 140.0)]
    slid = p1_profile.label_rows([80, 40], [(50, 70), (70, 150)], left=0)
    assert slid == [(0, 20.0), (0, 104.0)]  # centred at 90, slid to 20 + 80 + 4 (the span's middle is 110)
    assert p1_profile.label_rows([200, 40], [(0, 20), (20, 40)], left=0) == [(0, 0), (1, 10.0)]
    assert p1_profile.label_rows([50], [(0, 10)], left=0) == [(0, 0)]


def test_the_timeline_names_the_modules(data_dir_with_the_small_trace):
    """With the ops of Qwen3's attention half in the trace, the timeline names each module over its CPU time."""
    import json

    data = as_if_on_a_gpu(fixture("p1_profile"))
    trace = data_dir_with_the_small_trace / "h200" / SMALL_TRACE.name
    _with_attention(trace)
    content = json.loads(trace.read_text(encoding="utf-8"))
    content["traceEvents"] += [dict(op, pid=1) for op in QWEN3_OPS]
    text = json.dumps(content)
    trace.write_text(text, encoding="utf-8")
    data["results"]["main"]["trace_bytes"] = len(text.encode())
    texts = set(plots.svg_texts(p1_profile.render(data)["p1_profile_layer_timeline.svg"]))
    assert set(p1_profile.PRE_ATTENTION_MODULES) | {"sdpa：CPU 上 30 µs"} <= texts


def test_renders_from_the_quick_run(quick_p1_profile, quick_p1_profile_dir, monkeypatch):
    """What the experiment wrote renders: the timeline reads the trace it saved next to its record."""
    from bench import store

    monkeypatch.setattr(store, "DATA_DIR", quick_p1_profile_dir)
    rendered = check_p1_render(p1_profile, quick_p1_profile)
    assert "p1_profile_layer_timeline.svg" in rendered
