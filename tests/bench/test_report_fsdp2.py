"""bench/report/fsdp2.py: the FSDP2 table, plot and the values of the pages' readings, what they say when a contender
fails, errs or is unavailable, and the committed file from before the fused kernel's own id (the readings' words:
tests/test_readings_methods.py, tests/test_readings_fused_add.py)."""
from __future__ import annotations

import json
import re

from bench import exp_fsdp2, store
from bench.report import fsdp2 as report_fsdp2
from bench.report import plots


def test_render_from_the_quick_run(quick_fsdp2):
    rendered = report_fsdp2.render(quick_fsdp2)
    assert rendered == report_fsdp2.render(json.loads(json.dumps(quick_fsdp2))), "deterministic"
    assert set(rendered) == {"fsdp2.md", "fsdp2.svg", "fsdp2_large.md"}
    large = rendered["fsdp2_large.md"]  # the large geometry: a row per contender, Liger's unavailable on CPU
    assert large.count("\n| ") == 1 + len(quick_fsdp2["config"]["large"]["contenders"])
    assert "| 本站整套 + 融合 loss |" in large and "MFU 以 GPU 的稠密 bf16 峰值为分母" in large
    values = report_fsdp2.values(quick_fsdp2)
    assert values["gpus"] == "2" and values["tflop"].endswith(" TFLOP") and "amp_hf_ms" in values
    rest = rendered["fsdp2.md"]
    assert rest.startswith("| ")  # the methods page reads the table by hand (values: worst_final, control_final)
    header = next(line for line in rest.splitlines() if line.startswith("|"))
    cells = header.strip("|").split("|")
    assert len(cells) <= 6 and all(re.search(r"[\u4e00-\u9fff]", c) for c in cells), header
    assert rest.count("\n| ") == 1 + len(quick_fsdp2["config"]["variants"]) * len(exp_fsdp2.CONTENDERS)
    assert any("相对差" in t for t in plots.svg_texts(rendered["fsdp2.svg"]))
    facts = report_fsdp2.article_facts(quick_fsdp2)
    assert facts["passed"] == quick_fsdp2["results"]["passed"]
    assert facts["steps"] == quick_fsdp2["config"]["steps"] and facts["gpus"] == 2
    assert facts["worst_final_rel_diff"] == max(quick_fsdp2["results"][v][a]["gate"]["final_rel_diff"]
                                                for v in quick_fsdp2["config"]["variants"] for a in exp_fsdp2.GATED
                                                if quick_fsdp2["results"][v][a]["status"] == "ok")


def test_render_says_fail_error_and_unavailable(quick_fsdp2):
    data = json.loads(json.dumps(quick_fsdp2))
    gate = data["results"]["bf16"]["triton"]["gate"]
    gate.update(passed=False, final_rel_diff=0.02)
    data["results"]["passed"] = False
    data["results"]["amp"]["triton_fused_add"] = {"status": "error", "reason": "ValueError: boom"}
    data["results"]["bf16"]["triton_fused_add"] = {"status": "unavailable", "reason": "x"}
    data["results"]["unavailable"] = ["triton_fused_add"]
    text = report_fsdp2.render(data)["fsdp2.md"]
    facts = report_fsdp2.article_facts(data)
    assert facts["failed"] == ["bf16 权重下的本站 RMSNorm"] and not facts["passed"]
    values = report_fsdp2.values(data)
    assert (values["worst_final"], values["worst_where"]) == ("2.000%", "bf16 权重下的本站 RMSNorm")
    assert "| bf16 权重：本站 RMSNorm |" in text and "| 未通过 |" in text and "| 出错 |" in text
    assert "ValueError: boom" in text.split("\n\n")[-1], "the caption gives the error"
    assert "fsdp2.svg" in report_fsdp2.render(data)


def test_a_file_from_before_the_word_contender_is_read_in_todays_words():
    """fsdp2.json lists "arms" and calls the fused add + RMSNorm "fused": read renamed, it renders as before."""
    old = store.load("fsdp2")
    assert "arms" in old["config"] and "fused" in old["config"]["arms"]
    current = report_fsdp2.current(old)
    assert current["config"]["contenders"] == ["hf", "control", "triton", "triton_fused_add"]
    assert all(set(current["results"][v]) == set(current["config"]["contenders"]) for v in old["config"]["variants"])
    assert report_fsdp2.current(current) is current
    assert report_fsdp2.render(old) == report_fsdp2.render(current)
    assert "融合残差加 + RMSNorm" in report_fsdp2.render(old)["fsdp2.md"]


def test_the_matrix_work_counts_each_gpus_work_once():
    """6 x parameters x tokens with the tokens of one GPU is already one GPU's work (it was divided by the
    GPU count a second time); the values give it and every contender's step time as the table does."""
    data = report_fsdp2.current(store.load("fsdp2"))
    cfg, results = report_fsdp2.config(data), data["results"]
    params = max(results[v]["hf"]["parameters_per_rank"][0] for v in cfg["variants"]) * cfg["world_size"]
    per_gpu = 6 * params * (cfg["batch"] // cfg["world_size"] * cfg["seq_len"]) / 1e12
    values = report_fsdp2.values(data)
    assert values["tflop"] == f"{per_gpu:.2g} TFLOP"
    assert values["bf16_triton_ms"] == f"{max(results['bf16']['triton']['median_step_ms']):.1f} ms"


def test_the_fused_add_rate_is_the_matrix_work_over_the_fastest_step():
    """番外 §七's figures: the fused patch's and HF's step per precision setting (the larger of the two GPUs'
    medians), and each GPU's matrix work over the fastest of those steps; no rate without HF or the patch."""
    data = store.load("fsdp2")
    values = report_fsdp2.values(data)
    amp, bf16 = (data["results"][v] for v in ("amp", "bf16"))
    for name, variant in (("amp", amp), ("bf16", bf16)):
        fused, hf = (max(variant[a]["median_step_ms"]) for a in ("fused", "hf"))
        assert values[f"{name}_triton_fused_add_ms"] == f"{fused:.1f} ms" and values[f"{name}_hf_ms"] == f"{hf:.1f} ms"
    cfg = data["config"]
    tokens_per_gpu = cfg["batch"] // cfg["world_size"] * cfg["seq_len"]
    tflop = 6 * amp["hf"]["parameters_per_rank"][0] * cfg["world_size"] * tokens_per_gpu / 1e12
    fastest = min(max(data["results"][v][a]["median_step_ms"]) for v in ("amp", "bf16") for a in ("fused", "hf"))
    assert values["tflop"] == f"{tflop:.2g} TFLOP"
    assert values["fused_add_rate"] == f"{tflop / fastest * 1e3:.2g} TFLOP/s"
    broken = json.loads(json.dumps(data))
    for variant in cfg["variants"]:
        broken["results"][variant]["fused"]["status"] = "error"
    assert report_fsdp2.fused_add_rate(broken) is None and "fused_add_rate" not in report_fsdp2.values(broken)
