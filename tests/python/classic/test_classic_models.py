"""Classic Core ML predictors (GLM, SVM, tree ensembles, k-nearest neighbours) converted by
coremltools from scikit-learn, LibSVM and XGBoost models, predicted by coremlrt and compared with
the source library's own predictions. Core ML evaluates these models in double precision
(src/format/classic/predictor.h); regressions are compared at double-precision tolerances, class
probabilities (returned through classify's fp32 vector, src/ops/classify.cc) at fp32 ones.

Trees built by hand with coremltools' builder check every node behaviour, missing values and
every post-evaluation transform against a plain Python walk of the same trees."""

import math
import warnings

import numpy as np
import pytest

import coremlrt

ct = pytest.importorskip("coremltools")
pytest.importorskip("sklearn")

from sklearn.ensemble import RandomForestClassifier, RandomForestRegressor  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402
from sklearn.neighbors import KNeighborsClassifier  # noqa: E402
from sklearn.svm import SVC, SVR  # noqa: E402
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor  # noqa: E402

KERNELS = ["linear", "rbf", "poly", "sigmoid"]


@pytest.fixture(scope="module")
def data():
    rng = np.random.RandomState(0)
    x = rng.randn(80, 4)
    y = x @ np.array([1.0, -2.0, 0.5, 3.0]) + 0.1 * rng.randn(80)
    classes3 = (x[:, 0] + x[:, 1] > 0).astype(np.int64) + (x[:, 2] > 0.5)
    classes2 = np.where(x[:, 0] - x[:, 3] > 0, "yes", "no")
    return x, y, classes3, classes2


def _load(tmp_path, mlmodel, name):
    path = str(tmp_path / f"{name}.mlmodel")
    mlmodel.save(path)
    return coremlrt.MLModel(path)


def _convert_sklearn(tmp_path, model, name):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return _load(tmp_path, ct.converters.sklearn.convert(model), name)


def _predict(model, x, name="input"):
    return [model.predict({name: row}) for row in x]


def test_model_types_load_as_programs_of_their_own_ops(tmp_path, data):
    x, y, _, _ = data
    model = _convert_sklearn(tmp_path, LinearRegression().fit(x, y), "lr")
    assert [p["op_type"] for p in model.placements()] == ["glm"]
    model = _convert_sklearn(tmp_path, DecisionTreeRegressor(max_depth=3, random_state=0).fit(x, y), "tree")
    assert [p["op_type"] for p in model.placements()] == ["tree_ensemble"]


