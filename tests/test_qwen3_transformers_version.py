"""Which transformers the Qwen3 patch tests run on: the pin (requirements-test.txt) and, in a
second run of .ci/test.sh, the newest tested one (requirements-transformers-newest.txt)."""
import inspect
import os
import pathlib

import transformers
import transformers.models.qwen3.modeling_qwen3 as modeling_qwen3
from packaging.version import Version

import qwen3_fused_add_patch

ROOT = pathlib.Path(__file__).resolve().parents[1]


def pinned(requirements: str) -> str:
    lines = (ROOT / requirements).read_text().splitlines()
    return next(line.split("==")[1].split()[0] for line in lines if line.startswith("transformers=="))


def test_the_tested_versions_are_the_pins():
    oldest, newest = pinned("requirements-test.txt"), pinned("requirements-transformers-newest.txt")
    assert qwen3_fused_add_patch.TESTED_VERSIONS == tuple(
        ".".join(v.split(".")[:2]) for v in (oldest, newest))
    expected = os.environ.get("EXPECTED_TRANSFORMERS")  # set by .ci/test.sh for the second run
    assert transformers.__version__ == (expected or oldest)


def test_the_patch_names_the_kv_cache_as_this_version_does():
    parameters = inspect.signature(modeling_qwen3.Qwen3Model.forward).parameters
    expected = "cache" if Version(transformers.__version__) >= Version("5.24") else "past_key_values"
    assert qwen3_fused_add_patch.CACHE == expected and expected in parameters
