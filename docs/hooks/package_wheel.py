"""MkDocs hook: the site serves the fusion set as one wheel, built from snippets/ at build time.

A reader who wants ``apply_qwen3_fusion`` needs the snippet files it imports, and the ones those
import. The site build packs exactly that closure (followed through the files' imports, starting
at ``ENTRY_MODULES``) into ``downloads/<WHEEL_NAME>``, a pure-Python wheel with one package,
``qwen3_fusion``: each file as the pages show it, with its imports of other snippet files made
package imports (``from rmsnorm_triton import x`` -> ``from qwen3_fusion.rmsnorm_triton import x``),
so no generic top-level name (``swiglu``, ``rmsnorm_triton``) lands in the reader's environment.
There is no second copy of the code in the repository: the wheel is made from snippets/ on every
build, byte for byte the same for the same files (fixed timestamps and order).

    pip install qwen3_fusion-<version>-py3-none-any.whl     # the reader, after downloading it
    from qwen3_fusion import apply_qwen3_fusion
"""
from __future__ import annotations

import ast
import base64
import hashlib
import io
import pathlib
import re
import zipfile

ROOT = pathlib.Path(__file__).resolve().parents[2]
SNIPPETS = ROOT / "snippets"
PACKAGE = "qwen3_fusion"
VERSION = "0.1.0"
WHEEL_NAME = f"{PACKAGE}-{VERSION}-py3-none-any.whl"
DOWNLOAD_URI = f"downloads/{WHEEL_NAME}"
ENTRY_MODULES = ("qwen3_fusion_patch", "qwen3_kernels_layer")
REQUIRES = ("torch>=2.11", "triton>=3.6", "transformers>=5.17")
SUMMARY = "Qwen3 training fusions in Triton: RMSNorm, fused residual add, QK-norm + RoPE, SwiGLU, linear + cross-entropy"
_TIMESTAMP = (1980, 1, 1, 0, 0, 0)  # zip's earliest: the same bytes on every build
INIT = f'''"""{SUMMARY}.

The files are the site's snippets/ (Apache-2.0), packaged: apply_qwen3_fusion(model=None, ...)
fuses a Qwen3 model in place, or patches transformers before one is built; it returns undo().
"""
from {PACKAGE}.qwen3_fusion_patch import apply_qwen3_fusion

__all__ = ["apply_qwen3_fusion"]
__version__ = "{VERSION}"
'''


def snippet_imports(source: str, known: set[str]) -> set[str]:
    """The snippet modules (names in ``known``) that ``source`` imports anywhere, demos included."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names if alias.name in known}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in known:
            found.add(node.module)
    return found


def closure(entries=ENTRY_MODULES, folder: pathlib.Path = SNIPPETS) -> list[str]:
    """Every snippet module the entries need, themselves included, sorted."""
    known = {path.stem for path in folder.glob("*.py")}
    needed, todo = set(), list(entries)
    while todo:
        name = todo.pop()
        if name not in needed:
            needed.add(name)
            todo += snippet_imports((folder / f"{name}.py").read_text(), known)
    return sorted(needed)


def packaged_source(source: str, modules: set[str]) -> str:
    """``source`` with each import of a module in ``modules`` turned into a package import.

    Only the import statements' own first lines change (found by the syntax tree, so a
    docstring or comment that mentions ``from swiglu import`` is left alone)."""
    lines = source.splitlines(keepends=True)
    for node in ast.walk(ast.parse(source)):
        index = getattr(node, "lineno", 0) - 1
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module in modules:
            lines[index] = re.sub(rf"\bfrom {node.module} import\b",
                                  f"from {PACKAGE}.{node.module} import", lines[index], count=1)
        elif isinstance(node, ast.Import) and any(a.name in modules for a in node.names):
            if len(node.names) != 1:
                raise ValueError(f"line {node.lineno}: import one snippet module per line")
            lines[index] = re.sub(rf"\bimport {node.names[0].name}\b",
                                  f"from {PACKAGE} import {node.names[0].name}", lines[index], count=1)
    return "".join(lines)


def metadata() -> str:
    lines = ["Metadata-Version: 2.1", f"Name: {PACKAGE.replace('_', '-')}", f"Version: {VERSION}",
             f"Summary: {SUMMARY}", "License: Apache-2.0", "Requires-Python: >=3.10",
             *(f"Requires-Dist: {requirement}" for requirement in REQUIRES)]
    return "\n".join(lines) + "\n"


def wheel_files(folder: pathlib.Path = SNIPPETS) -> dict[str, bytes]:
    """Path in the wheel -> bytes, RECORD excluded."""
    modules = closure(folder=folder)
    files = {f"{PACKAGE}/__init__.py": INIT.encode()}
    for name in modules:
        text = packaged_source((folder / f"{name}.py").read_text(), set(modules))
        files[f"{PACKAGE}/{name}.py"] = text.encode()
    info = f"{PACKAGE}-{VERSION}.dist-info"
    files[f"{info}/METADATA"] = metadata().encode()
    files[f"{info}/WHEEL"] = b"Wheel-Version: 1.0\nGenerator: qwen3-docs\nRoot-Is-Purelib: true\nTag: py3-none-any\n"
    files[f"{info}/top_level.txt"] = f"{PACKAGE}\n".encode()
    files[f"{info}/LICENSE"] = (ROOT / "LICENSE").read_bytes()
    return files


def build_wheel(folder: pathlib.Path = SNIPPETS) -> bytes:
    """The wheel's bytes: deterministic for the same snippet files."""
    files = wheel_files(folder)
    record = f"{PACKAGE}-{VERSION}.dist-info/RECORD"
    rows = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        rows.append(f"{path},sha256={digest},{len(data)}")
    files[record] = ("\n".join([*rows, f"{record},,"]) + "\n").encode()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=zipfile.ZIP_DEFLATED) as wheel:
        for path in sorted(files):
            info = zipfile.ZipInfo(path, date_time=_TIMESTAMP)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            wheel.writestr(info, files[path])
    return buffer.getvalue()


def _event_priority(priority):
    try:
        from mkdocs.plugins import event_priority
    except ImportError:  # building the wheel needs no MkDocs (the tests import this file too)
        return lambda function: function
    return event_priority(priority)


@_event_priority(100)  # before the plugins' on_files: htmlproofer then knows the file when it checks links
def on_files(files, config):
    """Serve the wheel at DOWNLOAD_URI (``mkdocs serve`` too)."""
    from mkdocs.structure.files import File

    if files.get_file_from_path(DOWNLOAD_URI) is None:
        files.append(File.generated(config, DOWNLOAD_URI, content=build_wheel()))
    return files
