"""bench/report/fusion_page.py: the 番外二 page's generated boxes and values around fusion.json's tables.

* from the committed data: every file renders, the tables on the page are at most 6 columns wide with a
  Chinese header, the values the hand-written readings use are what the raw JSON says (recomputed here);
* the merged QKV projection's saving per step is the GEMM time saved at the step's model times its layers;
* a probe log's JSON lines are read, its script's lines are not.

The comparison words of the page's hand-written readings are checked in tests/test_readings_fusion.py and
tests/test_readings_extras.py.
"""
from __future__ import annotations


import pytest

from artifacts import CJK, tables
from bench import store
from bench.report import fusion_page, step_fusion
from bench.report.tables import fmt
from bench.report.render import loader

pytestmark = pytest.mark.skipif(not (store.data_path("fusion").exists() and store.data_path("step_fusion").exists()),
                                reason="fusion.json or step_fusion.json not committed")


@pytest.fixture(scope="module")
def data():
    return store.load("fusion")


@pytest.fixture(scope="module")
def step():
    return store.load("step_fusion")


@pytest.fixture(scope="module")
def rendered():
    return fusion_page.render_summary(loader())


def test_every_file_renders(rendered):
    assert set(rendered) == {f"fusion_page_{name}.md" for name in (
        "env", "probe_table", "provenance")}
    assert rendered["fusion_page_env.md"].startswith('!!! info "实验环境"')
    for name, text in rendered.items():
        for header in tables(text):
            assert len(header) <= 6 and CJK.search(header[0]), (name, header)


def test_no_sentence_speaks_of_targets(rendered):
    """The reader has no stake in the project's targets: the page states results, not goals met or missed."""
    for name, text in rendered.items():
        assert "目标" not in text, name


def test_probe_output_reads_only_the_printed_json():
    text = "\n".join(['# Diagnostic ...', '#   print(json.dumps({"x": 1}))', '{"fma_on": {"whole_equal": 0.5}}',
                      '# Output, second call:', '{"fma_off": {"whole_equal": 1.0}}'])
    assert fusion_page.probe_output(text) == {"fma_on": {"whole_equal": 0.5}, "fma_off": {"whole_equal": 1.0}}


def test_fma_values_are_the_qk_probes_shares(data):
    """{{ fusion.fma_* }}: the QK probe's shares of bf16 outputs equal to HF's, contraction on and off."""
    qk, _ = fusion_page.probes(data)
    values = fusion_page.summary_values(loader())["fusion"]
    assert values["fma_on_whole"] == f"{100 * qk['fma_on']['whole_equal']:.1f}%"
    assert values["fma_on_rope"] == f"{100 * qk['fma_on']['rope_stage_equal']:.1f}%"
    assert values["fma_off_whole"] == f"{100 * qk['fma_off']['whole_equal']:.3f}%"


def test_qkv_saving_is_the_gemm_time_saved_times_the_steps_layers(data, step):
    saving = fusion_page.qkv_saving(data, step)
    size = step["config"]["model"]["size"]
    entry = next(s for s in data["results"]["kernels"]["qkv"] if s["shape"]["models"] == size)
    per_layer = entry["fwd_bwd"]["three_gemms"]["median_us"] - entry["fwd_bwd"]["merged_gemm"]["median_us"]
    layers = step["config"]["geometry"]["num_hidden_layers"]
    assert saving["per_step_ms"] == pytest.approx(per_layer * layers / 1000)
    ours = step_fusion.rows_by_contender(step)["fusion_set"]["step"]
    assert saving["resolution_ms"] == pytest.approx(step["config"]["resolution"] * ours)
    assert saving["per_step_ms"] < saving["resolution_ms"]  # the page's reason (a): below what the run resolves
    values = fusion_page.summary_values(loader())["fusion"]
    assert values["qkv_step_ms"] == f"{fmt(saving['per_step_ms'], 2)} ms"
    assert values["qkv_step_layers"] == str(layers) and values["qkv_step_model"] == f"Qwen3-{size}"


def test_liger_qk_gap_values(data):
    """The values of §五's reading on Liger's QK time: Liger's RMSNorm alone on 128-wide rows of the same counts
    (rmsnorm.json, contiguous dy) over Liger's QK-norm + RoPE time (the word "多半" is tests/test_readings_fusion.py's)."""
    if not store.data_path("rmsnorm").exists():
        pytest.skip("rmsnorm.json not committed")
    rms = store.load("rmsnorm")
    norm = fusion_page.liger_norm_share(data, rms)
    assert norm is not None
    entry = next(s for s in data["results"]["kernels"]["qk_rope"] if s["label"] == norm["label"])
    rows = {s["rows"]: s for s in rms["results"]["shapes"] if s["width"] == 128 and s["dy_layout"] == "contiguous"}
    expected = sum(rows[entry["rows"] * entry["shape"][h]]["fwd_bwd"]["liger"]["median_us"]
                   for h in ("q_heads", "kv_heads"))
    assert norm["norm_us"] == pytest.approx(expected)
    assert norm["share"] == pytest.approx(expected / entry["fwd_bwd"]["liger"]["median_us"])
    values = fusion_page.summary_values(loader())["fusion"]
    assert values["liger_norm_us"] == f"{fmt(norm['norm_us'])} µs" and values["liger_norm_shape"] == norm["label"]
    assert fusion_page.liger_norm_share(data, None) is None
