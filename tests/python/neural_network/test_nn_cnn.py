"""neuralNetwork image layers (convolution, pooling, padding, batchnorm, upsample, the
normalizations, crop and resize, reorganizeData, 3D convolution and pooling) built with
coremltools' NeuralNetworkBuilder in both blob layouts, run by coremlrt and compared with
torch or numpy."""

import os
import warnings

import numpy as np
import pytest

import coremlrt

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")
F = torch.nn.functional

from coremltools.models import datatypes  # noqa: E402
from coremltools.models.neural_network import NeuralNetworkBuilder  # noqa: E402

RTOL, ATOL = 1e-4, 1e-4
# "rank5": the builder's default (arrays become [Seq, Batch, C, H, W] blobs);
# "exact": disable_rank5_shape_mapping (the input keeps its rank, here [1, C, H, W]).
LAYOUTS = ["rank5", "exact"]


def builder_for(layout, shape, extra_inputs=()):
    """A builder with input 'data' of per-image shape `shape` ([C, H, W])."""
    exact = layout == "exact"
    dims = (1, *shape) if exact else shape
    inputs = [("data", datatypes.Array(*dims))] + [(n, datatypes.Array(*((1, *s) if exact else s))) for n, s in extra_inputs]
    return NeuralNetworkBuilder(inputs, [("out", None)], disable_rank5_shape_mapping=exact)


