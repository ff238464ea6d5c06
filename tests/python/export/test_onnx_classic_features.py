"""Support vector machines, oneHotEncoder and arrayFeatureExtractor through the ONNX export
(ops_classic.py): ONNX Runtime on the export against coremlrt's prediction of the model.

The SVMs are exported as fp64 ONNX ops following src/ops/svm.cc step by step, so the numbers
agree to fp64 rounding (regressions) or exactly after the cast to fp32 (class scores); the
tolerances below are far tighter than what a sign error in rho, a wrong coefficient layout or
Platt's sigmoid the wrong way round would give (all three change the probabilities by 1e-2 or
more on these data).
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
from sklearn.svm import SVC, SVR, NuSVC  # noqa: E402

RNG = np.random.default_rng(11)
X = RNG.random((50, 4))
Y = X @ np.array([1.0, 2.0, 3.0, -1.0]) + 0.5
TWO = (Y > 2.5).astype(int)
THREE = np.digitize(Y, [1.5, 2.5])
FOUR = np.digitize(Y, [1.2, 2.0, 2.8])

SVMS = {
    "svr_rbf": lambda: SVR(kernel="rbf", gamma=0.7).fit(X, Y),
    "svr_poly": lambda: SVR(kernel="poly", degree=3, coef0=0.5).fit(X, Y),
    "svr_linear": lambda: SVR(kernel="linear").fit(X, Y),
    "svr_sigmoid": lambda: SVR(kernel="sigmoid", gamma=0.3, coef0=0.1).fit(X, Y),
    "svc2_sigmoid_probability": lambda: SVC(kernel="sigmoid", gamma=1.0, coef0=-0.5, probability=True, random_state=0).fit(X, TWO),
    "svc3_linear_probability": lambda: SVC(kernel="linear", probability=True, random_state=0).fit(X, THREE),
    "svc4_poly_probability": lambda: SVC(kernel="poly", probability=True, random_state=0).fit(X, FOUR),
    "svc3_rbf_votes": lambda: SVC(kernel="rbf").fit(X, THREE),
    "nusvc4_rbf_votes": lambda: NuSVC(kernel="rbf", nu=0.1).fit(X, FOUR),
}


def _convert(model, path):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ct.converters.sklearn.convert(model, [("input", ct.models.datatypes.Array(4))], "target").save(path)


@pytest.mark.parametrize("name", list(SVMS))
def test_svm_through_onnx(name, tmp_path):
    path, onnx_path = str(tmp_path / "m.mlmodel"), tmp_path / "m.onnx"
    _convert(SVMS[name](), path)
    export_onnx(path, onnx_path)
    model = coremlrt.MLModel(path)
    runner = ExportedModel(model, onnx_path)
    labels = set()
    for row in X:
        want, got = model.predict({"input": row}), runner.predict({"input": row})
        assert set(got) == set(want)
        for output, value in want.items():
            if isinstance(value, dict):  # Platt + coupling: the same fp64 steps, then fp32
                assert set(got[output]) == set(value)
                for label, p in value.items():
                    assert abs(got[output][label] - p) <= 1e-6, (output, label, got[output][label], p)
            elif output == "target" and name.startswith("svc") or name.startswith("nusvc"):
                assert got[output] == value  # the label (votes: the first class with most votes)
                labels.add(value)
            else:
                np.testing.assert_allclose(np.float64(got[output]), np.float64(value), rtol=1e-10, atol=1e-12)
    if not name.startswith("svr"):
        assert len(labels) > 1  # the rows reach more than one class: the label test means something


def _spec(input_type, output_width):
    from coremltools.proto import FeatureTypes_pb2, Model_pb2
    spec = Model_pb2.Model()
    spec.specificationVersion = 1
    x = spec.description.input.add()
    x.name = "x"
    if input_type == "int64":
        x.type.int64Type.SetInParent()
    elif input_type == "double":
        x.type.doubleType.SetInParent()
    else:
        x.type.multiArrayType.shape.append(input_type)
        x.type.multiArrayType.dataType = FeatureTypes_pb2.ArrayFeatureType.DOUBLE
    y = spec.description.output.add()
    y.name = "y"
    y.type.multiArrayType.shape.append(output_width)
    y.type.multiArrayType.dataType = FeatureTypes_pb2.ArrayFeatureType.DOUBLE
    return spec


def _export(spec, tmp_path):
    path, onnx_path = str(tmp_path / "m.mlmodel"), tmp_path / "m.onnx"
    ct.utils.save_spec(spec, path)
    export_onnx(path, onnx_path)
    model = coremlrt.MLModel(path)
    return model, ExportedModel(model, onnx_path)


def test_array_feature_extractor_through_onnx(tmp_path):
    spec = _spec(6, 3)
    spec.arrayFeatureExtractor.extractIndex.extend([4, 0, 4])
    model, runner = _export(spec, tmp_path)
    x = RNG.random(6)
    want, got = model.predict({"x": x})["y"], runner.predict({"x": x})["y"]
    np.testing.assert_array_equal(got.reshape(-1), want.reshape(-1))
    np.testing.assert_array_equal(got.reshape(-1), x[[4, 0, 4]])



def _check_one_hot(model, runner, values, categories, ignore):
    """Each value through coremlrt and the export: the same one-hot row (one 1 for a category,
    none for an unknown value under IgnoreUnknown), or both failing for an unknown value
    without it."""
    for value in values:
        try:
            want = model.predict({"x": value})["y"]
        except Exception:  # an unknown value without IgnoreUnknown fails the prediction
            assert not ignore
            with pytest.raises(Exception):
                runner.predict({"x": value})
            continue
        got = runner.predict({"x": value})["y"]
        np.testing.assert_array_equal(got.reshape(-1), want.reshape(-1), err_msg=str(value))
        assert got.sum() == (1 if value in categories else 0)

@pytest.mark.parametrize("input_type", ["int64", "double"])
@pytest.mark.parametrize("ignore", [True, False])
def test_one_hot_encoder_through_onnx(input_type, ignore, tmp_path):
    spec = _spec(input_type, 3)
    spec.oneHotEncoder.int64Categories.vector.extend([4, -2, 9])
    spec.oneHotEncoder.handleUnknown = 1 if ignore else 0
    model, runner = _export(spec, tmp_path)
    values = [4, -2, 9, 3] + ([2.5, -2.0001, float("nan")] if input_type == "double" else [])
    _check_one_hot(model, runner, values, (4, -2, 9), ignore)


@pytest.mark.parametrize("keys", [["a", "b", "c"], [3, 7, 11]])
def test_dict_vectorizer_through_onnx(keys, tmp_path):
    """The dictionary input becomes an ONNX map (string or int64 keys, float values) read by
    DictVectorizer: keys the model does not list are dropped, absent keys give 0, the places
    follow the vocabulary's order."""
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import LinearRegression
    from sklearn.pipeline import Pipeline
    rows = [{keys[0]: 1.0, keys[1]: 2.0}, {keys[2]: 3.0}, {keys[0]: -1.0, keys[2]: 0.5}]
    path, onnx_path = str(tmp_path / "m.mlmodel"), tmp_path / "m.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ct.converters.sklearn.convert(DictVectorizer(sparse=False).fit(rows), "x", "y").save(path)
    export_onnx(path, onnx_path)
    model = coremlrt.MLModel(path)
    runner = ExportedModel(model, onnx_path)
    stranger = "zz" if isinstance(keys[0], str) else 99
    # (ONNX Runtime refuses an empty map: a dictionary with only unknown keys stands for one.)
    for x in rows + [{keys[2]: 1.5, stranger: 4.0, keys[0]: 5.0}, {stranger: 1.0}]:
        want, got = model.predict({"x": x})["y"], runner.predict({"x": x})["y"]
        np.testing.assert_array_equal(got.reshape(-1), want.reshape(-1), err_msg=str(x))
    assert list(got.reshape(-1)) == [0, 0, 0]
    # Values cross as fp32 (ONNX Runtime's Python API makes float maps only).
    x = {keys[1]: 0.1}
    np.testing.assert_allclose(runner.predict({"x": x})["y"].reshape(-1), model.predict({"x": x})["y"].reshape(-1),
                               rtol=1e-7)
    # Through a pipeline: dictVectorizer, then a linear regression over its places.
    X = [{keys[0]: float(i), keys[1]: float(i % 3), keys[2]: float(i * i % 5)} for i in range(12)]
    target = [2 * r[keys[0]] - r[keys[1]] + 0.5 * r[keys[2]] for r in X]
    pipeline = Pipeline([("dv", DictVectorizer(sparse=False)), ("lr", LinearRegression())]).fit(X, target)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ct.converters.sklearn.convert(pipeline, "x", "y").save(path)
    export_onnx(path, onnx_path)
    model = coremlrt.MLModel(path)
    runner = ExportedModel(model, onnx_path)
    for x in X:
        np.testing.assert_allclose(np.float64(runner.predict({"x": x})["y"]), np.float64(model.predict({"x": x})["y"]),
                                   rtol=1e-12, atol=1e-12)


