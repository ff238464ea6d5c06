"""Core ML pipelines (pipeline, pipelineClassifier, pipelineRegressor) and the feature-engineering
models in them (scaler, imputer, normalizer, featureVectorizer, arrayFeatureExtractor,
oneHotEncoder, identity), as coremltools' scikit-learn converter writes them: predicted by
coremlrt and compared with scikit-learn's own predict / predict_proba, or with numpy for
pipelines built by hand. Core ML evaluates these models in double precision
(src/format/classic/predictor.h), so regressions are compared at double-precision tolerances and
class probabilities (classify's fp32 vector) at fp32 ones. Stages are spliced into one program
at load (src/format/pipeline_splicer.h); a linkedModel stage is read from beside the pipeline."""

import os
import tempfile
import warnings

import numpy as np
import pytest

import coremlrt

ct = pytest.importorskip("coremltools")
pytest.importorskip("sklearn")

from coremltools.models import datatypes  # noqa: E402
from coremltools.models.pipeline import Pipeline, PipelineRegressor  # noqa: E402
from coremltools.proto import Model_pb2  # noqa: E402
from sklearn.ensemble import RandomForestClassifier  # noqa: E402
from sklearn.impute import SimpleImputer  # noqa: E402
from sklearn.linear_model import LinearRegression, LogisticRegression  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import Normalizer, OneHotEncoder, StandardScaler  # noqa: E402
from sklearn.svm import SVC  # noqa: E402
from sklearn.tree import DecisionTreeClassifier  # noqa: E402


@pytest.fixture(scope="module")
def data():
    rng = np.random.RandomState(0)
    x = rng.randn(60, 4) * np.array([1.0, 10.0, 0.1, 3.0]) + np.array([0.0, 5.0, -1.0, 2.0])
    y = x @ np.array([1.0, -0.2, 5.0, 0.3]) + 0.1 * rng.randn(60)
    classes = (x[:, 0] + 0.1 * x[:, 1] > 0.5).astype(np.int64) + (x[:, 2] > -1.0)
    return x, y, classes


def _save(tmp_path, mlmodel, name):
    path = str(tmp_path / f"{name}.mlmodel")
    if isinstance(mlmodel, Model_pb2.Model):
        mlmodel = ct.models.MLModel(mlmodel)
    mlmodel.save(path)
    return path


