# SPDX-License-Identifier: Apache-2.0
"""Which transformers the Qwen3 patches accept: decided by the code they mirror.

The patches (qwen3_patch.py, qwen3_fused_add_patch.py) stand in for parts of
transformers' Qwen3 and lean on transformers' machinery around them (gradient
checkpointing, output capture, config defaults). A version number says little
about that code: 5.23 changed how checkpointing wraps a layer and left the Qwen3
file alone; 5.25 left the whole Qwen3 file byte for byte as 5.24 had it.

So each piece is fingerprinted: its syntax tree, without docstrings and type
annotations, hashed. TESTED records the fingerprint of every transformers version
the patch tests ran on. A version whose fingerprint equals a tested one runs code
the tests ran on and is accepted, whatever its number; anything else is refused,
naming the pieces that differ.

Run ``python qwen3_mirrored_code.py`` to print the installed version's entry.
"""
import ast
import hashlib
import inspect
import sys

import transformers
import transformers.models.qwen3.modeling_qwen3 as modeling_qwen3
from transformers.loss import loss_utils

# --8<-- [start:pieces]
# The mirrored pieces, in TESTED's order.
PIECES = (
    "Qwen3RMSNorm",  # both patches reproduce its arithmetic (HF's cast order)
    "Qwen3DecoderLayer",  # the fused patch rewrites its forward, adds moved
    "Qwen3Model",  # the fused patch rewrites its forward: layer loop, final norm
    "GradientCheckpointingLayer",  # wraps a layer's forward for checkpointing
    "capture_outputs",  # records hidden states and attentions from the layers
    "install_output_capuring_hook",  # (sic) what a recorded layer output is
    "_CanRecordRegistry",  # where a model class's recorded outputs are looked up
    "merge_with_config_defaults",  # fills use_cache and friends from the config
    "Qwen3Attention",  # the fusion patch rewrites its forward: q/k norm + RoPE fused
    "rotate_half",  # RoPE's arithmetic, reproduced by the fused q/k kernel
    "apply_rotary_pos_emb",
    "Qwen3RotaryEmbedding",  # makes cos and sin: their dtype and layout
    "Qwen3MLP",  # the fusion patch rewrites its forward: SwiGLU fused
    "Qwen3ForCausalLM",  # the fused loss rewrites its forward's logits and loss
    "ForCausalLMLoss",  # HF's loss (shift, ignore_index), reproduced without logits
    "fixed_cross_entropy",  # its mean or sum / num_items_in_batch
    "slice_logits_to_keep",  # 5.22+: which positions get logits (missing before)
    "can_return_tuple",  # return_dict=False: the output as a tuple
)

# transformers versions the patch tests ran on -> fingerprint (PIECES' digests).
TESTED = {
    "5.17.0": "d2f0569a389c 33b93ae7299a 2c8323462173 22ce9d21c946 "
              "2a9119043510 11ef8bfcb7a5 missing 9f836ac40e77 "
              "de3fb50f5f3e e40a6f5690e6 97fe9d70f899 7d8081c15b2e "
              "ed2873bc9f1b 0a2de0c7263b c7c5440d2104 9121fe97327d "
              "missing a7d37036499c",
    "5.22.2": "d2f0569a389c 33b93ae7299a 2c8323462173 22ce9d21c946 "
              "4d3c49258e84 11ef8bfcb7a5 missing 9f836ac40e77 "
              "de3fb50f5f3e e40a6f5690e6 97fe9d70f899 2865a4d245f8 "
              "ed2873bc9f1b 034aed233af1 c7c5440d2104 9121fe97327d "
              "e55932fc273b a7d37036499c",
    "5.23.0": "d2f0569a389c 33b93ae7299a 2c8323462173 f03cdbec4366 "
              "5a173dabc469 2865397999c8 46599738c9aa 9f836ac40e77 "
              "de3fb50f5f3e e40a6f5690e6 97fe9d70f899 2865a4d245f8 "
              "ed2873bc9f1b 034aed233af1 c7c5440d2104 9121fe97327d "
              "e55932fc273b a7d37036499c",
    "5.24.0": "d2f0569a389c d11343373c22 397a172157f3 1dbb2b5e340c "
              "5a173dabc469 2865397999c8 46599738c9aa 87b3ee664131 "
              "5c715386ddcb e40a6f5690e6 97fe9d70f899 0aafd48e9d57 "
              "ed2873bc9f1b 2f6c629ada5c c7c5440d2104 9121fe97327d "
              "e55932fc273b a7d37036499c",
    "5.25.0": "d2f0569a389c d11343373c22 397a172157f3 1dbb2b5e340c "
              "5a173dabc469 2865397999c8 46599738c9aa 87b3ee664131 "
              "5c715386ddcb e40a6f5690e6 97fe9d70f899 0aafd48e9d57 "
              "ed2873bc9f1b 2f6c629ada5c c7c5440d2104 9121fe97327d "
              "e55932fc273b a7d37036499c",
}
# --8<-- [end:pieces]


