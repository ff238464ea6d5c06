"""Op rules that coremltools' own op tests pinned down: iOS17's mixed-dtype linear/matmul,
iOS17 scatter index rules, flipped crop_resize boxes, nearest sampling ties under mirroring
padding, and unknown-rank outputs. References are computed here with numpy or torch."""

import coremltools as ct
import numpy as np
import pytest
import torch
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

import backend_check
import coremlrt
from mil_helpers import save_program


def predict(prog, tmp_path, inputs, target):
    return backend_check.load(save_program(prog, tmp_path, target=target)).predict(inputs)


def only(outputs):
    assert len(outputs) == 1
    return next(iter(outputs.values()))


@pytest.mark.parametrize("x_dtype,w_dtype", [(np.float32, np.int32), (np.float16, np.int32), (np.float32, np.float16)])
def test_linear_weight_of_another_dtype(tmp_path, x_dtype, w_dtype):
    rng = np.random.default_rng(1)
    x = rng.integers(0, 10, (2, 3, 4)).astype(x_dtype)
    weight = rng.integers(-5, 5, (3, 4)).astype(w_dtype)
    bias = rng.integers(-5, 5, (3,)).astype(w_dtype)
    builtin = types.fp16 if x_dtype == np.float16 else types.fp32

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape, dtype=builtin)], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.linear(x=x, weight=weight, bias=bias)

    out = only(predict(prog, tmp_path, {"x": x}, ct.target.iOS17))
    # Small integers: every product and sum is exact in fp16 and fp32.
    np.testing.assert_array_equal(out, x.astype(np.float64) @ weight.T.astype(np.float64) + bias)


@pytest.mark.parametrize("x_dtype,y_dtype", [(np.float32, np.int32), (np.int32, np.float32), (np.int32, np.float16)])
def test_matmul_with_constant_of_another_dtype(tmp_path, x_dtype, y_dtype):
    rng = np.random.default_rng(2)
    x = rng.integers(-9, 10, (2, 5)).astype(x_dtype)
    y = rng.integers(-9, 10, (5, 3)).astype(y_dtype)
    builtin = {np.float32: types.fp32, np.int32: types.int32}[x_dtype]

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape, dtype=builtin)], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.matmul(x=x, y=y)

    out = only(predict(prog, tmp_path, {"x": x}, ct.target.iOS17))
    assert out.dtype == (np.int32 if x_dtype == np.int32 else np.float32)  # the non-constant operand's dtype
    np.testing.assert_array_equal(out, x.astype(np.int64) @ y.astype(np.int64))


@pytest.mark.parametrize("op", ["scatter", "scatter_along_axis", "scatter_nd"])
def test_ios17_scatter_drops_out_of_range_updates_unless_validating(tmp_path, op):
    data = np.arange(6, dtype=np.float32).reshape(2, 3)
    indices = {"scatter": np.array([-1, 0], np.int32), "scatter_along_axis": np.array([[-1, 0, 5], [1, 1, 0]], np.int32),
               "scatter_nd": np.array([[-1, 0], [1, 2]], np.int32)}[op]
    updates = {"scatter": np.full((2, 3), 10, np.float32), "scatter_along_axis": np.full((2, 3), 10, np.float32),
               "scatter_nd": np.full((2,), 10, np.float32)}[op]
    # The in-range entries, applied with mode "update", as numpy computes them.
    expected = data.copy()
    if op == "scatter":
        expected[0] = 10
    elif op == "scatter_along_axis":
        for (r, c), i in np.ndenumerate(indices):
            if 0 <= i < 2:
                expected[i, c] = 10
    else:
        expected[1, 2] = 10

    def build(validate):
        @mb.program(input_specs=[mb.TensorSpec(shape=data.shape), mb.TensorSpec(shape=indices.shape, dtype=types.int32)],
                    opset_version=ct.target.iOS17)
        def prog(data, indices):
            return getattr(mb, op)(data=data, indices=indices, updates=updates, mode="update", validate_indices=validate)
        return prog

    out = only(predict(build(False), tmp_path, {"data": data, "indices": indices}, ct.target.iOS17))
    np.testing.assert_array_equal(out, expected)
    model = backend_check.load(save_program(build(True), tmp_path, name="validating", target=ct.target.iOS17))
    with pytest.raises(coremlrt.Error, match="out of range"):
        model.predict({"data": data, "indices": indices})


def test_crop_resize_reads_a_flipped_box_backwards(tmp_path):
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    roi = np.array([2, 3, 0, 1], np.float32).reshape(1, 1, 4, 1, 1)  # y from 2 down to 0, x from 3 down to 1

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS16)
    def prog(x):
        return mb.crop_resize(x=x, roi=roi, target_height=3, target_width=3, normalized_coordinates=False,
                              box_coordinate_mode="CORNERS_HEIGHT_FIRST", sampling_mode="ALIGN_CORNERS")

    out = only(predict(prog, tmp_path, {"x": x}, ct.target.iOS16))
    # ALIGN_CORNERS puts the 3 samples on whole pixels: rows 2, 1, 0 and columns 3, 2, 1.
    np.testing.assert_array_equal(out.reshape(3, 3), x[0, 0][[2, 1, 0]][:, [3, 2, 1]])


def test_nearest_resample_mirrors_before_rounding(tmp_path):
    """A position that lands exactly between two pixels after mirroring rounds as PyTorch's
    grid_sample does (mirror, then round half to even)."""
    x = np.arange(1, 9, dtype=np.float32).reshape(1, 2, 2, 2)
    # Normalised [-1, 1] coordinates; 6.0 maps to pixel 6.5 of a 2-pixel axis, a tie after mirroring.
    grid = np.array([6.0, 1.0, -5.0, 0.5, 3.0, -1.0, 0.0, 0.0, 2.5, 7.0, -6.0, -2.0], np.float32).reshape(1, 2, 3, 2)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape), mb.TensorSpec(shape=grid.shape)], opset_version=ct.target.iOS15)
    def prog(x, grid):
        return mb.resample(x=x, coordinates=grid, sampling_mode="nearest", padding_mode="symmetric", padding_value=0.0,
                           coordinates_mode="normalized_minus_one_to_one", align_corners=False)

    out = only(predict(prog, tmp_path, {"x": x, "grid": grid}, ct.target.iOS15))
    # Core ML's "symmetric" repeats the edge pixel: PyTorch's "reflection" with align_corners=False.
    want = torch.nn.functional.grid_sample(torch.from_numpy(x), torch.from_numpy(grid), mode="nearest",
                                           padding_mode="reflection", align_corners=False).numpy()
    np.testing.assert_array_equal(out, want)


def test_fill_with_a_dynamic_shape_has_unknown_rank(tmp_path):
    @mb.program(input_specs=[mb.TensorSpec(shape=(3,), dtype=types.int32)], opset_version=ct.target.iOS15)
    def prog(shape):
        return mb.fill(shape=shape, value=2.5)

    model = backend_check.load(save_program(prog, tmp_path, target=ct.target.iOS15))
    for shape in ([2, 1, 3], [4, 0, 1]):
        out = only(model.predict({"shape": np.array(shape, np.int32)}))
        np.testing.assert_array_equal(out, np.full(shape, 2.5, np.float32))
