"""neuralNetwork data-movement layers built with coremltools' NeuralNetworkBuilder, run by
coremlrt and compared with numpy: the legacy layers on [Seq, Batch, C, H, W] blobs (reshape,
flatten, permute, concat, split, sequenceRepeat, slice, loadConstant) and the rank-N layers
of the exact-rank layout."""

import os
import warnings

import numpy as np
import pytest

import coremlrt

ct = pytest.importorskip("coremltools")

from coremltools.models import datatypes  # noqa: E402
from coremltools.models.neural_network import NeuralNetworkBuilder  # noqa: E402

rng = np.random.default_rng(0)
LAYOUTS = ["rank5", "exact"]


def make_builder(inputs, outputs=("out",), exact=True):
    """`inputs`: {name: shape}. In the rank5 layout shapes are [C] or [C, H, W] arrays."""
    return NeuralNetworkBuilder([(n, datatypes.Array(*s)) for n, s in inputs.items()], [(o, None) for o in outputs],
                                disable_rank5_shape_mapping=exact)


def predict(tmp_path, builder, feeds):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlmodel = ct.models.MLModel(builder.spec, skip_model_load=True)
    path = os.path.join(str(tmp_path), "model.mlmodel")
    mlmodel.save(path)
    return coremlrt.MLModel(path).predict(feeds)


def check(actual, expected):
    actual = np.asarray(actual)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_array_equal(actual, expected.astype(actual.dtype))


def legacy_input(layout, shape):
    """A [C, H, W] image: the rank5 layout's input, or the exact layout's [1, 1, C, H, W] blob."""
    return tuple(shape) if layout == "rank5" else (1, 1, *shape)


def legacy_output(layout, out):
    out = np.asarray(out)
    if layout == "exact":
        assert out.shape[:2] == (1, 1)
        return out[0, 0]
    return out


# ---- legacy layers ---------------------------------------------------------------------------


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", ["CHANNEL_FIRST", "CHANNEL_LAST"])
def test_reshape(tmp_path, layout, mode):
    x = rng.standard_normal((4, 3, 2)).astype(np.float32)
    b = make_builder({"data": legacy_input(layout, x.shape)}, exact=layout == "exact")
    b.add_reshape("r", "data", "out", target_shape=(2, 6, 2), mode=0 if mode == "CHANNEL_FIRST" else 1)
    feeds = {"data": x if layout == "rank5" else x[None, None]}
    got = legacy_output(layout, predict(tmp_path, b, feeds)["out"])
    if mode == "CHANNEL_FIRST":
        expected = x.reshape(2, 6, 2)
    else:  # read as [H, W, C], reshape to [H', W', C'], move C' in front
        expected = x.transpose(1, 2, 0).reshape(6, 2, 2).transpose(2, 0, 1)
    check(got, expected)


@pytest.mark.parametrize("mode", ["CHANNEL_FIRST", "CHANNEL_LAST"])
def test_reshape_with_sequence_axis(tmp_path, mode):
    x = rng.standard_normal((2, 1, 3, 2, 2)).astype(np.float32)
    b = make_builder({"data": x.shape})
    b.add_reshape("r", "data", "out", target_shape=(4, 3, 1, 2), mode=0 if mode == "CHANNEL_FIRST" else 1)
    got = predict(tmp_path, b, {"data": x})["out"]
    if mode == "CHANNEL_FIRST":
        expected = x.reshape(4, 1, 3, 1, 2)
    else:
        expected = x.transpose(0, 1, 3, 4, 2).reshape(4, 1, 1, 2, 3).transpose(0, 1, 4, 2, 3)
    check(got, expected)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", ["CHANNEL_FIRST", "CHANNEL_LAST"])
def test_flatten(tmp_path, layout, mode):
    x = rng.standard_normal((3, 2, 4)).astype(np.float32)
    b = make_builder({"data": legacy_input(layout, x.shape)}, exact=layout == "exact")
    b.add_flatten("f", mode=0 if mode == "CHANNEL_FIRST" else 1, input_name="data", output_name="out")
    feeds = {"data": x if layout == "rank5" else x[None, None]}
    got = legacy_output(layout, predict(tmp_path, b, feeds)["out"])
    flat = x.reshape(-1) if mode == "CHANNEL_FIRST" else x.transpose(1, 2, 0).reshape(-1)
    check(got, flat.reshape(-1, 1, 1))


