"""Bad input of every kind gets an Error that says what was wrong and what was expected, of the
class that says what kind of error it is (a damaged model, an unsupported op, a bad input:
docs/guide/limits-and-errors.md, "Error kinds"; resource limits: tests/python/robustness/test_bounds.py)."""

import os
import shutil

import numpy as np
import pytest

import coremlrt
from coremltools.converters.mil import Builder as mb
import coremltools as ct
from mil_helpers import save_program

WEIGHTS = "Data/com.apple.CoreML/weights/weight.bin"
SPEC = "Data/com.apple.CoreML/model.mlmodel"


@pytest.fixture(scope="module")
def weighted_model(tmp_path_factory):
    """x[2, 16] + w, with w (16 fp32 values) stored as a blob in weight.bin."""
    w = np.arange(16, dtype=np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 16))], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.add(x=x, y=w, name="y")

    return save_program(prog, tmp_path_factory.mktemp("weighted"))


def copy_of(path, tmp_path):
    target = os.path.join(tmp_path, "copy.mlpackage")
    shutil.copytree(path, target)
    for root, _dirs, files in os.walk(target):
        for f in files:
            os.chmod(os.path.join(root, f), 0o644)
    return target


def edit_spec(package, edit):
    """Rewrites the package's Model protobuf after `edit(spec)`."""
    from coremltools.proto import Model_pb2

    spec = Model_pb2.Model()
    with open(os.path.join(package, SPEC), "rb") as f:
        spec.ParseFromString(f.read())
    edit(spec)
    with open(os.path.join(package, SPEC), "wb") as f:
        f.write(spec.SerializeToString())


def main_ops(spec):
    function = spec.mlProgram.functions["main"]
    return function.block_specializations[function.opset].operations


def test_error_classes_are_kinds_of_coremlrt_error():
    """Every class is a coremlrt.Error (so existing `except coremlrt.Error` clauses catch it) and a
    RuntimeError, with the kind the server and the CLI read."""
    kinds = {coremlrt.BadModelError: "bad_model", coremlrt.UnsupportedError: "unsupported",
             coremlrt.BadInputError: "bad_input", coremlrt.ResourceLimitError: "resource_limit",
             coremlrt.InternalError: "internal"}
    for cls, kind in kinds.items():
        assert issubclass(cls, coremlrt.Error) and issubclass(cls, RuntimeError)
        assert cls.kind == kind and cls("x").kind == kind
    assert not hasattr(coremlrt.Error, "kind")  # the base class says no kind of its own


def test_model_works_before_damage(weighted_model):
    x = np.ones((2, 16), np.float32)
    np.testing.assert_allclose(coremlrt.MLModel(weighted_model).predict({"x": x})["y"], x + np.arange(16))


def test_missing_path(tmp_path):
    with pytest.raises(coremlrt.BadModelError,
                       match=r"does not exist \(expected an \.mlpackage folder or an \.mlmodel file\)"):
        coremlrt.MLModel(str(tmp_path / "nope.mlpackage"))


def test_folder_that_is_not_a_package(tmp_path):
    with pytest.raises(coremlrt.BadModelError, match="not a model package: it has no Manifest.json"):
        coremlrt.MLModel(str(tmp_path))


def test_manifest_without_root_model(weighted_model, tmp_path):
    package = copy_of(weighted_model, tmp_path)
    with open(os.path.join(package, "Manifest.json"), "w") as f:
        f.write('{"fileFormatVersion": "1.0.0", "itemInfoEntries": {}, "rootModelIdentifier": "x"}')
    with pytest.raises(coremlrt.BadModelError, match="names root model 'x' but itemInfoEntries has no such item"):
        coremlrt.MLModel(package)


