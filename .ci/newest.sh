#!/usr/bin/env bash
# The kernel and Qwen3 patch tests on the newest releases of torch (CPU build), Triton and
# transformers, as a reader who installs today gets them; the kernels run under the Triton
# interpreter. .github/workflows/newest.yml runs it weekly, by hand and from ci.yml.
# It fails when a release breaks the kernels or the patches, and when transformers changed
# code the patches mirror (they then refuse it: tests/test_qwen3_mirrored_code.py says what).
#
#   ./.ci/newest.sh                    into .venv-newest (VENV=... to choose)
#   TORCH_SPEC=torch==2.13.0 TORCH_CPU_INDEX_URL= ./.ci/newest.sh   another torch, pip's indexes
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv-newest}
PYTHON=${PYTHON:-python3}
TORCH_SPEC=${TORCH_SPEC:-torch}
TORCH_CPU_INDEX_URL=${TORCH_CPU_INDEX_URL-https://download.pytorch.org/whl/cpu}
PY="$VENV/bin/python"
step() { printf '\n==> %s\n' "$*"; }

step "environment: $VENV (newest torch, triton, transformers, numpy)"
[[ -x "$PY" ]] || "$PYTHON" -m venv "$VENV"
index=()
[[ -n $TORCH_CPU_INDEX_URL ]] && index=(--index-url "$TORCH_CPU_INDEX_URL" --extra-index-url https://pypi.org/simple)
"$PY" -m pip install --quiet --upgrade "${index[@]}" "$TORCH_SPEC"
# The test tools at their pins; what the suite exercises, at the newest release.
grep -vE '^(torch|triton|transformers|numpy)==|^-r ' requirements-test.txt > "$VENV/requirements-tools.txt"
"$PY" -m pip install --quiet --upgrade triton transformers numpy -r "$VENV/requirements-tools.txt"
versions=$("$PY" -c 'import numpy, torch, transformers, triton; print(f"torch {torch.__version__}, triton {triton.__version__}, transformers {transformers.__version__}, numpy {numpy.__version__}")')
echo "$versions"

step "pytest: kernel and Qwen3 patch tests ($versions)"
EXPECTED_TRANSFORMERS=$("$PY" -c 'import transformers; print(transformers.__version__)') \
  "$PY" -m pytest -p no:cacheprovider -n "${PYTEST_WORKERS:-auto}" -rfEs \
  tests/test_rmsnorm_*.py tests/test_qk_norm_rope.py tests/test_swiglu.py tests/test_triton_one_minute.py \
  tests/test_qwen3_*.py "$@"
