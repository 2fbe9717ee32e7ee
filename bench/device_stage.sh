#!/usr/bin/env bash
# One stage of the GPU runbook (bench/README.md, "What the fused loss still needs on a GPU"), on a CUDA
# machine that has torch, triton and transformers but no package index. Each stage fits one 10-minute call.
#
#   OUT=/path/to/out GIT_COMMIT=<full sha> bench/device_stage.sh STAGE
#
#   failing      the ten tests that failed at 2681a77, alone
#   suite        the whole GPU suite (pytest -n 14); SUITE_LIMIT_S seconds at most (default 540)
#   loss         python -m bench.run_all loss
#   step_loss    python -m bench.run_all step_loss (three rounds of every contender)
#   fullsize     python -m bench.run_all fullsize_loss
#
# Wheels the machine lacks (liger-kernel, cut-cross-entropy, the docs stack, pytest plugins, and numpy 2.3.5:
# Triton 3.6's interpreter, which the one-GPU FSDP2 quick run uses on the CPU, needs numpy < 2.4) travel in
# .whl/suite and .whl/plot and are unpacked into /tmp/site, first on PYTHONPATH, which stays between warm calls. Every stage
# writes its log to $OUT; a test failure's traceback goes to $OUT/failures.log as it happens.
set -uo pipefail

stage=${1:?usage: bench/device_stage.sh failing|suite|loss|step_loss|fullsize}
OUT=${OUT:?set OUT to the folder for logs and records}
mkdir -p "$OUT"
commit=${GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
export GIT_COMMIT=$commit PYTHONUNBUFFERED=1
# The wheels may travel in two calls (the tree and both folders exceed one carry): unpack the folders this call
# carries, and use /tmp/site whenever an earlier warm call left it there.
site=""
carried=()
for folder in .whl/suite .whl/plot; do [[ -d $folder ]] && carried+=("$folder"); done
if (( ${#carried[@]} )); then
  python3 .ci/unpack-wheels.py /tmp/site "${carried[@]}" >/dev/null
fi
if [[ -d /tmp/site ]]; then
  site="$(python3 .ci/unpack-wheels.py --path /tmp/site):"
fi
export PYTHONPATH="$site$PWD/snippets:$PWD:$PWD/tests/tools"
nvidia-smi --query-gpu=name,memory.used,utilization.gpu --format=csv,noheader > "$OUT/gpu-before-$stage.txt" 2>&1

pytest_args=(-p no:cacheprovider -m "not browser" -v -rfEs --tb=short)
case $stage in
  failing)
    PYTEST_FAILURE_LOG="$OUT/failures.log" timeout 540 python3 -m pytest "${pytest_args[@]}" \
      "tests/test_linear_cross_entropy.py::test_unchecked_bad_target_is_a_device_side_assert" \
      tests/test_docs_codeblocks.py -k "not test_docs_codeblocks or kernel_switch_demo" tests/bench/test_exp_loss.py tests/bench/test_report_loss.py \
      tests/bench/test_exp_fsdp2.py tests/bench/test_report_fsdp2.py > "$OUT/gpu-failing-${commit:0:7}.log" 2>&1
    ;;
  suite)
    PYTEST_FAILURE_LOG="$OUT/failures.log" timeout "${SUITE_LIMIT_S:-540}" python3 -m pytest "${pytest_args[@]}" \
      -n 14 --ignore=tests/test_workflows.py \
      --deselect tests/test_generated.py::test_committed_artifacts_match_the_data tests/ \
      > "$OUT/gpu-tests-${commit:0:7}.log" 2>&1
    ;;
  loss | step_loss)
    python3 -m bench.run_all "$stage" --out "$OUT" > "$OUT/bench-$stage-${commit:0:7}.log" 2>&1
    ;;
  fullsize)
    python3 -m bench.run_all fullsize_loss --out "$OUT" > "$OUT/bench-fullsize-loss-${commit:0:7}.log" 2>&1
    ;;
  *)
    echo "unknown stage: $stage" >&2
    exit 2
    ;;
esac
status=$?
echo "stage $stage exit $status" | tee -a "$OUT/stages.txt"
exit $status
