# SPDX-License-Identifier: Apache-2.0
"""Read Qwen3 as a graph: torch.fx.symbolic_trace where it works, torch.export
where it does not.

Article 1 (docs/qwen3-fusion.md) shows this file in parts;
tests/test_p1_fx_trace.py tests it.

    python snippets/p1_fx_trace.py
"""
# --8<-- [start:symbolic_trace]
import linecache
import pathlib

import torch
import torch.fx


def try_symbolic_trace(module: torch.nn.Module):
    """(GraphModule, None) if torch.fx.symbolic_trace succeeds, else (None, why not)."""
    try:
        return torch.fx.symbolic_trace(module), None
    # fx raises TraceError, ValueError, TypeError, ... depending on the code
    except Exception as error:
        return None, describe_failure(error)


def describe_failure(error: Exception) -> str:
    """'ErrorType: message' plus the last model-code line (outside torch) reached."""
    message = (str(error).strip().splitlines() or [""])[0].split(". ")[0][:80]
    torch_dir = pathlib.Path(torch.__file__).parent
    where = ""
    frame = error.__traceback__
    while frame is not None:
        filename = frame.tb_frame.f_code.co_filename
        # Skip torch's own frames.
        if not pathlib.Path(filename).is_relative_to(torch_dir):
            line = linecache.getline(filename, frame.tb_lineno).strip()
            where = f" at {pathlib.Path(filename).name}:{frame.tb_lineno}: {line}"
        frame = frame.tb_next
    if "p1_fx_trace" in where:  # failed before entering model code
        where = ""
    return f"{type(error).__name__}: {message}{where}"


def qwen3_parts(model) -> dict:
    """The whole model and one of each building block, from the outside in."""
    layer = model.model.layers[0]
    return {
        "Qwen3ForCausalLM": model,
        "Qwen3DecoderLayer": layer,
        "Qwen3Attention": layer.self_attn,
        "Qwen3MLP": layer.mlp,
        "Qwen3RMSNorm": layer.input_layernorm,
    }
# --8<-- [end:symbolic_trace]


# --8<-- [start:op_kinds]
import collections

import torch
import torch.fx


def op_name(node: torch.fx.Node, root: torch.nn.Module | None = None) -> str | None:
    """A short, comparable name for a graph node: 'pow', 'rsqrt', 'linear', ...

    Works for symbolic_trace graphs (torch functions, Tensor methods, submodules)
    and for torch.export graphs (ATen overloads such as aten.pow.Tensor_Scalar).
    Placeholders, outputs and attribute reads return None.
    """
    if node.op == "call_module":
        return (type(root.get_submodule(node.target)).__name__ if root is not None
                else str(node.target))
    if node.op == "call_method":
        return node.target
    if node.op == "call_function":
        target = node.target
        if isinstance(target, torch._ops.OpOverload):  # aten.pow.Tensor_Scalar -> pow
            return target._schema.name.split("::")[-1]
        return getattr(target, "__name__", str(target)).strip("_")
    return None


def op_kinds(graph_module: torch.fx.GraphModule) -> collections.Counter:
    """How many nodes of each op kind a graph holds."""
    names = (op_name(node, graph_module) for node in graph_module.graph.nodes)
    # torch.export adds _assert_tensor_metadata checks; they do no compute
    return collections.Counter(name for name in names
                               if name and not name.startswith("_assert"))
# --8<-- [end:op_kinds]


# --8<-- [start:patterns]
# Each fusable pattern, written as a chain read backwards from its last op:
# rsqrt(add(mean(pow(x)))) is the variance part of RMSNorm, cat(neg(x2), x1) is
# RoPE's rotate_half, mul(silu(gate), up) is SwiGLU.
PATTERNS = {
    "RMSNorm": ("rsqrt", "add", "mean", "pow"),
    "RoPE rotate_half": ("cat", "neg"),
    "SwiGLU": ("mul", "silu"),
}


def count_pattern(graph_module: torch.fx.GraphModule, chain: tuple[str, ...]) -> int:
    """Occurrences of ``chain`` in the graph: a node named chain[0] whose input (some
    argument) is a node named chain[1], whose input is chain[2], and so on."""
    def matches(node, rest):
        if op_name(node, graph_module) != rest[0]:
            return False
        if len(rest) == 1:
            return True
        return any(isinstance(arg, torch.fx.Node) and matches(arg, rest[1:])
                   for arg in node.all_input_nodes)

    return sum(matches(node, chain) for node in graph_module.graph.nodes)


def count_patterns(graph_module: torch.fx.GraphModule) -> dict:
    return {name: count_pattern(graph_module, chain)
            for name, chain in PATTERNS.items()}
# --8<-- [end:patterns]


# --8<-- [start:export]
import torch


def export_model(model, input_ids: torch.Tensor) -> torch.fx.GraphModule:
    """The whole Qwen3ForCausalLM as one ATen graph, via torch.export (no KV cache)."""
    program = torch.export.export(model, (input_ids,), kwargs={"use_cache": False})
    return program.graph_module


class DecoderLayerCall(torch.nn.Module):
    """Calls a decoder layer with plain tensor arguments, as Qwen3Model calls it."""

    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, hidden_states, cos, sin):
        return self.layer(hidden_states, attention_mask=None,
                          position_embeddings=(cos, sin))


def export_decoder_layer(model, seq_len: int = 8) -> torch.fx.GraphModule:
    """One Qwen3DecoderLayer as an ATen graph, with example inputs made by the model."""
    hidden = torch.randn(1, seq_len, model.config.hidden_size)
    position_ids = torch.arange(seq_len)[None]
    cos, sin = model.model.rotary_emb(hidden, position_ids)
    program = torch.export.export(DecoderLayerCall(model.model.layers[0]),
                                  (hidden, cos, sin))
    return program.graph_module
# --8<-- [end:export]


if __name__ == "__main__":
    # --8<-- [start:usage_trace]
    from p1_fx_trace import op_kinds, qwen3_parts, try_symbolic_trace
    from p1_static_read import build_qwen3
    from qwen3_configs import tiny_qwen3_config

    model = build_qwen3(tiny_qwen3_config(), device="cpu")
    for name, part in qwen3_parts(model).items():
        graph, error = try_symbolic_trace(part)
        print(f"{name:18s}", dict(op_kinds(graph)) if graph else error)
    # --8<-- [end:usage_trace]

    # --8<-- [start:usage_export]
    import torch

    from p1_fx_trace import count_patterns, export_model, op_kinds
    from p1_static_read import build_qwen3
    from qwen3_configs import tiny_qwen3_config

    config = tiny_qwen3_config()  # 2 layers
    model = build_qwen3(config, device="cpu")
    graph = export_model(model, torch.randint(0, config.vocab_size, (1, 8)))
    kinds = op_kinds(graph)
    print(sum(kinds.values()), "ATen ops:", kinds.most_common(8))
    print(count_patterns(graph))  # RMSNorm: 4 x 2 + 1 = 9
    # --8<-- [end:usage_export]