def _string_spec(input_kind, output_kind):
    from coremltools.proto import Model_pb2
    spec = Model_pb2.Model()
    spec.specificationVersion = 1
    x = spec.description.input.add()
    x.name = "x"
    getattr(x.type, input_kind + "Type").SetInParent()
    y = spec.description.output.add()
    y.name = "y"
    if output_kind == "array":
        from coremltools.proto import FeatureTypes_pb2
        y.type.multiArrayType.shape.append(3)
        y.type.multiArrayType.dataType = FeatureTypes_pb2.ArrayFeatureType.DOUBLE
    else:
        getattr(y.type, output_kind + "Type").SetInParent()
    return spec


def test_categorical_mapping_string_to_int64_through_onnx(tmp_path):
    """The string input becomes an ONNX string tensor (CategoryMapper onto the vocabulary's
    codes); a string the map lacks gives the default. Keys whose sorted order differs from the
    map's values catch a table laid out in the wrong order."""
    spec = _string_spec("string", "int64")
    for key, value in {"b": 5, "a": -3, "zz": 7, "B": 2 ** 62}.items():
        spec.categoricalMapping.stringToInt64Map.map[key] = value
    spec.categoricalMapping.int64Value = 42
    model, runner = _export(spec, tmp_path)
    import onnx
    graph_input = onnx.load(str(tmp_path / "m.onnx")).graph.input[0]
    assert graph_input.type.tensor_type.elem_type == onnx.TensorProto.STRING
    for value in ["a", "b", "zz", "B", "q", "", "A"]:
        want, got = model.predict({"x": value})["y"], runner.predict({"x": value})["y"]
        assert int(got) == int(want), value
    assert int(runner.predict({"x": "B"})["y"]) == 2 ** 62  # int64 all the way (a double would round)
    assert int(runner.predict({"x": "nope"})["y"]) == 42


