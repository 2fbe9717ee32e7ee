"""bench/report/tuning.py: the launch-config tables and plot from the committed data (the plot reads the copy
ceiling of the rmsnorm record next to it); bench/exp_tuning.py's quick run is checked in test_exp_tuning.py."""
from __future__ import annotations

from artifacts import tables
from bench import store
from bench.report import tuning
from bench_fixtures import check_artifacts


def test_committed_tables_name_the_shapes():
    rendered = tuning.render(store.load("tuning"))
    check_artifacts(rendered)
    assert tables(rendered["tuning_fwd.md"])[0][0] == "形状"
    assert "| q_norm |" in rendered["tuning_fwd.md"] and "| H=4096 |" in rendered["tuning_bwd.md"]


def test_programs_sentence_follows_the_sweep():
    """篇2 §7.1's sentence: its words change with the data (here: one program per SM made the slowest everywhere)."""
    import copy

    data = store.load("tuning")
    text = tuning.programs_sentence(data)
    assert "只放 1 个常驻 program" in text and "但不总是最慢：H=4096 上放 8 个更慢" in text
    assert "只有 q_norm 的 128 宽行上放 2、4、8 个打平" in text and "本站实现取 8 个" in text
    # the sentence compares each count at its own best BLOCK_ROWS and num_warps, which the plot's line does not
    assert text.startswith("backward 里，若每种 program 数各取自己最快的 BLOCK_ROWS 与 num_warps")
    slowest_one = copy.deepcopy(data)
    for entry in slowest_one["results"]:
        for config in entry["bwd"]:
            if config["programs_per_sm"] == 1:
                config["us"] *= 10
    changed = tuning.programs_sentence(slowest_one)
    assert "不总是最慢" not in changed and "慢 " in changed
