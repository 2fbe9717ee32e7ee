"""The section chains the articles include, each pasted in order into an empty file, run.

A page shows a snippet by sections (``# --8<-- [start:name]`` ... ``[end:name]``); a reader
pastes the blocks of one chain into a new script. Each chain below must have no undefined
name (pyflakes) and must run as ``__main__``.
"""
import ast
import pathlib
import re
import runpy
import textwrap

import pytest
from pyflakes import checker, messages

SNIPPETS = pathlib.Path(__file__).resolve().parents[1] / "snippets"
CHAINS = {  # what the pages of 篇 2 and its companion pages include, in order
    "forward kernel": [("rmsnorm_triton", "imports"), ("rmsnorm_triton", "tile"),  # 篇 2 §4.3
                       ("rmsnorm_triton", "fwd_imports"), ("rmsnorm_triton", "fwd_kernel")],
    "backward kernel, launcher and check": [  # 篇 2 §5.4: the helpers come from the file
        ("rmsnorm_triton", "imports"), ("rmsnorm_triton", "bwd_imports"),
        ("rmsnorm_triton", "bwd_kernel"), ("rmsnorm_triton", "bwd_launch"),
        ("rmsnorm_triton", "bwd_check")],
    "both kernels": [("rmsnorm_triton", "imports"), ("rmsnorm_triton", "tile"),
                     ("rmsnorm_triton", "fwd_kernel"), ("rmsnorm_triton", "fused_helpers"),
                     ("rmsnorm_triton", "bwd_tile"),
                     ("rmsnorm_triton", "bwd_kernel"), ("rmsnorm_triton", "dw_reduce_kernel")],
    "column blocks": [("rmsnorm_triton", "imports"), ("rmsnorm_triton", "column_blocks")],
    "fused helpers": [("rmsnorm_triton", "imports"), ("rmsnorm_triton", "fused_helpers")],
    "fused op": [("rmsnorm_fused_add", "imports"), ("rmsnorm_fused_add", "autograd"),
                 ("rmsnorm_fused_add", "module"), ("rmsnorm_fused_add", "usage")],
    # 番外二 §三, §四: the file's imports, then its helpers imported from the file, then the kernel
    "QK forward tile": [("qk_norm_rope", "imports"), ("qk_norm_rope", "tile_imports"),
                        ("qk_norm_rope", "fwd_tile")],
    "SwiGLU backward kernel": [("swiglu", "imports"), ("swiglu", "kernel_imports"),
                               ("swiglu", "bwd_kernel")],
}
MARKER = re.compile(r"^\s*# --8<-- \[(start|end):(\w+)\]\s*$")


def section(module: str, name: str) -> str:
    """The lines of one section, other markers dropped, dedented (as pymdownx.snippets does)."""
    lines, inside, found = [], False, False
    for line in (SNIPPETS / f"{module}.py").read_text().splitlines():
        match = MARKER.match(line)
        if match:
            if match.group(2) == name:
                inside = match.group(1) == "start"
                found = found or inside
            continue
        if inside:
            lines.append(line)
    assert found, f"{module}.py has no section {name}"
    return textwrap.dedent("\n".join(lines)) + "\n"


def test_sections_are_well_formed():
    for path in [*SNIPPETS.glob("rmsnorm_*.py"), SNIPPETS / "qk_norm_rope.py", SNIPPETS / "swiglu.py"]:
        open_ = {}
        for number, line in enumerate(path.read_text().splitlines(), 1):
            match = MARKER.match(line)
            if match:
                kind, name = match.groups()
                if kind == "start":
                    assert name not in open_, f"{path.name}:{number} reopens {name}"
                    open_[name] = number
                else:
                    assert open_.pop(name, None), f"{path.name}:{number} ends {name} never started"
        assert not open_, f"{path.name}: unclosed {open_}"


@pytest.mark.parametrize("chain", sorted(CHAINS))
def test_chain_runs_pasted_into_an_empty_file(chain, tmp_path, capsys):
    code = "\n\n".join(section(module, name) for module, name in CHAINS[chain])
    for line in code.splitlines():
        assert len(line) <= 88, line
    undefined = [m for m in checker.Checker(ast.parse(code)).messages
                 if isinstance(m, (messages.UndefinedName, messages.UndefinedExport))]
    assert not undefined, [str(m) for m in undefined]
    script = tmp_path / "pasted.py"
    script.write_text(code)
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    if chain == "backward kernel, launcher and check":
        errors = [float(v) for v in re.findall(r"max error (\S+) of", out)]
        assert len(errors) == 2 and max(errors) < 0.02, out  # bf16: a few ulps of the largest value
