"""Image inputs of neuralNetwork models: PIL images fed through the network's image
preprocessing (scale and per-channel bias, or a mean image), in both blob layouts, compared
with the preprocessing computed by hand in numpy and with torch on the normalized tensor."""

import os
import warnings

import numpy as np
import pytest

import coremlrt
from coremlrt import _core

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")
Image = pytest.importorskip("PIL.Image")

from coremltools.models import datatypes  # noqa: E402
from coremltools.models.neural_network import NeuralNetworkBuilder  # noqa: E402
from nn_helpers import save_spec  # noqa: E402

RTOL, ATOL = 1e-5, 1e-4
H, W = 5, 7
rng = np.random.default_rng(0)


def rgb_image():
    return Image.fromarray(rng.integers(0, 256, (H, W, 3), dtype=np.uint8), mode="RGB")


def gray_image():
    return Image.fromarray(rng.integers(0, 256, (H, W), dtype=np.uint8), mode="L")


def image_builder(layout, channels):
    """A builder whose input 'image' is a [channels, H, W] array, made an image later by
    set_pre_processing_parameters. "rank5": the legacy [Seq, Batch, C, H, W] blobs;
    "exact": disable_rank5_shape_mapping, which also selects RANK4_IMAGE_MAPPING."""
    exact = layout == "exact"
    dims = (1, channels, H, W) if exact else (channels, H, W)
    return NeuralNetworkBuilder([("image", datatypes.Array(*dims))], [("out", None)],
                                disable_rank5_shape_mapping=exact)


def identity_network(layout, channels):
    b = image_builder(layout, channels)
    b.add_activation("identity", "LINEAR", "image", "out", params=[1.0, 0.0])
    return b


def as_chw(out, layout):
    """The model output as one [C, H, W] image."""
    if layout == "exact":
        assert out.shape[0] == 1
        out = out[0]
    return out


def pixels(image, color_space):
    """The image as Core ML hands it to the network: [C, H, W] float, channels in the
    color space's order."""
    a = np.asarray(image).astype(np.float64)
    if a.ndim == 2:
        return a[None]
    if color_space == "BGR":
        a = a[:, :, ::-1]
    return a.transpose(2, 0, 1)


@pytest.mark.parametrize("layout", ["rank5", "exact"])
@pytest.mark.parametrize("is_bgr", [False, True])
def test_scaler_on_color_images(tmp_path, layout, is_bgr):
    b = identity_network(layout, 3)
    scale, red, green, blue = 0.017, -2.0, 0.5, 1.25
    b.set_pre_processing_parameters(image_input_names=["image"], is_bgr=is_bgr, red_bias=red, green_bias=green,
                                    blue_bias=blue, image_scale=scale)
    path = save_spec(tmp_path, b.spec)
    image = rgb_image()
    out = as_chw(coremlrt.MLModel(path).predict({"image": image})["out"], layout)
    space = "BGR" if is_bgr else "RGB"
    biases = [blue, green, red] if is_bgr else [red, green, blue]
    expected = scale * pixels(image, space) + np.array(biases)[:, None, None]
    assert out.shape == (3, H, W)
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("layout", ["rank5", "exact"])
def test_scaler_on_grayscale_image(tmp_path, layout):
    b = identity_network(layout, 1)
    # The color biases do not apply to a grayscale image; grayBias does.
    b.set_pre_processing_parameters(image_input_names=["image"], gray_bias=-0.75, red_bias=9.0, image_scale=1 / 255)
    path = save_spec(tmp_path, b.spec)
    image = gray_image()
    out = as_chw(coremlrt.MLModel(path).predict({"image": image})["out"], layout)
    np.testing.assert_allclose(out, pixels(image, "GRAYSCALE") / 255 - 0.75, rtol=RTOL, atol=ATOL)


