#!/usr/bin/env bash
# Sets everything up, then runs every test: the C++ suite (GoogleTest, through ctest) and
# the Python suite (pytest, against the installed package and ../shared/corpus).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh

cmake -S . -B build/tests -G Ninja -DCMAKE_BUILD_TYPE=Release -DCOREMLRT_BUILD_TESTS=ON >/dev/null
cmake --build build/tests --parallel 2
ctest --test-dir build/tests --output-on-failure

# Run from tests/ so that `import coremlrt` finds the installed package, not the source tree.
cd tests/python
python3 -m pytest -q -p no:cacheprovider -c ../../pyproject.toml --rootdir ../.. .