def test_categorical_mapping_int64_to_string_through_onnx(tmp_path):
    """The output, a code over the output vocabulary inside coremlrt, is an ONNX string tensor."""
    spec = _string_spec("int64", "string")
    for key, value in {5: "five", -3: "minus", 7: "seven", 2 ** 62: "big"}.items():
        spec.categoricalMapping.int64ToStringMap.map[key] = value
    spec.categoricalMapping.strValue = "other"
    model, runner = _export(spec, tmp_path)
    import onnx
    graph_output = onnx.load(str(tmp_path / "m.onnx")).graph.output[0]
    assert graph_output.type.tensor_type.elem_type == onnx.TensorProto.STRING
    for value in [5, -3, 7, 2 ** 62, 2 ** 62 + 1, 0, -1]:
        want, got = model.predict({"x": value})["y"], runner.predict({"x": value})["y"]
        assert isinstance(got, str) and got == want, value
    assert runner.predict({"x": 2 ** 62 + 1})["y"] == "other"


@pytest.mark.parametrize("ignore", [True, False])
def test_string_one_hot_encoder_through_onnx(ignore, tmp_path):
    spec = _string_spec("string", "array")
    spec.oneHotEncoder.stringCategories.vector.extend(["red", "green", "blue"])
    spec.oneHotEncoder.handleUnknown = 1 if ignore else 0
    model, runner = _export(spec, tmp_path)
    _check_one_hot(model, runner, ["red", "green", "blue", "Red", ""], ("red", "green", "blue"), ignore)


# Samples on an integer grid, two of them repeated: many queries are equally far from several
# samples (the lower sample index must win the last place), k = 4 splits votes 2 : 2 (the first
# class in sorted order must win), and queries at a sample make inverse weighting give that
# sample (and its duplicates) all the weight.
KNN_SAMPLES = np.array([[0, 0], [2, 0], [0, 2], [2, 2], [1, 1], [1, 1], [3, 1], [1, 3], [3, 3], [0, 0]], float)
KNN_QUERIES = np.array([[1, 0], [0, 1], [1, 2], [2, 1], [1, 1], [0, 0], [2, 2], [3, 2], [0.5, 0.25], [5, 5],
                        [1.5, 1.5], [2, 3]], float)


