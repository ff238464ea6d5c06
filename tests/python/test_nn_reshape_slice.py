"""neuralNetwork rankPreservingReshape and sliceDynamic with a strides input, built with
coremltools' NeuralNetworkBuilder, run by coremlrt and compared with numpy."""


import numpy as np
import pytest

import coremlrt

pytest.importorskip("coremltools")

from nn_helpers import build_and_load  # noqa: E402

rng = np.random.default_rng(0)


def load(tmp_path, inputs, add_layers):
    return build_and_load(tmp_path, inputs, add_layers)


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
