"""neuralNetwork rankPreservingReshape, sliceDynamic with a strides input, sliceBySize and tile
with a reps input shorter than the rank, built with coremltools' NeuralNetworkBuilder, run by
coremlrt and compared with numpy."""


import numpy as np
import pytest

import coremlrt

pytest.importorskip("coremltools")

from nn_helpers import build_and_load  # noqa: E402

rng = np.random.default_rng(0)


def load(tmp_path, inputs, add_layers):
    return build_and_load(tmp_path, inputs, add_layers)


def fresh_dir(tmp_path, name):
    """One folder per model when a test builds several."""
    path = tmp_path / name
    path.mkdir()
    return path


def numpy_rank_preserving_reshape(x, target):
    """0 copies the input's size at that axis; -1 is inferred (numpy's reshape)."""
    return x.reshape([x.shape[i] if t == 0 else t for i, t in enumerate(target)])


@pytest.mark.parametrize("shape,target", [
    ((2, 3, 4), (4, 3, 2)),
    ((2, 3, 4), (0, -1, 2)),
    ((2, 3, 4), (-1, 0, 1)),
    ((6, 5), (0, 5)),
    ((6, 5), (10, -1)),
    ((1, 2, 3, 4), (0, 0, 0, -1)),
])
def test_rank_preserving_reshape(tmp_path, shape, target):
    x = rng.standard_normal(shape).astype(np.float32)
    model = load(tmp_path, {"x": shape}, lambda b: b.add_rank_preserving_reshape("r", "x", "out", list(target)))
    out = np.asarray(model.predict({"x": x})["out"])
    expected = numpy_rank_preserving_reshape(x, target)
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("target,reason", [((2, 3), "rank"), ((-1, -1, 4), "targetShape entry"),
                                           ((5, 0, 0), "cannot take")])
def test_rank_preserving_reshape_refusals(tmp_path, target, reason):
    with pytest.raises(Exception, match=reason):
        load(tmp_path, {"x": (2, 3, 4)}, lambda b: b.add_rank_preserving_reshape("r", "x", "out", list(target)))


def numpy_slice(x, begin, end, strides):
    return x[tuple(slice(b, e, s) for b, e, s in zip(begin, end, strides))]


@pytest.mark.parametrize("begin,end,strides", [
    ((0, 1, 0), (4, 6, 5), (2, 2, 1)),
    ((3, 5, 4), (0, 0, 0), (-1, -2, -3)),
    ((-1, 0, 1), (-5, 6, 5), (-2, 3, 2)),
])
@pytest.mark.parametrize("end_from_input", [False, True])
def test_slice_dynamic_with_constant_strides_input(tmp_path, begin, end, strides, end_from_input):
    shape = (4, 6, 5)
    x = rng.standard_normal(shape).astype(np.float32)
    inputs = {"x": shape, "begin": (3,)} | ({"end": (3,)} if end_from_input else {})

    def layers(b):
        b.add_load_constant_nd("strides", "strides", np.array(strides, np.float32), shape=[3])
        # The strides parameter (all 1s) is ignored when the strides input is given.
        names = ["x", "begin"] + (["end"] if end_from_input else ["end_ids"]) + ["strides"]
        if not end_from_input:
            b.add_load_constant_nd("end_ids", "end_ids", np.array(end, np.float32), shape=[3])
        b.add_slice_dynamic("s", names, "out", strides=[1, 1, 1], begin_masks=[False] * 3, end_masks=[False] * 3)

    model = load(tmp_path, inputs, layers)
    feeds = {"x": x, "begin": np.array(begin, np.float32)}
    if end_from_input:
        feeds["end"] = np.array(end, np.float32)
    out = np.asarray(model.predict(feeds)["out"])
    expected = numpy_slice(x, begin, end, strides)
    assert out.shape == expected.shape
    np.testing.assert_array_equal(out, expected)


def test_slice_dynamic_refuses_strides_known_only_at_prediction(tmp_path):
    def layers(b):
        b.add_slice_dynamic("s", ["x", "begin", "end", "strides"], "out", begin_masks=[False] * 2,
                            end_masks=[False] * 2)

    with pytest.raises(Exception, match="stride.*compile-time constant"):
        load(tmp_path, {"x": (4, 6), "begin": (2,), "end": (2,), "strides": (2,)}, layers)


def test_slice_dynamic_with_the_builders_five_default_strides_and_masks(tmp_path):
    """NeuralNetworkBuilder writes five strides (1) and masks (false) whatever the rank."""
    shape = (4, 6, 5)
    x = rng.standard_normal(shape).astype(np.float32)
    model = load(tmp_path, {"x": shape, "begin": (3,), "end": (3,)},
                 lambda b: b.add_slice_dynamic("s", ["x", "begin", "end"], "out"))
    begin, end = (1, 0, 2), (3, 4, 5)
    out = np.asarray(model.predict({"x": x, "begin": np.array(begin, np.float32), "end": np.array(end, np.float32)})["out"])
    np.testing.assert_array_equal(out, numpy_slice(x, begin, end, (1, 1, 1)))


