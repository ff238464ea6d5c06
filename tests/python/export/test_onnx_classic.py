"""Classic models (scikit-learn's, converted by coremltools) through the ONNX export: linear models
as fp64 ONNX ops, tree ensembles as ai.onnx.ml's TreeEnsembleRegressor, classifiers' labels and
probability maps as ai.onnx.ml writes them; ONNX Runtime on the export against coremlrt.
"""

import warnings

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
ct = pytest.importorskip("coremltools")
pytest.importorskip("sklearn")

import coremlrt  # noqa: E402
from coremlrt.onnx_export import export_onnx  # noqa: E402
from coremlrt.onnx_export.runner import ExportedModel  # noqa: E402
from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor  # noqa: E402

RNG = np.random.default_rng(7)
X = RNG.random((60, 4))
Y = X @ np.array([1.0, 2.0, 3.0, -1.0]) + 0.5
TWO = (Y > 2.5).astype(int)
THREE = np.digitize(Y, [1.5, 2.5])

# name -> (fitted model, tolerance on numbers). The tree ensemble runs in fp32 in ONNX Runtime
# (its TreeEnsembleRegressor sums and returns fp32; Core ML sums in fp64): its results agree to
# fp32's precision; the linear models compute in fp64 on both sides.
MODELS = {
    "linear_regression": (lambda: LinearRegression().fit(X, Y), 1e-12),
    "decision_tree_regressor": (lambda: DecisionTreeRegressor(max_depth=4, random_state=0).fit(X, Y), 1e-6),
    "random_forest_regressor": (lambda: RandomForestRegressor(n_estimators=5, max_depth=3, random_state=0).fit(X, Y),
                                1e-6),
    "decision_tree_classifier": (lambda: DecisionTreeClassifier(max_depth=3, random_state=0).fit(X, TWO), 1e-6),
    "random_forest_classifier": (lambda: RandomForestClassifier(n_estimators=4, max_depth=3, random_state=0)
                                 .fit(X, THREE), 1e-6),
    "logistic_regression_ovr": (lambda: LogisticRegression(multi_class="ovr").fit(X, THREE), 1e-12),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_classic_model_through_onnx(name, tmp_path):
    build, tolerance = MODELS[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converted = ct.converters.sklearn.convert(build(), [("input", ct.models.datatypes.Array(4))], "target")
    path = str(tmp_path / f"{name}.mlmodel")
    converted.save(path)
    onnx_path = tmp_path / f"{name}.onnx"
    export_onnx(path, onnx_path)
    model = coremlrt.MLModel(path)
    runner = ExportedModel(model, onnx_path)
    for row in X:
        want, got = model.predict({"input": row}), runner.predict({"input": row})
        assert set(got) == set(want)
        for output, value in want.items():
            if isinstance(value, dict):  # a classifier's probabilities by label
                assert set(got[output]) == set(value)
                for label, p in value.items():
                    assert abs(got[output][label] - p) <= tolerance, (output, label)
            elif np.asarray(value).dtype.kind in "iu" or isinstance(value, str):
                assert got[output] == value, output  # the predicted label
            else:
                np.testing.assert_allclose(np.asarray(got[output], np.float64), np.asarray(value, np.float64),
                                           rtol=tolerance, atol=tolerance, err_msg=output)
