"""bench/report/fusion_page.py: the 番外二 page's 要点 box and sentences around fusion.json's tables.

* from the committed data: every file renders, the key points say what the raw JSON says (recomputed
  here), the tables on the page are at most 6 columns wide with a Chinese header;
* the step experiment (step_fusion.json): a tier is ranked against the RMSNorm patch only where the 95 %
  intervals are disjoint, the pairs against Liger follow step_fusion.wins, and the merged QKV projection's
  saving per step is the GEMM time saved at the step's model times its layers;
* the comparison words follow the run's tie rule, on made-up ratios;
* a probe log's JSON lines are read, its script's lines are not.
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
        "env", "step", "qkv", "qk", "swiglu", "fma", "swiglu_bits", "swiglu_probe", "probe_table",
        "provenance")}
    assert rendered["fusion_page_env.md"].startswith('!!! info "实验环境"')
    for name, text in rendered.items():
        for header in tables(text):
            assert len(header) <= 6 and CJK.search(header[0]), (name, header)


def _ratio(data, kernel, label, phase, peer):
    entry = next(s for s in data["results"]["kernels"][kernel] if s["label"] == label)
    ours = data["config"]["kernels"][kernel]["ours"]
    return entry[phase][peer]["median_us"] / entry[phase][ours]["median_us"]


@pytest.mark.parametrize("ratio, words", [
    (1.30, "快于 Liger（Liger 用时是本站的 1.30 倍）"),
    (1.015, "与 Liger 持平（相差不到 2%）"),
    (0.985, "与 Liger 持平（相差不到 2%）"),
    (0.90, "慢于 Liger（慢 11%）"),
])
def test_comparison_follows_the_tie_rule(ratio, words):
    text = fusion_page.compare([{"label": "I=1", "ratio": ratio}], 0.02, "Liger")
    assert text == "在全部 1 个形状上" + words


def test_the_larger_group_comes_first():
    rows = [{"label": "I=1", "ratio": 1.1}, {"label": "I=2", "ratio": 0.9}, {"label": "I=3", "ratio": 0.8}]
    assert fusion_page.compare(rows, 0.02, "X").startswith("在 I=2、I=3 上慢于 X")


def test_no_sentence_speaks_of_targets(rendered):
    """The reader has no stake in the project's targets: the page states results, not goals met or missed."""
    for name, text in rendered.items():
        assert "目标" not in text, name


def test_probe_output_reads_only_the_printed_json():
    text = "\n".join(['# Diagnostic ...', '#   print(json.dumps({"x": 1}))', '{"fma_on": {"whole_equal": 0.5}}',
                      '# Output, second call:', '{"fma_off": {"whole_equal": 1.0}}'])
    assert fusion_page.probe_output(text) == {"fma_on": {"whole_equal": 0.5}, "fma_off": {"whole_equal": 1.0}}


def _step(medians: dict, half_width: float = 2.0, level_pairs: bool = True) -> dict:
    """A step_fusion record: the given median per tier (400 ms otherwise), intervals of ± half_width."""
    names = ["triton", "triton_qk_rope", "triton_liger_rope", "triton_swiglu", "triton_liger_swiglu",
             "fusion_set", "liger_no_loss"]
    cfg = {"model": {"size": "8B", "num_hidden_layers": 8}, "batch": 4, "seq_len": 4096, "baseline": "triton",
           "ours": "fusion_set", "tie_rule": "ci95_disjoint", "resolution": 0.01,
           "pairs": [["triton_qk_rope", "triton_liger_rope"], ["triton_swiglu", "triton_liger_swiglu"],
                     ["fusion_set", "liger_no_loss"]]}
    results = {}
    for name in names:
        ms = medians.get(name, 400.0)
        results[name] = {"status": "ok", "label": name, "median_ms": ms, "min_ms": ms - 3, "max_ms": ms + 3,
                         "ci95_ms": [ms - half_width, ms + half_width], "peak_gib": 50.0, "processes": 3}
    return {"config": cfg, "results": results}


def test_a_tier_is_ranked_only_where_the_intervals_are_disjoint():
    step = _step({"triton": 400.0, "fusion_set": 320.0, "liger_no_loss": 320.0, "triton_qk_rope": 380.0,
                  "triton_liger_rope": 381.0, "triton_swiglu": 398.0, "triton_liger_swiglu": 398.0})
    sentence = fusion_page.step_sentence(step)
    assert "本站整套是 1.250 倍（95% 区间不重叠）" in sentence
    assert "单加 QK-norm + RoPE 是 1.053 倍（95% 区间不重叠）" in sentence
    assert "单加 SwiGLU 是 1.005 倍，区间与它重叠，算持平" in sentence
    assert "目标" not in sentence


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
    assert f"一步共省 {fmt(saving['per_step_ms'], 2)} ms" in fusion_page.qkv_sentence(data, step)


def test_liger_qk_gap_is_mostly_its_rmsnorm(data, step, rendered):
    """The 要点's "主要慢在它的 RMSNorm 上": Liger's RMSNorm alone on 128-wide rows of the same counts (rmsnorm.json,
    contiguous dy) takes more than half of Liger's QK-norm + RoPE time; the step word follows the intervals."""
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
    assert norm["share"] == pytest.approx(expected / entry["fwd_bwd"]["liger"]["median_us"]) and norm["share"] > 0.5
    sentence = rendered["fusion_page_qk.md"]
    assert f"{fmt(norm['norm_us'])} µs" in sentence and "主要慢在 RMSNorm" in sentence
    won = step_fusion.wins(step)["triton_qk_rope"]
    assert ("Liger 的 RoPE 与本站的 kernel 持平" in sentence) == (won is None)
    assert fusion_page.liger_norm_share(data, None) is None