def test_preprocessed_image_feeds_a_convolution(tmp_path):
    # A 1x1 convolution mixes the channels, so a bias on the wrong channel changes every output.
    b = image_builder("rank5", 3)
    w = rng.standard_normal((1, 1, 3, 2)).astype(np.float32)  # the builder's [kH, kW, C, Cout]
    b.add_convolution("mix", kernel_channels=3, output_channels=2, height=1, width=1, stride_height=1,
                      stride_width=1, border_mode="valid", groups=1, W=w, b=None, has_bias=False,
                      input_name="image", output_name="out")
    b.set_pre_processing_parameters(image_input_names=["image"], is_bgr=True, red_bias=10.0, green_bias=-20.0,
                                    blue_bias=30.0, image_scale=0.5)
    path = save_spec(tmp_path, b.spec)
    image = rgb_image()
    x = 0.5 * pixels(image, "BGR") + np.array([30.0, -20.0, 10.0])[:, None, None]
    expected = np.einsum("chw,co->ohw", x, w[0, 0].astype(np.float64))
    out = coremlrt.MLModel(path).predict({"image": image})["out"]
    np.testing.assert_allclose(out, expected, rtol=RTOL, atol=1e-3)


@pytest.mark.parametrize("layout", ["rank5", "exact"])
def test_mean_image(tmp_path, layout):
    b = identity_network(layout, 3)
    b.set_pre_processing_parameters(image_input_names=["image"])
    mean = rng.uniform(0, 255, (3, H, W)).astype(np.float32)
    pre = b.nn_spec.preprocessing[0]
    pre.meanImage.meanImage.extend(mean.ravel().tolist())  # replaces the scaler (a oneof)
    assert not pre.HasField("scaler")
    path = save_spec(tmp_path, b.spec)
    image = rgb_image()
    out = as_chw(coremlrt.MLModel(path).predict({"image": image})["out"], layout)
    np.testing.assert_allclose(out, pixels(image, "RGB") - mean, rtol=RTOL, atol=ATOL)


def test_unnamed_preprocessing_applies_to_the_only_image_input(tmp_path):
    b = identity_network("rank5", 3)
    b.set_pre_processing_parameters(image_input_names=["image"], image_scale=0.25, red_bias=5.0)
    b.nn_spec.preprocessing[0].featureName = ""
    path = save_spec(tmp_path, b.spec)
    image = rgb_image()
    out = coremlrt.MLModel(path).predict({"image": image})["out"]
    np.testing.assert_allclose(out, 0.25 * pixels(image, "RGB") + np.array([5.0, 0.0, 0.0])[:, None, None],
                               rtol=RTOL, atol=ATOL)


def test_image_without_preprocessing_arrives_as_pixel_values(tmp_path):
    b = identity_network("rank5", 3)
    b.set_pre_processing_parameters(image_input_names=["image"], is_bgr=True)
    del b.nn_spec.preprocessing[:]
    path = save_spec(tmp_path, b.spec)
    image = rgb_image()
    out = coremlrt.MLModel(path).predict({"image": image})["out"]
    np.testing.assert_array_equal(out, pixels(image, "BGR"))


def test_grayscale_float16_image(tmp_path):
    b = identity_network("exact", 1)
    b.set_pre_processing_parameters(image_input_names=["image"], gray_bias=0.25, image_scale=2.0)
    spec = b.spec
    spec.specificationVersion = 7  # GRAYSCALE_FLOAT16 is a Core ML 6 color space
    spec.description.input[0].type.imageType.colorSpace = ct.proto.FeatureTypes_pb2.ImageFeatureType.GRAYSCALE_FLOAT16
    path = save_spec(tmp_path, spec)
    values = rng.uniform(-4, 4, (H, W)).astype(np.float32)
    out = coremlrt.MLModel(path).predict({"image": Image.fromarray(values, mode="F")})["out"]
    # The pixel buffer holds float16 values.
    expected = 2.0 * values.astype(np.float16).astype(np.float64) + 0.25
    np.testing.assert_allclose(out[0, 0], expected, rtol=RTOL, atol=ATOL)