@pytest.mark.parametrize("weights", ["uniform", "distance"])
@pytest.mark.parametrize("k", [1, 2, 4, 7])
@pytest.mark.parametrize("labels", ["int", "str"])
def test_nearest_neighbors_through_onnx(weights, k, labels, tmp_path):
    from sklearn.neighbors import KNeighborsClassifier
    y = np.array([2, 0, 1, 2, 0, 1, 2, 0, 1, 1])
    if labels == "str":
        y = np.array(["b", "c", "a"])[y]
    knn = KNeighborsClassifier(n_neighbors=k, algorithm="brute").fit(KNN_SAMPLES, y)
    path, onnx_path = str(tmp_path / "m.mlmodel"), tmp_path / "m.onnx"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        spec = ct.converters.sklearn.convert(knn, "input", "target").get_spec()
    if weights == "distance":  # coremltools converts uniform weights only; the spec has both
        spec.kNearestNeighborsClassifier.inverseDistanceWeighting.SetInParent()
    # coremltools writes the label only: the probabilities are declared too, as a classifier's.
    probabilities = spec.description.output.add()
    probabilities.name = "classProbability"
    if labels == "str":
        probabilities.type.dictionaryType.stringKeyType.SetInParent()
    else:
        probabilities.type.dictionaryType.int64KeyType.SetInParent()
    spec.description.predictedProbabilitiesName = "classProbability"
    ct.utils.save_spec(spec, path)
    export_onnx(path, onnx_path)
    model = coremlrt.MLModel(path)
    runner = ExportedModel(model, onnx_path)
    seen = set()
    for row in KNN_QUERIES:
        want, got = model.predict({"input": row}), runner.predict({"input": row})
        assert set(got) == set(want)
        assert got["target"] == want["target"], row
        seen.add(want["target"])
        assert set(got["classProbability"]) == set(want["classProbability"])
        for label, p in want["classProbability"].items():  # fp64 steps, then fp32: the same float
            assert got["classProbability"][label] == p, (row, label, got["classProbability"][label], p)
    assert len(seen) > 1


@pytest.mark.parametrize("in_type,out_type", [("FLOAT32", "FLOAT32"), ("DOUBLE", "FLOAT32"), ("FLOAT16", "DOUBLE")])
def test_class_confidence_thresholding_through_onnx(in_type, out_type, tmp_path):
    """The format's definition (src/ops/feature_engineering.cc): [0, :] the confidences in the
    output's dtype, [1, :] ones, every class taken."""
    from coremltools.proto import FeatureTypes_pb2, Model_pb2
    spec = Model_pb2.Model()
    spec.specificationVersion = 8
    for features, name, shape, data_type in ((spec.description.input, "confidence", [3], in_type),
                                             (spec.description.output, "filtered", [2, 3], out_type)):
        feature = features.add()
        feature.name = name
        feature.type.multiArrayType.shape.extend(shape)
        feature.type.multiArrayType.dataType = getattr(FeatureTypes_pb2.ArrayFeatureType, data_type)
    for _ in range(3):  # one precision-recall curve per class
        curve = spec.classConfidenceThresholding.precisionRecallCurves.add()
        curve.precisionValues.vector.extend([0.5, 1.0])
        curve.precisionConfidenceThresholds.vector.extend([0.1, 0.9])
        curve.recallValues.vector.extend([1.0, 0.5])
        curve.recallConfidenceThresholds.vector.extend([0.1, 0.9])
    model, runner = _export(spec, tmp_path)
    dtypes = {"FLOAT32": np.float32, "DOUBLE": np.float64, "FLOAT16": np.float16}
    x = np.array([0.2, 0.7, 0.1], dtypes[in_type])
    want = np.stack([x.astype(dtypes[out_type]), np.ones(3, dtypes[out_type])])
    np.testing.assert_array_equal(np.asarray(runner.predict({"confidence": x})["filtered"], np.float64),
                                  want.astype(np.float64))
    np.testing.assert_array_equal(model.predict({"confidence": x})["filtered"], want)
