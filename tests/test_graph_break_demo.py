"""snippets/graph_break_demo.py and the committed explain output it generates (篇2 §一)."""
import pathlib
import runpy

import torch

import graph_break_demo as demo

ROOT = pathlib.Path(__file__).resolve().parents[1]
COMMITTED = ROOT / "docs" / "generated" / "graph_break_explain.txt"


def test_item_branch_breaks_the_graph():
    x = torch.randn(4, 32)
    weight = torch.randn(32)
    broken = demo.explain_report(demo.rms_norm_with_check, x, weight)
    plain = demo.explain_report(demo.rms_norm_plain, x, weight)
    assert "graph_count=2, graph_break_count=1" in broken
    assert "Tensor.item()" in broken
    assert "graph_count=1, graph_break_count=0" in plain
    # Both functions compute the same thing; the check only costs a graph.
    torch.testing.assert_close(demo.rms_norm_with_check(x, weight), demo.rms_norm_plain(x, weight))


def test_committed_output_is_current():
    """docs/generated/graph_break_explain.txt is what the snippet prints today.

    Regenerate with: python snippets/graph_break_demo.py --write docs/generated/graph_break_explain.txt
    Dynamo's wording is version-specific: under another torch version only the
    graph counts are compared.
    """
    regenerated = demo.report()
    committed = COMMITTED.read_text(encoding="utf-8")
    if committed.splitlines()[0] == regenerated.splitlines()[0]:
        assert committed == regenerated
    else:
        counts = [line for line in regenerated.splitlines() if "graph_count=" in line]
        assert counts == [line for line in committed.splitlines() if "graph_count=" in line]


def test_script_prints_the_report(capsys):
    runpy.run_path(demo.__file__, run_name="__main__")
    out = capsys.readouterr().out
    assert "rms_norm_with_check: graph_count=2, graph_break_count=1" in out
    assert "rms_norm_plain: graph_count=1, graph_break_count=0" in out


def test_large_activations_take_the_python_branch(capsys):
    x = torch.randn(2, 16) * 1000  # mean square ~1e6 > 1e4
    demo.rms_norm_with_check(x, torch.ones(16))
    assert "very large activations" in capsys.readouterr().out
