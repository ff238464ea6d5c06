#!/usr/bin/env bash
# Runs every suite of coremltools' own tests whole through coremlrt (scripts/coremltools_op_tests.py,
# --sample 1), rewrites each one's report section and its recorded results: the baselines that the
# test command's samples are checked against (scripts/test.sh). Hours on 2 cores; run it after a
# change of defaults (packed weights, a backend's cost rule) and commit what it writes.
#
#   bash scripts/coremltools_suites_whole.sh                 # every suite
#   bash scripts/coremltools_suites_whole.sh runtime pipeline  # some of them
#
# Suites: ops, ops_neuralnetwork, neural_network, runtime, pipeline, sklearn, xgboost (on the
# environment of scripts/xgboost_tested_env.sh), onnx (the op suite through the ONNX export).
# PYTHONPATH picks the coremlrt under test (a build tree's python/ folder, or the installed one).
set -euo pipefail
cd "$(dirname "$0")/.."
run() { python3 scripts/coremltools_op_tests.py --sample 1 --record "$@"; }
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(ops ops_neuralnetwork neural_network runtime pipeline sklearn xgboost onnx)
for suite in "${suites[@]}"; do
  echo "== $suite"
  case "$suite" in
    ops) run --report docs/reports/conformance.md ;;
    runtime) run --suite runtime --report docs/reports/coremltools-runtime-tests.md ;;
    xgboost) PYTHONPATH="$(bash scripts/xgboost_tested_env.sh)${PYTHONPATH:+:$PYTHONPATH}" \
               run --suite xgboost --report docs/reports/conformance.md ;;
    onnx) run --via onnx --report docs/reports/onnx-export-conformance.md ;;
    *) run --suite "$suite" --report docs/reports/conformance.md ;;
  esac
done