def _convert(tmp_path, sk, name, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return coremlrt.MLModel(_save(tmp_path, ct.converters.sklearn.convert(sk, **kwargs), name))


def _regress(model, x, name="input"):
    return np.array([float(model.predict({name: row})["prediction"]) for row in x])


def test_scaler_then_linear_regression_matches_sklearn(tmp_path, data):
    x, y, _ = data
    sk = make_pipeline(StandardScaler(), LinearRegression()).fit(x, y)
    model = _convert(tmp_path, sk, "scaler_lr")
    assert [p["op_type"] for p in model.placements()] == ["scaler", "glm"]
    np.testing.assert_allclose(_regress(model, x), sk.predict(x), rtol=1e-10, atol=1e-10)


def test_scaler_then_logistic_regression_matches_sklearn(tmp_path, data):
    x, _, classes = data
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk = make_pipeline(StandardScaler(), LogisticRegression(multi_class="ovr")).fit(x, classes)
    model = _convert(tmp_path, sk, "scaler_logistic")
    for row, probabilities, label in zip(x, sk.predict_proba(x), sk.predict(x)):
        out = model.predict({"input": row})
        assert out["classLabel"] == label
        np.testing.assert_allclose([out["classProbability"][c] for c in sk.classes_], probabilities, rtol=1e-6,
                                   atol=1e-7)


@pytest.mark.parametrize("norm", ["l1", "l2", "max"])
def test_imputer_normalizer_regression_matches_sklearn(tmp_path, data, norm):
    x, y, _ = data
    x = x.copy()
    x[::4, 1] = np.nan
    x[1::5, 3] = np.nan
    sk = make_pipeline(SimpleImputer(), Normalizer(norm=norm), LinearRegression()).fit(x, y)
    model = _convert(tmp_path, sk, f"imputer_{norm}")
    assert [p["op_type"] for p in model.placements()] == ["imputer", "normalizer", "glm"]
    np.testing.assert_allclose(_regress(model, x), sk.predict(x), rtol=1e-10, atol=1e-10)


def test_normalizer_leaves_a_zero_vector_zero(tmp_path, data):
    x, y, _ = data
    sk = make_pipeline(Normalizer(norm="l2"), LinearRegression()).fit(x, y)
    model = _convert(tmp_path, sk, "normalizer_zero", input_features=[("input", datatypes.Array(4))])
    zero = np.zeros((1, 4))
    np.testing.assert_allclose(_regress(model, zero), sk.predict(zero), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("handle_unknown", ["error", "ignore"])
def test_one_hot_encoder_regression_matches_sklearn(tmp_path, handle_unknown):
    # The converter encodes the category *indices* 0..n-1, so the categories are those.
    rng = np.random.RandomState(1)
    x = np.stack([rng.randint(0, 3, 50), rng.randint(0, 4, 50)], axis=1).astype(np.float64)
    y = rng.randn(50)
    sk = make_pipeline(OneHotEncoder(handle_unknown=handle_unknown), LinearRegression()).fit(x, y)
    model = _convert(tmp_path, sk, f"onehot_{handle_unknown}")
    ops = [p["op_type"] for p in model.placements()]
    assert ops.count("one_hot_encoder") == 2 and "feature_vectorizer" in ops
    np.testing.assert_allclose(_regress(model, x), sk.predict(x), rtol=1e-10, atol=1e-10)
    unknown = np.array([[5.0, 1.0]])
    if handle_unknown == "ignore":
        np.testing.assert_allclose(_regress(model, unknown), sk.predict(unknown), rtol=1e-10, atol=1e-10)
    else:
        with pytest.raises(coremlrt.Error, match="not one of the encoder's categories"):
            _regress(model, unknown)


def test_one_hot_encoder_refuses_a_fractional_category(tmp_path):
    rng = np.random.RandomState(2)
    x = rng.randint(0, 3, (30, 1)).astype(np.float64)
    model = _convert(tmp_path, make_pipeline(OneHotEncoder(), LinearRegression()).fit(x, rng.randn(30)), "onehot_frac")
    with pytest.raises(coremlrt.Error, match="not a whole number"):
        model.predict({"input": np.array([1.5])})


@pytest.mark.parametrize("kind", ["svc", "tree", "forest"])
def test_scaled_classifiers_match_sklearn(tmp_path, data, kind):
    x, _, classes = data
    classifier = {
        "svc": SVC(gamma=0.3, probability=True, random_state=0),
        "tree": DecisionTreeClassifier(max_depth=4, random_state=0),
        "forest": RandomForestClassifier(n_estimators=5, max_depth=4, random_state=0),
    }[kind]
    # coremltools writes a multi-class forest's leaves unscaled (each tree's class fractions,
    # summing to the tree count), so the forest is checked on two classes, where it scales them.
    target = (classes > 0).astype(np.int64) if kind == "forest" else classes
    sk = make_pipeline(StandardScaler(), classifier).fit(x, target)
    model = _convert(tmp_path, sk, f"scaled_{kind}")
    expected = sk.predict_proba(x)
    for row, probabilities in zip(x, expected):
        out = model.predict({"input": row})
        np.testing.assert_allclose([out["classProbability"][c] for c in sk.classes_], probabilities, rtol=1e-5,
                                   atol=1e-6)
        if kind != "svc":  # LibSVM's label comes from its votes, not the probabilities
            assert out["classLabel"] == sk.classes_[int(np.argmax(probabilities))]


def test_named_input_features_are_vectorized_first(tmp_path, data):
    # Several named features: the converter puts a featureVectorizer in front.
    x, y, _ = data
    sk = make_pipeline(StandardScaler(), LinearRegression()).fit(x, y)
    model = _convert(tmp_path, sk, "named", input_features=["a", "b", "c", "d"])
    assert [p["op_type"] for p in model.placements()] == ["feature_vectorizer", "scaler", "glm"]
    got = np.array([float(model.predict({k: v for k, v in zip("abcd", row)})["prediction"]) for row in x])
    np.testing.assert_allclose(got, sk.predict(x), rtol=1e-10, atol=1e-10)


def _feature_model(inputs, outputs):
    spec = Model_pb2.Model()
    spec.specificationVersion = 1
    ct.models._interface_management.set_transform_interface_params(spec, inputs, outputs)
    return spec


def test_hand_built_nested_pipeline_matches_numpy(tmp_path):
    # pipelineRegressor[ pipeline[scaler, normalizer(L1)], arrayFeatureExtractor, glmRegressor ]
    shift, scale = np.array([1.0, -2.0, 0.5]), np.array([2.0, 0.5, 4.0])
    weights, offset = np.array([3.0, -1.0]), 0.25
    three = [("x", datatypes.Array(3))]
    scaler = _feature_model(three, [("scaled", datatypes.Array(3))])
    scaler.scaler.shiftValue.extend(shift)
    scaler.scaler.scaleValue.extend(scale)
    normalizer = _feature_model([("scaled", datatypes.Array(3))], [("unit", datatypes.Array(3))])
    normalizer.normalizer.normType = normalizer.normalizer.L1
    inner = Pipeline(three, [("unit", datatypes.Array(3))])
    inner.add_model(scaler)
    inner.add_model(normalizer)
    extractor = _feature_model([("unit", datatypes.Array(3))], [("picked", datatypes.Array(2))])
    extractor.arrayFeatureExtractor.extractIndex.extend([2, 0])
    glm = _feature_model([("picked", datatypes.Array(2))], [("y", datatypes.Double())])
    glm.description.predictedFeatureName = "y"
    row = glm.glmRegressor.weights.add()
    row.value.extend(weights)
    glm.glmRegressor.offset.append(offset)
    outer = PipelineRegressor(three, [("y", datatypes.Double())])
    outer.add_model(inner.spec)
    outer.add_model(extractor)
    outer.add_model(glm)
    model = coremlrt.MLModel(_save(tmp_path, outer.spec, "nested"))
    assert [p["op_type"] for p in model.placements()] == ["scaler", "normalizer", "array_feature_extractor", "glm"]
    for x in np.random.RandomState(3).randn(10, 3):
        scaled = (x + shift) * scale
        unit = scaled / np.abs(scaled).sum()
        expected = unit[[2, 0]] @ weights + offset
        np.testing.assert_allclose(float(model.predict({"x": x})["y"]), expected, rtol=1e-12, atol=1e-12)


def test_pipeline_may_return_a_stage_output_and_an_input(tmp_path):
    # Outputs are whatever features the description names: an intermediate one and an input.
    three = [("x", datatypes.Array(3))]
    scaler = _feature_model(three, [("scaled", datatypes.Array(3))])
    scaler.scaler.shiftValue.append(1.0)
    scaler.scaler.scaleValue.append(3.0)
    identity = _feature_model(three, three)
    identity.identity.SetInParent()
    pipe = Pipeline(three, [("scaled", datatypes.Array(3)), ("x", datatypes.Array(3))])
    pipe.add_model(scaler)
    pipe.add_model(identity)
    model = coremlrt.MLModel(_save(tmp_path, pipe.spec, "passthrough"))
    x = np.array([1.0, -2.0, 0.5])
    out = model.predict({"x": x})
    np.testing.assert_array_equal(out["scaled"], (x + 1.0) * 3.0)
    np.testing.assert_array_equal(out["x"], x)


def test_imputer_with_a_given_missing_value(tmp_path):
    four = [("x", datatypes.Array(4))]
    imputer = _feature_model(four, [("y", datatypes.Array(4))])
    imputer.imputer.imputedDoubleArray.vector.extend([10.0, 20.0, 30.0, 40.0])
    imputer.imputer.replaceDoubleValue = -1.0
    model = coremlrt.MLModel(_save(tmp_path, imputer, "imputer_value"))
    out = model.predict({"x": np.array([-1.0, 2.0, np.nan, -1.0])})["y"]
    np.testing.assert_array_equal(out[[0, 1, 3]], [10.0, 2.0, 40.0])
    assert np.isnan(out[2])  # only the given value is missing


def test_string_and_dictionary_features_are_refused_where_no_vocabulary_reads_them(tmp_path):
    # String and dictionary inputs run through dictVectorizer, categoricalMapping and string
    # oneHotEncoder (tests/python/classic/test_text_features.py); any other reader is refused.
    scaler = _feature_model([("d", datatypes.Dictionary(datatypes.String()))], [("v", datatypes.Array(2))])
    scaler.scaler.shiftValue.extend([0.0])
    scaler.scaler.scaleValue.extend([1.0])
    with pytest.raises(coremlrt.Error, match="input 'd' is a dictionary feature"):
        coremlrt.MLModel(_save(tmp_path, scaler, "dict_scaler"))
    # Inside a pipeline the stage itself says why.
    pipe = Pipeline([("v", datatypes.Double())], [("w", datatypes.Array(1))])
    mapping = _feature_model([("v", datatypes.Double())], [("w", datatypes.Array(1))])
    mapping.categoricalMapping.int64Value = 3
    pipe.add_model(mapping)
    with pytest.raises(coremlrt.Error, match="categoricalMapping.*no map"):
        coremlrt.MLModel(_save(tmp_path, pipe.spec, "categorical_mapping"))


def test_sparse_one_hot_output_is_refused_outside_a_pipeline(tmp_path):
    encoder = _feature_model([("c", datatypes.Int64())], [("v", datatypes.Dictionary(datatypes.Int64()))])
    encoder.oneHotEncoder.int64Categories.vector.extend([0, 1])
    encoder.oneHotEncoder.outputSparse = True
    with pytest.raises(coremlrt.Error, match="dictionar"):
        coremlrt.MLModel(_save(tmp_path, encoder, "sparse_onehot"))


def test_stage_reading_an_unknown_feature_is_refused_naming_the_stage(tmp_path):
    three = [("x", datatypes.Array(3))]
    scaler = _feature_model([("nowhere", datatypes.Array(3))], [("y", datatypes.Array(3))])
    scaler.scaler.scaleValue.append(2.0)
    pipe = Pipeline(three, [("y", datatypes.Array(3))])
    pipe.add_model(scaler)
    with pytest.raises(coremlrt.Error, match="stage 0.*nowhere"):
        coremlrt.MLModel(_save(tmp_path, pipe.spec, "unknown_feature"))


def test_neural_network_stage_reads_a_scaled_double_array(tmp_path):
    # The scaler writes doubles; the neuralNetwork stage computes in fp32: a cast joins them.
    from coremltools.models.neural_network import NeuralNetworkBuilder

    three = [("x", datatypes.Array(3))]
    scaler = _feature_model(three, [("scaled", datatypes.Array(3))])
    scaler.scaler.shiftValue.append(1.0)
    scaler.scaler.scaleValue.append(2.0)
    weights = np.arange(6, dtype=np.float32).reshape(2, 3) - 2.5
    bias = np.array([0.5, -1.0], np.float32)
    builder = NeuralNetworkBuilder([("scaled", datatypes.Array(3))], [("out", datatypes.Array(2))],
                                   disable_rank5_shape_mapping=True)
    builder.add_inner_product("ip", weights, bias, 3, 2, True, "scaled", "out")
    pipe = Pipeline(three, [("out", datatypes.Array(2))])
    pipe.add_model(scaler)
    pipe.add_model(builder.spec)
    model = coremlrt.MLModel(_save(tmp_path, pipe.spec, "nn_stage"))
    assert [p["op_type"] for p in model.placements()] == ["scaler", "cast", "linear"]
    for x in np.random.RandomState(4).randn(5, 3):
        expected = weights.astype(np.float64) @ ((x + 1.0) * 2.0) + bias
        np.testing.assert_allclose(model.predict({"x": x})["out"], expected, rtol=1e-5, atol=1e-5)


def _ml_program(program):
    return ct.convert(program, convert_to="mlprogram", skip_model_load=True, compute_precision=ct.precision.FLOAT32,
                      minimum_deployment_target=ct.target.iOS16)


def test_ml_program_stages_run_with_their_weights(tmp_path, monkeypatch):
    # coremltools' make_pipeline: each stage's weights in weights/<i>-weight.bin of the package.
    from coremltools.converters.mil import Builder as mb

    # make_pipeline leaves one of its temporary packages behind (coremltools 9.0, without
    # coremlrt too): made under tmp_path, it goes with the test's other files.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))

    weight = np.random.RandomState(0).randn(4, 3).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 3))], opset_version=ct.target.iOS16)
    def first(x):
        return mb.relu(x=mb.linear(x=x, weight=weight), name="h")

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4))], opset_version=ct.target.iOS16)
    def second(h):
        return mb.mul(x=h, y=np.float32(-2.0), name="y")

    path = str(tmp_path / "programs.mlpackage")
    ct.utils.make_pipeline(_ml_program(first), _ml_program(second)).save(path)
    model = coremlrt.MLModel(path)
    for x in np.random.RandomState(1).randn(4, 1, 3).astype(np.float32):
        expected = np.maximum(x.astype(np.float64) @ weight.T, 0) * -2.0
        np.testing.assert_allclose(model.predict({"x": x})["y"], expected, rtol=1e-5, atol=1e-5)


