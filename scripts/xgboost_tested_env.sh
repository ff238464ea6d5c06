#!/usr/bin/env bash
# Installs the XGBoost that coremltools' XGBoost converter tests run with
# (scripts/coremltools_op_tests.py --suite xgboost) into build/xgboost-<version> with
# `pip install --target`, beside numpy 1.26.4, and prints that folder. The system's packages
# (xgboost-cpu 2.1.4, numpy 2) stay as they are.
#
#   bash scripts/xgboost_tested_env.sh          # 1.7.6: the version the suite is recorded with
#   bash scripts/xgboost_tested_env.sh 1.4.2    # the newest coremltools 9 names as tested
#   PYTHONPATH=$(bash scripts/xgboost_tested_env.sh):build-dev/python \
#     python3 scripts/coremltools_op_tests.py --suite xgboost
#
# Why these versions (docs/reports/conformance.md, the XGBoost section, says what each run gave):
# * numpy 1: on numpy 2 coremltools 9's scikit-learn GradientBoosting converter, which the same
#   suite tests, fails ("only 0-dimensional arrays can be converted to Python scalars").
# * 1.7.6, the last 1.x release, still takes DMatrix feature names as a numpy array, as the
#   suite's tests pass them (load_boston's feature_names); 2.0.3 and 2.1.4 (tried here) raise
#   TypeError ("Expecting a sequence of strings for feature names") in a setUpClass, failing
#   the four cases of its test class.
# * 1.4.2, the newest coremltools 9 names as tested (coremltools/_deps/__init__.py,
#   _XGBOOST_MAX_VERSION), takes such names too; it imports pkg_resources, hence setuptools < 81
#   beside it. No XGBoost release passes every case: see known_xgboost_differences.json.
# pandas 2.2.3 (with pytz and tzdata) is the pandas built for numpy 1.
set -euo pipefail
cd "$(dirname "$0")/.."
version=${1:-1.7.6}
case "$version" in
  1.7.6) extra=() ;;
  1.4.2) extra=("setuptools==80.10.2") ;;
  *) echo "xgboost_tested_env.sh: no pinned set for XGBoost $version (1.7.6 or 1.4.2)" >&2; exit 2 ;;
esac
target=build/xgboost-$version
if [ ! -f "$target/.complete" ]; then
  rm -rf "$target"
  python3 -m pip install -q --disable-pip-version-check --no-deps --target "$target" \
    "xgboost==$version" "numpy==1.26.4" "pandas==2.2.3" "pytz==2026.6" "tzdata==2026.6" "${extra[@]}" >&2
  touch "$target/.complete"  # an interrupted install is redone, not used half-made
fi
echo "$target"
