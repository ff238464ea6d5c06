"""affine, crop, iOS17 resize and sliding_windows through the ONNX export: ONNX Runtime on the
export against coremlrt's prediction of the same MIL program.

crop, sliding_windows and resize to sizes known at export (Gathers of the kernel's taps and its
fp32 lerp) must agree exactly; affine to fp32 rounding of the sample positions (the kernel maps
them in fp64, GridSample in fp32), 1e-5; resize to sizes known only at run time (ONNX Resize's
bilinear arithmetic) 1e-5. Inputs are random and the matrices move samples outside the image,
so a wrong padding, coordinate mode or tap fails the comparison.
"""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
ct = pytest.importorskip("coremltools")

from coremlrt.onnx_export import unsupported_ops  # noqa: E402
from export_checks import export_and_compare  # noqa: E402

from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import types  # noqa: E402

RNG = np.random.default_rng(11)


def _save(tmp_path, prog):
    path = str(tmp_path / "m.mlpackage")
    ct.convert(prog, convert_to="mlprogram", skip_model_load=True, compute_precision=ct.precision.FLOAT32,
               minimum_deployment_target=ct.target.iOS17).save(path)
    return path


def _compare(tmp_path, prog, inputs, atol=0.0, ops=None):
    return export_and_compare(_save(tmp_path, prog), tmp_path / "m.onnx", inputs, atol=atol, ops=ops)


AFFINE_CASES = [
    ("bilinear", "constant", 0.0, "normalized_minus_one_to_one", True, 1),
    ("bilinear", "constant", 0.75, "normalized_zero_to_one", False, 2),
    ("nearest", "border", 0.0, "unnormalized", False, 2),
    ("bilinear", "reflection", 0.0, "normalized_minus_one_to_one", True, 1),
    ("bilinear", "symmetric", 0.0, "unnormalized", False, 2),
    ("nearest", "constant", -2.0, "normalized_minus_one_to_one", False, 1),
]


@pytest.mark.parametrize("sampling,padding,value,coordinates,align,matrices", AFFINE_CASES)
def test_affine(sampling, padding, value, coordinates, align, matrices, tmp_path, monkeypatch):
    # coremltools builds only bilinear, constant 0, [-1, 1] affine ops; the op (and our kernel)
    # defines the other modes as resample's, so the builder's check is lifted for them.
    from coremltools.converters.mil.mil.ops.defs.iOS15.image_resizing import affine as affine_op
    monkeypatch.setattr(affine_op, "type_inference", lambda op: types.tensor(
        op.x.dtype, (op.x.shape[0], op.x.shape[1], op.output_height.val, op.output_width.val)))
    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3, 6, 7)), mb.TensorSpec(shape=(matrices, 6))],
                opset_version=ct.target.iOS17)
    def prog(x, m):
        return mb.affine(x=x, transform_matrix=m, output_height=5, output_width=9, sampling_mode=sampling,
                         padding_mode=padding, padding_value=value, coordinates_mode=coordinates,
                         align_corners=align)

    x = RNG.standard_normal((2, 3, 6, 7)).astype(np.float32)
    # A rotation with a scale above 1 and a shift: part of the output falls outside the image.
    m = np.array([[1.3, 0.4, 0.2, -0.3, 1.2, -0.25], [0.9, -0.5, 0.1, 0.6, 0.8, 0.3]], np.float32)[:matrices]
    if coordinates == "unnormalized":
        m[:, 2] *= 7
        m[:, 5] *= 6
    want = _compare(tmp_path, prog, {"x": x, "m": m}, atol=1e-5, ops=["GridSample"])
    out = list(want.values())[0]
    if padding == "constant":
        assert np.any(out == value)  # some samples fell wholly outside the image


@pytest.mark.parametrize("ch,cw", [([1, 2], [0, 3]), ([0, 0], [2, 0]), ([3, 0], [1, 1])])
def test_crop(ch, cw, tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3, 7, 9))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.crop(x=x, crop_height=ch, crop_width=cw)

    x = RNG.standard_normal((2, 3, 7, 9)).astype(np.float32)
    want = _compare(tmp_path, prog, {"x": x}, ops=["Slice"])
    np.testing.assert_array_equal(list(want.values())[0], x[:, :, ch[0]:7 - ch[1], cw[0]:9 - cw[1]])


RESIZE_MODES = ["STRICT_ALIGN_CORNERS", "ALIGN_CORNERS", "DEFAULT", "OFFSET_CORNERS", "UNALIGN_CORNERS"]


@pytest.mark.parametrize("mode", RESIZE_MODES)
@pytest.mark.parametrize("interpolation", ["LINEAR", "NEAREST_NEIGHBOR"])
@pytest.mark.parametrize("shape,dims", [([3, 11], 2), ([1, 4, 1], 3), ([0, 5], 2)])
def test_resize_ios17_static(mode, interpolation, shape, dims, tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3, 5, 7))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.resize(x=x, shape=np.array(shape, np.int32), resized_dims=np.uint32(dims),
                         interpolation_mode=interpolation, sampling_mode=mode)

    x = RNG.standard_normal((2, 3, 5, 7)).astype(np.float32)
    _compare(tmp_path, prog, {"x": x}, ops=["Gather"])


def _runtime_resize(mode, interpolation):
    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 2, 5, 6)), mb.TensorSpec(shape=(2,), dtype=types.int32)],
                opset_version=ct.target.iOS17)
    def prog(x, s):
        return mb.resize(x=x, shape=s, resized_dims=np.uint32(2), interpolation_mode=interpolation, sampling_mode=mode)
    return prog


@pytest.mark.parametrize("mode", ["STRICT_ALIGN_CORNERS", "DEFAULT", "UNALIGN_CORNERS"])
def test_resize_ios17_run_time_sizes(mode, tmp_path):
    x = RNG.standard_normal((1, 2, 5, 6)).astype(np.float32)
    _compare(tmp_path, _runtime_resize(mode, "LINEAR"), {"x": x, "s": np.array([9, 0], np.int32)}, atol=1e-5,
             ops=["Resize"])


@pytest.mark.parametrize("mode,interpolation", [("OFFSET_CORNERS", "LINEAR"), ("ALIGN_CORNERS", "LINEAR"),
                                                ("DEFAULT", "NEAREST_NEIGHBOR")])
def test_resize_ios17_run_time_sizes_refused(mode, interpolation, tmp_path):
    path = _save(tmp_path, _runtime_resize(mode, interpolation))
    problems = unsupported_ops(path)
    assert [p[0] for p in problems] == ["resize"]
    assert "run time" in problems[0][2]


@pytest.mark.parametrize("shape,axis,size,stride", [((3, 10, 4), 1, 3, 2), ((3, 10, 4), -1, 2, 1),
                                                    ((6, 5), 0, 6, 4), ((2, 9), 1, 4, 3)])
def test_sliding_windows(shape, axis, size, stride, tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=shape)], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.sliding_windows(x=x, axis=axis, size=size, stride=stride)

    x = RNG.standard_normal(shape).astype(np.float32)
    want = list(_compare(tmp_path, prog, {"x": x}).values())[0]
    a = axis % len(shape)
    count = (shape[a] - size) // stride + 1
    assert want.shape == shape[:a] + (count, size) + shape[a + 1:]
