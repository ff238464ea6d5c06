"""The data sets coremltools' model tests download, read from copies in this repository.

coremltools/test/utils.py's ``load_boston()`` fetches the Boston housing data from
http://lib.stat.cmu.edu/datasets/boston (StatLib) with requests.get and parses the text into
``{"data": (506, 13) float64, "target": (506,) float64, "feature_names": 13 names ('<U7')}``.
The sklearn, xgboost and pipeline suites' tree ensemble, regression, SVR and imputer cases
build their models from it. On a machine without network access that download fails; here
the same function returns the same arrays, read from tests/conformance/data/
boston_house_prices.csv (the copy scikit-learn 1.1.3's wheel published; see
tests/conformance/data/README.md for its origin, checksum and the cross-check against a
second published copy).

install() replaces ``coremltools.test.utils.load_boston`` and the name in every already
imported module that bound it with ``from ..utils import load_boston``; test modules imported
afterwards bind the replacement. Loaded by tests/conformance/coremltools_op_suite.py.
"""

import pathlib
import sys

DATA_DIR = pathlib.Path(__file__).resolve().parent / "data"
BOSTON_CSV = DATA_DIR / "boston_house_prices.csv"
# The feature names and their dtype, as coremltools/test/utils.py's load_boston gives them.
BOSTON_FEATURE_NAMES = ('CRIM', 'ZN', 'INDUS', 'CHAS', 'NOX', 'RM', 'AGE', 'DIS', 'RAD',
                        'TAX', 'PTRATIO', 'B', 'LSTAT')

_boston = None


def load_boston():
    """The Boston housing data in load_boston()'s format: a fresh dict of fresh arrays per
    call (the tests may modify what they get, as they may the original's)."""
    global _boston
    import numpy as np

    if _boston is None:
        import pandas as pd

        # The file's first line is "506,13,..." (samples, features), the second the 13 feature
        # names and MEDV; parsed with pandas, as the original parses StatLib's text.
        frame = pd.read_csv(BOSTON_CSV, skiprows=1)
        names = tuple(frame.columns[:-1])
        if names != BOSTON_FEATURE_NAMES or frame.shape != (506, 14) or frame.columns[-1] != "MEDV":
            raise ValueError(f"{BOSTON_CSV}: not the 506 x 13 Boston housing data (+ MEDV)")
        values = frame.to_numpy(dtype=np.float64)
        _boston = (values[:, :13], values[:, 13])
    data, target = _boston
    return {"data": np.array(data, order="C"), "target": target.copy(),
            "feature_names": np.array(BOSTON_FEATURE_NAMES, dtype="<U7")}


def install():
    import coremltools.test.utils as test_utils

    original = test_utils.load_boston
    test_utils.load_boston = load_boston
    for module in list(sys.modules.values()):
        if getattr(module, "load_boston", None) is original:
            module.load_boston = load_boston