def test_linear_regression_matches_sklearn(tmp_path, data):
    x, y, _, _ = data
    sk = LinearRegression().fit(x, y)
    model = _convert_sklearn(tmp_path, sk, "lr")
    got = np.array([float(o["prediction"]) for o in _predict(model, x)])
    np.testing.assert_allclose(got, sk.predict(x), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("labels", ["int3", "string2"])
def test_logistic_regression_matches_sklearn(tmp_path, data, labels):
    x, _, classes3, classes2 = data
    target = classes3 if labels == "int3" else classes2
    sk = LogisticRegression(multi_class="ovr").fit(x, target)
    model = _convert_sklearn(tmp_path, sk, "logistic")
    outputs = _predict(model, x)
    expected = sk.predict_proba(x)
    for out, probabilities, label in zip(outputs, expected, sk.predict(x)):
        assert out["classLabel"] == label
        got = [out["classProbability"][c] for c in sk.classes_]
        np.testing.assert_allclose(got, probabilities, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kernel", KERNELS)
def test_svr_matches_sklearn(tmp_path, data, kernel):
    x, y, _, _ = data
    sk = SVR(kernel=kernel, gamma=0.2, coef0=0.5, degree=3, C=2.0).fit(x, y)
    model = _convert_sklearn(tmp_path, sk, f"svr_{kernel}")
    got = np.array([float(o["prediction"]) for o in _predict(model, x)])
    np.testing.assert_allclose(got, sk.predict(x), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("kernel", KERNELS)
def test_svc_probabilities_match_sklearn(tmp_path, data, kernel):
    x, _, classes3, _ = data
    sk = SVC(kernel=kernel, gamma=0.2, coef0=0.5, degree=3, probability=True, random_state=0).fit(x, classes3)
    model = _convert_sklearn(tmp_path, sk, f"svc_{kernel}")
    expected = sk.predict_proba(x)
    for out, probabilities in zip(_predict(model, x), expected):
        got = [out["classProbability"][c] for c in sk.classes_]
        np.testing.assert_allclose(got, probabilities, rtol=1e-5, atol=1e-6)
        # LibSVM's prediction with a probability model: the most probable class.
        assert out["classLabel"] == sk.classes_[int(np.argmax(probabilities))]


@pytest.mark.parametrize("kernel", KERNELS)
@pytest.mark.parametrize("labels", ["int3", "string2"])
def test_svc_labels_match_sklearn(tmp_path, data, kernel, labels):
    x, _, classes3, classes2 = data
    target = classes3 if labels == "int3" else classes2
    sk = SVC(kernel=kernel, gamma=0.2, coef0=0.5, degree=3).fit(x, target)
    model = _convert_sklearn(tmp_path, sk, f"svc_votes_{kernel}")
    assert [o["classLabel"] for o in _predict(model, x)] == list(sk.predict(x))


def test_sparse_support_vectors_match_sklearn(tmp_path, data):
    # The same SVC written with sparse support vectors (LibSVM's form: 1-based indices, zeros
    # left out; coremltools' LibSVM converter writes this form), some of them shorter than the
    # input: the prediction must not change.
    x, _, classes3, _ = data
    x = np.where(np.abs(x) < 0.5, 0.0, x)  # zeros to leave out
    sk = SVC(kernel="rbf", gamma=0.3, probability=True, random_state=0).fit(x, classes3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = ct.converters.sklearn.convert(sk).get_spec()
    svm = spec.supportVectorClassifier
    dense = [list(v.values) for v in svm.denseSupportVectors.vectors]
    svm.ClearField("denseSupportVectors")
    for values in dense:
        vector = svm.sparseSupportVectors.vectors.add()
        for i, value in enumerate(values):
            if value != 0.0:
                node = vector.nodes.add()
                node.index, node.value = i + 1, value
    assert any(len(v.nodes) < 4 and (not v.nodes or v.nodes[-1].index < 4) for v in svm.sparseSupportVectors.vectors)
    model = _load(tmp_path, ct.models.MLModel(spec), "sparse_svc")
    for out, probabilities in zip(_predict(model, x), sk.predict_proba(x)):
        np.testing.assert_allclose([out["classProbability"][c] for c in sk.classes_], probabilities, rtol=1e-5,
                                   atol=1e-6)


def test_libsvm_probabilities_of_nan_decision_values_match_libsvm(tmp_path, monkeypatch):
    # A nu-SVC with a sigmoid kernel on unscaled inputs trains to infinite coefficients and a
    # NaN rho (coremltools' test/sklearn_tests/test_NuSVC.py trains this model), so every
    # decision value is NaN; LibSVM's clip of the pairwise estimate turns the NaN into 1e-7.
    import random

    libsvm = pytest.importorskip("libsvm")
    svmutil = pytest.importorskip("libsvm.svmutil")
    # coremltools' LibSVM converter records libsvm.__version__, which libsvm-official lacks.
    monkeypatch.setattr(libsvm, "__version__", getattr(libsvm, "__version__", "3"), raising=False)
    rng = random.Random(42)
    x = [[rng.gauss(200, 30), rng.gauss(-100, 22)] for _ in range(50)]
    y = [1, 2] + [rng.choice([1, 2]) for _ in range(48)]
    trained = svmutil.svm_train(svmutil.svm_problem(y, x), svmutil.svm_parameter("-s 1 -t 3 -b 1 -q"))
    _, _, decisions = svmutil.svm_predict(y, x, trained, "-q")
    assert all(math.isnan(d[0]) for d in decisions)  # the case this test is about
    _, _, expected = svmutil.svm_predict(y, x, trained, "-b 1 -q")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlmodel = ct.converters.libsvm.convert(trained, ["x1", "x2"], "target", "probabilities")
    model = _load(tmp_path, mlmodel, "nan_nusvc")
    labels = trained.get_labels()
    for row, probabilities in zip(x, expected):
        out = model.predict({"x1": row[0], "x2": row[1]})
        np.testing.assert_allclose([out["probabilities"][c] for c in labels], probabilities, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("kind", ["forest", "tree"])
def test_tree_regressors_match_sklearn(tmp_path, data, kind):
    x, y, _, _ = data
    sk = (RandomForestRegressor(n_estimators=7, max_depth=5, random_state=0) if kind == "forest"
          else DecisionTreeRegressor(max_depth=6, random_state=0)).fit(x, y)
    model = _convert_sklearn(tmp_path, sk, kind)
    got = np.array([float(o["prediction"]) for o in _predict(model, x)])
    np.testing.assert_allclose(got, sk.predict(x), rtol=1e-9, atol=1e-9)


def test_binary_forest_classifier_matches_sklearn(tmp_path, data):
    x, _, _, classes2 = data
    sk = RandomForestClassifier(n_estimators=7, max_depth=4, random_state=0).fit(x, classes2)
    model = _convert_sklearn(tmp_path, sk, "forest2")
    expected = sk.predict_proba(x)
    for out, probabilities in zip(_predict(model, x), expected):
        got = [out["classProbability"][c] for c in sk.classes_]
        # coremltools nudges a leaf value of exactly 0.5 by 1e-7 (its _tree_ensemble.py).
        np.testing.assert_allclose(got, probabilities, atol=1e-5)
        if abs(probabilities[0] - probabilities[1]) > 1e-5:
            assert out["classLabel"] == sk.classes_[int(np.argmax(probabilities))]


@pytest.mark.parametrize("kind", ["random_forest", "extra_trees"])
def test_multiclass_forest_classifier_outputs_core_ml_tree_sums(tmp_path, data, kind):
    # coremltools writes each tree's leaf class fractions unscaled for three or more classes
    # (scaling by 1 / trees only in the binary case, converters/sklearn/_tree_ensemble.py) and
    # no post-evaluation transform, so Core ML's classProbability, basePredictionValue (zeros)
    # plus the sum over trees, is n_estimators times scikit-learn's predict_proba (the mean
    # over trees); the label is the largest sum's class.
    from coremltools.converters.sklearn._tree_ensemble import convert_tree_ensemble
    from sklearn.ensemble import ExtraTreesClassifier

    x, _, classes3, _ = data
    trees = 9
    forest = RandomForestClassifier if kind == "random_forest" else ExtraTreesClassifier
    sk = forest(n_estimators=trees, max_depth=4, random_state=0).fit(x, classes3)
    features = [("input", ct.models.datatypes.Array(x.shape[1]))]
    spec = convert_tree_ensemble(sk, features, "classLabel", mode="classifier", class_labels=sk.classes_)
    assert spec.treeEnsembleClassifier.postEvaluationTransform == 0  # NoTransform
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = _load(tmp_path, ct.models.MLModel(spec), kind)
    expected = trees * sk.predict_proba(x)
    assert expected.sum(axis=1).max() > 1.5  # sums, not probabilities: the case under test
    for out, sums in zip(_predict(model, x), expected):
        got = [out["classProbability"][c] for c in sk.classes_]
        np.testing.assert_allclose(got, sums, rtol=1e-6, atol=1e-6)
        top = np.sort(sums)
        if top[-1] - top[-2] > 1e-9:  # ties aside, the label is the largest sum's class
            assert out["classLabel"] == sk.classes_[int(np.argmax(sums))]


def test_multiclass_tree_classifier_matches_sklearn(tmp_path, data):
    x, _, classes3, _ = data
    sk = DecisionTreeClassifier(max_depth=5, random_state=0).fit(x, classes3)
    model = _convert_sklearn(tmp_path, sk, "tree3")
    expected = sk.predict_proba(x)
    for out, probabilities, label in zip(_predict(model, x), expected, sk.predict(x)):
        assert out["classLabel"] == label
        np.testing.assert_allclose([out["classProbability"][c] for c in sk.classes_], probabilities, atol=1e-6)


@pytest.mark.parametrize("weights", ["uniform", "distance"])
@pytest.mark.parametrize("algorithm", ["brute", "kd_tree"])
def test_k_neighbors_classifier_matches_sklearn(tmp_path, data, weights, algorithm):
    x, _, classes3, _ = data
    sk = KNeighborsClassifier(n_neighbors=5, weights=weights, algorithm=algorithm).fit(x[:60], classes3[:60])
    # coremltools converts uniform weighting only; inverse-distance weighting is the same
    # model with the other weighting scheme of the format.
    uniform = KNeighborsClassifier(n_neighbors=5, algorithm=algorithm).fit(x[:60], classes3[:60])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = ct.converters.sklearn.convert(uniform).get_spec()
    if weights == "distance":
        spec.kNearestNeighborsClassifier.inverseDistanceWeighting.SetInParent()
    index = spec.kNearestNeighborsClassifier.nearestNeighborsIndex
    assert index.HasField("singleKdTreeIndex" if algorithm == "kd_tree" else "linearIndex")
    model = _load(tmp_path, ct.models.MLModel(spec), f"knn_{weights}_{algorithm}")
    name = spec.description.input[0].name
    # coremltools declares the label only; the dictionary, when a model declares one, holds
    # each class's share of the weight (scikit-learn's predict_proba).
    assert not any(o.type.HasField("dictionaryType") for o in spec.description.output)
    queries = x[60:]  # none at distance 0 from a sample
    decided = 0
    for out, label, probabilities in zip(_predict(model, queries, name), sk.predict(queries), sk.predict_proba(queries)):
        if np.sort(probabilities)[-1] - np.sort(probabilities)[-2] > 1e-6:  # no tie to break
            assert out[spec.description.predictedFeatureName] == label
            decided += 1
    assert decided > len(queries) // 2


# XGBoost boosters (the converter takes several double features, one per column). XGBoost
# reads features as fp32 and its thresholds are fp32 sample values (quantile cuts), where Core
# ML compares the double input with the threshold; features exactly representable in fp32
# make both comparisons the same.
def _fp32_exact(x):
    return x.astype(np.float32).astype(np.float64)


def _xgboost():
    return pytest.importorskip("xgboost")


def test_xgboost_regression_matches_xgboost(tmp_path, data):
    xgb = _xgboost()
    x, y, _, _ = data
    x = _fp32_exact(x)
    names = [f"f{i}" for i in range(x.shape[1])]
    # base_score 0.5: what coremltools' converter assumes (its xgboost/_tree_ensemble.py).
    booster = xgb.train({"max_depth": 4, "base_score": 0.5, "eta": 0.3}, xgb.DMatrix(x, label=y, feature_names=names), 12)
    model = _load(tmp_path, ct.converters.xgboost.convert(booster, feature_names=names, target="target"), "xgb")
    expected = booster.predict(xgb.DMatrix(x, feature_names=names))
    got = np.array([float(model.predict(dict(zip(names, row)))["target"]) for row in x])
    # XGBoost sums leaves in fp32 and compares fp32 features with fp32 thresholds.
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("classes", [2, 3])
def test_xgboost_classifier_matches_xgboost(tmp_path, data, classes):
    xgb = _xgboost()
    x, _, classes3, _ = data
    x = _fp32_exact(x)
    target = classes3 if classes == 3 else (classes3 > 0).astype(np.int64)
    params = {"max_depth": 3, "base_score": 0.5, "eta": 0.5}
    params.update({"objective": "multi:softprob", "num_class": 3} if classes == 3 else {"objective": "binary:logistic"})
    names = [f"f{i}" for i in range(x.shape[1])]
    booster = xgb.train(params, xgb.DMatrix(x, label=target, feature_names=names), 8)
    converted = ct.converters.xgboost.convert(booster, feature_names=names, mode="classifier", n_classes=classes)
    model = _load(tmp_path, converted, f"xgb{classes}")
    spec = converted.get_spec()
    label_name = spec.description.predictedFeatureName
    probabilities_name = next(o.name for o in spec.description.output if o.type.HasField("dictionaryType"))
    expected = booster.predict(xgb.DMatrix(x, feature_names=names))
    if classes == 2:
        expected = np.stack([1 - expected, expected], axis=1)
    for row, probabilities in zip(x, expected):
        out = model.predict(dict(zip(names, row)))
        np.testing.assert_allclose([out[probabilities_name][c] for c in range(classes)], probabilities, atol=1e-5)
        if np.sort(probabilities)[-1] - np.sort(probabilities)[-2] > 1e-4:
            assert out[label_name] == int(np.argmax(probabilities))


# Hand-built ensembles: every node behaviour, missing values, base values and transforms,
# against a plain walk of the same trees.
BEHAVIOURS = {
    "BranchOnValueLessThanEqual": lambda v, t: v <= t,
    "BranchOnValueLessThan": lambda v, t: v < t,
    "BranchOnValueGreaterThanEqual": lambda v, t: v >= t,
    "BranchOnValueGreaterThan": lambda v, t: v > t,
    "BranchOnValueEqual": lambda v, t: v == t,
    "BranchOnValueNotEqual": lambda v, t: v != t,
}


def _trees(builder, dims):
    """Adds one stump per behaviour (feature i % 3, threshold 1.0; missing values go to the
    true child for even trees) and returns a plain-Python evaluator of the same trees."""
    stumps = []
    for tree, (behaviour, test) in enumerate(BEHAVIOURS.items()):
        feature, missing_true = tree % 3, tree % 2 == 0
        builder.add_branch_node(tree, 0, feature, 1.0, behaviour, 1, 2, missing_value_tracks_true_child=missing_true)
        true_values = {d: 0.1 * (tree + 1) * (d + 1) for d in range(dims)}
        false_values = {d: -0.05 * (tree + 2) + 0.01 * d for d in range(dims)}
        builder.add_leaf_node(tree, 1, true_values if dims > 1 else true_values[0])
        builder.add_leaf_node(tree, 2, false_values if dims > 1 else false_values[0])
        stumps.append((feature, test, missing_true, true_values, false_values))

    def evaluate(x, base):
        score = np.array(base, dtype=np.float64)
        for feature, test, missing_true, true_values, false_values in stumps:
            v = x[feature]
            go_true = missing_true if math.isnan(v) else test(v, 1.0)
            leaf = true_values if go_true else false_values
            for d, value in leaf.items():
                score[d] += value
        return score

    return evaluate


ROWS = np.array([[1.0, 1.0, 1.0], [0.5, 2.0, -1.0], [2.0, 0.0, 1.0], [np.nan, 1.0, 3.0], [1.0, np.nan, np.nan]])


def _softmax(v):
    e = np.exp(v - v.max())
    return e / e.sum()


@pytest.mark.parametrize("transform", ["NoTransform", "Regression_Logistic"])
def test_hand_built_regressor_every_behaviour(tmp_path, transform):
    from coremltools.models import datatypes
    from coremltools.models.tree_ensemble import TreeEnsembleRegressor

    builder = TreeEnsembleRegressor([("x", datatypes.Array(3))], "y")
    evaluate = _trees(builder, 1)
    builder.set_default_prediction_value(0.25)
    builder.set_post_evaluation_transform(transform)
    model = _load(tmp_path, ct.models.MLModel(builder.spec), "hand_regressor")
    for row in ROWS:
        expected = evaluate(row, [0.25])[0]
        if transform == "Regression_Logistic":
            expected = 1 / (1 + math.exp(-expected))
        assert float(model.predict({"x": row})["y"]) == pytest.approx(expected, rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("transform", ["NoTransform", "Classification_SoftMax", "Regression_Logistic",
                                       "Classification_SoftMaxWithZeroClassReference"])
def test_hand_built_classifier_every_transform(tmp_path, transform):
    from coremltools.models import datatypes
    from coremltools.models.tree_ensemble import TreeEnsembleClassifier

    labels = ["a", "b", "c"] if transform != "Regression_Logistic" else ["a", "b"]
    dims = {"Regression_Logistic": 1, "Classification_SoftMaxWithZeroClassReference": 2}.get(transform, 3)
    builder = TreeEnsembleClassifier([("x", datatypes.Array(3))], labels, "label")
    evaluate = _trees(builder, dims)
    base = [0.1 * (d + 1) for d in range(dims)]
    builder.set_default_prediction_value(base)
    builder.set_post_evaluation_transform(transform)
    spec = builder.spec
    spec.treeEnsembleClassifier.treeEnsemble.numPredictionDimensions = dims
    model = _load(tmp_path, ct.models.MLModel(spec), "hand_classifier")
    probabilities_name = spec.description.predictedProbabilitiesName
    for row in ROWS:
        score = evaluate(row, base)
        if transform == "NoTransform":
            expected = score
        elif transform == "Classification_SoftMax":
            expected = _softmax(score)
        elif transform == "Regression_Logistic":
            p = 1 / (1 + math.exp(-score[0]))
            expected = np.array([1 - p, p])
        else:
            expected = _softmax(np.concatenate([[0.0], score]))
        out = model.predict({"x": row})
        np.testing.assert_allclose([out[probabilities_name][c] for c in labels], expected, rtol=1e-6, atol=1e-7)
        assert out["label"] == labels[int(np.argmax(expected))]


def test_wrong_feature_count_is_a_clear_error(tmp_path, data):
    x, y, _, _ = data
    model = _convert_sklearn(tmp_path, LinearRegression().fit(x, y), "lr")
    with pytest.raises(coremlrt.Error, match="input 'input'"):
        model.predict({"input": np.zeros(3)})


def test_tree_child_missing_is_refused_at_load(tmp_path):
    from coremltools.models import datatypes
    from coremltools.models.tree_ensemble import TreeEnsembleRegressor

    builder = TreeEnsembleRegressor([("x", datatypes.Array(3))], "y")
    builder.add_branch_node(0, 0, 0, 1.0, "BranchOnValueLessThan", 1, 7)
    builder.add_leaf_node(0, 1, 1.0)
    builder.set_default_prediction_value(0.0)
    path = str(tmp_path / "broken.mlmodel")
    ct.models.MLModel(builder.spec).save(path)
    with pytest.raises(coremlrt.Error, match="false child 7, which the tree does not have"):
        coremlrt.MLModel(path)


@pytest.mark.parametrize("encoding", ["ReferenceClass", "OneVsRest"])
def test_glm_probit_link_matches_the_normal_cdf(tmp_path, data, encoding):
    from scipy.stats import norm

    x, _, _, classes2 = data
    sk = LogisticRegression(multi_class="ovr").fit(x, classes2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = ct.converters.sklearn.convert(sk).get_spec()
    glm = spec.glmClassifier
    glm.postEvaluationTransform = glm.Probit
    glm.classEncoding = getattr(glm, encoding)
    model = _load(tmp_path, ct.models.MLModel(spec), "probit")
    for out, z in zip(_predict(model, x), sk.decision_function(x)):
        p = norm.cdf(z)
        np.testing.assert_allclose([out["classProbability"][c] for c in sk.classes_], [1 - p, p], rtol=1e-6, atol=1e-7)


def test_regressor_through_coremltools_predicts_a_python_float(tmp_path, data):
    """A double output feature reaches coremltools' predict as a Python float, as Core ML hands
    it over on macOS (coremltools.models.utils.evaluate_regressor does float arithmetic on it);
    coremlrt's own API keeps the rank-0 array."""
    import coremlrt.coremltools_backend as backend

    x, y, _, _ = data
    sk = SVR(kernel="rbf").fit(x[:, :2], y)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlmodel = ct.converters.sklearn.convert(sk, ["x1", "x2"], "target")
    path = str(tmp_path / "svr.mlmodel")
    mlmodel.save(path)
    rows = [{"x1": a, "x2": b} for a, b in x[:5, :2]]
    backend.enable()
    try:
        model = ct.models.MLModel(path)
        got = [model.predict(row)["target"] for row in rows]
        batch = [o["target"] for o in model.predict(rows)]
    finally:
        backend.disable()
    assert all(type(v) is float for v in got + batch)
    np.testing.assert_allclose(got, sk.predict(x[:5, :2]), rtol=1e-12, atol=1e-12)
    assert batch == got
    assert coremlrt.MLModel(path).predict(rows[0])["target"].shape == ()


def _thresholding_spec(in_type="FLOAT32", out_type="FLOAT32", classes=3, curves=3, bad_value=None):
    from coremltools.proto import FeatureTypes_pb2, Model_pb2

    spec = Model_pb2.Model()
    spec.specificationVersion = 8
    for features, name, shape in ((spec.description.input, "confidence", [classes]),
                                  (spec.description.output, "filtered", [2, classes])):
        feature = features.add()
        feature.name = name
        array = feature.type.multiArrayType
        array.shape.extend(shape)
        array.dataType = getattr(FeatureTypes_pb2.ArrayFeatureType, in_type if features is spec.description.input
                                 else out_type)
    spec.classConfidenceThresholding.SetInParent()  # set even with no curves
    for i in range(curves):
        curve = spec.classConfidenceThresholding.precisionRecallCurves.add()
        curve.precisionValues.vector.extend([0.5, 0.75, 1.0])
        curve.precisionConfidenceThresholds.vector.extend([0.1, 0.5, 0.9])
        curve.recallValues.vector.extend([1.0, 0.5])
        curve.recallConfidenceThresholds.vector.extend([0.1, bad_value if bad_value is not None and i == 1 else 0.9])
    return spec


@pytest.mark.parametrize("in_type,out_type", [("FLOAT32", "FLOAT32"), ("DOUBLE", "FLOAT32"), ("FLOAT16", "DOUBLE")])
def test_class_confidence_thresholding_takes_every_class(tmp_path, in_type, out_type):
    """The format's definition: [0, :] the confidences, [1, :] ones (every class taken)."""
    path = str(tmp_path / "thresholding.mlmodel")
    ct.models.utils.save_spec(_thresholding_spec(in_type, out_type), path)
    dtypes = {"FLOAT32": np.float32, "DOUBLE": np.float64, "FLOAT16": np.float16}
    x = np.array([0.2, 0.7, 0.1], dtypes[in_type])
    got = coremlrt.MLModel(path).predict({"confidence": x})["filtered"]
    assert got.dtype == dtypes[out_type] and got.shape == (2, 3)
    np.testing.assert_array_equal(got, np.stack([x.astype(dtypes[out_type]), np.ones(3, dtypes[out_type])]))


@pytest.mark.parametrize("change,message", [
    (dict(curves=0), "no precision-recall curves"),
    (dict(curves=2), "2 precision-recall curves for 3 classes"),
    (dict(bad_value=-1.0), "finite and not negative"),
    (dict(bad_value=float("nan")), "finite and not negative"),
    (dict(in_type="INT32"), "fp16, fp32 or fp64"),
])
def test_class_confidence_thresholding_refuses_what_core_ml_refuses(tmp_path, change, message):
    path = str(tmp_path / "bad.mlmodel")
    with open(path, "wb") as f:
        f.write(_thresholding_spec(**change).SerializeToString())
    with pytest.raises(coremlrt.Error, match=message):
        coremlrt.MLModel(path)


def test_bayesian_probit_regressor_is_refused_with_the_reason(tmp_path):
    """Its probability is Φ(<w, x> / β) with β nowhere in the message: refused, not guessed."""
    from coremltools.models import _interface_management, datatypes
    from coremltools.proto import Model_pb2

    spec = Model_pb2.Model()
    spec.specificationVersion = 3
    _interface_management.set_transform_interface_params(spec, [("x", datatypes.Array(3))],
                                                         [("p", datatypes.Double())])
    spec.bayesianProbitRegressor.numberOfFeatures = 3
    path = str(tmp_path / "probit.mlmodel")
    with open(path, "wb") as f:
        f.write(spec.SerializeToString())
    with pytest.raises(coremlrt.Error, match="bayesianProbitRegressor' is refused: .* β"):
        coremlrt.MLModel(path)
