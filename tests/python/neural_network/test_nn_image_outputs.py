"""Image outputs of neuralNetwork models: the image is made from the output blob's last three
axes [C, H, W]. coremlrt.MLModel returns it as the float32 [1, C, H, W] array; through
coremltools' MLModel (the coremlrt stand-in) it comes back as Core ML hands it over, a PIL image
of mode "RGBA" (RGB and BGR, alpha 255), "L" (grayscale) or "F" (GRAYSCALE_FLOAT16). Expected
values are computed in numpy from the layer's formula, the images' pixels with numpy and PIL."""

import contextlib

import numpy as np
import pytest

import coremlrt

ct = pytest.importorskip("coremltools")
Image = pytest.importorskip("PIL.Image")

from coremltools.models import datatypes  # noqa: E402
from coremltools.models.neural_network import NeuralNetworkBuilder  # noqa: E402
from coremltools.proto import FeatureTypes_pb2  # noqa: E402
from nn_helpers import save_spec  # noqa: E402

H, W = 6, 9
rng = np.random.default_rng(0)
SPACES = {"RGB": 3, "BGR": 3, "GRAYSCALE": 1}


def whole_pixels(channels):
    """Whole numbers in 0..127: 2 x + 1 stays a whole number in 0..255."""
    return np.floor(rng.random((channels, H, W)) * 128)


def linear_network(channels, layout, alpha=2.0, beta=1.0):
    """out = alpha * data + beta over a [C, H, W] array input (rank-5 blobs), or a [C, H, W] or
    [1, C, H, W] one in the exact-rank layout ("exact3", "exact4")."""
    dims = {"rank5": (channels, H, W), "exact3": (channels, H, W), "exact4": (1, channels, H, W)}[layout]
    b = NeuralNetworkBuilder([("data", datatypes.Array(*dims))], [("out", datatypes.Array(*dims))],
                             disable_rank5_shape_mapping=layout != "rank5")
    b.add_activation("linear", "LINEAR", "data", "out", params=[alpha, beta])
    return b


def make_image_output(spec, space, width=W, height=H):
    out = spec.description.output[0].type
    out.imageType.colorSpace = FeatureTypes_pb2.ImageFeatureType.ColorSpace.Value(space)
    out.imageType.width, out.imageType.height = width, height
    if space == "GRAYSCALE_FLOAT16":
        spec.specificationVersion = max(spec.specificationVersion, 7)
    return spec


@contextlib.contextmanager
def coremltools_on_coremlrt():
    import coremlrt.coremltools_backend as backend

    backend.enable()
    try:
        yield
    finally:
        backend.disable()


def expected_image(chw, space):
    """The PIL image Core ML hands over for [C, H, W] pixel values in the space's channel order."""
    pixels = chw.astype(np.uint8)
    if space == "GRAYSCALE":
        return Image.fromarray(pixels[0])
    rgb = pixels if space == "RGB" else pixels[::-1]
    return Image.fromarray(np.dstack([rgb.transpose(1, 2, 0), np.full((H, W), 255, np.uint8)]))


@pytest.mark.parametrize("layout", ["rank5", "exact3", "exact4"])
@pytest.mark.parametrize("space", list(SPACES))
def test_image_output_array_and_coremltools_image(tmp_path, space, layout):
    channels = SPACES[space]
    x = whole_pixels(channels)
    spec = make_image_output(linear_network(channels, layout).spec, space)
    path = save_spec(tmp_path, spec)
    want = 2.0 * x + 1.0
    feed = x[None] if layout == "exact4" else x

    out = coremlrt.MLModel(path).predict({"data": feed})["out"]
    assert out.dtype == np.float32 and out.shape == (1, channels, H, W)
    np.testing.assert_array_equal(out[0], want)

    with coremltools_on_coremlrt():
        image = ct.models.MLModel(path).predict({"data": feed})["out"]
    assert isinstance(image, Image.Image)
    assert image.mode == ("L" if channels == 1 else "RGBA") and image.size == (W, H)
    reference = expected_image(want, space)
    assert image.mode == reference.mode
    np.testing.assert_array_equal(np.asarray(image), np.asarray(reference))
    if space == "BGR":  # the first channel of a BGR blob is the image's blue
        np.testing.assert_array_equal(np.asarray(image)[:, :, 2], want[0])


