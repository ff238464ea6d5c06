"""What real converted models do that a strict reader would refuse, handled as Core ML does:
optional inputs with a default value, rank-0 outputs, and static dims that coremltools'
type inference declared wrongly (docs/design/declared-shapes.md). References come from numpy."""

import os

import numpy as np
import pytest

import coremlrt
import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import get_new_symbol
from mil_helpers import save_program


def convert(prog, directory, name, inputs=None):
    model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
                       compute_precision=ct.precision.FLOAT32, inputs=inputs, skip_model_load=True)
    path = str(directory / (name + ".mlpackage"))
    model.save(path)
    return path


def declared_dims(path, output):
    """The static dims the file declares for an op output (None for an unknown dim)."""
    spec = ct.models.MLModel(path, skip_model_load=True).get_spec()
    function = spec.mlProgram.functions["main"]
    for op in function.block_specializations[function.opset].operations:
        for o in op.outputs:
            if o.name == output:
                return [d.constant.size if d.HasField("constant") else None for d in o.type.tensorType.dimensions]
    raise KeyError(output)


# ----------------------------------------------------------------------------- optional inputs


@pytest.fixture(scope="module")
def optional_inputs_model(tmp_path_factory):
    """y = x * scale + bias, with scale (int32, default 3) and bias (fp32, default 0.5) optional."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3)), mb.TensorSpec(shape=(2, 3)),
                             mb.TensorSpec(shape=(2, 3), dtype=ct.converters.mil.mil.types.int32)],
                opset_version=ct.target.iOS18)
    def prog(x, bias, scale):
        return mb.add(x=mb.mul(x=x, y=mb.cast(x=scale, dtype="fp32")), y=bias, name="y")

    inputs = [ct.TensorType(name="x", shape=(2, 3)),
              ct.TensorType(name="bias", shape=(2, 3), default_value=np.full((2, 3), 0.5, np.float32)),
              ct.TensorType(name="scale", shape=(2, 3), dtype=np.int32, default_value=np.full((2, 3), 3, np.int32))]
    return convert(prog, tmp_path_factory.mktemp("optional"), "optional", inputs)


def test_optional_inputs_take_their_default_when_absent(optional_inputs_model):
    model = coremlrt.MLModel(optional_inputs_model)
    described = {f["name"]: f for f in model._function["inputs"]}
    assert described["bias"]["optional"] and described["scale"]["optional"] and not described["x"]["optional"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(model.predict({"x": x})["y"], x * 3 + 0.5)
    np.testing.assert_array_equal(model.predict({"x": x, "bias": np.ones((2, 3), np.float32)})["y"], x * 3 + 1)
    given = {"x": x, "bias": np.zeros((2, 3), np.float32), "scale": np.full((2, 3), -2, np.int32)}
    np.testing.assert_array_equal(model.predict(given)["y"], x * -2)


def test_required_input_is_still_required(optional_inputs_model):
    with pytest.raises(coremlrt.Error, match=r"missing input 'x' \(expected float32 \[2, 3\]\)"):
        coremlrt.MLModel(optional_inputs_model).predict({"bias": np.ones((2, 3), np.float32)})


def test_optional_input_default_through_coremltools(optional_inputs_model):
    import coremlrt.coremltools_backend as backend

    backend.enable()
    try:
        x = np.arange(6, dtype=np.float32).reshape(2, 3)
        np.testing.assert_array_equal(ct.models.MLModel(optional_inputs_model).predict({"x": x})["y"], x * 3 + 0.5)
    finally:
        backend.disable()


# ----------------------------------------------------------------------------- rank-0 outputs


@pytest.fixture(scope="module")
def scalar_output_model(tmp_path_factory):
    @mb.program(input_specs=[mb.TensorSpec(shape=(4,))], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.reduce_sum(x=x, name="total"), mb.mul(x=x, y=2.0, name="doubled")

    return save_program(prog, tmp_path_factory.mktemp("scalar"), name="scalar")


def test_rank0_output_native_api_keeps_rank0(scalar_output_model):
    """coremlrt's own API returns the program's rank-0 value as a rank-0 array (README)."""
    x = np.array([1, 2, 3, 4.5], np.float32)
    out = coremlrt.MLModel(scalar_output_model).predict({"x": x})
    assert out["total"].shape == () and out["total"] == np.float32(10.5)
    assert out["doubled"].shape == (4,)


def test_rank0_output_through_coremltools_is_shape_1(scalar_output_model):
    """Core ML has no rank-0 multi-arrays: coremltools' predict on macOS returns shape (1,)."""
    import coremlrt.coremltools_backend as backend

    backend.enable()
    try:
        model = ct.models.MLModel(scalar_output_model)
        x = np.array([1, 2, 3, 4.5], np.float32)
        out = model.predict({"x": x})
        assert out["total"].shape == (1,) and out["total"][0] == np.float32(10.5)
        assert out["doubled"].shape == (4,)
        batch = model.predict([{"x": x}, {"x": -x}])
        assert [b["total"].shape for b in batch] == [(1,), (1,)] and batch[1]["total"][0] == np.float32(-10.5)
    finally:
        backend.disable()


