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


def test_the_values_follow_the_sweep():
    """篇 2 §7.1's values: the widths swept, and how far one program per SM lags each width's fastest config (each
    count at its own best BLOCK_ROWS and num_warps); ten times slower with one program, the lag follows."""
    import copy

    data = store.load("tuning")
    assert tuning.values(data) == {"widths": "6", "one_lag": "7%–31%", "tie": "1%"}
    slowest_one = copy.deepcopy(data)
    for entry in slowest_one["results"]:
        for config in entry["bwd"]:
            if config["programs_per_sm"] == 1:
                config["us"] *= 10
    assert tuning.values(slowest_one)["one_lag"].startswith("9")
