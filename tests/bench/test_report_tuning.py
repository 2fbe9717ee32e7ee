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