# ----------------------------------------------------------------------------- declared static dims


def test_slice_by_size_negative_begin_size_minus_one(tmp_path):
    """coremltools declares dim x - begin = 5 + 2 = 7; the op takes the last 2 columns."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 5))], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.mul(x=mb.slice_by_size(x=x, begin=[0, -2], size=[-1, -1], name="tail"), y=2.0, name="y")

    path = save_program(prog, tmp_path, name="slice")
    assert declared_dims(path, "tail") == [2, 7]  # the quirk this test is about
    x = np.arange(10, dtype=np.float32).reshape(2, 5)
    np.testing.assert_array_equal(coremlrt.MLModel(path).predict({"x": x})["y"], x[:, -2:] * 2)


def flexible_rows():
    return [ct.TensorType(name="x", shape=(ct.RangeDim(1, 8, default=2), 4))]


def test_reshape_zero_on_flexible_dim(tmp_path):
    """reshape(x, [0, -1]) with x [n, 4], n flexible: the 0 copies n (iOS17's right-aligned
    zeros), but coremltools declares the literal 0 as a static dim."""
    rows = get_new_symbol()

    @mb.program(input_specs=[mb.TensorSpec(shape=(rows, 4))], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.mul(x=mb.reshape(x=x, shape=[0, -1], name="flat"), y=2.0, name="y")

    path = convert(prog, tmp_path, "reshape_zero", flexible_rows())
    assert declared_dims(path, "flat")[0] == 0
    model = coremlrt.MLModel(path)
    for n in (1, 3, 8):
        x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
        np.testing.assert_array_equal(model.predict({"x": x})["y"], x * 2)


def test_merged_reshapes_under_ios17_zero_rule(tmp_path):
    """reshape(reshape(x, [-1, 2, 2]), [0, -1]): coremltools' merge_consecutive_reshapes makes it
    reshape(x, [0, -1]), whose 0 now copies x's first dim, and declares that dim as a static 0.
    Core ML runs the file's (merged) program: the reference is numpy's reshape of x to [n, 4]."""
    rows = get_new_symbol()

    @mb.program(input_specs=[mb.TensorSpec(shape=(rows, 4))], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.mul(x=mb.reshape(x=mb.reshape(x=x, shape=[-1, 2, 2]), shape=[0, -1], name="merged"), y=2.0,
                      name="y")

    path = convert(prog, tmp_path, "merged", flexible_rows())
    spec = ct.models.MLModel(path, skip_model_load=True).get_spec()
    function = spec.mlProgram.functions["main"]
    ops = [op.type for op in function.block_specializations[function.opset].operations]
    assert ops.count("reshape") == 1, ops  # merged by coremltools
    assert declared_dims(path, "merged")[0] == 0
    model = coremlrt.MLModel(path)
    for n in (1, 3, 5):
        x = np.arange(n * 4, dtype=np.float32).reshape(n, 4)
        np.testing.assert_array_equal(model.predict({"x": x})["y"], x.reshape(n, 4) * 2)


def test_declared_rank_and_dtype_still_hold(tmp_path):
    """Only dims follow the op: a value whose rank differs from its declaration is still an
    error naming the op (here the file is edited to declare reduce_sum's scalar as rank 1)."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(4,))], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.mul(x=mb.reduce_sum(x=x, name="total"), y=2.0, name="y")

    path = save_program(prog, tmp_path, name="typed")
    from coremltools.proto import Model_pb2

    spec_path = os.path.join(path, "Data/com.apple.CoreML/model.mlmodel")
    spec = Model_pb2.Model()
    with open(spec_path, "rb") as f:
        spec.ParseFromString(f.read())
    function = spec.mlProgram.functions["main"]
    for op in function.block_specializations[function.opset].operations:
        if op.outputs[0].name == "total":
            declared = op.outputs[0].type.tensorType
            declared.rank = 1
            declared.dimensions.add().constant.size = 1
    with open(spec_path, "wb") as f:
        f.write(spec.SerializeToString())
    with pytest.raises(coremlrt.Error, match=r"op 'total' \(reduce_sum\).*is float32 \[\] but the program declares tensor<fp32, \[1\]>"):
        coremlrt.MLModel(path).predict({"x": np.ones(4, np.float32)})
