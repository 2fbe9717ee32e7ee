#!/usr/bin/env bash
# Install the docs dependencies (no torch) into .venv and serve the site on
# http://127.0.0.1:8000 with live reload.   Usage: ./.ci/serve.sh [mkdocs serve options]
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
[[ -x "$VENV/bin/python" ]] || "$PYTHON" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet -r requirements-docs.txt
export NO_MKDOCS_2_WARNING=1
exec "$VENV/bin/python" -m mkdocs serve --dev-addr 127.0.0.1:8000 "$@"
