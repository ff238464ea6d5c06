"""String and dictionary input features: dictVectorizer (string or int64 keys),
categoricalMapping from strings to int64, and oneHotEncoder over string categories. The engine
carries a string as its code in the reading op's vocabulary and a dictionary laid out over it
(src/format/classic/text_feature_readers.cc, Model::input_vocabulary); these tests check the
results against scikit-learn (DictVectorizer converted by coremltools) and against expectations
computed here from the models' own maps."""

import warnings

import numpy as np
import pytest

import coremlrt

ct = pytest.importorskip("coremltools")
pytest.importorskip("sklearn")

from coremltools.models import datatypes  # noqa: E402
from coremltools.models.utils import save_spec  # noqa: E402
from coremltools.proto import Model_pb2  # noqa: E402
from sklearn.feature_extraction import DictVectorizer  # noqa: E402


def _load(tmp_path, spec, name):
    path = str(tmp_path / f"{name}.mlmodel")
    save_spec(spec, path)
    return coremlrt.MLModel(path)


def _convert(tmp_path, sk, name, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlmodel = ct.converters.sklearn.convert(sk, *args)
    return _load(tmp_path, mlmodel.get_spec(), name)


def _spec(inputs, outputs):
    spec = Model_pb2.Model()
    spec.specificationVersion = 1
    for name, kind in inputs:
        _set_type(spec.description.input.add(), name, kind)
    for name, kind in outputs:
        _set_type(spec.description.output.add(), name, kind)
    return spec


def _set_type(feature, name, kind):
    feature.name = name
    t = feature.type
    if kind == "string":
        t.stringType.SetInParent()
    elif kind == "int64":
        t.int64Type.SetInParent()
    elif isinstance(kind, tuple):  # ("array", n)
        t.multiArrayType.dataType = Model_pb2.ArrayFeatureType.DOUBLE
        t.multiArrayType.shape.append(kind[1])
    else:
        raise ValueError(kind)


# -- dictVectorizer ----------------------------------------------------------------------------

def test_dict_vectorizer_string_keys_matches_sklearn(tmp_path):
    rows = [{"a": 1.5, "b": -2.0}, {"c": 3.0}, {"a": 0.25, "d": 7.0, "b": 1.0}]
    sk = DictVectorizer(sparse=False).fit(rows)
    model = _convert(tmp_path, sk, "dv_str", "x", "y")
    queries = rows + [{"b": 4.0, "unseen": 9.0}, {}]
    for q in queries:
        got = np.asarray(model.predict({"x": q})["y"], dtype=np.float64).ravel()
        np.testing.assert_array_equal(got, sk.transform([q])[0])


def test_dict_vectorizer_int64_keys_by_hand(tmp_path):
    spec = Model_pb2.Model()
    spec.specificationVersion = 1
    i = spec.description.input.add()
    i.name = "x"
    i.type.dictionaryType.int64KeyType.SetInParent()
    _set_type(spec.description.output.add(), "y", ("array", 3))
    spec.dictVectorizer.int64ToIndex.vector.extend([10, -3, 7])
    model = _load(tmp_path, spec, "dv_int")
    got = model.predict({"x": {7: 2.5, 10: 1.0, 99: 5.0}})["y"]
    np.testing.assert_array_equal(np.asarray(got).ravel(), [1.0, 0.0, 2.5])
    with pytest.raises(coremlrt.Error, match="int64 keys"):
        model.predict({"x": {"7": 2.5}})  # "7" is not the key 7


def test_dict_vectorizer_refuses_a_non_dictionary(tmp_path):
    rows = [{"a": 1.0}, {"b": 2.0}]
    model = _convert(tmp_path, DictVectorizer(sparse=False).fit(rows), "dv_bad", "x", "y")
    with pytest.raises(coremlrt.Error, match="dictionary"):
        model.predict({"x": "a"})
    with pytest.raises(coremlrt.Error, match="not a number"):
        model.predict({"x": {"a": "1"}})


# -- categoricalMapping ------------------------------------------------------------------------

def _string_to_int64(tmp_path, mapping, default):
    spec = _spec([("s", "string")], [("k", "int64")])
    for key, value in mapping.items():
        spec.categoricalMapping.stringToInt64Map.map[key] = value
    if default is not None:
        spec.categoricalMapping.int64Value = default
    return _load(tmp_path, spec, "cm")


def test_categorical_mapping_string_to_int64_with_default(tmp_path):
    mapping = {"cat": 3, "dog": -8, "emu": (1 << 62) + 1}  # beyond 2^53: no trip through a double
    model = _string_to_int64(tmp_path, mapping, -1)
    for word in ["cat", "dog", "emu", "yak", "", "Cat"]:
        assert int(model.predict({"s": word})["k"]) == mapping.get(word, -1), word
    assert int(_string_to_int64(tmp_path, {"a": 1}, -(1 << 62) - 3).predict({"s": "b"})["k"]) == -(1 << 62) - 3


def test_categorical_mapping_refusals(tmp_path):
    with pytest.raises(coremlrt.Error, match="int64Value"):
        _string_to_int64(tmp_path, {"a": 1}, None)
    spec = _spec([("k", "int64")], [("s", "string")])
    spec.categoricalMapping.int64ToStringMap.map[1] = "a"
    spec.categoricalMapping.int64Value = 0
    with pytest.raises(coremlrt.Error, match="strValue"):
        _load(tmp_path, spec, "cm_int")
    model = _string_to_int64(tmp_path, {"a": 1}, 0)
    with pytest.raises(coremlrt.Error, match="string feature"):
        model.predict({"s": 1})


def _int64_to_string(tmp_path, mapping, default, name="cm_int"):
    spec = _spec([("k", "int64")], [("s", "string")])
    spec.categoricalMapping.int64ToStringMap.SetInParent()
    for key, value in mapping.items():
        spec.categoricalMapping.int64ToStringMap.map[key] = value
    spec.categoricalMapping.strValue = default
    return _load(tmp_path, spec, name)


def test_categorical_mapping_int64_to_string_with_default(tmp_path):
    mapping = {3: "three", -8: "minus eight", (1 << 62) + 1: "huge", 0: ""}
    model = _int64_to_string(tmp_path, mapping, "other")
    for key in [3, -8, (1 << 62) + 1, 1 << 62, 0, 4]:  # 2^62 and 2^62+1 are one double apart: not here
        got = model.predict({"k": key})["s"]
        assert isinstance(got, str) and got == mapping.get(key, "other"), key
    assert _int64_to_string(tmp_path, {}, "none", "cm_empty").predict({"k": 5})["s"] == "none"


def test_string_round_trip_through_a_pipeline_is_refused(tmp_path):
    # int64 -> string -> int64: the string leaves the first stage as a code into its own
    # vocabulary, which the second stage's vocabulary does not share.
    from coremltools.models.pipeline import Pipeline

    pipe = Pipeline([("k", datatypes.Int64())], [("j", datatypes.Int64())])
    first = _spec([("k", "int64")], [("s", "string")])
    first.categoricalMapping.int64ToStringMap.map[1] = "a"
    first.categoricalMapping.strValue = "?"
    second = _spec([("s", "string")], [("j", "int64")])
    second.categoricalMapping.stringToInt64Map.map["a"] = 7
    second.categoricalMapping.int64Value = 0
    pipe.add_model(first)
    pipe.add_model(second)
    with pytest.raises(coremlrt.Error, match="string output"):
        _load(tmp_path, pipe.spec, "round_trip")


# -- oneHotEncoder over strings ----------------------------------------------------------------

def _string_one_hot(tmp_path, categories, ignore_unknown):
    spec = _spec([("s", "string")], [("v", ("array", len(categories)))])
    spec.oneHotEncoder.stringCategories.vector.extend(categories)
    spec.oneHotEncoder.outputSparse = False
    spec.oneHotEncoder.handleUnknown = 1 if ignore_unknown else 0
    return _load(tmp_path, spec, "ohe")


def test_string_one_hot_encoder(tmp_path):
    categories = ["red", "green", "blue"]
    model = _string_one_hot(tmp_path, categories, ignore_unknown=True)
    for word in categories + ["pink"]:
        expected = np.array([1.0 if c == word else 0.0 for c in categories])
        np.testing.assert_array_equal(np.asarray(model.predict({"s": word})["v"]).ravel(), expected)


def test_string_one_hot_encoder_unknown_fails(tmp_path):
    model = _string_one_hot(tmp_path, ["a", "b"], ignore_unknown=False)
    np.testing.assert_array_equal(np.asarray(model.predict({"s": "b"})["v"]).ravel(), [0.0, 1.0])
    with pytest.raises(coremlrt.Error, match="not one of the encoder's categories"):
        model.predict({"s": "c"})


def test_string_input_elsewhere_is_still_refused(tmp_path):
    spec = _spec([("s", "string")], [("y", ("array", 1))])
    spec.scaler.shiftValue.append(1.0)
    spec.scaler.scaleValue.append(1.0)
    with pytest.raises(coremlrt.Error, match="string"):
        _load(tmp_path, spec, "scaler_str")


def test_engine_checks_the_code_it_is_given(tmp_path):
    # A C++ caller encodes strings itself (Model::input_vocabulary); a code outside the
    # vocabulary fails rather than reading past the model's keys.
    model = _string_to_int64(tmp_path, {"a": 1, "b": 2}, 0)
    assert model._model.input_vocabulary("s") == (["a", "b"], False, 0.0)  # entries, integer keys, absent value
    assert int(model._model.predict({"s": np.array(1, dtype=np.int64)}, None)["k"]) == 2
    with pytest.raises(coremlrt.Error, match="outside"):
        model._model.predict({"s": np.array(2, dtype=np.int64)}, None)


def test_string_imputer_is_refused_with_its_reason(tmp_path):
    spec = _spec([("s", "string")], [("t", "string")])
    spec.imputer.imputedStringValue = "x"
    spec.imputer.replaceStringValue = ""
    with pytest.raises(coremlrt.Error, match="imputer: .*string"):
        _load(tmp_path, spec, "imputer_str")


def test_pipeline_string_input_read_without_a_vocabulary_is_refused(tmp_path):
    from coremltools.models.pipeline import Pipeline

    pipe = Pipeline([("s", datatypes.String())], [("k", datatypes.Int64())])
    mapping = _spec([("s", "string")], [("k", "int64")])
    mapping.categoricalMapping.stringToInt64Map.map["a"] = 4
    mapping.categoricalMapping.int64Value = -2
    pipe.add_model(mapping)
    model = _load(tmp_path, pipe.spec, "pipe_ok")
    assert [int(model.predict({"s": w})["k"]) for w in ["a", "z"]] == [4, -2]
    # The same string read by a scaler stage as well: no single encoding, refused.
    pipe = Pipeline([("s", datatypes.String())], [("k", datatypes.Int64()), ("y", datatypes.Array(1))])
    pipe.add_model(mapping)
    scaler = _spec([("s", "string")], [("y", ("array", 1))])
    scaler.scaler.shiftValue.append(0.0)
    scaler.scaler.scaleValue.append(1.0)
    pipe.add_model(scaler)
    with pytest.raises(coremlrt.Error, match="input 's' is a string feature"):
        _load(tmp_path, pipe.spec, "pipe_two_readers")
