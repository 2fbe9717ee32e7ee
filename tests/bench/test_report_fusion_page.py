"""bench/report/fusion_page.py: the 番外二 page's 要点 box and sentences around fusion.json's tables.

* from the committed data: every file renders, the key points say what the raw JSON says (recomputed
  here), the tables on the page are at most 6 columns wide with a Chinese header;
* the comparison words follow the run's tie rule, on made-up ratios;
* a probe log's JSON lines are read, its script's lines are not.
"""
from __future__ import annotations

import copy

import pytest

from artifacts import CJK, tables
from bench import store
from bench.report import fusion_page
from bench.report.render import loader

pytestmark = pytest.mark.skipif(not store.data_path("fusion").exists(), reason="fusion.json not committed")


@pytest.fixture(scope="module")
def data():
    return store.load("fusion")


@pytest.fixture(scope="module")
def rendered():
    return fusion_page.render_summary(loader())


def test_every_file_renders(rendered):
    assert set(rendered) == {f"fusion_page_{name}.md" for name in (
        "keypoints", "env", "qk", "swiglu", "fma", "swiglu_bits", "swiglu_probe", "probe_table", "provenance")}
    assert rendered["fusion_page_keypoints.md"].startswith('!!! abstract "要点"\n\n    - QK-norm + RoPE：')
    assert rendered["fusion_page_env.md"].startswith('!!! info "实验环境"')
    for name, text in rendered.items():
        for header in tables(text):
            assert len(header) <= 6 and CJK.search(header[0]), (name, header)


def _ratio(data, kernel, label, phase, peer):
    entry = next(s for s in data["results"]["kernels"][kernel] if s["label"] == label)
    ours = data["config"]["kernels"][kernel]["ours"]
    return entry[phase][peer]["median_us"] / entry[phase][ours]["median_us"]


def test_keypoints_say_what_the_data_says(data, rendered):
    points = rendered["fusion_page_keypoints.md"]
    qk = [_ratio(data, "qk_rope", s["label"], "fwd_bwd", "compile_hf") for s in data["results"]["kernels"]["qk_rope"]]
    assert f"用时是本站的 {min(qk):.2f}–{max(qk):.2f} 倍" in points
    sw = [_ratio(data, "swiglu", s["label"], "fwd_bwd", "compile_hf") for s in data["results"]["kernels"]["swiglu"]]
    if max(sw) <= 0.98:
        assert f"在全部 {len(sw)} 个形状上慢于 torch.compile(HF)" in points and "手写没有赢" in points
    liger_slower = sum(_ratio(data, "swiglu", s["label"], "fwd_bwd", "liger") <= 0.98
                       for s in data["results"]["kernels"]["swiglu"])
    if liger_slower * 2 > len(sw):
        assert f"不编译时用 Liger（{len(sw)} 个宽度中 {liger_slower} 个比本站快）" in points


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


def test_target_clause():
    assert fusion_page._target_clause([0.9, 0.86]) == "都达到了 85% 的目标"
    assert fusion_page._target_clause([0.8, 0.75]) == "全部低于 85% 的目标"
    assert fusion_page._target_clause([0.8, 0.9]) == "1 个形状低于 85% 的目标"


def test_probe_output_reads_only_the_printed_json():
    text = "\n".join(['# Diagnostic ...', '#   print(json.dumps({"x": 1}))', '{"fma_on": {"whole_equal": 0.5}}',
                      '# Output, second call:', '{"fma_off": {"whole_equal": 1.0}}'])
    assert fusion_page.probe_output(text) == {"fma_on": {"whole_equal": 0.5}, "fma_off": {"whole_equal": 1.0}}


def test_swiglu_advice_follows_the_data(data):
    """With torch.compile no longer ahead at every width, the page does not send SwiGLU to it."""
    faster = copy.deepcopy(data)
    for s in faster["results"]["kernels"]["swiglu"]:
        s["fwd_bwd"]["triton_swiglu"]["median_us"] = s["fwd_bwd"]["compile_hf"]["median_us"] * 0.9
    assert "SwiGLU 用" not in fusion_page.advice(faster)
    assert "手写没有赢" not in fusion_page.swiglu_points(faster)[0]
