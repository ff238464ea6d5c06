#!/usr/bin/env bash
# Configures build/asan, the one tree behind the ASan+UBSan runs of scripts/test_sanitizers.sh
# and scripts/lsan_python.sh and the libFuzzer targets of scripts/fuzz.sh, when it is not
# configured yet. clang 16 (libFuzzer comes with clang; CXX_FOR_ASAN overrides): every library
# is instrumented for ASan, UBSan and libFuzzer's coverage (CMakeLists.txt,
# COREMLRT_BUILD_FUZZERS), which the C++ suite and the Python extension carry too. At -O1 with
# line tables, as the sanitizers' documentation advises (CMakeLists.txt). Without the
# OpenVINO backend: its prebuilt libraries are not instrumented, and its TBB opens a library
# with RTLD_DEEPBIND, which the sanitizer runtime refuses (it stops the process).
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/asan/build.ninja ] && exit 0
CXX=${CXX_FOR_ASAN:-clang++-16} cmake -S . -B build/asan -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DCOREMLRT_BUILD_FUZZERS=ON -DCOREMLRT_BUILD_TESTS=ON \
  -DCOREMLRT_BUILD_PYTHON=ON -DCOREMLRT_WITH_OPENVINO=OFF -DCMAKE_UNITY_BUILD=ON >/dev/null
