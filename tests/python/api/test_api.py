"""The coremltools-shaped Python API: loading, descriptions, input conversion, outputs."""

import numpy as np
import pytest

import coremlrt
import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types
from mil_helpers import save_program


@pytest.fixture(scope="module")
def affine_path(tmp_path_factory):
    """y = x * 3 - 1 over fp32 [2, 3], with metadata set the way users set it."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3))], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.sub(x=mb.mul(x=x, y=3.0), y=1.0, name="y")

    model = ct.convert(prog, convert_to="mlprogram", compute_precision=ct.precision.FLOAT32,
                       minimum_deployment_target=ct.target.iOS18, skip_model_load=True)
    model.author = "Ada"
    model.license = "MIT"
    model.short_description = "affine map"
    model.version = "1.2"
    model.user_defined_metadata["origin"] = "test"
    model.input_description["x"] = "the input"
    path = str(tmp_path_factory.mktemp("affine") / "affine.mlpackage")
    model.save(path)
    return path


@pytest.fixture(scope="module")
def affine(affine_path):
    return coremlrt.MLModel(affine_path)


def reference(x):
    return np.asarray(x, np.float64) * 3 - 1


def test_metadata_and_descriptions(affine):
    assert affine.author == "Ada"
    assert affine.license == "MIT"
    assert affine.short_description == "affine map"
    assert affine.version == "1.2"
    assert affine.user_defined_metadata["origin"] == "test"
    assert "com.github.apple.coremltools.version" in affine.user_defined_metadata
    assert list(affine.input_description) == ["x"]
    assert affine.input_description["x"] == "the input"
    assert "y" in affine.output_description and len(affine.output_description) == 1
    with pytest.raises(KeyError, match="No feature with name z"):
        affine.input_description["z"]


def test_compute_units(affine_path):
    assert [u.name for u in coremlrt.ComputeUnit] == ["ALL", "CPU_AND_GPU", "CPU_ONLY", "CPU_AND_NE"]
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for unit in coremlrt.ComputeUnit:
        model = coremlrt.MLModel(affine_path, compute_units=unit)
        np.testing.assert_allclose(model.predict({"x": x})["y"], reference(x), rtol=1e-6)
    with pytest.raises(TypeError, match="compute_units"):
        coremlrt.MLModel(affine_path, compute_units="CPU_ONLY")


@pytest.mark.parametrize("make", [
    lambda x: x,                                  # float32 array, zero conversion
    lambda x: x.astype(np.float64),               # float64 -> float32
    lambda x: x.astype(np.float16),               # float16 -> float32
    lambda x: x.astype(np.int64),                 # integers -> float32
    lambda x: x.tolist(),                         # nested lists
    lambda x: np.asfortranarray(x),               # non-contiguous layout
    lambda x: x.T.copy().T,                       # transposed view
])
def test_input_forms(affine, make):
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out = affine.predict({"x": make(x)})["y"]
    assert out.dtype == np.float32 and out.shape == (2, 3)
    np.testing.assert_allclose(out, reference(x), rtol=1e-6)


def test_array_protocol_objects(affine):
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)

    class ArrayLike:
        def __array__(self, dtype=None, copy=None):
            return x

    np.testing.assert_allclose(affine.predict({"x": ArrayLike()})["y"], reference(x), rtol=1e-6)
    torch = pytest.importorskip("torch")
    t = torch.from_numpy(x.copy())
    np.testing.assert_allclose(affine.predict({"x": t})["y"], reference(x), rtol=1e-6)
    t.requires_grad_(True)  # cannot go through __dlpack__; falls back to a detached copy
    np.testing.assert_allclose(affine.predict({"x": t})["y"], reference(x), rtol=1e-6)


def test_batch_predict(affine):
    xs = [np.full((2, 3), i, np.float32) for i in range(3)]
    outs = affine.predict([{"x": x} for x in xs])
    assert isinstance(outs, list) and len(outs) == 3
    for x, out in zip(xs, outs):
        np.testing.assert_allclose(out["y"], reference(x))


def test_outputs_are_independent_arrays(affine):
    x = np.ones((2, 3), np.float32)
    first = affine.predict({"x": x})["y"]
    first[:] = 123  # outputs belong to the caller: writing them affects nothing else
    second = affine.predict({"x": x})["y"]
    np.testing.assert_allclose(second, reference(x))


def test_int32_model_and_scalar_conversion(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(1,), dtype=types.int32)], opset_version=ct.target.iOS18)
    def prog(n):
        return mb.mul(x=n, y=np.int32(7), name="y")

    m = coremlrt.MLModel(save_program(prog, tmp_path))
    assert m.predict({"n": np.array([6], np.int64)})["y"].dtype == np.int32
    assert m.predict({"n": 6})["y"].tolist() == [42]
    assert m.predict({"n": [5]})["y"].tolist() == [35]


def test_fp16_model_io(tmp_path):
    """fp16 inputs accept float32/float64 arrays; fp16 outputs come back as float32 (coremltools' rule)."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(4,), dtype=types.fp16)], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.add(x=x, y=np.float16(0.5), name="y")

    m = coremlrt.MLModel(save_program(prog, tmp_path, fp16=True))
    x = np.array([1.0, 2.0, 1000.0, -3.25])
    out = m.predict({"x": x})["y"]
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, (x.astype(np.float16) + np.float16(0.5)).astype(np.float32))


def test_traced_torch_module(tmp_path):
    torch = pytest.importorskip("torch")
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4), torch.nn.Softmax(dim=-1))
    net.eval()
    example = torch.randn(3, 8)
    traced = torch.jit.trace(net, example)
    mlmodel = ct.convert(traced, inputs=[ct.TensorType(name="x", shape=(3, 8))], convert_to="mlprogram",
                         compute_precision=ct.precision.FLOAT32, minimum_deployment_target=ct.target.iOS18,
                         skip_model_load=True)
    path = str(tmp_path / "net.mlpackage")
    mlmodel.save(path)
    model = coremlrt.MLModel(path)
    x = torch.randn(3, 8)
    with torch.no_grad():
        expected = net(x).numpy()
    (out,) = model.predict({"x": x.numpy()}).values()
    np.testing.assert_allclose(out, expected, rtol=1e-5, atol=1e-6)


def test_repr_names_features(affine):
    assert "inputs=[x: float32 [2, 3]]" in repr(affine)