def test_rank4_image_blob_takes_the_declared_output_rank(tmp_path):
    # RANK4_IMAGE_MAPPING makes the image the blob [1, C, H, W]; an output declared [C, H, W]
    # comes back with that rank, as Core ML returns it (ranks of outputs come from the
    # description in the rank-generic layout).
    b = NeuralNetworkBuilder([("image", datatypes.Array(3, H, W))], [("out", datatypes.Array(3, H, W))],
                             disable_rank5_shape_mapping=True)
    b.add_activation("identity", "LINEAR", "image", "out", params=[1.0, 0.0])
    b.set_pre_processing_parameters(image_input_names=["image"], image_scale=3.0, green_bias=-1.0)
    path = save_spec(tmp_path, b.spec)
    image = rgb_image()
    out = coremlrt.MLModel(path).predict({"image": image})["out"]
    assert out.shape == (3, H, W)
    np.testing.assert_allclose(out, 3.0 * pixels(image, "RGB") + np.array([0.0, -1.0, 0.0])[:, None, None],
                               rtol=RTOL, atol=ATOL)


def test_image_size_range(tmp_path):
    b = identity_network("exact", 3)
    b.set_pre_processing_parameters(image_input_names=["image"], image_scale=0.5, blue_bias=4.0)
    size_range = b.spec.description.input[0].type.imageType.imageSizeRange
    size_range.heightRange.lowerBound, size_range.heightRange.upperBound = 2, 6
    size_range.widthRange.lowerBound, size_range.widthRange.upperBound = 3, -1  # unbounded
    model = coremlrt.MLModel(save_spec(tmp_path, b.spec))
    for height, width in [(H, W), (2, 11), (6, 3)]:
        image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), mode="RGB")
        out = model.predict({"image": image})["out"]
        expected = 0.5 * pixels(image, "RGB") + np.array([0.0, 0.0, 4.0])[:, None, None]
        np.testing.assert_allclose(out[0], expected, rtol=RTOL, atol=ATOL)
    with pytest.raises(coremlrt.Error, match="has shape"):
        model.predict({"image": Image.fromarray(np.zeros((7, 4, 3), dtype=np.uint8), mode="RGB")})


def test_converted_torch_cnn_with_enumerated_image_sizes(tmp_path):
    torch.manual_seed(0)
    net = SmallCnn(3).eval()
    sizes = [(8, 10), (12, 6)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(net, torch.rand(1, 3, *sizes[0]))
        shapes = ct.EnumeratedShapes(shapes=[(1, 3, h, w) for h, w in sizes])
        mlmodel = ct.convert(traced, inputs=[ct.ImageType(name="img", shape=shapes, scale=1 / 255, bias=[0.1, 0.2, 0.3])],
                             convert_to="neuralnetwork")
    path = os.path.join(str(tmp_path), "cnn.mlmodel")
    mlmodel.save(path)
    output_name = mlmodel.get_spec().description.output[0].name
    model = coremlrt.MLModel(path)
    for height, width in sizes:
        image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), mode="RGB")
        normalized = pixels(image, "RGB") / 255 + np.array([0.1, 0.2, 0.3])[:, None, None]
        with torch.no_grad():
            expected = net(torch.from_numpy(normalized[None].astype(np.float32))).numpy()
        out = model.predict({"img": image})[output_name]
        np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)
    with pytest.raises(coremlrt.Error, match="has shape"):
        model.predict({"img": Image.fromarray(np.zeros((8, 6, 3), dtype=np.uint8), mode="RGB")})


def test_wrong_image_mode_is_rejected(tmp_path):
    b = identity_network("rank5", 3)
    b.set_pre_processing_parameters(image_input_names=["image"])
    model = coremlrt.MLModel(save_spec(tmp_path, b.spec))
    with pytest.raises(coremlrt.Error, match="mode 'RGB'"):
        model.predict({"image": gray_image()})


# ---- refusals -------------------------------------------------------------------------------

def test_mean_image_of_the_wrong_size_is_refused(tmp_path):
    b = identity_network("rank5", 3)
    b.set_pre_processing_parameters(image_input_names=["image"])
    b.nn_spec.preprocessing[0].meanImage.meanImage.extend([0.0] * (H * W))
    path = save_spec(tmp_path, b.spec)
    with pytest.raises(coremlrt.Error, match=f"mean image of input 'image' has {H * W} values"):
        coremlrt.MLModel(path)


