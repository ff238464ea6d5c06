"""neuralNetwork layers whose results Core ML defines by an algorithm the specification leaves
open: coremlrt refuses them at load, naming the layer and the reason, instead of running
something close."""

import os
import warnings

import numpy as np
import pytest

import coremlrt

ct = pytest.importorskip("coremltools")

from coremltools.models import datatypes  # noqa: E402
from coremltools.models.neural_network import NeuralNetworkBuilder  # noqa: E402


def refusal(tmp_path, builder):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlmodel = ct.models.MLModel(builder.spec, skip_model_load=True)
    path = os.path.join(str(tmp_path), "model.mlmodel")
    mlmodel.save(path)
    with pytest.raises(coremlrt.Error) as info:
        coremlrt.MLModel(path).predict({"data": np.ones(4, np.float32)})
    return str(info.value)


def builder():
    return NeuralNetworkBuilder([("data", datatypes.Array(4))], [("out", None)], disable_rank5_shape_mapping=True)


@pytest.mark.parametrize("params, reason", [({"temperature": 0.5}, "temperature 0.5 is not 1"),
                                            ({"eps": 1e-3}, "eps 0.001 is not 1e-10")])
def test_categorical_distribution_with_unspecified_eps_or_temperature_is_refused(tmp_path, params, reason):
    b = builder()
    b.add_categorical_distribution("rnd", "data", "out", num_samples=2, is_logits=True, seed=3, **params)
    message = refusal(tmp_path, b)
    assert "'rnd'" in message and reason in message
