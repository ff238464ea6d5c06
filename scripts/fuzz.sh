#!/usr/bin/env bash
# Runs one fuzz target (fuzz/README.md) for SECONDS seconds:
#   bash scripts/fuzz.sh TARGET SECONDS [extra libFuzzer flags]
# TARGET: package, blob, program, neural_network or predict. Builds the target in build/asan
# (clang, libFuzzer, ASan, UBSan; the tree scripts/test_sanitizers.sh uses too:
# scripts/asan_tree.sh) when needed, makes seeds (fuzz/make_seeds.py: ../shared/corpus when
# present, generated models always), keeps the growing corpus in build/asan/fuzz/corpus/TARGET
# and writes any crashing input to build/asan/fuzz/artifacts/TARGET/ (copy it to
# fuzz/regressions/TARGET/ once fixed: ctest replays that folder). Exits non-zero on a crash.
set -euo pipefail
cd "$(dirname "$0")/.."
target=${1:?usage: scripts/fuzz.sh TARGET SECONDS}
seconds=${2:?usage: scripts/fuzz.sh TARGET SECONDS}
shift 2

work=build/asan/fuzz
# COREMLRT_FUZZ_PREPARED=1: the target is built and the seeds are made (scripts/test.sh runs
# targets side by side after a first run; they must not configure, build or seed one tree at once).
if [ "${COREMLRT_FUZZ_PREPARED:-0}" != 1 ]; then
  bash scripts/asan_tree.sh
  cmake --build build/asan --parallel 2 --target "fuzz_$target" >/dev/null
  if [ ! -d "$work"/seeds/"$target" ]; then
    python3 fuzz/make_seeds.py "$work"/seeds 2>/dev/null | grep -v '^$' || true
  fi
fi
mkdir -p "$work"/corpus/"$target" "$work"/artifacts/"$target"
fixture() { python3 tests/python/fixtures.py "$1" 2>/dev/null | sed -n 's/^case: //p'; }
export COREMLRT_FUZZ_MODEL COREMLRT_FUZZ_WEIGHTS
COREMLRT_FUZZ_MODEL="$(fixture fixture_fuzz_predict)/model.mlpackage"
COREMLRT_FUZZ_WEIGHTS="$COREMLRT_FUZZ_MODEL/Data/com.apple.CoreML/weights/weight.bin"
# Leaks are checked (LSan runs at the end of each input's process lifetime).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:allocator_may_return_null=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}
export ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$(command -v llvm-symbolizer-16 || true)}
exec "$work"/fuzz_"$target" "$work"/corpus/"$target" "$work"/seeds/"$target" fuzz/regressions/"$target" \
  -dict=fuzz/coremlrt.dict -max_total_time="$seconds" -timeout=10 -rss_limit_mb=4096 -max_len=262144 \
  -artifact_prefix="$work"/artifacts/"$target"/ -print_final_stats=1 "$@"
