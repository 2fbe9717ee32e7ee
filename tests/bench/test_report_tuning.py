"""bench/report/tuning.py: the launch-config tables and plot, from the committed data and from the quick run
(whose plot needs the rmsnorm record of the same GPU next to it for the copy ceiling)."""
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


def test_renders_from_the_quick_run(quick_tuning, quick_rmsnorm, tmp_path, monkeypatch):
    (tmp_path / "cpu").mkdir()
    store.write(tmp_path / "cpu" / "rmsnorm.json", quick_rmsnorm)
    monkeypatch.setattr(store, "DATA_DIR", tmp_path)
    rendered = tuning.render(quick_tuning)
    assert set(rendered) == {"tuning_fwd.md", "tuning_bwd.md", "tuning.svg"}
    assert "| q_norm |" in rendered["tuning_fwd.md"]  # the entries carry their labels
