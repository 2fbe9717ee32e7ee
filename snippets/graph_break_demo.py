# SPDX-License-Identifier: Apache-2.0
"""A real torch.compile graph break, reported by torch._dynamo.explain.

A data-dependent Python branch (`if tensor.item() > ...`) forces Dynamo to stop
tracing, run the Python `if`, and start a second graph: Inductor can only fuse
inside each piece. The same function without the check compiles to one graph.

    python snippets/graph_break_demo.py    # print the report
    python snippets/graph_break_demo.py --write docs/generated/graph_break_explain.txt
"""
import pathlib
import sys

# --8<-- [start:demo]
import torch


def rms_norm_with_check(x, weight, eps=1e-6):
    variance = x.float().pow(2).mean(-1, keepdim=True)
    if variance.max().item() > 1e4:  # data-dependent Python branch: graph break
        print("warning: very large activations")
    y = x.float() * torch.rsqrt(variance + eps)
    return weight * y.to(x.dtype)
# --8<-- [end:demo]


def rms_norm_plain(x, weight, eps=1e-6):
    variance = x.float().pow(2).mean(-1, keepdim=True)
    y = x.float() * torch.rsqrt(variance + eps)
    return weight * y.to(x.dtype)


def explain_report(fn, *args) -> str:
    """torch._dynamo.explain's graph count, graph ops and break reasons as text."""
    torch._dynamo.reset()
    explanation = torch._dynamo.explain(fn)(*args)
    lines = [f"{fn.__name__}: graph_count={explanation.graph_count}, "
             f"graph_break_count={explanation.graph_break_count}"]
    for number, graph in enumerate(explanation.graphs, 1):
        ops = [getattr(node.target, "__name__", str(node.target))
               for node in graph.graph.nodes
               if node.op in ("call_function", "call_method")]
        lines.append(f"  graph {number} ops: {', '.join(ops)}")
    for brk in explanation.break_reasons:
        lines.append(f"  break reason: {brk.reason.splitlines()[0]}")
        frame = brk.user_stack[-1]
        lines.append(f"    at {pathlib.Path(frame.filename).name}:{frame.lineno}: "
                     f"{(frame.line or '').strip()}")
    return "\n".join(lines)


def report() -> str:
    """The text of docs/generated/graph_break_explain.txt."""
    x = torch.randn(8, 64, dtype=torch.bfloat16)
    weight = torch.randn(64, dtype=torch.bfloat16)
    header = (f"# on a CPU, torch {torch.__version__.split('+')[0]}: "
              "torch._dynamo.explain(fn)(x, weight), x: bf16 (8, 64)")
    lines = [header] + [explain_report(fn, x, weight)
                        for fn in (rms_norm_with_check, rms_norm_plain)]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--write":
        pathlib.Path(sys.argv[2]).write_text(report(), encoding="utf-8")
    # --8<-- [start:call]
    from graph_break_demo import explain_report, rms_norm_plain

    x = torch.randn(8, 64, dtype=torch.bfloat16)
    weight = torch.randn(64, dtype=torch.bfloat16)
    print(explain_report(rms_norm_with_check, x, weight))
    print(explain_report(rms_norm_plain, x, weight))
    # --8<-- [end:call]
