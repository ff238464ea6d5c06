#!/usr/bin/env bash
# Installs what coremlrt needs on Debian 12 (system packages, Python packages), then builds
# and installs coremlrt itself with `pip install .`. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."

if command -v apt-get >/dev/null 2>&1; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends \
    g++ cmake ninja-build libprotobuf-dev protobuf-compiler nlohmann-json3-dev libgtest-dev >/dev/null
fi

# coremltools, torch, torchvision and transformers make the test models the way users make
# them; torch 2.14.1 and torchvision 0.29.1 are the builds this environment provides (another
# version would download gigabytes).
# mypy checks the package's type stubs (tests/python/test_typing.py); pytest-asyncio runs the
# async cases of coremltools' runtime tests (scripts/coremltools_op_tests.py --suite runtime).
python3 -m pip install -q --disable-pip-version-check numpy pytest mypy pytest-asyncio "coremltools==9.0" \
  "torch==2.14.1" "torchvision==0.29.1" "transformers==5.24.0"
python3 -m pip install -q --disable-pip-version-check .
