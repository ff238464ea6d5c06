"""neuralNetwork layers reverse, reverseSeq, categoricalDistribution and broadcastToDynamic
with a shape blob of rank 2, built with coremltools' NeuralNetworkBuilder and run by coremlrt;
expected values come from numpy (np.flip, a per-slice reversal, np.broadcast_to) and, for the
random layer, from the distribution's probabilities."""


import numpy as np
import pytest

import coremlrt

pytest.importorskip("coremltools")

from nn_helpers import build_and_load  # noqa: E402


def load(tmp_path, inputs, add_layers, outputs=("out",)):
    return build_and_load(tmp_path, inputs, add_layers, outputs)


@pytest.mark.parametrize("shape, flags", [((5,), [True]), ((3, 4), [False, True]), ((2, 3, 4), [True, False, True]),
                                          ((2, 3, 4, 5), [False, False, False, False]),
                                          ((2, 3, 2, 3, 2), [True, True, False, True, True])])
def test_reverse_flips_the_flagged_axes(tmp_path, shape, flags):
    model = load(tmp_path, {"x": shape}, lambda b: b.add_reverse("rev", "x", "out", flags))
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    axes = tuple(i for i, f in enumerate(flags) if f)
    np.testing.assert_array_equal(model.predict({"x": x})["out"], np.flip(x, axis=axes))


def test_reverse_needs_one_flag_per_axis(tmp_path):
    with pytest.raises(coremlrt.Error, match="reverseDim has 2 entries for an input of rank 3"):
        load(tmp_path, {"x": (2, 3, 4)}, lambda b: b.add_reverse("rev", "x", "out", [True, False]))


def reverse_sequence_reference(x, lengths, batch_axis, seq_axis):
    out = x.copy()
    for b, n in enumerate(lengths):
        index = [slice(None)] * x.ndim
        index[batch_axis] = b
        index[seq_axis] = slice(0, int(n))
        # The batch axis is indexed away: seq_axis counts one less after it.
        out[tuple(index)] = np.flip(x[tuple(index)], axis=seq_axis - (seq_axis > batch_axis))
    return out


@pytest.mark.parametrize("shape, batch_axis, seq_axis", [((3, 5), 0, 1), ((5, 3), 1, 0), ((2, 4, 3), 0, -1),
                                                         ((4, 2, 3, 2), -3, 0), ((2, 3, 6, 2, 2), 1, 2)])
def test_reverse_seq_reverses_each_slice_up_to_its_length(tmp_path, shape, batch_axis, seq_axis):
    rank = len(shape)
    batch = shape[batch_axis]
    model = load(tmp_path, {"x": shape, "lengths": (batch,)},
                 lambda b: b.add_reverse_sequence("rs", ["x", "lengths"], "out", batch_axis=batch_axis,
                                                  seq_axis=seq_axis))
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype(np.float32)
    lengths = rng.integers(0, shape[seq_axis] + 1, size=batch)
    lengths[0] = shape[seq_axis]  # the whole axis reversed
    if batch > 1:
        lengths[1] = 0  # nothing reversed
    expected = reverse_sequence_reference(x, lengths, batch_axis % rank, seq_axis % rank)
    got = model.predict({"x": x, "lengths": lengths.astype(np.float32)})["out"]
    np.testing.assert_array_equal(got, expected)


def test_reverse_seq_refuses_equal_axes(tmp_path):
    with pytest.raises(coremlrt.Error, match="batchAxis and sequenceAxis are both axis 1"):
        load(tmp_path, {"x": (2, 3), "lengths": (3,)},
             lambda b: b.add_reverse_sequence("rs", ["x", "lengths"], "out", batch_axis=1, seq_axis=-1))


def test_reverse_seq_checks_the_lengths_at_prediction(tmp_path):
    model = load(tmp_path, {"x": (2, 3), "lengths": (2,)},
                 lambda b: b.add_reverse_sequence("rs", ["x", "lengths"], "out", batch_axis=0, seq_axis=1))
    with pytest.raises(coremlrt.Error, match="out of range"):
        model.predict({"x": np.zeros((2, 3), np.float32), "lengths": np.array([1, 4], np.float32)})


@pytest.mark.parametrize("shape_blob", [(3, 1), (1, 3), (3,)])
def test_broadcast_to_dynamic_reads_a_shape_blob_with_one_axis_longer_than_1(tmp_path, shape_blob):
    model = load(tmp_path, {"x": (4, 1), "shape": shape_blob},
                 lambda b: b.add_broadcast_to_dynamic("bc", ["x", "shape"], "out"))
    x = np.arange(4, dtype=np.float32).reshape(4, 1)
    target = [2, 4, 5]
    got = model.predict({"x": x, "shape": np.array(target, np.float32).reshape(shape_blob)})["out"]
    np.testing.assert_array_equal(got, np.broadcast_to(x, target))


def test_broadcast_to_dynamic_refuses_a_shape_blob_that_is_not_a_vector(tmp_path):
    with pytest.raises(coremlrt.Error, match="expected a vector"):
        load(tmp_path, {"x": (4, 1), "shape": (2, 3)}, lambda b: b.add_broadcast_to_dynamic("bc", ["x", "shape"], "out"))


SAMPLES = 20000
SIGMAS = 6.0


def sample_frequencies(model, x, classes):
    out = model.predict({"x": x})["out"]
    assert out.shape == x.shape[:-1] + (SAMPLES,)
    assert np.all(out == np.round(out)) and out.min() >= 0 and out.max() < classes
    rows = out.reshape(-1, SAMPLES).astype(np.int64)
    return np.stack([np.bincount(r, minlength=classes) / SAMPLES for r in rows])


@pytest.mark.parametrize("is_logits", [True, False])
def test_categorical_distribution_samples_each_row_by_its_probabilities(tmp_path, is_logits):
    x_logits = np.array([[[0.0, 1.0, 2.0, -1.0]], [[3.0, 0.0, 0.0, -30.0]]], np.float32)  # [2, 1, 4]
    probs = np.exp(x_logits) / np.exp(x_logits).sum(-1, keepdims=True)
    x = x_logits if is_logits else probs.astype(np.float32)
    model = load(tmp_path, {"x": x.shape},
                 lambda b: b.add_categorical_distribution("cd", "x", "out", num_samples=SAMPLES, is_logits=is_logits,
                                                          seed=7))
    freq = sample_frequencies(model, x, 4)
    p = probs.reshape(-1, 4)
    bound = SIGMAS * np.sqrt(p * (1 - p) / SAMPLES) + 1e-12
    assert np.all(np.abs(freq - p) <= bound), (freq, p)
    # A seed >= 0 gives the same samples at every prediction.
    np.testing.assert_array_equal(model.predict({"x": x})["out"], model.predict({"x": x})["out"])
