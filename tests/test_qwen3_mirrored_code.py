"""Which transformers the Qwen3 patches accept (snippets/qwen3_mirrored_code.py).

The suite runs the patch tests on the pin of requirements-test.txt and once more on each
version of requirements-transformers/ (.ci/test.sh). TESTED must be exactly those versions,
each with the fingerprint its code really has; the installed version must be accepted
(the scheduled run on the newest transformers fails here when its code is new); code that
differs is refused by name. The pages that name the tested versions (番外 §五, the training-use page) are
checked here to name exactly TESTED.
"""
import ast
import inspect
import os
import pathlib
import re
import runpy

import pytest
import transformers
import transformers.models.qwen3.modeling_qwen3 as modeling_qwen3
from packaging.version import Version

import qwen3_fused_add_patch
import qwen3_mirrored_code
from qwen3_mirrored_code import PIECES, TESTED, check_transformers, fingerprint

ROOT = pathlib.Path(__file__).resolve().parents[1]
# The pages whose hand-written sentence names the versions the tests ran on.
PAGES = ("triton-rmsnorm-fused-add.md", "use-in-training.md")


def pinned_transformers() -> str:
    lines = (ROOT / "requirements-test.txt").read_text().splitlines()
    return next(line.split("==")[1].split()[0] for line in lines if line.startswith("transformers=="))


def test_tested_is_the_versions_the_suite_runs_on():
    others = {path.stem for path in (ROOT / "requirements-transformers").glob("*.txt")}
    for path in (ROOT / "requirements-transformers").glob("*.txt"):
        assert f"transformers=={path.stem}\n" in path.read_text(), path
    assert set(TESTED) == {pinned_transformers()} | others
    expected = os.environ.get("EXPECTED_TRANSFORMERS")  # set by .ci/test.sh for other versions
    assert transformers.__version__ == (expected or pinned_transformers())


def test_the_installed_transformers_is_accepted():
    """Fails on a transformers whose mirrored code no test ran on: the scheduled run on the
    newest release reports that here (then: run the patch tests on it, add it to TESTED)."""
    check_transformers("qwen3_fused_add_patch")
    check_transformers("qwen3_patch", pieces=("Qwen3RMSNorm",))


def test_tested_records_this_versions_real_fingerprint():
    if transformers.__version__ not in TESTED:
        pytest.skip(f"transformers {transformers.__version__} is not in TESTED")
    prints = fingerprint()
    assert TESTED[transformers.__version__].split() == [prints[name] for name in PIECES]


def test_every_tested_entry_has_a_digest_per_piece():
    for version, line in TESTED.items():
        digests = line.split()
        assert len(digests) == len(PIECES), version
        assert all(d == "missing" or (len(d) == 12 and int(d, 16) >= 0) for d in digests), version


@pytest.mark.parametrize("piece", PIECES)
def test_any_changed_piece_is_refused_by_name(piece, monkeypatch):
    changed = dict(fingerprint(), **{piece: "0123456789ab"})
    monkeypatch.setattr(qwen3_mirrored_code, "fingerprint", lambda: changed)
    with pytest.raises(RuntimeError, match=rf"differs from \S+ in {piece}( |,|\))"):
        check_transformers("qwen3_fused_add_patch")
    if piece == "Qwen3RMSNorm":  # the only piece the plain patch reproduces
        with pytest.raises(RuntimeError, match="Qwen3RMSNorm"):
            check_transformers("qwen3_patch", pieces=("Qwen3RMSNorm",))
    else:
        check_transformers("qwen3_patch", pieces=("Qwen3RMSNorm",))


def test_the_refusal_names_the_nearest_tested_version(monkeypatch):
    """Code equal to 5.23.0's but for one piece: the message compares it with 5.23.0."""
    near = dict(zip(PIECES, TESTED["5.23.0"].split()), Qwen3Model="0123456789ab")
    monkeypatch.setattr(qwen3_mirrored_code, "fingerprint", lambda: near)
    with pytest.raises(RuntimeError, match=r"differs from 5\.23\.0 in Qwen3Model \(tested: "):
        check_transformers("qwen3_fused_add_patch")


def test_a_version_number_alone_decides_nothing(monkeypatch):
    """An untested version number with tested code is accepted; a tested number with
    changed code is refused."""
    monkeypatch.setattr(transformers, "__version__", "9.99.0")
    check_transformers("qwen3_fused_add_patch")
    monkeypatch.undo()
    monkeypatch.setattr(qwen3_mirrored_code, "TESTED", {
        version: line.replace(line.split()[3], "0123456789ab") for version, line in TESTED.items()})
    with pytest.raises(RuntimeError, match="GradientCheckpointingLayer"):
        check_transformers("qwen3_fused_add_patch")


def test_docstrings_and_annotations_do_not_count_code_does():
    def digest(source):
        return qwen3_mirrored_code._code_digest(ast.parse(source).body[0])

    base = digest("def f(x):\n    return x + 1\n")
    assert digest('def f(x: int) -> int:\n    """Adds one."""\n    return x + 1  # note\n') == base
    assert digest("def f(x):\n    return x + 2\n") != base
    assert digest("class A:\n    y: int = 1\n") == digest('class A:\n    """A."""\n    y = 1\n')


def test_an_active_patch_does_not_change_the_fingerprint():
    """The fingerprint is read from transformers' files, not from patched module globals."""
    before = fingerprint()
    undo = qwen3_fused_add_patch.patch_qwen3_fused_add_rmsnorm()
    try:
        assert modeling_qwen3.Qwen3Model.__module__ == "qwen3_fused_add_patch"
        assert fingerprint() == before
    finally:
        undo()


def test_the_patch_names_the_kv_cache_as_this_version_does():
    names = inspect.signature(qwen3_fused_add_patch.HF_MODEL.forward).parameters
    expected = "cache" if Version(transformers.__version__) >= Version("5.24") else "past_key_values"
    assert qwen3_fused_add_patch.CACHE == expected and expected in names


def test_the_script_prints_this_versions_entry(capsys):
    runpy.run_path(qwen3_mirrored_code.__file__, run_name="__main__")
    prints = fingerprint()
    line = " ".join(prints[name] for name in PIECES)
    assert capsys.readouterr().out == f'"{transformers.__version__}": "{line}"\n'


@pytest.mark.parametrize("page", PAGES)
def test_the_page_names_the_tested_versions(page):
    """"测试跑过的版本是 A、B、…。" on each page names exactly TESTED's versions, in its order: a version added to
    TESTED (or dropped) fails here until the page says so."""
    text = (ROOT / "docs" / page).read_text(encoding="utf-8")
    named = re.findall(r"测试跑过的版本是 ([^。]+)。", text)
    assert named == ["、".join(TESTED)], (page, named)
