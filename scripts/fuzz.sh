#!/usr/bin/env bash
# Runs one fuzz target (fuzz/README.md) for SECONDS seconds:
#   bash scripts/fuzz.sh TARGET SECONDS [extra libFuzzer flags]
# TARGET: package, blob, program, neural_network or predict. Builds build/fuzz with clang
# (libFuzzer, ASan, UBSan) when needed, makes seeds (fuzz/make_seeds.py: ../shared/corpus when
# present, generated models always), keeps the growing corpus in build/fuzz/corpus/TARGET and
# writes any crashing input to build/fuzz/artifacts/TARGET/ (copy it to
# fuzz/regressions/TARGET/ once fixed: ctest replays that folder). Exits non-zero on a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/fuzz.sh TARGET SECONDS}
seconds=${2:?usage: scripts/fuzz.sh TARGET SECONDS}
shift 2

CXX_FOR_FUZZ=${CXX_FOR_FUZZ:-clang++-16}
if [ ! -f build/fuzz/build.ninja ]; then
  # -O1 with line tables (CMakeLists.txt), as libFuzzer's and the sanitizers' documentation advise.
  CXX=$CXX_FOR_FUZZ cmake -S . -B build/fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG" -DCOREMLRT_BUILD_FUZZERS=ON \
    -DCMAKE_UNITY_BUILD=ON >/dev/null
fi
cmake --build build/fuzz --parallel 2 --target "fuzz_$target" >/dev/null

if [ ! -d build/fuzz/seeds/"$target" ]; then
  python3 fuzz/make_seeds.py build/fuzz/seeds 2>/dev/null | grep -v '^$' || true
fi
mkdir -p build/fuzz/corpus/"$target" build/fuzz/artifacts/"$target"
fixture() { python3 tests/python/fixtures.py "$1" 2>/dev/null | sed -n 's/^case: //p'; }
export COREMLRT_FUZZ_MODEL COREMLRT_FUZZ_WEIGHTS
COREMLRT_FUZZ_MODEL="$(fixture fixture_fuzz_predict)/model.mlpackage"
COREMLRT_FUZZ_WEIGHTS="$COREMLRT_FUZZ_MODEL/Data/com.apple.CoreML/weights/weight.bin"
# Leaks are checked (LSan runs at the end of each input's process lifetime).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
exec build/fuzz/fuzz/fuzz_"$target" build/fuzz/corpus/"$target" build/fuzz/seeds/"$target" fuzz/regressions/"$target" \
  -dict=fuzz/coremlrt.dict -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -max_len=262144 \
  -artifact_prefix=build/fuzz/artifacts/"$target"/ -print_final_stats=1 "$@"
