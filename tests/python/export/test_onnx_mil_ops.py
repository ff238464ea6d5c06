"""MIL ops through the ONNX export, each from a program built with coremltools' MIL builder:
ONNX Runtime on the export against coremlrt's prediction of the same model.

The data-movement ops (reverse_sequence, space_to_batch, batch_to_space, pixel_unshuffle) must
agree exactly; l2_pool to fp32 rounding (LpPool's power and root against the kernel's square and
sqrt). Inputs are random, so a wrong order of the block's dims or a reversal of the wrong
entries moves values and fails the comparison.
"""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
ct = pytest.importorskip("coremltools")

import coremlrt  # noqa: E402
from coremlrt.onnx_export import export_onnx  # noqa: E402
from coremlrt.onnx_export.runner import ExportedModel  # noqa: E402
from export_checks import export_and_compare  # noqa: E402

RNG = np.random.default_rng(5)


def _compare(tmp_path, prog, inputs, rtol=0.0, atol=0.0, target=None, ops=None, precision="fp32"):
    kwargs = {"minimum_deployment_target": target} if target is not None else {}
    path = str(tmp_path / "m.mlpackage")
    ct.convert(prog, convert_to="mlprogram", skip_model_load=True,
               compute_precision=ct.precision.FLOAT32 if precision == "fp32" else ct.precision.FLOAT16, **kwargs).save(path)
    return export_and_compare(path, tmp_path / "m.onnx", inputs, rtol=rtol, atol=atol, ops=ops)


@pytest.mark.parametrize("seq_axis,batch_axis", [(1, 0), (0, 1), (2, 0), (-1, 1), (0, 2)])
def test_reverse_sequence(seq_axis, batch_axis, tmp_path):
    from coremltools.converters.mil import Builder as mb
    shape = (3, 4, 5)

    @mb.program(input_specs=[mb.TensorSpec(shape=shape), mb.TensorSpec(shape=(shape[batch_axis],), dtype=ct.converters.mil.mil.types.int32)])
    def prog(x, lengths):
        return mb.reverse_sequence(x=x, lengths=lengths, seq_axis=seq_axis, batch_axis=batch_axis)

    x = RNG.standard_normal(shape).astype(np.float32)
    length = shape[seq_axis]
    lengths = np.array([length, 1, length - 1, 2, 0][:shape[batch_axis]], np.int32)
    want = _compare(tmp_path, prog, {"x": x, "lengths": lengths}, ops=["ReverseSequence"])
    assert not np.array_equal(list(want.values())[0], x)  # something moved


@pytest.mark.parametrize("pad_type,ceil_mode", [("valid", False), ("same", False), ("custom", False), ("valid", True)])
def test_l2_pool(pad_type, ceil_mode, tmp_path):
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 3, 7, 8))])
    def prog(x):
        return mb.l2_pool(x=x, kernel_sizes=[3, 2], strides=[2, 2], pad_type=pad_type,
                          pad=[1, 0, 0, 1] if pad_type == "custom" else None, ceil_mode=ceil_mode)

    x = RNG.standard_normal((1, 3, 7, 8)).astype(np.float32)
    _compare(tmp_path, prog, {"x": x}, rtol=1e-6, atol=1e-6, ops=["LpPool"])


def test_l2_pool_fp16(tmp_path):
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 2, 6, 6))])
    def prog(x):
        return mb.l2_pool(x=x, kernel_sizes=[2, 2], strides=[2, 2], pad_type="valid")

    x = RNG.standard_normal((1, 2, 6, 6)).astype(np.float32)
    # The kernel squares and sums fp16 values in float and rounds the root to fp16: the export
    # casts to fp32 around LpPool, so the results agree to within one fp16 step.
    _compare(tmp_path, prog, {"x": x}, rtol=1e-3, atol=1e-3, precision="fp16")


@pytest.mark.parametrize("paddings", [[[0, 0], [0, 0]], [[0, 0], [2, 1]]])
def test_space_to_batch_and_back(paddings, tmp_path):
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3, 5, 5))])
    def prog(x):
        s2b = mb.space_to_batch(x=x, block_shape=[2, 3], paddings=np.array(paddings, np.int32) + [[1, 0], [1, 0]])
        b2s = mb.batch_to_space(x=mb.add(x=s2b, y=1.0), block_shape=[2, 3], crops=[[1, 1], [0, 2]])
        return s2b, b2s

    x = RNG.standard_normal((2, 3, 5, 5)).astype(np.float32)
    _compare(tmp_path, prog, {"x": x})


def test_pixel_unshuffle(tmp_path):
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3, 4, 6))], opset_version=ct.target.iOS16)
    def prog(x):
        return mb.pixel_unshuffle(x=x, downscale_factor=np.uint32(2))

    x = RNG.standard_normal((2, 3, 4, 6)).astype(np.float32)
    _compare(tmp_path, prog, {"x": x}, target=ct.target.iOS16)


