"""neuralNetwork models built with coremltools' NeuralNetworkBuilder, saved as .mlmodel files
and loaded by coremlrt: shared by the tests of the neuralNetwork layer families."""

import os
import warnings

import coremltools as ct

import coremlrt


def save_spec(tmp_path, spec, name="model.mlmodel"):
    """Saves `spec` under `tmp_path` (coremltools' own load skipped: there is no Core ML here);
    returns the file's path."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlmodel = ct.models.MLModel(spec, skip_model_load=True)
    path = os.path.join(str(tmp_path), name)
    mlmodel.save(path)
    return path


def save_and_load(tmp_path, builder, name="model.mlmodel"):
    """Saves `builder`'s spec under `tmp_path` and loads it with coremlrt."""
    return coremlrt.MLModel(save_spec(tmp_path, builder.spec, name))


def build_and_load(tmp_path, inputs, add_layers, outputs=("out",)):
    """A model of exact-rank fp32 `inputs` ({name: shape}) whose layers `add_layers(builder)`
    adds, with the named outputs, loaded with coremlrt."""
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    builder = NeuralNetworkBuilder([(n, datatypes.Array(*s)) for n, s in inputs.items()],
                                   [(o, None) for o in outputs], disable_rank5_shape_mapping=True)
    add_layers(builder)
    return save_and_load(tmp_path, builder)
