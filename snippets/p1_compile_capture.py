# SPDX-License-Identifier: Apache-2.0
"""Automatic fusion: what torch.compile (Inductor) generates for Qwen3's RMSNorm.

Article 1 (docs/qwen3-fusion.md) shows this file in parts;
tests/test_p1_compile_capture.py tests it.
`TORCH_LOGS=output_code python x.py` prints every module Inductor writes; here the
same text is captured as strings, split into kernels, and saved. On a GPU the
kernels are Triton; on CPU, C++.

    python snippets/p1_compile_capture.py [out.txt]
"""
import sys

# --8<-- [start:capture]
import re

import torch


def capture_output_code(fn, *args):
    """Run ``fn(*args)`` and return (result, [generated modules]).

    The modules are the text that TORCH_LOGS=output_code logs. The compile caches
    are off so that a warm cache cannot skip code generation. ``run_and_get_code``
    also resets dynamo, so everything compiled inside fn is fresh.
    """
    from torch._functorch import config as aot_config
    from torch._inductor import config as inductor_config
    from torch._inductor.utils import run_and_get_code

    with (inductor_config.patch(fx_graph_cache=False),
          aot_config.patch(enable_autograd_cache=False)):
        return run_and_get_code(fn, *args)


KERNEL = re.compile(
    # '# kernel path', '# ... Source Nodes: [...]'
    r"(?P<comments>(?:^#[^\n]*\n)*)"
    r"^(?P<variable>\w+) = async_compile\.(?P<kind>\w+)\("  # triton / cpp_pybinding
    r"[^\n]*?r?'''\n?(?P<source>.*?)'''",
    re.S | re.M,
)


def generated_kernels(module_source: str) -> list:
    """The kernels defined in one generated module, in order.

    Each is a dict: name, kind, the ATen ops it fuses (source_nodes), source.
    """
    kernels = []
    for match in KERNEL.finditer(module_source):
        nodes = re.search(
            r"# (?:Topologically Sorted|Unsorted) Source Nodes: \[(.*?)\]",
            match["comments"])
        kernels.append({
            "name": match["variable"],
            "kind": match["kind"],
            "source_nodes": [n.strip() for n in nodes[1].split(",")] if nodes else [],
            "source": match["source"].strip("\n"),
        })
    return kernels


def graph_kind(module_source: str) -> str:
    """'forward' or 'backward' (or 'inference'), from Inductor's '# AOT ID' header."""
    header = re.search(r"# AOT ID: \['\d+_(\w+)'\]", module_source)
    return header[1] if header else "unknown"


def kernel_body(source: str) -> str:
    """A Triton kernel from '@triton.jit' on.

    Drops the imports and Inductor's tuning decorator above it.
    """
    start = source.find("@triton.jit")
    return source[start:] if start >= 0 else source
# --8<-- [end:capture]


# --8<-- [start:rmsnorm]
def compile_rmsnorm(hidden_size: int = 4096, rows: int = 8, device: str = "cpu",
                    dtype=torch.bfloat16):
    """torch.compile HF's Qwen3RMSNorm, run forward + backward once, and return its
    generated kernels as {'forward': [...], 'backward': [...]}."""
    from transformers.models.qwen3.modeling_qwen3 import Qwen3RMSNorm

    norm = Qwen3RMSNorm(hidden_size).to(device=device, dtype=dtype)
    x = torch.randn(rows, hidden_size, device=device, dtype=dtype, requires_grad=True)
    grad = torch.randn(rows, hidden_size, device=device, dtype=dtype)
    compiled = torch.compile(norm)

    def forward_backward():
        compiled(x).backward(grad)

    _, modules = capture_output_code(forward_backward)
    return {graph_kind(module): generated_kernels(module) for module in modules}
# --8<-- [end:rmsnorm]


if __name__ == "__main__":
    # --8<-- [start:usage]
    import torch

    from p1_compile_capture import compile_rmsnorm, kernel_body

    # Triton kernels on a GPU, C++ on CPU
    device = "cuda" if torch.cuda.is_available() else "cpu"
    kernels = compile_rmsnorm(hidden_size=4096, rows=8, device=device)
    for graph, found in kernels.items():
        for kernel in found:
            print(f"{graph:8s} {kernel['name']}  fuses {kernel['source_nodes']}")
    print(kernel_body(kernels["forward"][0]["source"])[:600])
    # --8<-- [end:usage]
    if len(sys.argv) > 1:
        with open(sys.argv[1], "w", encoding="utf-8") as file:
            file.write(kernel_body(kernels["forward"][0]["source"]) + "\n")