@pytest.mark.parametrize("equation,shape_a,shape_b", [
    ("nchw,nwhu->nchu", (2, 3, 4, 5), (2, 5, 4, 6)),
    ("abcd,adce->abce", (1, 3, 4, 5), (2, 5, 1, 6)),   # n and h broadcast, other letters
    ("chw,whr->chr", (3, 4, 5), (5, 4, 2)),
    ("xyz,zyq->xyq", (3, 1, 5), (5, 4, 2)),
])
def test_einsum(equation, shape_a, shape_b, tmp_path):
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=shape_a), mb.TensorSpec(shape=shape_b)])
    def prog(a, b):
        return mb.einsum(values=(a, b), equation=equation)

    a = RNG.standard_normal(shape_a).astype(np.float32)
    b = RNG.standard_normal(shape_b).astype(np.float32)
    want = _compare(tmp_path, prog, {"a": a, "b": b}, rtol=1e-5, atol=1e-5)
    # The reference: numpy's einsum over the broadcast operands.
    n = 1 if len(shape_a) == 3 else max(shape_a[0], shape_b[0])
    a4, b4 = (a, b) if len(shape_a) == 4 else (a[None], b[None])
    h = max(a4.shape[2], b4.shape[2])
    a4 = np.broadcast_to(a4, (n, a4.shape[1], h, a4.shape[3]))
    b4 = np.broadcast_to(b4, (n, b4.shape[1], h, b4.shape[3]))
    reference = np.einsum("nchw,nwhu->nchu", a4, b4).reshape(list(want.values())[0].shape)
    np.testing.assert_allclose(list(want.values())[0], reference, rtol=1e-4, atol=1e-4)


RESAMPLE_CASES = [(mode, padding, coordinates, align)
                  for mode in ("bilinear", "nearest")
                  for padding, align in (("constant", False), ("constant", True), ("border", False), ("border", True),
                                         ("reflection", True), ("symmetric", False))
                  for coordinates in ("normalized_minus_one_to_one", "normalized_zero_to_one", "unnormalized")]


@pytest.mark.parametrize("mode,padding,coordinates,align", RESAMPLE_CASES)
def test_resample(mode, padding, coordinates, align, tmp_path):
    """Coordinates reach well past the image on every side, so each padding mode decides values;
    constant padding uses a non-zero padding value."""
    from coremltools.converters.mil import Builder as mb
    h, w = 5, 7

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3, h, w)), mb.TensorSpec(shape=(2, 4, 6, 2))])
    def prog(x, grid):
        return mb.resample(x=x, coordinates=grid, sampling_mode=mode, padding_mode=padding, padding_value=0.75,
                           coordinates_mode=coordinates, align_corners=align)

    x = RNG.standard_normal((2, 3, h, w)).astype(np.float32)
    grid = RNG.uniform(-1.6, 1.6, (2, 4, 6, 2)).astype(np.float32)
    if coordinates == "normalized_zero_to_one":
        grid = (grid + 1) / 2
    elif coordinates == "unnormalized":
        grid = (grid + 1) / 2 * np.array([w - 1, h - 1], np.float32)
    _compare(tmp_path, prog, {"x": x, "grid": grid}, rtol=1e-5, atol=1e-5, ops=["GridSample"])


@pytest.mark.parametrize("padding,align", [("reflection", False), ("symmetric", True)])
def test_resample_reflections_grid_sample_does_not_write_are_refused(padding, align, tmp_path):
    from coremltools.converters.mil import Builder as mb
    from coremlrt.onnx_export import unsupported_ops

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 1, 4, 4)), mb.TensorSpec(shape=(1, 2, 2, 2))])
    def prog(x, grid):
        return mb.resample(x=x, coordinates=grid, sampling_mode="bilinear", padding_mode=padding, padding_value=0.0,
                           coordinates_mode="normalized_minus_one_to_one", align_corners=align)

    path = str(tmp_path / "m.mlpackage")
    ct.convert(prog, convert_to="mlprogram", skip_model_load=True, compute_precision=ct.precision.FLOAT32).save(path)
    problems = unsupported_ops(path)
    assert [p[0] for p in problems] == ["resample"]
    assert "reflects about" in problems[0][2]


def _int8_dynamic_model(tmp_path, shape, layer, bias):
    """A neuralNetwork innerProduct or batchedMatmul with int8DynamicQuantize (coremltools'
    activate_int8_int8_matrix_multiplications), read as the int8_dynamic_linear op."""
    import contextlib
    import io
    import warnings
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder
    from coremltools.models.neural_network.quantization_utils import activate_int8_int8_matrix_multiplications
    c_out, c_in = 16, shape[-1]
    W = np.random.default_rng(1988).uniform(-10, 10, (c_out, c_in))
    b = np.linspace(-2, 2, c_out) if bias else None
    builder = NeuralNetworkBuilder([("data", datatypes.Array(*shape))], [("out", None)],
                                   disable_rank5_shape_mapping=True)
    if layer == "inner_product":
        builder.add_inner_product("ip", W=W, b=b, input_channels=c_in, output_channels=c_out, has_bias=bias,
                                  input_name="data", output_name="out")
    else:
        builder.add_batched_mat_mul("bmm", ["data"], "out", weight_matrix_rows=c_in, weight_matrix_columns=c_out,
                                    W=W.T, bias=b)
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        activate_int8_int8_matrix_multiplications(builder.spec)
    layer_spec = builder.spec.neuralNetwork.layers[0]
    assert getattr(layer_spec, layer_spec.WhichOneof("layer")).int8DynamicQuantize
    path = str(tmp_path / "m.mlmodel")
    ct.models.MLModel(builder.spec, skip_model_load=True).save(path)
    return path


