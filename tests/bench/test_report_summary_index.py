"""bench/report/summary_index.py: the home page's headline figure says what step.json says: the baseline's and
ours' step, the speed-up only where the two ranges of timed steps are apart, the setup, and the link."""
from __future__ import annotations

import copy

from bench import store
from bench.report import summary_index


def test_the_headline_is_the_committed_step_against_hf_eager():
    data = store.load("step")
    cfg, results, env = data["config"], data["results"], data["environment"]
    base, ours = results[cfg["baseline"]], results[cfg["ours"]]
    text = summary_index.headline(data)
    assert text.startswith("**实测：** ") and text.endswith("。\n") and text.count("。") == 1
    assert (f"{env['gpu_count']} 张 {env['gpu'].replace('NVIDIA ', '')} 上训练 Qwen3-{cfg['model']['size']} 几何、"
            f"{cfg['geometry']['num_hidden_layers']} 层的模型（bf16，B={cfg['batch']}，T={cfg['seq_len']}）") in text
    assert f"从 HF eager 的 {base['median_ms']:.1f} ms 降到 {ours['median_ms']:.1f} ms" in text
    assert f"快 {base['median_ms'] / ours['median_ms']:.2f}×（两者各 {cfg['timed_steps']} 步的用时范围不重叠）" in text
    assert f"]({summary_index.LINK})" in text
    assert summary_index.render_summary(store.load) == {"index_headline.md": text}


def test_overlapping_ranges_are_level_and_a_missing_contender_is_named():
    data = copy.deepcopy(store.load("step"))
    cfg = data["config"]
    base, ours = data["results"][cfg["baseline"]], data["results"][cfg["ours"]]
    ours["max_ms"] = base["min_ms"] + 1
    text = summary_index.headline(data)
    assert "两者各 8 步的用时范围重叠，算持平" in text and "快" not in text.split("；")[0].split("kernel")[-1]
    ours["status"] = "error"
    assert "生产版（forward + backward）没有结果" in summary_index.headline(data)
