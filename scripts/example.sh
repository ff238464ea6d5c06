#!/usr/bin/env bash
# Sets everything up, builds a small Core ML model with coremltools and runs it with coremlrt.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
python3 examples/quickstart.py
