#!/usr/bin/env bash
# The whole test suite (README's second command). Creates .venv, installs the pinned
# test dependencies, then runs every check below and fails if any failed:
#   1. python -m bench.render --check    committed tables/plots match docs/data
#   2. mkdocs build --strict              the site, into site/
#   3. (CPU, whole suite) the Qwen3 patch tests once more on each other transformers
#      the patches were tested on (requirements-transformers/*.txt), and the kernel and
#      patch tests on the newest Triton (requirements-triton.txt), each from its own
#      folder put first on PYTHONPATH, side by side
#   4. pytest with coverage of snippets/ (floor in pyproject.toml): snippet tests,
#      docs code-block tests, docs conventions, workflow lint (actionlint + zizmor),
#      browser check (headless chromium; screenshots in artifacts/screenshots/);
#      on CPU on every core (pytest-xdist, PYTEST_WORKERS=N to choose)
#
#   ./.ci/test.sh                  CPU: kernels run under the Triton interpreter
#   ./.ci/test.sh --gpu            CUDA machine: reuses the machine's CUDA torch/triton,
#                                  kernel tests at real sizes; no browser check
#   ./.ci/test.sh -- -k rmsnorm    a subset: the arguments go to pytest, which then runs
#                                  without the coverage floor (it is for the whole suite)
set -euo pipefail
cd "$(dirname "$0")/.."

