#!/usr/bin/env bash
# Runs Python tests against the ASan+UBSan build of the extension (build/asan, made by
# scripts/test_sanitizers.sh) with LeakSanitizer on, then fails if any process leaked memory
# that coremlrt allocated (scripts/lsan_report.py says how leaks are told apart from the
# interpreter's own, which is not instrumented and never frees everything at exit).
#   bash scripts/lsan_python.sh [pytest arguments]     # default: the whole of tests/python
# Subprocesses the tests start (the CLI, batch and exit tests) inherit the sanitizer and report
# too. Any ASan or UBSan error fails the run as well.
set -euo pipefail
cd "$(dirname "$0")/.."
[ -f build/asan/python/coremlrt/__init__.py ] || { echo "build/asan is missing: run scripts/test_sanitizers.sh first"; exit 2; }
logs=build/asan/lsan
rm -rf "$logs" && mkdir -p "$logs"
# The extension is built with clang (scripts/asan_tree.sh), whose ASan runtime (UBSan's
# included) is preloaded; libstdc++ is preloaded too so that ASan can intercept C++ throws from
# the extension; PYTHONMALLOC=malloc routes the interpreter's small objects through ASan's
# allocator, so a Python object our code leaks shows up with our frames in its allocation
# stack. Leaks do not
# change exit codes (LSAN_OPTIONS=exitcode=0: the interpreter's own would fail every CLI test's
# subprocess; abort_on_error=0 likewise, or the report would end in abort()); the report below
# judges them, and fails on any ASan or UBSan error it finds in the logs as well.
# Allocation stacks are walked by frame pointers (fast), which our code keeps; the interpreter
# does not, so an allocation made inside it (a Python object our code created and lost) may
# show no frame of ours. COREMLRT_LSAN_FULL_STACKS=1 walks stacks by unwind tables instead,
# which sees those too at several times the run time.
unwind=""
[ "${COREMLRT_LSAN_FULL_STACKS:-0}" = 1 ] && unwind=":fast_unwind_on_malloc=0"
set +e
LD_PRELOAD="$(${CXX_FOR_ASAN:-clang++-16} -print-file-name=libclang_rt.asan-$(uname -m).so) $(g++ -print-file-name=libstdc++.so)" \
  ASAN_SYMBOLIZER_PATH=${ASAN_SYMBOLIZER_PATH:-$(command -v llvm-symbolizer-16 || true)} \
  ASAN_OPTIONS=abort_on_error=0:detect_leaks=1:log_path="$PWD/$logs/report":malloc_context_size=30$unwind \
  LSAN_OPTIONS=exitcode=0 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1:log_path="$PWD/$logs/report" \
  PYTHONMALLOC=malloc PYTHONPATH=build/asan/python \
  python3 -m pytest -q -p no:cacheprovider "${@:-tests/python}"
status=$?
set -e
python3 scripts/lsan_report.py "$logs/report" || exit 1
exit $status