def test_truncated_model_file(weighted_model, tmp_path):
    package = copy_of(weighted_model, tmp_path)
    spec = os.path.join(package, SPEC)
    data = open(spec, "rb").read()
    with open(spec, "wb") as f:
        f.write(data[: len(data) // 2])
    with pytest.raises(coremlrt.BadModelError, match="is not a valid Core ML model"):
        coremlrt.MLModel(package)


def test_random_bytes_model_file(tmp_path):
    path = tmp_path / "random.mlmodel"
    path.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    with pytest.raises(coremlrt.BadModelError, match="is not a valid Core ML model|specification version"):
        coremlrt.MLModel(str(path))


def test_weight_file_truncated(weighted_model, tmp_path):
    package = copy_of(weighted_model, tmp_path)
    weights = os.path.join(package, WEIGHTS)
    data = open(weights, "rb").read()
    with open(weights, "wb") as f:
        f.write(data[:140])  # header and the blob's metadata record, but only part of its data
    with pytest.raises(coremlrt.BadModelError, match=r"runs past the end of the file \(140 bytes\)"):
        coremlrt.MLModel(package)


def test_blob_offset_past_end(weighted_model, tmp_path):
    package = copy_of(weighted_model, tmp_path)

    def move_blob(spec):
        for op in main_ops(spec):
            if op.type == "const" and op.attributes["val"].HasField("blobFileValue"):
                op.attributes["val"].blobFileValue.offset = 1 << 30

    edit_spec(package, move_blob)
    with pytest.raises(coremlrt.BadModelError,
                       match=r"blob at offset 1073741824: the metadata record lies outside the file"):
        coremlrt.MLModel(package)


def test_unsupported_op_is_rejected_at_load(weighted_model, tmp_path):
    package = copy_of(weighted_model, tmp_path)

    def rename(spec):
        for op in main_ops(spec):
            if op.type == "add":
                op.type = "frobnicate"

    edit_spec(package, rename)
    with pytest.raises(coremlrt.UnsupportedError) as info:
        coremlrt.MLModel(package)
    message = str(info.value)
    assert "unsupported op" in message
    assert "no kernel for op type 'frobnicate'" in message
    assert "function 'main'" in message and "producing 'y'" in message


@pytest.fixture(scope="module")
def model(weighted_model, coremlrt_backend):
    return coremlrt.MLModel(weighted_model)


def test_missing_input(model):
    with pytest.raises(coremlrt.BadInputError, match=r"missing input 'x' \(expected float32 \[2, 16\]\)"):
        model.predict({})


def test_unknown_extra_input(model):
    with pytest.raises(coremlrt.BadInputError,
                       match=r"unknown input 'z'; the model's inputs are: x: float32 \[2, 16\]"):
        model.predict({"x": np.zeros((2, 16), np.float32), "z": np.zeros(3)})


@pytest.mark.parametrize("shape", [(2, 15), (16,), (1, 2, 16)])
def test_wrong_shape(model, shape):
    with pytest.raises(coremlrt.BadInputError, match=r"input 'x' has shape \[.*\]; expected \[2, 16\]"):
        model.predict({"x": np.zeros(shape, np.float32)})


@pytest.mark.parametrize("value", [np.array([["a"] * 16] * 2), np.zeros((2, 16), np.complex64),
                                   np.array([[object()] * 16] * 2)])
def test_unconvertible_dtype(model, value):
    with pytest.raises(coremlrt.BadInputError, match=r"input 'x': dtype .* cannot be converted to the model's float32"):
        model.predict({"x": value})


def test_non_integer_floats_for_int_input(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(3,), dtype=ct.converters.mil.mil.types.int32)],
                opset_version=ct.target.iOS18)
    def prog(x):
        return mb.add(x=x, y=np.int32(1), name="y")

    m = coremlrt.MLModel(save_program(prog, tmp_path))
    np.testing.assert_array_equal(m.predict({"x": np.array([1.0, 2.0, 3.0])})["y"], [2, 3, 4])
    with pytest.raises(coremlrt.BadInputError, match="has non-integer values; the model expects int32"):
        m.predict({"x": np.array([1.5, 2.0, 3.0])})
    with pytest.raises(coremlrt.BadInputError, match=r"does not fit the model's int32"):
        m.predict({"x": np.array([1, 2, 1 << 40])})


def test_bad_data_container(model):
    with pytest.raises(TypeError, match='"data" parameter must be either a dict or list of dict'):
        model.predict(np.zeros((2, 16), np.float32))
    with pytest.raises(TypeError, match='"data" list must contain only dictionaries'):
        model.predict([{"x": np.zeros((2, 16), np.float32)}, 3])


def test_unknown_function_name(weighted_model):
    with pytest.raises(coremlrt.BadInputError,
                       match="has a single function, 'main'; function_name 'decode' does not exist"):
        coremlrt.MLModel(weighted_model, function_name="decode")


def test_error_leaves_model_usable(model):
    with pytest.raises(coremlrt.Error):
        model.predict({"x": np.zeros((3, 16), np.float32)})
    x = np.full((2, 16), 2, np.float32)
    np.testing.assert_allclose(model.predict({"x": x})["y"], x + np.arange(16))
