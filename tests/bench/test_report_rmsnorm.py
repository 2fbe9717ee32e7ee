"""bench/report/rmsnorm.py: the op-level tables from the committed H200 data (with and without quack), from
the quick run, and the words that turn when ours gets slower."""
from __future__ import annotations

import copy

import pytest

from artifacts import tables
from bench import store
from bench.report import rmsnorm
from bench.report.ops import forward_shapes, forward_twin
from bench_fixtures import check_artifacts


@pytest.fixture(scope="module")
def committed():
    if not store.data_path("rmsnorm").exists():
        pytest.skip("rmsnorm data not committed")
    return store.load("rmsnorm")


def test_the_contender_tables_stay_at_six_columns(committed):
    assert any("quack" in s["fwd"] for s in committed["results"]["shapes"])  # measured on the H200
    rendered = rmsnorm.render(committed)
    # with a quack column the contender tables drop HF eager to stay at 6 columns and say so
    for name in ("rmsnorm_fwd_all.md", "rmsnorm_eager.md"):
        header = tables(rendered[name])[0]
        assert len(header) == 6 and "quack" in header and "HF eager" not in header
        assert "HF eager 未列出" in rendered[name]
    # data from before quack (or a run where it could not load) still renders, without the column
    without = copy.deepcopy(committed)
    for s in without["results"]["shapes"]:
        for phase in ("fwd", "fwd_bwd", "fwd_eager", "fwd_bwd_eager"):
            s[phase].pop("quack", None)
    header = tables(rmsnorm.render(without)["rmsnorm_fwd_all.md"])[0]
    assert "quack" not in header and "HF eager" in header


def test_the_takeaway_turns_when_ours_gets_slower(committed):
    rms = copy.deepcopy(committed)
    for s in rms["results"]["shapes"]:  # make ours three times slower than every peer in forward + backward
        slowest = max(v["median_us"] for n, v in s["fwd_bwd"].items() if n != "triton")
        s["fwd_bwd"]["triton"]["median_us"] = 3 * slowest
    v = rmsnorm.values(rms)  # the page's reading looks these up; its word "快于" is checked on the committed data
    assert float(v["fwd_bwd_peer_ratio"].split("–")[-1]) < 1 and v["fwd_bwd_worst"] != "-0%"


def test_the_forward_tables_have_no_transposed_dy_row(committed):
    """The transposed-dy shape differs from q_norm only in the backward's input: the forward tables leave it
    out (and their sentence and caption with it), the forward + backward tables keep it."""
    twin = [s for s in committed["results"]["shapes"] if s.get("dy_layout") == "heads_transposed"]
    assert twin and forward_twin(twin[0], committed["results"]["shapes"]) is not None
    rendered = rmsnorm.render(committed)
    for name in ("rmsnorm_fwd.md", "rmsnorm_fwd_all.md"):
        assert "dy 转置" not in rendered[name] and "dy" not in rendered[name], name
    forward = [line for line in rendered["rmsnorm_fwd.md"].splitlines() if line.startswith("| H=") or
               line.startswith("| q_norm") or line.startswith("| k_norm")]
    shapes = len(committed["results"]["shapes"])
    assert len(forward) == shapes - len(twin)
    assert rmsnorm.values(committed)["fwd_shapes"] == str(shapes - len(twin))
    assert "| q_norm（dy 转置） |" in rendered["rmsnorm_fwdbwd.md"] and "| q_norm（dy 转置） |" in \
        rendered["rmsnorm_fwdbwd_all.md"]
    assert rmsnorm.values(committed)["fwd_bwd_shapes"] == str(shapes)
    # a transposed-dy shape with no contiguous twin is a forward shape of its own
    alone = [dict(twin[0], rows=twin[0]["rows"] + 1)]
    assert forward_shapes(alone) == alone


def test_renders_from_the_quick_run(quick_rmsnorm):
    rendered = rmsnorm.render(quick_rmsnorm)
    assert {"rmsnorm_fwd.md", "rmsnorm_rstd.md", "rmsnorm_bandwidth.svg"} <= set(rendered)
    check_artifacts(rendered)
    assert "| q_norm |" in rendered["rmsnorm_rstd.md"]  # the rstd entries carry their labels


def test_the_rstd_values_follow_the_data():
    """篇 2 §5.4's values: recomputing rstd against saving it, per shape (|change|, one decimal) and the largest."""
    data = store.load("rmsnorm")
    v = rmsnorm.values(data)
    for r in data["results"]["rstd"]:
        change = abs(r["recomputed_us"] / r["saved_us"] - 1)
        assert v[f"rstd_{rmsnorm.value_key(r['label'])}"] == f"{100 * change:.1f}%"
    assert v["rstd_spread"] == max(v[k] for k in v if k.startswith("rstd_") and k != "rstd_spread")
    assert v["tie"] == "1%" and rmsnorm.value_key("H=1024") == "h1024" and rmsnorm.value_key("q_norm") == "q_norm"
