#!/usr/bin/env bash
# Check a transformers release against the Qwen3 patches, before adding it to the tested set.
#
#   ./.ci/check-transformers.sh 5.26.0
#
# 1. Writes requirements-transformers/VERSION.txt (transformers==VERSION and the extra pins of
#    the newest file there) and installs it, --no-deps, into .venv/transformers-VERSION (the
#    test environment .venv must exist: run ./.ci/test.sh once).
# 2. Prints the release's fingerprint line for TESTED in snippets/qwen3_mirrored_code.py, and
#    which mirrored pieces differ from the nearest tested version (nothing: the patches accept
#    it as it is; pieces named: read those diffs before going on).
# 3. Runs the Qwen3 patch tests on it with its fingerprint accepted for the run
#    (tests/tools/accept_installed_transformers.py).
# If they pass: add the printed line to TESTED, commit it with requirements-transformers/VERSION.txt
# (from then on .ci/test.sh runs the patch tests on it too), and say so on the pages' version list.
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION=${1:?usage: .ci/check-transformers.sh VERSION}
PY=${VENV:-.venv}/bin/python
[[ -x $PY ]] || { echo "no test environment: run ./.ci/test.sh first" >&2; exit 2; }
pins=requirements-transformers/$VERSION.txt
if [[ ! -f $pins ]]; then
  newest=$(ls requirements-transformers/*.txt | sort -V | tail -n 1)
  { echo "# The Qwen3 patch tests also run on transformers $VERSION (.ci/test.sh); extra pins as in $(basename "$newest")."
    echo "transformers==$VERSION"
    grep -vE '^(#|transformers==)' "$newest"; } > "$pins"
  echo "wrote $pins"
fi
target=${VENV:-.venv}/transformers-$VERSION
rm -rf "$target"
"$PY" -m pip install --quiet --no-compile --no-deps --target "$target" -r "$pins"
touch "$target/.installed"
export PYTHONPATH=$target
echo "==> fingerprint (a line for TESTED in snippets/qwen3_mirrored_code.py):"
"$PY" snippets/qwen3_mirrored_code.py
echo "==> against the tested versions:"
"$PY" -c 'import sys; sys.path.insert(0, "snippets")
from qwen3_mirrored_code import check_transformers
try:
    check_transformers("qwen3_fusion_patch"); print("same code as a tested version: the patches accept it")
except RuntimeError as error:
    print(error)'
echo "==> the Qwen3 patch tests, with this release accepted for the run:"
EXPECTED_TRANSFORMERS=$VERSION "$PY" -m pytest -p no:cacheprovider -p no:cov -p accept_installed_transformers \
  -n "${PYTEST_WORKERS:-auto}" -q -rfEs tests/test_qwen3_*.py \
  --deselect tests/test_qwen3_mirrored_code.py::test_tested_is_the_versions_the_suite_runs_on \
  --deselect tests/test_qwen3_mirrored_code.py::test_the_page_names_the_tested_versions
