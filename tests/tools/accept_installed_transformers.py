"""pytest plugin for checking a new transformers release (.ci/check-transformers.sh): accept it.

``pytest -p accept_installed_transformers ...`` adds the installed transformers' fingerprint to
``qwen3_mirrored_code.TESTED`` for the run, so that the Qwen3 patches run on its code instead of
refusing it, and the patch tests say whether the mirrored code still behaves as HF's. Nothing is
written: a version joins TESTED for good only when its line is committed.
"""


def pytest_sessionstart(session):  # noqa: ARG001 - pytest hook signature
    """After tests/conftest.py chose the Triton backend (which must precede any triton import)."""
    import transformers

    import qwen3_mirrored_code

    prints = qwen3_mirrored_code.fingerprint()
    line = " ".join(prints[name] for name in qwen3_mirrored_code.PIECES)
    qwen3_mirrored_code.TESTED.setdefault(transformers.__version__, line)
