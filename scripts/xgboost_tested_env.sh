#!/usr/bin/env bash
# Installs XGBoost 1.4.2, the newest version coremltools 9 names as tested
# (coremltools/_deps/__init__.py, _XGBOOST_MAX_VERSION), into build/xgboost-1.4.2 with
# `pip install --target`, for coremltools' XGBoost converter tests
# (scripts/coremltools_op_tests.py --suite xgboost). The system's packages stay as they are.
# 1.4.2 predates numpy 2 (it calls np.array(copy=False)), so the folder also holds numpy 1.26.4,
# the pandas 2.2.3 built for it (with pytz, tzdata) and setuptools < 81 (1.4.2 imports
# pkg_resources). Use it with:
#   PYTHONPATH=build/xgboost-1.4.2:build-dev/python python3 scripts/coremltools_op_tests.py --suite xgboost
set -euo pipefail
cd "$(dirname "$0")/.."
target=build/xgboost-1.4.2
if [ ! -d "$target/xgboost" ]; then
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$target" \
    "xgboost==1.4.2" "numpy==1.26.4" "pandas==2.2.3" "pytz==2026.6" "tzdata==2026.6" "setuptools==80.10.2"
fi
echo "$target"