def test_scaler_feeds_an_ml_program_stage(tmp_path):
    # double [3] -> fp32 [1, 3]: a cast and a reshape join the stages, under the program's opset.
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 3))], opset_version=ct.target.iOS16)
    def program(scaled):
        return mb.add(x=scaled, y=np.array([[1.0, 2.0, 3.0]], np.float32), name="y")

    three = [("x", datatypes.Array(3))]
    scaler = _feature_model(three, [("scaled", datatypes.Array(3))])
    scaler.scaler.shiftValue.append(0.5)
    scaler.scaler.scaleValue.append(4.0)
    stage = _ml_program(program).get_spec()
    pipe = Pipeline(three, [("y", datatypes.Array(1, 3))])
    pipe.add_model(scaler)
    pipe.add_model(stage)
    pipe.spec.specificationVersion = stage.specificationVersion
    path = str(tmp_path / "mixed.mlpackage")
    ct.models.MLModel(pipe.spec, weights_dir=str(tmp_path)).save(path)
    model = coremlrt.MLModel(path)
    assert [p["op_type"] for p in model.placements()][:3] == ["scaler", "cast", "reshape"]
    x = np.array([1.0, -2.0, 0.25])
    np.testing.assert_allclose(model.predict({"x": x})["y"], [(x + 0.5) * 4.0 + [1.0, 2.0, 3.0]], rtol=1e-6)