@pytest.mark.parametrize("dim", [(0, 3, 1, 2), (0, 2, 3, 1), (0, 1, 2, 3)])
def test_permute_image_axes(tmp_path, dim):
    x = rng.standard_normal((2, 3, 4)).astype(np.float32)
    b = make_builder({"data": x.shape}, exact=False)
    b.add_permute("p", dim=dim, input_name="data", output_name="out")
    got = predict(tmp_path, b, {"data": x})["out"]
    # (Seq, C, H, W) axes 1-3 are the image's 0-2.
    check(got, x.transpose([d - 1 for d in dim[1:]]))


def test_permute_sequence_axis(tmp_path):
    x = rng.standard_normal((2, 1, 3, 4, 5)).astype(np.float32)  # [Seq, B, C, H, W]
    b = make_builder({"data": x.shape})
    b.add_permute("p", dim=(3, 1, 2, 0), input_name="data", output_name="out")
    check(predict(tmp_path, b, {"data": x})["out"], x.transpose(4, 1, 2, 3, 0))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_channel_concat_and_split(tmp_path, layout):
    a = rng.standard_normal((2, 3, 4)).astype(np.float32)
    c = rng.standard_normal((4, 3, 4)).astype(np.float32)
    exact = layout == "exact"
    b = make_builder({"a": legacy_input(layout, a.shape), "c": legacy_input(layout, c.shape)},
                     outputs=("out", "s0", "s1", "s2"), exact=exact)
    b.add_elementwise("cat", ["a", "c"], "out", mode="CONCAT")
    b.add_split("split", "out", ["s0", "s1", "s2"])
    feeds = {"a": a, "c": c} if not exact else {"a": a[None, None], "c": c[None, None]}
    got = predict(tmp_path, b, feeds)
    joined = np.concatenate([a, c], axis=0)
    check(legacy_output(layout, got["out"]), joined)
    for i in range(3):
        check(legacy_output(layout, got[f"s{i}"]), joined[2 * i:2 * i + 2])


def test_sequence_concat_and_repeat(tmp_path):
    a = rng.standard_normal((1, 1, 2, 3, 1)).astype(np.float32)
    c = rng.standard_normal((2, 1, 2, 3, 1)).astype(np.float32)
    b = make_builder({"a": a.shape, "c": c.shape}, outputs=("out", "rep"))
    b.add_elementwise("cat", ["a", "c"], "out", mode="SEQUENCE_CONCAT")
    b.add_sequence_repeat("repeat", 3, "out", "rep")
    got = predict(tmp_path, b, {"a": a, "c": c})
    joined = np.concatenate([a, c], axis=0)
    check(got["out"], joined)
    check(got["rep"], np.tile(joined, (3, 1, 1, 1, 1)))


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("axis,start,end,stride", [
    ("channel", 1, 5, 2), ("height", 0, -1, 1), ("width", -4, 100, 3), ("width", 2, 1, 1),
])
def test_slice(tmp_path, layout, axis, start, end, stride):
    x = rng.standard_normal((6, 4, 7)).astype(np.float32)
    b = make_builder({"data": legacy_input(layout, x.shape)}, exact=layout == "exact")
    b.add_slice("s", "data", "out", axis=axis, start_index=0, end_index=end, stride=stride)
    b.spec.neuralNetwork.layers[-1].slice.startIndex = start  # the builder takes no negative start
    feeds = {"data": x if layout == "rank5" else x[None, None]}
    got = legacy_output(layout, predict(tmp_path, b, feeds)["out"])
    index = [slice(None)] * 3
    index[{"channel": 0, "height": 1, "width": 2}[axis]] = slice(start, end, stride)
    check(got, x[tuple(index)])


@pytest.mark.parametrize("layout", LAYOUTS)
def test_load_constant_feeds_a_layer(tmp_path, layout):
    value = rng.standard_normal((2, 3, 4)).astype(np.float32)
    x = rng.standard_normal((1, 3, 4)).astype(np.float32)
    b = make_builder({"data": legacy_input(layout, x.shape)}, exact=layout == "exact")
    b.add_load_constant("k", "const", value, shape=list(value.shape))
    b.add_elementwise("cat", ["data", "const"], "out", mode="CONCAT")
    feeds = {"data": x if layout == "rank5" else x[None, None]}
    got = legacy_output(layout, predict(tmp_path, b, feeds)["out"])
    check(got, np.concatenate([x, value], axis=0))


def test_legacy_reshape_refuses_a_size_mismatch(tmp_path):
    b = make_builder({"data": (4, 3, 2)}, exact=False)
    b.add_reshape("r", "data", "out", target_shape=(5, 1, 1), mode=0)
    with pytest.raises(coremlrt.Error, match=r"reshape.*does not hold"):
        predict(tmp_path, b, {"data": np.zeros((4, 3, 2), np.float32)})