def test_slice_dynamic_refuses_unequal_strides_longer_than_the_rank(tmp_path):
    with pytest.raises(Exception, match="strides has 4 entries for rank 3"):
        load(tmp_path, {"x": (4, 6, 5), "begin": (3,), "end": (3,)},
             lambda b: b.add_slice_dynamic("s", ["x", "begin", "end"], "out", strides=[1, 2, 1, 1],
                                           begin_masks=[False] * 3, end_masks=[False] * 3))


# ---- sliceBySize: x[..., begin:begin + size, ...] along axis, begin from the second input ----


@pytest.mark.parametrize("shape", [(4,), (3, 4), (2, 5, 6), (3, 5, 2, 4), (4, 5, 3, 6, 7)])
def test_slice_by_size_along_every_axis(tmp_path, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    for axis in range(len(shape)):
        dim = shape[axis]
        size = int(rng.integers(1, dim + 1))
        begin = int(rng.integers(0, dim - size + 1))
        model = load(fresh_dir(tmp_path, str(axis)), {"x": shape, "begin": (1,)},
                     lambda b: b.add_slice_by_size("s", ["x", "begin"], "out", axis=axis, size=size))
        out = np.asarray(model.predict({"x": x, "begin": np.array([begin], np.float32)})["out"])
        expected = np.take(x, np.arange(begin, begin + size), axis=axis)
        assert out.shape == expected.shape
        np.testing.assert_array_equal(out, expected)


def test_slice_by_size_reuses_one_model_for_several_begins_and_a_negative_axis(tmp_path):
    x = rng.standard_normal((3, 7, 2)).astype(np.float32)
    model = load(tmp_path, {"x": (3, 7, 2), "begin": (1,)},
                 lambda b: b.add_slice_by_size("s", ["x", "begin"], "out", axis=-2, size=3))
    for begin in range(0, 5):
        out = np.asarray(model.predict({"x": x, "begin": np.array([begin], np.float32)})["out"])
        np.testing.assert_array_equal(out, x[:, begin:begin + 3])
    # A negative begin counts from the end of the axis (the output keeps its size 3).
    out = np.asarray(model.predict({"x": x, "begin": np.array([-4], np.float32)})["out"])
    np.testing.assert_array_equal(out, x[:, -4:-1])


def test_slice_by_size_running_past_the_end_fails_at_prediction(tmp_path):
    model = load(tmp_path, {"x": (3, 7), "begin": (1,)},
                 lambda b: b.add_slice_by_size("s", ["x", "begin"], "out", axis=1, size=3))
    with pytest.raises(Exception, match="out of range"):
        model.predict({"x": np.zeros((3, 7), np.float32), "begin": np.array([5], np.float32)})


@pytest.mark.parametrize("axis,size,reason", [
    (2, 1, "axis 2 does not fit an input of rank 2"),
    (1, 8, "size 8 exceeds axis 1"),
    (0, 0, "size 0 must be positive"),
])
def test_slice_by_size_refusals(tmp_path, axis, size, reason):
    def layers(b):
        b.add_slice_by_size("s", ["x", "begin"], "out", axis=axis, size=1)
        b.spec.neuralNetwork.layers[-1].sliceBySize.size = size  # the builder itself refuses a size of 0

    with pytest.raises(Exception, match=reason):
        load(tmp_path, {"x": (3, 7), "begin": (1,)}, layers)


# ---- tile with its reps from an input: a short reps vector is padded with leading 1s ----------


@pytest.mark.parametrize("shape", [(3,), (2, 4), (3, 2, 4), (2, 3, 2, 2), (2, 2, 3, 2, 2)])
def test_tile_with_reps_input_of_every_length_up_to_the_rank(tmp_path, shape):
    x = rng.standard_normal(shape).astype(np.float32)
    for count in range(1, len(shape) + 1):
        reps = rng.integers(1, 4, size=count)
        model = load(fresh_dir(tmp_path, str(count)), {"x": shape, "reps": (count,)},
                     lambda b: b.add_tile("t", ["x", "reps"], "out"))
        out = np.asarray(model.predict({"x": x, "reps": reps.astype(np.float32)})["out"])
        expected = np.tile(x, list(reps))
        assert out.shape == expected.shape
        np.testing.assert_array_equal(out, expected)


def test_tile_refuses_a_reps_input_longer_than_the_rank(tmp_path):
    with pytest.raises(Exception, match="more entries than the input's rank 2"):
        load(tmp_path, {"x": (2, 3), "reps": (3,)}, lambda b: b.add_tile("t", ["x", "reps"], "out"))