MODE=cpu
if [[ "${1:-}" == "--gpu" ]]; then MODE=gpu; shift; fi
if [[ "${1:-}" == "--" ]]; then shift; fi
VENV=${VENV:-.venv}
PYTHON=${PYTHON:-python3}
PY="$VENV/bin/python"
export NO_MKDOCS_2_WARNING=1
# Bytecode: pip installs without compiling (--no-compile: transformers and torch hold
# thousands of modules a test never imports), and each module is compiled on its first
# import into one cache under the venv, which every later process (xdist workers, the
# experiments' subprocesses) reads. Nothing is written next to the sources.
unset PYTHONDONTWRITEBYTECODE
if [[ $VENV == /* ]]; then PYTHONPYCACHEPREFIX=$VENV/pycache; else PYTHONPYCACHEPREFIX=$PWD/$VENV/pycache; fi
export PYTHONPYCACHEPREFIX

step() { printf '\n==> %s\n' "$*"; }
as_root() { if [[ $(id -u) -eq 0 ]]; then "$@"; else sudo -n "$@"; fi; }

# The browser check needs Debian's chromium (playwright never downloads a browser).
# Install it when missing and we can (root or passwordless sudo); elsewhere, e.g. on
# GitHub's Ubuntu runners, use a preinstalled Chrome through $CHROMIUM.
find_browser() {
  if [[ -z "${CHROMIUM:-}" && ! -x /usr/bin/chromium ]]; then
    if grep -q '^ID=debian' /etc/os-release 2>/dev/null; then
      step "apt-get install chromium (browser check)"
      as_root apt-get update -qq && as_root apt-get install -y -qq --no-install-recommends chromium >/dev/null
    else
      for candidate in chromium chromium-browser google-chrome google-chrome-stable; do
        if command -v "$candidate" >/dev/null; then CHROMIUM=$(command -v "$candidate"); export CHROMIUM; break; fi
      done
    fi
  fi
  # A CJK font, so that the screenshots show the Chinese text (nice to have, not fatal).
  if ! fc-list 2>/dev/null | grep -qiE 'wqy|noto sans cjk'; then
    { as_root apt-get update -qq && as_root apt-get install -y -qq --no-install-recommends fonts-wqy-microhei >/dev/null; } \
      || echo "warning: no CJK font installed; screenshots show boxes for Chinese text"
  fi
}

# The torch pin must resolve to the CPU wheel (2.13.0+cpu); from PyPI alone, pip takes the
# multi-GB CUDA build. Where pip does not already find the CPU wheel (a local mirror, as on
# this project's CI machine), add PyTorch's CPU index, as ci.yml does. TORCH_CPU_INDEX_URL
# names another index; set it empty to never add one.
torch_cpu_index_args() {
  if [[ -n "${PIP_EXTRA_INDEX_URL:-}" ]] || "$PY" -c 'import sys, torch; sys.exit(torch.__version__ != "2.13.0+cpu")' 2>/dev/null; then
    return  # the caller chose the index, or the venv already has the CPU wheel
  fi
  local probe found=0
  probe=$(mktemp -d)
  "$PY" -m pip download --no-deps --quiet -d "$probe" "torch==2.13.0+cpu" >/dev/null 2>&1 && found=1
  rm -rf "$probe"
  local url=${TORCH_CPU_INDEX_URL-https://download.pytorch.org/whl/cpu}
  if [[ $found == 0 && -n $url ]]; then
    echo "note: torch 2.13.0+cpu is not on pip's configured indexes; adding $url" >&2
    echo "--extra-index-url $url"
  fi
}

step "environment ($MODE): $VENV"
if [[ $MODE == gpu ]]; then
  # torch/triton come from the machine (CUDA builds); everything else from the pins.
  [[ -x "$PY" ]] || "$PYTHON" -m venv --system-site-packages "$VENV"
  "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else "no CUDA device: the GPU suite must run on a GPU")'
  grep -vE '^(torch|triton)==|^-r ' requirements-test.txt > "$VENV/requirements-gpu.txt"
  "$PY" -m pip install --quiet --no-compile -r requirements-docs.txt -r "$VENV/requirements-gpu.txt"
  PYTEST_SELECT=(-m "not browser")
  WORKERS=${PYTEST_WORKERS:-0}  # one process: the tests share one GPU
else
  find_browser
  [[ -x "$PY" ]] || "$PYTHON" -m venv "$VENV"
  # shellcheck disable=SC2046  # the index arguments are words on purpose
  "$PY" -m pip install --quiet --no-compile $(torch_cpu_index_args) -r requirements-test.txt
  PYTEST_SELECT=()
  WORKERS=${PYTEST_WORKERS:-auto}  # one pytest-xdist worker per core
fi
"$PY" -c 'import torch, triton; print(f"torch {torch.__version__}, triton {triton.__version__}, cuda: {torch.cuda.is_available()}")'

# Every check runs even after one fails, so that one run reports everything; the
# script fails if any of them failed.
failed=()

step "measured data: python -m bench.render --check"
"$PY" -m bench.render --check || failed+=("bench.render --check")

step "site: mkdocs build --strict"
"$PY" -m mkdocs build --strict || failed+=("mkdocs build --strict")

if [[ $MODE == cpu && $# -eq 0 ]]; then
  # The same tests on other stacks: each installs its pins (--no-deps) into a folder of its
  # own under the venv, first on PYTHONPATH over the venv's pins. The runs go side by side
  # (one process each; the triton run on two workers), each into its own log; coverage is
  # the main run's (it reaches the floor alone).
  names=() pids=()
  other_stack() {  # NAME REQUIREMENTS EXPECTED_TRANSFORMERS WORKERS TEST...
    local name=$1 pins=$2 expected=$3 workers=$4
    shift 4
    local target="$VENV/$name"
    if [[ ! -f "$target/.installed" || "$pins" -nt "$target/.installed" ]]; then
      rm -rf "$target"
      "$PY" -m pip install --quiet --no-compile --no-deps --target "$target" -r "$pins" \
        && touch "$target/.installed" || { failed+=("pip install -r $pins"); return; }
    fi
    EXPECTED_TRANSFORMERS=$expected PYTHONPATH="$target" "$PY" -m pytest -p no:cacheprovider \
      -p no:cov -n "$workers" -q -rfEs "$@" > "$target.log" 2>&1 &
    names+=("$name") pids+=($!)
  }
  step "pytest on other stacks: the Qwen3 patch tests on each transformers of requirements-transformers/, the kernel tests and the fusion patch's on requirements-triton.txt"
  PATCH_TESTS=(tests/test_qwen3_*.py)
  triton=$(grep -E '^triton==' requirements-triton.txt | cut -d= -f3 | cut -d' ' -f1)
  # On the newest Triton: the kernel tests, and of the patch tests the one file that runs every fused kernel
  # through the patch and under torch.compile (the other patch files test transformers' side, not Triton's).
  other_stack "triton-$triton" requirements-triton.txt "" 2 \
    tests/test_rmsnorm_*.py tests/test_qk_norm_rope.py tests/test_swiglu.py tests/test_linear_cross_entropy.py \
    tests/test_triton_one_minute.py tests/test_qwen3_fusion_patch.py
  for pins in requirements-transformers/*.txt; do
    version=$(basename "$pins" .txt)
    other_stack "transformers-$version" "$pins" "$version" 0 "${PATCH_TESTS[@]}"
  done
  for i in "${!pids[@]}"; do
    status=0
    wait "${pids[$i]}" || status=$?
    step "pytest on ${names[$i]} (exit $status)"
    tail -n 25 "$VENV/${names[$i]}.log"
    [[ $status -eq 0 ]] || failed+=("pytest on ${names[$i]} (log: $VENV/${names[$i]}.log)")
  done
fi

step "pytest (coverage of snippets/, docs code blocks, workflows, browser)"
status=0
# Tests that share a costly fixture (the --quick experiment runs, the site build, a module's
# fixtures) stay on one worker: tests/conftest.py's worker_group, through xdist's scheduler hook.
if [[ $# -eq 0 ]]; then
  COVERAGE=(--cov=snippets --cov-report=term-missing:skip-covered)
else
  COVERAGE=(-p no:cov)  # a subset: the coverage floor is the whole suite's
fi
"$PY" -m pytest -p no:cacheprovider -n "$WORKERS" "${COVERAGE[@]}" "${PYTEST_SELECT[@]}" "$@" \
  || status=$?
if [[ $status -eq 5 ]]; then
  echo "pytest collected no tests (exit 5): the suite itself is broken" >&2
  failed+=("pytest: no tests collected")
elif [[ $status -ne 0 ]]; then
  failed+=("pytest (exit $status)")
fi

if (( ${#failed[@]} )); then
  printf '\n==> FAILED: %s\n' "${failed[@]}" >&2
  exit 1
fi
printf '\n==> all checks passed\n'
