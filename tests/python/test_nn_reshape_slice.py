"""neuralNetwork rankPreservingReshape and sliceDynamic with a strides input, built with
coremltools' NeuralNetworkBuilder, run by coremlrt and compared with numpy."""

import os
import warnings

import numpy as np
import pytest

import coremlrt

ct = pytest.importorskip("coremltools")

from coremltools.models import datatypes  # noqa: E402
from coremltools.models.neural_network import NeuralNetworkBuilder  # noqa: E402

rng = np.random.default_rng(0)


def load(tmp_path, inputs, add_layers):
    builder = NeuralNetworkBuilder([(n, datatypes.Array(*s)) for n, s in inputs.items()], [("out", None)],
                                   disable_rank5_shape_mapping=True)
    add_layers(builder)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlmodel = ct.models.MLModel(builder.spec, skip_model_load=True)
    path = os.path.join(str(tmp_path), "model.mlmodel")
    mlmodel.save(path)
    return coremlrt.MLModel(path)


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