def test_preprocessing_of_an_array_input_is_refused(tmp_path):
    b = NeuralNetworkBuilder([("data", datatypes.Array(3, H, W))], [("out", None)])
    b.add_activation("identity", "LINEAR", "data", "out", params=[1.0, 0.0])
    pre = b.nn_spec.preprocessing.add()
    pre.featureName = "data"
    pre.scaler.channelScale = 2.0
    path = save_spec(tmp_path, b.spec)
    with pytest.raises(coremlrt.Error, match="names the input 'data', which is not an image"):
        coremlrt.MLModel(path)
    assert "not an image" in _core.inspect(path)["problem"]


# ---- ct.convert(..., convert_to="neuralnetwork") of a torch CNN ------------------------------

class SmallCnn(torch.nn.Module):
    def __init__(self, channels):
        super().__init__()
        self.conv = torch.nn.Conv2d(channels, 6, 3, padding=1)
        self.pool = torch.nn.MaxPool2d(2)
        self.head = torch.nn.Conv2d(6, 4, 1)

    def forward(self, x):
        return self.head(self.pool(torch.relu(self.conv(x))))


@pytest.mark.parametrize("color_layout", ["RGB", "BGR", "G"])
def test_converted_torch_cnn_with_image_input(tmp_path, color_layout):
    torch.manual_seed(0)
    channels = 1 if color_layout == "G" else 3
    net = SmallCnn(channels).eval()
    shape = (1, channels, 8, 10)
    scale = 1 / 127.5
    bias = -1.0 if channels == 1 else [-0.9, -1.0, -1.1]  # in the image's channel order
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(net, torch.rand(shape))
        mlmodel = ct.convert(traced, inputs=[ct.ImageType(name="img", shape=shape, scale=scale, bias=bias,
                                                          color_layout=color_layout)],
                             convert_to="neuralnetwork")
    path = os.path.join(str(tmp_path), "cnn.mlmodel")
    mlmodel.save(path)
    output_name = mlmodel.get_spec().description.output[0].name

    if channels == 1:
        image = Image.fromarray(rng.integers(0, 256, (8, 10), dtype=np.uint8), mode="L")
        space = "GRAYSCALE"
    else:
        image = Image.fromarray(rng.integers(0, 256, (8, 10, 3), dtype=np.uint8), mode="RGB")
        space = color_layout
    normalized = scale * pixels(image, space) + np.array(bias, ndmin=1)[:, None, None]
    with torch.no_grad():
        expected = net(torch.from_numpy(normalized[None].astype(np.float32))).numpy()
    out = coremlrt.MLModel(path).predict({"img": image})[output_name]
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-4)


def test_ml_program_image_input_takes_its_enumerated_sizes(tmp_path):
    # The image sizes an ML program declares are checked as they are for neuralNetworks.
    torch.manual_seed(0)
    net = SmallCnn(3).eval()
    sizes = [(8, 10), (12, 6)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        traced = torch.jit.trace(net, torch.rand(1, 3, *sizes[0]))
        shapes = ct.EnumeratedShapes(shapes=[(1, 3, h, w) for h, w in sizes])
        mlmodel = ct.convert(traced, inputs=[ct.ImageType(name="img", shape=shapes, scale=1 / 255)],
                             convert_to="mlprogram", compute_precision=ct.precision.FLOAT32)
    path = os.path.join(str(tmp_path), "cnn.mlpackage")
    mlmodel.save(path)
    output_name = mlmodel.get_spec().description.output[0].name
    model = coremlrt.MLModel(path)
    for height, width in sizes:
        image = Image.fromarray(rng.integers(0, 256, (height, width, 3), dtype=np.uint8), mode="RGB")
        with torch.no_grad():
            expected = net(torch.from_numpy((pixels(image, "RGB") / 255)[None].astype(np.float32))).numpy()
        np.testing.assert_allclose(model.predict({"img": image})[output_name], expected, rtol=1e-4, atol=1e-4)
    with pytest.raises(coremlrt.Error, match="has shape"):
        model.predict({"img": Image.fromarray(np.zeros((8, 6, 3), dtype=np.uint8), mode="RGB")})