def test_linear_svc_label_is_chosen_in_double_precision(tmp_path):
    # Near-tied one-vs-rest scores round to equal fp32 probabilities; Core ML picks the label
    # from the doubles it computes, as scikit-learn does from its decision function.
    from sklearn.svm import LinearSVC

    rng = np.random.RandomState(0)
    x = rng.rand(100, 2) * 10
    y = rng.choice([1, 2, 3, 4], 100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sk = LinearSVC(C=0.75, loss="hinge", random_state=0).fit(x, y)
    model = _convert(tmp_path, sk, "linear_svc", input_features=["x1", "x2"], output_feature_names="target")
    got = [model.predict({"x1": a, "x2": b})["target"] for a, b in x]
    assert got == list(sk.predict(x))


def test_int64_features_through_imputer_and_dense_one_hot(tmp_path):
    # int64 -1 is missing -> 7; then a dense one-hot over categories [3, 7, 9].
    imputer = _feature_model([("c", datatypes.Int64())], [("filled", datatypes.Int64())])
    imputer.imputer.imputedInt64Value = 7
    imputer.imputer.replaceInt64Value = -1
    encoder = _feature_model([("filled", datatypes.Int64())], [("hot", datatypes.Array(3))])
    encoder.oneHotEncoder.int64Categories.vector.extend([3, 7, 9])
    encoder.oneHotEncoder.handleUnknown = encoder.oneHotEncoder.IgnoreUnknown
    pipe = Pipeline([("c", datatypes.Int64())], [("filled", datatypes.Int64()), ("hot", datatypes.Array(3))])
    pipe.add_model(imputer)
    pipe.add_model(encoder)
    model = coremlrt.MLModel(_save(tmp_path, pipe.spec, "int64_features"))
    for value, filled in [(-1, 7), (3, 3), (9, 9), (4, 4)]:
        out = model.predict({"c": value})
        assert int(out["filled"]) == filled
        np.testing.assert_array_equal(out["hot"], [float(filled == k) for k in (3, 7, 9)])


def test_array_feature_extractor_to_a_double(tmp_path):
    extractor = _feature_model([("x", datatypes.Array(4))], [("third", datatypes.Double())])
    extractor.arrayFeatureExtractor.extractIndex.append(2)
    model = coremlrt.MLModel(_save(tmp_path, extractor, "extract_one"))
    assert float(model.predict({"x": np.array([1.0, 2.0, -3.5, 4.0])})["third"]) == -3.5
    extractor.arrayFeatureExtractor.extractIndex[0] = 4
    with pytest.raises(coremlrt.Error, match="index 4 is outside"):
        coremlrt.MLModel(_save(tmp_path, extractor, "extract_outside"))


def test_pipeline_input_keeps_its_declared_type(tmp_path):
    # The pipeline takes float32; its scaler stage declares double: a cast joins them.
    scaler = _feature_model([("x", datatypes.Array(2))], [("y", datatypes.Array(2))])
    scaler.scaler.shiftValue.append(0.5)
    scaler.scaler.scaleValue.append(3.0)
    pipe = Pipeline([("x", datatypes.Array(2))], [("y", datatypes.Array(2))])
    pipe.add_model(scaler)
    pipe.spec.description.input[0].type.multiArrayType.dataType = Model_pb2.FeatureTypes__pb2.ArrayFeatureType.FLOAT32
    model = coremlrt.MLModel(_save(tmp_path, pipe.spec, "float_input"))
    assert [p["op_type"] for p in model.placements()] == ["cast", "scaler"]
    x = np.array([0.1, -2.0], np.float32)
    np.testing.assert_allclose(model.predict({"x": x})["y"], (x.astype(np.float64) + 0.5) * 3.0, rtol=1e-15)


def _linked_pipeline(tmp_path, search_path, file_name="stage.mlmodelc"):
    """pipeline[linkedModel -> `file_name` along `search_path`, scaler(h * 3)] over x double [3]."""
    three = [("x", datatypes.Array(3))]
    pipeline = Model_pb2.Model()
    pipeline.specificationVersion = 4
    ct.models._interface_management.set_transform_interface_params(pipeline, three, [("y", datatypes.Array(3))])
    linked = _feature_model(three, [("h", datatypes.Array(3))])
    linked.specificationVersion = 4
    linked.linkedModel.linkedModelFile.linkedModelFileName.defaultValue = file_name
    linked.linkedModel.linkedModelFile.linkedModelSearchPath.defaultValue = search_path
    scaler = _feature_model([("h", datatypes.Array(3))], [("y", datatypes.Array(3))])
    scaler.scaler.shiftValue.append(0.0)
    scaler.scaler.scaleValue.append(3.0)
    pipeline.pipeline.models.add().CopyFrom(linked)
    pipeline.pipeline.models.add().CopyFrom(scaler)
    path = str(tmp_path / "linking.mlmodel")
    ct.models.utils.save_spec(pipeline, path)
    return path


def test_linked_model_stage_is_read_from_beside_the_pipeline(tmp_path):
    """A linkedModel stage names a compiled model by file name and search path, relative to the
    pipeline's folder; the first folder of the path that has it wins."""
    inner = _feature_model([("x", datatypes.Array(3))], [("h", datatypes.Array(3))])
    inner.scaler.shiftValue.extend([1.0, 2.0, 3.0])
    inner.scaler.scaleValue.append(0.5)
    source = str(tmp_path / "inner.mlmodel")
    ct.models.utils.save_spec(inner, source)
    (tmp_path / "models").mkdir()
    coremlrt.compile_model(source, str(tmp_path / "models" / "stage.mlmodelc"))
    x = np.array([1.0, -2.0, 0.25])
    expected = (x + [1.0, 2.0, 3.0]) * 0.5 * 3.0
    for search in ["missing:models", "models", "./models/"]:
        model = coremlrt.MLModel(_linked_pipeline(tmp_path, search))
        np.testing.assert_allclose(model.predict({"x": x})["y"], expected, rtol=1e-12)
    coremlrt.compile_model(source, str(tmp_path / "stage.mlmodelc"))
    np.testing.assert_allclose(coremlrt.MLModel(_linked_pipeline(tmp_path, "")).predict({"x": x})["y"], expected,
                               rtol=1e-12)


@pytest.mark.parametrize("search,file_name,message", [
    ("..", "stage.mlmodelc", "leaves the folder"),
    ("/tmp", "stage.mlmodelc", "leaves the folder"),
    ("$BUNDLE_MAIN", "stage.mlmodelc", "app bundle"),
    ("models", "../stage.mlmodelc", "not the name of a file"),
    ("nowhere", "stage.mlmodelc", "no 'stage.mlmodelc' in the search path"),
    ("out", "stage.mlmodelc", "leads out of the folder"),
])
def test_linked_model_paths_that_leave_the_folder_are_refused(tmp_path, search, file_name, message):
    inner = _feature_model([("x", datatypes.Array(3))], [("h", datatypes.Array(3))])
    inner.scaler.shiftValue.append(0.0)
    inner.scaler.scaleValue.append(1.0)
    outside = tmp_path / "outside"
    outside.mkdir()
    ct.models.utils.save_spec(inner, str(outside / "inner.mlmodel"))
    coremlrt.compile_model(str(outside / "inner.mlmodel"), str(outside / "stage.mlmodelc"))
    base = tmp_path / "base"
    base.mkdir()
    (base / "out").mkdir()
    os.symlink(outside / "stage.mlmodelc", base / "out" / "stage.mlmodelc")  # a link pointing out
    with pytest.raises(coremlrt.Error, match=message):
        coremlrt.MLModel(_linked_pipeline(base, search, file_name))
