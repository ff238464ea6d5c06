#!/usr/bin/env bash
# The README's run command: installs only what the quick start needs, then runs it
# (examples/quickstart.py: coremltools' MIL builder makes a small Core ML model, no torch;
# coremlrt predicts with it and checks the result against numpy). What it installs: the build's
# system packages (those missing), coremltools 9.0, and coremlrt itself with `pip install .`,
# which builds the engine and brings numpy and openvino. The development set-up (torch, the
# test suites' packages, the sanitizer toolchains) is scripts/setup.sh's, for scripts/test.sh.
# PYTHON=... installs into and runs another interpreter (a virtual environment's python).
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}

packages=(g++ cmake ninja-build libprotobuf-dev protobuf-compiler nlohmann-json3-dev)
missing=()
if command -v dpkg-query >/dev/null 2>&1; then
  for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
  done
fi
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""
  [ "$(id -u)" = 0 ] || SUDO=sudo
  echo "installing ${missing[*]}"
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

echo "installing coremltools 9.0 (makes the model) and coremlrt (pip install .: builds the engine, a minute or two)"
"$python" -m pip install -q --disable-pip-version-check "coremltools==9.0"
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-$(nproc)} \
  "$python" -m pip install -q --disable-pip-version-check .
"$python" examples/quickstart.py
