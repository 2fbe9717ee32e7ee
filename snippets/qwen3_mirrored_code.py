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
)

# transformers versions the patch tests ran on -> fingerprint (PIECES' digests).
TESTED = {
    "5.17.0": "d9cab0c2ec9d 9e8ba07a2573 738d97189f12 588a63ccc020 "
              "994347b6e9f9 8c30b0f7c010 missing f4ef0fd5f4e2",
    "5.22.2": "d9cab0c2ec9d 9e8ba07a2573 738d97189f12 588a63ccc020 "
              "4846c0d48724 8c30b0f7c010 missing f4ef0fd5f4e2",
    "5.23.0": "d9cab0c2ec9d 9e8ba07a2573 738d97189f12 f5b78faef3a4 "
              "cd0d839d6738 b012d54f810e 014864b59690 f4ef0fd5f4e2",
    "5.24.0": "d9cab0c2ec9d 423189ee0db0 107f4ffa00d3 7b2af8cbd098 "
              "cd0d839d6738 b012d54f810e 014864b59690 8e37bd659cbf",
    "5.25.0": "d9cab0c2ec9d 423189ee0db0 107f4ffa00d3 7b2af8cbd098 "
              "cd0d839d6738 b012d54f810e 014864b59690 8e37bd659cbf",
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


def _code_digest(node) -> str:
    tree = _CodeOnly().visit(ast.Module(body=[node], type_ignores=[]))
    return hashlib.sha256(ast.dump(tree).encode()).hexdigest()[:12]


def _defining_modules() -> dict:
    """PIECES -> the module whose source file defines it (None if not found)."""
    def home(name):  # where modeling_qwen3's import of ``name`` comes from
        obj = getattr(modeling_qwen3, name, None)
        return sys.modules.get(getattr(obj, "__module__", None))

    capturing = home("capture_outputs")
    return {"Qwen3RMSNorm": modeling_qwen3, "Qwen3DecoderLayer": modeling_qwen3,
            "Qwen3Model": modeling_qwen3,
            "GradientCheckpointingLayer": home("GradientCheckpointingLayer"),
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