def run(tmp_path, builder, feeds, layout):
    """Runs the model on per-image arrays; returns 'out' as one image ([C, H, W])."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlmodel = ct.models.MLModel(builder.spec, skip_model_load=True)
    path = os.path.join(str(tmp_path), "model.mlmodel")
    mlmodel.save(path)
    if layout == "exact":
        feeds = {k: v[None] for k, v in feeds.items()}
    out = coremlrt.MLModel(path).predict(feeds)["out"]
    if layout == "exact":
        assert out.shape[0] == 1
        out = out[0]
    return out


def check(actual, expected):
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)


def t(x):
    return torch.from_numpy(np.ascontiguousarray(x, dtype=np.float32))[None]


rng = np.random.default_rng(0)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("groups,stride,dilation,pads", [
    (1, (1, 1), (1, 1), (0, 0, 0, 0)),
    (2, (2, 1), (1, 2), (1, 2, 0, 1)),
    (4, (1, 2), (2, 1), (2, 2, 1, 1)),  # depthwise: 4 groups of 1 channel
])
def test_convolution_valid(tmp_path, layout, groups, stride, dilation, pads):
    c, cout, kh, kw = 4, 8, 3, 2
    w = rng.standard_normal((kh, kw, c // groups, cout)).astype(np.float32)  # the builder's [kH, kW, kc, Cout]
    bias = rng.standard_normal(cout).astype(np.float32)
    b = builder_for(layout, (c, 9, 8))
    top, bottom, left, right = pads
    b.add_convolution("conv", kernel_channels=c // groups, output_channels=cout, height=kh, width=kw,
                      stride_height=stride[0], stride_width=stride[1], border_mode="valid", groups=groups, W=w, b=bias,
                      has_bias=True, input_name="data", output_name="out", dilation_factors=list(dilation),
                      padding_top=top, padding_bottom=bottom, padding_left=left, padding_right=right)
    x = rng.standard_normal((c, 9, 8)).astype(np.float32)
    expected = F.conv2d(F.pad(t(x), (left, right, top, bottom)), torch.from_numpy(w.transpose(3, 2, 0, 1).copy()),
                        torch.from_numpy(bias), stride=stride, dilation=dilation, groups=groups)[0].numpy()
    check(run(tmp_path, b, {"data": x}, layout), expected)


def same_pads(size, kernel, stride, top_left):
    out = -(-size // stride)
    total = max((out - 1) * stride + kernel - size, 0)
    small, large = total // 2, total - total // 2
    return (large, small) if top_left else (small, large)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", ["BOTTOM_RIGHT_HEAVY", "TOP_LEFT_HEAVY"])
def test_convolution_same(tmp_path, layout, mode):
    c, cout = 3, 5
    w = rng.standard_normal((4, 3, c, cout)).astype(np.float32)
    b = builder_for(layout, (c, 10, 7))
    b.add_convolution("conv", kernel_channels=c, output_channels=cout, height=4, width=3, stride_height=3, stride_width=2,
                      border_mode="same", groups=1, W=w, b=None, has_bias=False, input_name="data", output_name="out",
                      same_padding_asymmetry_mode=mode)
    x = rng.standard_normal((c, 10, 7)).astype(np.float32)
    ph, pw = same_pads(10, 4, 3, mode == "TOP_LEFT_HEAVY"), same_pads(7, 3, 2, mode == "TOP_LEFT_HEAVY")
    expected = F.conv2d(F.pad(t(x), (*pw, *ph)), torch.from_numpy(w.transpose(3, 2, 0, 1).copy()), stride=(3, 2))[0].numpy()
    check(run(tmp_path, b, {"data": x}, layout), expected)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("groups,output_shape", [(1, None), (2, None), (1, (22, 24))])
def test_deconvolution(tmp_path, layout, groups, output_shape):
    c, cout = 4, 6
    w = rng.standard_normal((3, 3, c, cout // groups)).astype(np.float32)  # the builder's [kH, kW, Cin, Cout/groups]
    bias = rng.standard_normal(cout).astype(np.float32)
    b = builder_for(layout, (c, 10, 11))
    b.add_convolution("deconv", kernel_channels=c, output_channels=cout, height=3, width=3, stride_height=2, stride_width=2,
                      border_mode="valid", groups=groups, W=w, b=bias, has_bias=True, is_deconv=True,
                      output_shape=output_shape, input_name="data", output_name="out",
                      padding_top=1, padding_bottom=0, padding_left=0, padding_right=1)
    x = rng.standard_normal((c, 10, 11)).astype(np.float32)
    full = F.conv_transpose2d(t(x), torch.from_numpy(w.transpose(2, 3, 0, 1).copy()), torch.from_numpy(bias), stride=2,
                              groups=groups)[0].numpy()  # [Cout, 21, 23] before any cropping
    if output_shape is None:
        expected = full[:, 1:, : full.shape[2] - 1]
    else:
        # The amounts before are cropped; the output then extends to outputShape (bias beyond the full extent).
        expected = np.broadcast_to(bias[:, None, None], (cout, *output_shape)).copy()
        h, w_ = min(output_shape[0], full.shape[1] - 1), min(output_shape[1], full.shape[2])
        expected[:, :h, :w_] = full[:, 1 : 1 + h, :w_]
    check(run(tmp_path, b, {"data": x}, layout), expected)


def pool_reference(x, kind, kernel, stride, pads, exclude=False, ceil=False):
    """x [C, H, W]; pads (top, bottom, left, right) added explicitly."""
    top, bottom, left, right = pads
    xt = t(x)
    if kind == "MAX":
        return F.max_pool2d(F.pad(xt, (left, right, top, bottom), value=-np.inf), kernel, stride, ceil_mode=ceil)[0].numpy()
    if kind == "L2":
        return np.sqrt(F.avg_pool2d(F.pad(xt * xt, (left, right, top, bottom)), kernel, stride)[0].numpy() * kernel[0] * kernel[1])
    sums = F.avg_pool2d(F.pad(xt, (left, right, top, bottom)), kernel, stride, divisor_override=1)[0].numpy()
    if exclude:
        ones = F.pad(torch.ones_like(xt), (left, right, top, bottom))
        return sums / F.avg_pool2d(ones, kernel, stride, divisor_override=1)[0].numpy()
    return sums / (kernel[0] * kernel[1])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ["MAX", "AVERAGE", "L2"])
@pytest.mark.parametrize("exclude", [False, True])
def test_pooling_valid_with_padding(tmp_path, layout, kind, exclude):
    b = builder_for(layout, (3, 9, 10))
    b.add_pooling("pool", height=3, width=2, stride_height=2, stride_width=3, layer_type=kind, padding_type="VALID",
                  input_name="data", output_name="out", exclude_pad_area=exclude,
                  padding_top=1, padding_bottom=2, padding_left=0, padding_right=1)
    x = rng.standard_normal((3, 9, 10)).astype(np.float32)
    check(run(tmp_path, b, {"data": x}, layout), pool_reference(x, kind, (3, 2), (2, 3), (1, 2, 0, 1), exclude))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ["MAX", "AVERAGE"])
@pytest.mark.parametrize("mode", ["BOTTOM_RIGHT_HEAVY", "TOP_LEFT_HEAVY"])
def test_pooling_same(tmp_path, layout, kind, mode):
    b = builder_for(layout, (2, 8, 7))
    b.add_pooling("pool", height=3, width=4, stride_height=3, stride_width=2, layer_type=kind, padding_type="SAME",
                  input_name="data", output_name="out", exclude_pad_area=True, same_padding_asymmetry_mode=mode)
    x = rng.standard_normal((2, 8, 7)).astype(np.float32)
    ph, pw = same_pads(8, 3, 3, mode == "TOP_LEFT_HEAVY"), same_pads(7, 4, 2, mode == "TOP_LEFT_HEAVY")
    check(run(tmp_path, b, {"data": x}, layout), pool_reference(x, kind, (3, 4), (3, 2), (*ph, *pw), exclude=True))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ["MAX", "AVERAGE"])
def test_pooling_include_last_pixel(tmp_path, layout, kind):
    # Windows may run past the end (ceil rounding), as torch's ceil_mode: its average divides by
    # the window clipped to the padded input.
    b = builder_for(layout, (2, 10, 9))
    b.add_pooling("pool", height=3, width=3, stride_height=2, stride_width=2, layer_type=kind,
                  padding_type="INCLUDE_LAST_PIXEL", input_name="data", output_name="out", exclude_pad_area=False,
                  padding_top=1, padding_bottom=1, padding_left=1, padding_right=1)
    x = rng.standard_normal((2, 10, 9)).astype(np.float32)
    pool = F.max_pool2d if kind == "MAX" else F.avg_pool2d
    expected = pool(t(x), 3, 2, padding=1, ceil_mode=True)[0].numpy()
    check(run(tmp_path, b, {"data": x}, layout), expected)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("kind", ["MAX", "AVERAGE", "L2"])
def test_global_pooling(tmp_path, layout, kind):
    b = builder_for(layout, (3, 5, 6))
    b.add_pooling("pool", height=1, width=1, stride_height=1, stride_width=1, layer_type=kind, padding_type="VALID",
                  input_name="data", output_name="out", is_global=True)
    x = rng.standard_normal((3, 5, 6)).astype(np.float32)
    reduce = {"MAX": lambda v: v.max(axis=(1, 2)), "AVERAGE": lambda v: v.mean(axis=(1, 2)),
              "L2": lambda v: np.sqrt((v * v).sum(axis=(1, 2)))}[kind]
    check(run(tmp_path, b, {"data": x}, layout), reduce(x)[:, None, None])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("padding_type,mode", [("constant", "constant"), ("reflection", "reflect"), ("replication", "replicate")])
def test_padding(tmp_path, layout, padding_type, mode):
    b = builder_for(layout, (2, 4, 5))
    b.add_padding("pad", left=1, right=2, top=3, bottom=0, value=-1.5, input_name="data", output_name="out",
                  padding_type=padding_type)
    x = rng.standard_normal((2, 4, 5)).astype(np.float32)
    kwargs = {"constant_values": -1.5} if mode == "constant" else {}
    np_mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}[mode]
    expected = np.pad(x, ((0, 0), (3, 0), (1, 2)), mode=np_mode, **kwargs)
    check(run(tmp_path, b, {"data": x}, layout), expected)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("instance", [False, True])
def test_batchnorm(tmp_path, layout, instance):
    c = 4
    gamma, beta = rng.standard_normal(c).astype(np.float32), rng.standard_normal(c).astype(np.float32)
    mean, var = rng.standard_normal(c).astype(np.float32), rng.uniform(0.5, 2, c).astype(np.float32)
    b = builder_for(layout, (c, 3, 5))
    b.add_batchnorm("bn", c, gamma, beta, mean=None if instance else mean, variance=None if instance else var,
                    input_name="data", output_name="out", compute_mean_var=instance, instance_normalization=instance,
                    epsilon=1e-3)
    x = rng.standard_normal((c, 3, 5)).astype(np.float32)
    if instance:
        expected = F.instance_norm(t(x), weight=torch.from_numpy(gamma), bias=torch.from_numpy(beta), eps=1e-3)[0].numpy()
    else:
        expected = F.batch_norm(t(x), torch.from_numpy(mean), torch.from_numpy(var), torch.from_numpy(gamma),
                                torch.from_numpy(beta), eps=1e-3)[0].numpy()
    check(run(tmp_path, b, {"data": x}, layout), expected)


def upsample_reference(x, mode, linear_mode, sh, sw):
    """x [C, H, W] upsampled by integer factors as the layer defines it."""
    if mode == "NN":
        return x.repeat(sh, axis=1).repeat(sw, axis=2)
    if linear_mode == "DEFAULT":
        # Output i samples input i / scale, clamped to the last sample (numpy reference).
        def axis(n, s):
            p = np.minimum(np.arange(n * s) / s, n - 1)
            lo = np.floor(p).astype(int)
            return lo, np.minimum(lo + 1, n - 1), (p - lo).astype(np.float32)
        lo, hi, f = axis(x.shape[1], sh)
        rows = x[:, lo] * (1 - f)[None, :, None] + x[:, hi] * f[None, :, None]
        lo, hi, f = axis(x.shape[2], sw)
        return rows[:, :, lo] * (1 - f) + rows[:, :, hi] * f
    return F.interpolate(t(x), scale_factor=(sh, sw), mode="bilinear",
                         align_corners=linear_mode == "ALIGN_CORNERS_TRUE")[0].numpy()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode,linear_mode", [("NN", "DEFAULT"), ("BILINEAR", "DEFAULT"), ("BILINEAR", "ALIGN_CORNERS_TRUE"),
                                              ("BILINEAR", "ALIGN_CORNERS_FALSE")])
def test_upsample(tmp_path, layout, mode, linear_mode):
    b = builder_for(layout, (2, 3, 4))
    b.add_upsample("up", 2, 3, "data", "out", mode=mode, linear_upsample_mode=linear_mode)
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    check(run(tmp_path, b, {"data": x}, layout), upsample_reference(x, mode, linear_mode, 2, 3))


@pytest.mark.parametrize("mode,linear_mode", [("NN", "DEFAULT"), ("BILINEAR", "DEFAULT"), ("BILINEAR", "ALIGN_CORNERS_TRUE"),
                                              ("BILINEAR", "ALIGN_CORNERS_FALSE")])
def test_upsample_of_a_size_known_only_at_prediction(tmp_path, mode, linear_mode):
    """Height and width from a flexible input shape (as a converted torch interpolate with a
    RangeDim input writes it): the output is sized and sampled at prediction."""
    b = builder_for("exact", (2, 3, 4))
    b.add_upsample("up", 2, 3, "data", "out", mode=mode, linear_upsample_mode=linear_mode)
    array = b.spec.description.input[0].type.multiArrayType  # default shape [1, 2, 3, 4]
    for lower, upper in [(1, 1), (2, 2), (1, 8), (1, -1)]:
        size = array.shapeRange.sizeRanges.add()
        size.lowerBound, size.upperBound = lower, upper
    for h, w in [(3, 4), (5, 2), (1, 7)]:
        x = rng.standard_normal((2, h, w)).astype(np.float32)
        check(run(tmp_path, b, {"data": x}, "exact"), upsample_reference(x, mode, linear_mode, 2, 3))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("across,variance", [(False, False), (True, True), (False, True)])
def test_mvn(tmp_path, layout, across, variance):
    b = builder_for(layout, (3, 4, 5))
    b.add_mvn("mvn", "data", "out", across_channels=across, normalize_variance=variance, epsilon=1e-5)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    axes = (0, 1, 2) if across else (1, 2)
    expected = x - x.mean(axis=axes, keepdims=True)
    if variance:
        expected = expected / np.sqrt(x.var(axis=axes, keepdims=True) + 1e-5)
    check(run(tmp_path, b, {"data": x}, layout), expected)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_l2normalize_and_lrn(tmp_path, layout):
    b = builder_for(layout, (5, 3, 4))
    b.add_l2_normalize("l2", "data", "l2out", epsilon=1e-6)
    b.add_lrn("lrn", "l2out", "out", alpha=0.3, beta=0.75, local_size=3, k=2.0)
    x = rng.standard_normal((5, 3, 4)).astype(np.float32)
    l2 = x / np.sqrt((x * x).sum() + 1e-6)
    expected = F.local_response_norm(t(l2), 3, alpha=0.3, beta=0.75, k=2.0)[0].numpy()
    check(run(tmp_path, b, {"data": x}, layout), expected)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_crop_one_and_two_inputs(tmp_path, layout):
    b = builder_for(layout, (2, 7, 8), extra_inputs=[("like", (2, 3, 4))])
    b.add_crop("crop1", left=1, right=2, top=0, bottom=3, offset=[0, 0], input_names=["data"], output_name="c1")
    b.add_crop("crop2", left=0, right=0, top=0, bottom=0, offset=[1, 1], input_names=["c1", "like"], output_name="out")
    x = rng.standard_normal((2, 7, 8)).astype(np.float32)
    like = np.zeros((2, 3, 4), np.float32)
    check(run(tmp_path, b, {"data": x, "like": like}, layout), x[:, 0:4, 1:6][:, 1:4, 1:5])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", ["SPACE_TO_DEPTH", "DEPTH_TO_SPACE", "PIXEL_SHUFFLE"])
def test_reorganize_data(tmp_path, layout, mode):
    shape = (2, 4, 6) if mode == "SPACE_TO_DEPTH" else (8, 2, 3)
    b = builder_for(layout, shape)
    b.add_reorganize_data("reorg", "data", "out", mode=mode, block_size=2)
    x = rng.standard_normal(shape).astype(np.float32)
    c, h, w = shape
    if mode == "SPACE_TO_DEPTH":  # TF order: channel index (by * 2 + bx) * C + c
        expected = x.reshape(c, h // 2, 2, w // 2, 2).transpose(2, 4, 0, 1, 3).reshape(4 * c, h // 2, w // 2)
    elif mode == "DEPTH_TO_SPACE":  # the inverse of the above
        expected = x.reshape(2, 2, c // 4, h, w).transpose(2, 3, 0, 4, 1).reshape(c // 4, 2 * h, 2 * w)
    else:
        expected = F.pixel_shuffle(t(x), 2)[0].numpy()
    check(run(tmp_path, b, {"data": x}, layout), expected)


def test_resize_bilinear_modes(tmp_path):
    # STRICT_ALIGN_ENDPOINTS_MODE is torch's align_corners=True on outputs larger than 1.
    b = builder_for("rank5", (2, 4, 5))
    b.add_resize_bilinear("rb", "data", "out", target_height=7, target_width=3, mode="STRICT_ALIGN_ENDPOINTS_MODE")
    x = rng.standard_normal((2, 4, 5)).astype(np.float32)
    expected = F.interpolate(t(x), size=(7, 3), mode="bilinear", align_corners=True)[0].numpy()
    check(run(tmp_path, b, {"data": x}, "rank5"), expected)


def test_layer_normalization(tmp_path):
    b = builder_for("exact", (3, 4, 5))
    gamma, beta = rng.standard_normal((4, 5)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    b.add_layer_normalization("ln", "data", "out", normalized_shape=[4, 5], gamma=gamma, beta=beta, eps=1e-5)
    x = rng.standard_normal((3, 4, 5)).astype(np.float32)
    expected = F.layer_norm(t(x), (4, 5), torch.from_numpy(gamma), torch.from_numpy(beta), eps=1e-5)[0].numpy()
    check(run(tmp_path, b, {"data": x}, "exact"), expected)


def test_convolution3d_and_pooling3d(tmp_path):
    cin, cout = 2, 4
    w = rng.standard_normal((cout, cin, 2, 3, 2)).astype(np.float32)
    bias = rng.standard_normal(cout).astype(np.float32)
    b = builder_for("exact", (cin, 5, 6, 7))
    b.add_convolution3d("conv3d", cin, cout, 2, 3, 2, W=w, b=bias, has_bias=True, stride_height=2, padding_mode="custom",
                        padding_front=1, padding_back=0, padding_top=1, padding_bottom=1, padding_left=0,
                        padding_right=1, input_name="data", output_name="c")
    b.add_pooling3d("pool3d", "c", "p", "AVERAGE", 2, 2, 2, 1, 2, 2, padding_mode="valid")
    b.add_global_pooling3d("gp", "p", "out", "MAX")
    x = rng.standard_normal((cin, 5, 6, 7)).astype(np.float32)
    c = F.conv3d(F.pad(t(x), (0, 1, 1, 1, 1, 0)), torch.from_numpy(w), torch.from_numpy(bias), stride=(1, 2, 1))
    p = F.avg_pool3d(c, 2, (1, 2, 2))
    expected = p.amax(dim=(2, 3, 4), keepdim=True)[0].numpy()
    check(run(tmp_path, b, {"data": x}, "exact"), expected)
