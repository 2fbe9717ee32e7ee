"""bench/report/summary_index.py: the home page's headline says what fullsize.json says: HF eager's and ours'
tokens/s, the speed-up only where the intervals are apart by more than the resolvable difference, the setup,
and the link."""
from __future__ import annotations

import copy

from bench import store
from bench.report import summary_index


def test_the_headline_is_the_committed_full_size_job_against_hf_eager():
    full, step = store.load("fullsize"), store.load("step")
    res, env = full["results"], full["environment"]
    base, ours, both = res["eager"], res["triton"], res["liger_triton"]
    text = summary_index.headline(full, step)
    assert text.startswith("**实测：** ") and text.endswith("。\n") and text.count("。") == 1
    assert f"{env['gpu_count']} 张 {env['gpu'].replace('NVIDIA ', '')} 上训练完整的 Qwen3-8B（36 层，bf16，AdamW，激活检查点" in text
    assert (f"每秒 token 数从 HF eager 的 {base['tokens_per_s']:,.0f} 升到 {ours['tokens_per_s']:,.0f}"
            f"（{ours['tokens_per_s'] / base['tokens_per_s']:.2f}×）") in text
    assert (f"MFU（按 H200 的 bf16 稠密峰值 989 TFLOP/s 算）从 {100 * base['model_tflops'] / 989:.1f}% 到 "
            f"{100 * ours['model_tflops'] / 989:.1f}%") in text
    assert f"叠加是 {both['tokens_per_s']:,.0f}" in text and f"]({summary_index.LINK})" in text
    assert summary_index.render_summary(store.load) == {"index_headline.md": text}


def test_close_medians_are_level_and_a_missing_contender_is_named():
    full, step = copy.deepcopy(store.load("fullsize")), store.load("step")
    base, ours = full["results"]["eager"], full["results"]["triton"]
    ours["median_ms"] = base["median_ms"] * (1 - step["config"]["resolution"] / 2)  # inside the resolution
    ours["ci95_ms"] = [ours["median_ms"] * 0.999, ours["median_ms"] * 1.001]  # though the intervals are apart
    text = summary_index.headline(full, step)
    assert "持平" in text and "升到" not in text
    ours["status"] = "error"
    assert "本站 RMSNorm没有结果" in summary_index.headline(full, step)
