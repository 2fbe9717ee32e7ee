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


def test_one_program_per_sm_is_the_slowest_backward_at_every_width():
    """篇2 §7.1 (its ledger row): in the committed sweep, at every width the best backward with one
    resident program per SM is slower than the best with 2 or 4, and the fastest count is 2 or 4 (at 128
    columns 4 and 8 tie with it within 1 %)."""
    from bench import store

    for shape in store.load("tuning")["results"]:
        best = {}
        for config in shape["bwd"]:
            best[config["programs_per_sm"]] = min(best.get(config["programs_per_sm"], float("inf")), config["us"])
        assert best[1] > max(best[2], best[4]), (shape["width"], best)
        assert min(best, key=best.get) in (2, 4, 8) and min(best[2], best[4]) <= 1.01 * min(best.values()), (shape["width"], best)
