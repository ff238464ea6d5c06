#!/usr/bin/env bash
# Sets everything up, then runs every test: the self-contained wheel in a bare venv
# (scripts/build_wheel.sh, scripts/test_wheel.sh), the C++ suite (GoogleTest, through ctest), the
# Python suite (pytest, against the installed package; ../shared/corpus when present), samples of
# coremltools' own op and runtime API tests (scripts/coremltools_op_tests.py), the sanitizer runs
# (ASan+UBSan, TSan: scripts/test_sanitizers.sh) and a smoke run of each fuzz target.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/steps.sh
# COREMLRT_SKIP_SETUP=1 skips scripts/setup.sh when it has already run (re-runs on a set-up machine).
if [ "${COREMLRT_SKIP_SETUP:-0}" != 1 ]; then
  step setup
  bash scripts/setup.sh
fi

# The self-contained wheel: scripts/build_wheel.sh (setup.sh built it already, so nothing is
# recompiled), then scripts/test_wheel.sh installs it into a bare venv and checks what its
# extension loads and that the quick start predicts there.
step wheel
COREMLRT_WHEEL_TESTS=1 bash scripts/build_wheel.sh
bash scripts/test_wheel.sh

# The C++ suite (GoogleTest), built by the wheel's build tree (pyproject.toml's build-dir:
# COREMLRT_WHEEL_TESTS in scripts/build_wheel.sh), so the Release engine under test is the
# one the wheel ships. Every build tree of the test run is a unity build
# (-DCMAKE_UNITY_BUILD=ON: CMakeLists.txt).
step ctest
wheel_tree=$(dirname "$(ls -t build/wheel-*/CTestTestfile.cmake | head -n 1)")
ctest --test-dir "$wheel_tree" --output-on-failure --output-junit "$PWD/build/ctest-results.xml"
# The packed-weight kernels' tests run at each x86 level the CPU has and skip the others: fail
# when this CPU has AVX-512 (or AVX2) and the tests of that level skipped (scripts/check_simd_tests.py).
python3 scripts/check_simd_tests.py build/ctest-results.xml

# The source tree keeps the package under python/, so `import coremlrt` finds the
# installed package. Tests marked slow (full-size model variants) are left out; run them with
# `python3 -m pytest -m slow tests/python/models`.
# Two worker processes (pytest-xdist), a test file each at a time, so that a file's module-scoped
# models are converted once per file, not once per worker.
step pytest
python3 -m pytest -q -p no:cacheprovider -m "not slow" -n 2 --dist loadfile --durations=15 tests/python

# coremltools' own op tests, every 25th case, predicting through coremlrt: fails when a case
# that passed in the recorded full run (docs/reports/conformance.md) fails or crashes. Each
# suite below is a sample, the test command's smoke version of its whole run
# (docs/guide/testing.md, "Longer runs").
step "coremltools op tests"
python3 scripts/coremltools_op_tests.py --sample 25 --check
# The same op tests predicting through each model's ONNX export run by ONNX Runtime, every 80th
# case: against the recorded run (tests/conformance/recorded_onnx_results.json,
# docs/reports/onnx-export-conformance.md).
step "coremltools op tests through the ONNX export"
python3 scripts/coremltools_op_tests.py --via onnx --sample 80 --check
# coremltools' runtime API tests (compiled models, compute plans, structure, assets), every 10th
# case, against tests/conformance/recorded_runtime_results.json (docs/reports/coremltools-runtime-tests.md).
step "coremltools runtime tests"
python3 scripts/coremltools_op_tests.py --suite runtime --sample 10 --check
# The op tests' neuralnetwork-backend cases (models of the neuralNetwork type), every 40th case:
# against the recorded whole run (tests/conformance/recorded_ops_neuralnetwork_results.json).
step "coremltools ops_neuralnetwork tests"
python3 scripts/coremltools_op_tests.py --suite ops_neuralnetwork --sample 40 --check
# coremltools' neuralNetwork model tests (test/neural_network: layer-by-layer numpy tests, the
# builder, quantization), every 40th case, against the recorded whole run.
step "coremltools neural_network tests"
python3 scripts/coremltools_op_tests.py --suite neural_network --sample 40 --check
# coremltools' pipeline tests (whole: under a minute) and scikit-learn converter tests (every
# 20th case), against their recorded runs; the Boston housing data they use comes from
# tests/conformance/data/ (no download).
step "coremltools pipeline and sklearn tests"
python3 scripts/coremltools_op_tests.py --suite pipeline --check
python3 scripts/coremltools_op_tests.py --suite sklearn --sample 20 --check
step "coremltools xgboost tests"
# coremltools' XGBoost converter tests, every 4th case but the stress tests coremltools marks slow
# (docs/reports/conformance.md, XGBoost section), against the recorded full run, on XGBoost 1.7.6 and
# numpy 1.26.4 from build/xgboost-1.7.6 (scripts/xgboost_tested_env.sh, which setup.sh ran;
# docs/reports/conformance.md says why that version).
PYTHONPATH="$(bash scripts/xgboost_tested_env.sh)" python3 scripts/coremltools_op_tests.py --suite xgboost --sample 4 --skip-slow --check

step sanitizers
bash scripts/test_sanitizers.sh

# A short smoke run of each fuzz target (libFuzzer, ASan, UBSan, LSan; fuzz/README.md; built in
# build/asan by the sanitizer step): the same 10,000 inputs every time (fixed seed, fresh
# corpus), so the run passes or fails the same way on every machine; 60 s at most each. Inputs
# that crashed once are replayed by ctest above (fuzz_regressions.*). Long runs:
# bash scripts/fuzz.sh TARGET SECONDS. A fuzzer is one process on one core: the first run makes
# the seeds that all targets share; then the slowest (blob) runs beside the others.
fuzz_smoke() {
  local log="build/asan/fuzz/smoke-$1.log"
  if bash scripts/fuzz.sh "$1" 60 -runs=10000 -seed=1 > "$log" 2>&1; then
    grep -E "^(Done|stat::|==|SUMMARY)" "$log" | sed "s/^/$1: /"
  else
    tail -n 60 "$log"
    echo "fuzz target $1 failed"
    return 1
  fi
}
step "fuzz smoke runs"
mkdir -p build/asan/fuzz
fuzz_smoke package
cmake --build build/asan --parallel 2 --target fuzz_blob fuzz_program fuzz_neural_network fuzz_predict >/dev/null
export COREMLRT_FUZZ_PREPARED=1
fuzz_smoke blob &
blob_pid=$!
for target in program predict neural_network; do fuzz_smoke "$target"; done
wait "$blob_pid"
