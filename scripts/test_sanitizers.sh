#!/usr/bin/env bash
# The sanitizer part of the test kit (run by scripts/test.sh; expects scripts/setup.sh done):
#  * the C++ suite built with AddressSanitizer + UndefinedBehaviorSanitizer;
#  * the Python extension built with ASan + UBSan, running the lifetime, error and corpus
#    tests with leak checking (scripts/lsan_python.sh: the interpreter itself is not
#    instrumented; the ASan runtime is preloaded);
#  * the C++ threading tests (context pool, concurrent predictions, the partitioner, the
#    intra-op thread pool) and the portable fp16 conversions built with ThreadSanitizer.
# Any sanitizer report fails the run. The ASan+UBSan tree, build/asan, is also the fuzz
# targets' (scripts/asan_tree.sh): it is built once, with clang, for both. These builds leave
# the OpenVINO backend out (scripts/asan_tree.sh says why), so they are also the
# reference-backend-only variant of the build that CI checks.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/steps.sh

export UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
export ASAN_OPTIONS=abort_on_error=1
export TSAN_OPTIONS=halt_on_error=1:second_deadlock_stack=1
# clang's sanitizer runtimes name source lines through llvm-symbolizer (setup.sh installs it).
export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$(command -v llvm-symbolizer-16 || true)}
step "build/asan (clang: ASan+UBSan, also the fuzz targets)"
bash scripts/asan_tree.sh
cmake --build build/asan --parallel 2 --target coremlrt_tests _core coremlrt_python_files \
  fuzz_package fuzz_blob fuzz_program fuzz_neural_network fuzz_predict
step "C++ suite under ASan+UBSan, with LeakSanitizer"
ASAN_OPTIONS=abort_on_error=1:detect_leaks=1 build/asan/coremlrt_tests --gtest_brief=1

step "Python lifetime, error and corpus tests under ASan+UBSan, with LeakSanitizer"
# The whole Python suite runs the same way with `bash scripts/lsan_python.sh` (longer).
bash scripts/lsan_python.sh tests/python/api/test_lifetime.py tests/python/api/test_errors.py tests/python/corpus/test_corpus.py

step "build/tsan (TSan)"
# -O1 with line tables, as for build/asan (scripts/asan_tree.sh).
cmake -S . -B build/tsan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" \
  -DCOREMLRT_SANITIZE=thread \
  -DCOREMLRT_BUILD_TESTS=ON -DCOREMLRT_WITH_OPENVINO=OFF -DCMAKE_UNITY_BUILD=ON >/dev/null
cmake --build build/tsan --parallel 2 --target coremlrt_tests
step "C++ threading tests under TSan"
build/tsan/coremlrt_tests --gtest_brief=1 --gtest_filter='ContextPool.*:Model.Concurrent*:Partition.*:ThreadPool.*:HalfConversion.*'