class _CodeOnly(ast.NodeTransformer):
    """Drops docstrings and type annotations: they do not change what code does."""

    def _without_docstring(self, node):
        first = node.body[0] if node.body else None
        if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                and isinstance(first.value.value, str)):
            node.body = node.body[1:] or [ast.Pass()]
        return node

    def visit_FunctionDef(self, node):
        node.returns = None
        self.generic_visit(node)
        return self._without_docstring(node)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node):
        self.generic_visit(node)
        return self._without_docstring(node)

    def visit_arg(self, node):
        node.annotation = None
        return node

    def visit_AnnAssign(self, node):
        if node.value is None:
            return None
        return ast.Assign(targets=[node.target], value=node.value, lineno=node.lineno)


def _canonical(node) -> str:
    """The tree as text, leaving out empty fields: newer Pythons add fields (3.12: a
    function's type_params) that stay empty in this code, and ast.dump shows them."""
    if isinstance(node, ast.AST):
        fields = [f"{name}={_canonical(value)}" for name, value in ast.iter_fields(node)
                  if value is not None and value != []]
        return f"{type(node).__name__}({', '.join(fields)})"
    if isinstance(node, list):
        return f"[{', '.join(_canonical(item) for item in node)}]"
    return repr(node)


def _code_digest(node) -> str:
    tree = _CodeOnly().visit(ast.Module(body=[node], type_ignores=[]))
    return hashlib.sha256(_canonical(tree).encode()).hexdigest()[:12]


def _defining_modules() -> dict:
    """PIECES -> the module whose source file defines it (None if not found)."""
    def home(name):  # where modeling_qwen3's import of ``name`` comes from
        obj = getattr(modeling_qwen3, name, None)
        return sys.modules.get(getattr(obj, "__module__", None))

    capturing = home("capture_outputs")
    return {"Qwen3RMSNorm": modeling_qwen3, "Qwen3DecoderLayer": modeling_qwen3,
            "Qwen3Model": modeling_qwen3, "Qwen3Attention": modeling_qwen3,
            "rotate_half": modeling_qwen3, "apply_rotary_pos_emb": modeling_qwen3,
            "Qwen3RotaryEmbedding": modeling_qwen3, "Qwen3MLP": modeling_qwen3,
            "GradientCheckpointingLayer": home("GradientCheckpointingLayer"),
            "Qwen3ForCausalLM": modeling_qwen3,
            "ForCausalLMLoss": home("ForCausalLMLoss") or loss_utils,
            "fixed_cross_entropy": loss_utils,
            "slice_logits_to_keep": home("slice_logits_to_keep"),
            "can_return_tuple": home("can_return_tuple"),
            "capture_outputs": capturing, "install_output_capuring_hook": capturing,
            "_CanRecordRegistry": capturing,
            "merge_with_config_defaults": home("merge_with_config_defaults")}


def fingerprint() -> dict[str, str]:
    """PIECES -> digest of the installed transformers' code ("missing" if absent).

    Read from transformers' source files, so a patch active in memory (this
    project's or another) does not change it."""
    trees, prints = {}, {}
    for name, module in _defining_modules().items():
        if module is None:
            prints[name] = "missing"
            continue
        if module.__name__ not in trees:
            try:
                trees[module.__name__] = ast.parse(inspect.getsource(module))
            except (OSError, TypeError) as error:
                raise RuntimeError(f"cannot read {module.__name__}'s source to check "
                                   f"it: {error}") from error
        node = next((node for node in trees[module.__name__].body
                     if isinstance(node, (ast.ClassDef, ast.FunctionDef))
                     and node.name == name), None)
        prints[name] = "missing" if node is None else _code_digest(node)
    return prints


def check_transformers(patch: str, pieces=PIECES) -> None:
    """Raise unless ``pieces`` of the installed transformers are code the tests of
    ``patch`` ran on: the same digests as one tested version, all of them."""
    found = fingerprint()
    tested = {version: dict(zip(PIECES, line.split(), strict=True))
              for version, line in TESTED.items()}
    for prints in tested.values():
        if all(found[name] == prints[name] for name in pieces):
            return
    # The tested version sharing the most pieces (the newest among equals) says
    # what changed.
    nearest = max(tested, key=lambda v: (sum(found[n] == tested[v][n] for n in pieces),
                                         tuple(int(p) for p in v.split("."))))
    differ = [name for name in pieces if found[name] != tested[nearest][name]]
    raise RuntimeError(
        f"{patch} mirrors transformers code that is not what its tests ran on: "
        f"transformers {transformers.__version__} differs from {nearest} in "
        f"{', '.join(differ)} (tested: {', '.join(TESTED)}). Install a tested "
        "version, or run the patch tests on this one and add its fingerprint "
        "(python qwen3_mirrored_code.py) to TESTED.")


if __name__ == "__main__":
    prints = fingerprint()
    line = " ".join(prints[name] for name in PIECES)
    print(f'"{transformers.__version__}": "{line}"')