def test_grayscale_float16_output_is_an_f_image_of_fp16_values(tmp_path):
    x = rng.standard_normal((1, H, W)).astype(np.float32)
    spec = make_image_output(linear_network(1, "rank5", alpha=0.3, beta=0.1).spec, "GRAYSCALE_FLOAT16")
    path = save_spec(tmp_path, spec)
    want = (0.3 * x.astype(np.float64) + 0.1).astype(np.float16)

    out = coremlrt.MLModel(path).predict({"data": x})["out"]
    assert out.dtype == np.float32 and out.shape == (1, 1, H, W)
    np.testing.assert_allclose(out[0], want.astype(np.float32), rtol=0, atol=float(np.finfo(np.float16).eps) * 4)

    with coremltools_on_coremlrt():
        image = ct.models.MLModel(path).predict({"data": x})["out"]
    assert image.mode == "F" and image.size == (W, H)
    np.testing.assert_array_equal(np.asarray(image), out[0, 0])
    assert np.array_equal(np.asarray(image).astype(np.float16).astype(np.float32), np.asarray(image))


def test_values_that_are_no_whole_pixel_raise_through_coremltools(tmp_path):
    """0.5 x is no whole number for odd x: how Core ML rounds it into a pixel is not specified,
    so coremltools' predict raises; coremlrt's own API still returns the computed array."""
    x = np.full((3, H, W), 3.0)
    spec = make_image_output(linear_network(3, "rank5", alpha=0.5, beta=0.0).spec, "RGB")
    path = save_spec(tmp_path, spec)
    np.testing.assert_array_equal(coremlrt.MLModel(path).predict({"data": x})["out"], np.full((1, 3, H, W), 1.5))
    with coremltools_on_coremlrt():
        model = ct.models.MLModel(path)
        with pytest.raises(RuntimeError, match=r"image output 'out' holds 1\.5 at \[c, h, w\] = \[0, 0, 0\]"):
            model.predict({"data": x})
        x[:] = 200.0  # 0.5 * 200 = 100: whole, and the same model makes an image
        assert np.asarray(model.predict({"data": x})["out"])[0, 0].tolist() == [100, 100, 100, 255]
    x[:] = 600.0  # 300 is out of 0..255
    with coremltools_on_coremlrt():
        with pytest.raises(RuntimeError, match="holds 300.0"):
            ct.models.MLModel(path).predict({"data": x})


def test_image_in_image_out_through_coremltools(tmp_path):
    """An RGB image input, scaled and biased by the network's preprocessing, inverted by a
    linear layer, leaves as an RGB image: 255 - pixel."""
    b = NeuralNetworkBuilder([("image", datatypes.Array(3, H, W))], [("out", datatypes.Array(3, H, W))])
    b.add_activation("invert", "LINEAR", "image", "out", params=[-1.0, 255.0])
    b.set_pre_processing_parameters(image_input_names=["image"], is_bgr=False, image_scale=1.0)
    path = save_spec(tmp_path, make_image_output(b.spec, "RGB"))
    pixels = rng.integers(0, 256, (H, W, 3), dtype=np.uint8)
    with coremltools_on_coremlrt():
        image = ct.models.MLModel(path).predict({"image": Image.fromarray(pixels)})["out"]
    assert image.mode == "RGBA"
    got = np.asarray(image)
    np.testing.assert_array_equal(got[:, :, :3], 255 - pixels)
    np.testing.assert_array_equal(got[:, :, 3], 255)


@pytest.mark.parametrize("space, channels, size, message", [
    ("RGB", 1, (W, H), r"image output 'out' is RGB \(3 channels\) but its blob .* has 1 channels"),
    ("GRAYSCALE", 3, (W, H), r"image output 'out' is GRAYSCALE \(1 channel\) but its blob .* has 3 channels"),
    ("RGB", 3, (W + 1, H), rf"image output 'out' is {W + 1}x{H} \(width x height\) but its blob is"),
])
def test_image_output_that_does_not_fit_its_blob_is_refused(tmp_path, space, channels, size, message):
    spec = make_image_output(linear_network(channels, "rank5").spec, space, *size)
    path = save_spec(tmp_path, spec)
    with pytest.raises(coremlrt.Error, match=message):
        coremlrt.MLModel(path)


def test_image_output_from_a_blob_of_rank_below_three_is_refused(tmp_path):
    b = NeuralNetworkBuilder([("data", datatypes.Array(H, W))], [("out", datatypes.Array(H, W))],
                             disable_rank5_shape_mapping=True)
    b.add_activation("linear", "LINEAR", "data", "out", params=[1.0, 0.0])
    path = save_spec(tmp_path, make_image_output(b.spec, "GRAYSCALE"))
    with pytest.raises(coremlrt.Error, match=r"image output 'out' comes from the blob .*last three axes \[C, H, W\]"):
        coremlrt.MLModel(path)