@pytest.mark.parametrize("layer,shape,bias", [("inner_product", (5, 32), False), ("inner_product", (32,), True),
                                              ("batched_matmul", (2, 3, 32), False), ("batched_matmul", (4, 32), True)])
def test_int8_dynamic_linear(layer, shape, bias, tmp_path):
    """The same quantization and int32 product as the kernel: results agree exactly, including
    ties of the rounding (max|x| = 127 makes x / scale_x = x), an all-zero input (the bias) and a
    non-finite one (NaN everywhere)."""
    path = _int8_dynamic_model(tmp_path, shape, layer, bias)
    out = tmp_path / "m.onnx"
    export_onnx(path, out)
    onnx.checker.check_model(str(out), full_check=True)
    assert "MatMulInteger" in {n.op_type for n in onnx.load(str(out)).graph.node}
    model = coremlrt.MLModel(path)
    runner = ExportedModel(model, out)
    ties = np.zeros(shape, np.float32)
    ties.reshape(-1)[:6] = [127.0, 0.5, 1.5, 2.5, -2.5, -3.5]
    nonfinite = RNG.normal(0, 3, shape).astype(np.float32)
    nonfinite.reshape(-1)[3] = np.inf
    for x in (RNG.random(shape).astype(np.float32), RNG.normal(0, 3, shape).astype(np.float32), ties,
              np.zeros(shape, np.float32), nonfinite):
        want, got = model.predict({"data": x})["out"], runner.predict({"data": x})["out"]
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)


CROP_MODES = ["DEFAULT", "STRICT_ALIGN_CORNERS", "ALIGN_CORNERS", "OFFSET_CORNERS", "UNALIGN_CORNERS"]


@pytest.mark.parametrize("sampling_mode", CROP_MODES)
@pytest.mark.parametrize("box_mode,normalized", [("CORNERS_HEIGHT_FIRST", True), ("CORNERS_WIDTH_FIRST", False),
                                                 ("CENTER_SIZE_HEIGHT_FIRST", True), ("CENTER_SIZE_WIDTH_FIRST", False)])
def test_crop_resize_ios17(sampling_mode, box_mode, normalized, tmp_path):
    """Boxes reach outside the image (pad_value there), one is given backwards (read flipped),
    one is a single row; box_indices pick the images."""
    from coremltools.converters.mil import Builder as mb
    h, w = 6, 7

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3, h, w)), mb.TensorSpec(shape=(4, 4))],
                opset_version=ct.target.iOS17)
    def prog(x, boxes):
        return mb.crop_resize(x=x, boxes=boxes, box_indices=np.array([1, 0, 1, 0], np.int32), target_height=4,
                              target_width=5, normalized_coordinates=normalized, spatial_scale=1.0 if normalized else 0.9,
                              box_coordinate_mode=box_mode, sampling_mode=sampling_mode, pad_value=-3.0)

    x = RNG.standard_normal((2, 3, h, w)).astype(np.float32)
    scale = 1.0 if normalized else float(min(h, w))
    boxes = np.array([[0.1, 0.2, 0.8, 0.9], [-0.3, 0.0, 1.2, 0.5], [0.9, 0.7, 0.2, 0.1], [0.5, 0.1, 0.5, 0.6]],
                     np.float32) * scale
    want = _compare(tmp_path, prog, {"x": x, "boxes": boxes}, rtol=1e-6, atol=1e-6, target=ct.target.iOS17)
    assert (list(want.values())[0] == -3.0).any()  # some samples fell outside the image


@pytest.mark.parametrize("with_index", [True, False])
def test_crop_resize_ios15_roi(with_index, tmp_path):
    from coremltools.converters.mil import Builder as mb
    per_box = 5 if with_index else 4

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3, 6, 6)), mb.TensorSpec(shape=(3, 1, per_box, 1, 1))],
                opset_version=ct.target.iOS15)
    def prog(x, roi):
        return mb.crop_resize(x=x, roi=roi, target_height=3, target_width=4, normalized_coordinates=True,
                              box_coordinate_mode="CORNERS_HEIGHT_FIRST", sampling_mode="ALIGN_CORNERS")

    x = RNG.standard_normal((2, 3, 6, 6)).astype(np.float32)
    boxes = np.array([[0.1, 0.2, 0.8, 0.9], [0.0, 0.0, 1.0, 1.0], [0.9, 0.7, 0.2, -0.1]], np.float32)
    if with_index:
        boxes = np.concatenate([np.array([[1], [0], [1]], np.float32), boxes], axis=1)
    _compare(tmp_path, prog, {"x": x, "roi": boxes.reshape(3, 1, per_box, 1, 1)}, rtol=1e-6, atol=1e-6,
             target=ct.target.iOS15)
