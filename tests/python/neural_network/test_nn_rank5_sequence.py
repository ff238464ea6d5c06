"""Legacy rank-5 networks fed a sequence: an array input declared [C, H, W] (or [C]) may arrive
as [Seq, Batch, C, H, W] (NeuralNetwork.proto, RANK5_ARRAY_MAPPING). A network whose layers
only fit a longer sequence (here an innerProduct sized for Seq x C values after a permute and a
flatten, the model of coremltools' test_custom_neural_nets.py::test_fixed_seq_len) is
translated with Seq unknown until prediction (src/format/neural_network/reader.cc). Expected
values from numpy."""

import numpy as np
import pytest

import coremlrt
from nn_helpers import save_and_load

ct = pytest.importorskip("coremltools")

from coremltools.models import datatypes  # noqa: E402
from coremltools.models.neural_network import NeuralNetworkBuilder  # noqa: E402

SEQ, VOCAB, EMBED, OUT = 15, 10, 32, 2


def fixed_sequence_model(tmp_path, rng):
    embed = rng.random((EMBED, VOCAB)).astype(np.float32)      # [output_channels, input_dim]
    dense = rng.random((OUT, EMBED * SEQ)).astype(np.float32)  # [C_out, C_in]
    builder = NeuralNetworkBuilder([("data", datatypes.Array(1, 1, 1))], [("output", datatypes.Array(1, 1, 1))])
    builder.add_embedding("embed", W=embed, b=None, input_dim=VOCAB, output_channels=EMBED, has_bias=False,
                          input_name="data", output_name="embed")
    # [Seq, B, C, H, W] -> [W, B, C, H, Seq]
    builder.add_permute("permute", dim=[3, 1, 2, 0], input_name="embed", output_name="permute")
    builder.add_flatten("flatten", mode=0, input_name="permute", output_name="flatten")
    builder.add_inner_product("dense", W=dense, b=None, input_channels=EMBED * SEQ, output_channels=OUT,
                              has_bias=False, input_name="flatten", output_name="output")
    return save_and_load(tmp_path, builder), embed, dense


def test_sequence_fed_on_the_seq_axis(tmp_path):
    rng = np.random.default_rng(11)
    model, embed, dense = fixed_sequence_model(tmp_path, rng)
    indices = rng.integers(0, VOCAB, SEQ)
    x = indices.reshape(SEQ, 1, 1, 1, 1).astype(np.float32)
    got = model.predict({"data": x})["output"]
    # embed: [Seq, 1, C, 1, 1]; permute: [1, 1, C, 1, Seq]; flatten: C-major, so c * Seq + s.
    embedded = embed[:, indices]              # [C, Seq]
    want = dense @ embedded.reshape(-1)
    np.testing.assert_allclose(got.reshape(-1), want, rtol=1e-5)
    assert got.size == OUT


def test_declared_shape_is_a_sequence_of_one_that_the_dense_layer_refuses(tmp_path):
    model, _, _ = fixed_sequence_model(tmp_path, np.random.default_rng(2))
    with pytest.raises(coremlrt.Error):
        model.predict({"data": np.ones((1, 1, 1), np.float32)})


def test_batch_other_than_one_is_an_error(tmp_path):
    model, _, _ = fixed_sequence_model(tmp_path, np.random.default_rng(3))
    with pytest.raises(coremlrt.Error, match="has shape"):
        model.predict({"data": np.ones((SEQ, 2, 1, 1, 1), np.float32)})


def test_inner_product_on_an_input_sequence(tmp_path):
    # A network that fits Seq 1 keeps the [1, 1, C, H, W] framing of its declared shape.
    rng = np.random.default_rng(5)
    w = rng.random((3, 4)).astype(np.float32)
    builder = NeuralNetworkBuilder([("data", datatypes.Array(4))], [("out", None)])
    builder.add_inner_product("ip", W=w, b=None, input_channels=4, output_channels=3, has_bias=False,
                              input_name="data", output_name="out")
    model = save_and_load(tmp_path, builder)
    x = rng.random(4).astype(np.float32)
    np.testing.assert_allclose(model.predict({"data": x})["out"].reshape(-1), w @ x, rtol=1e-6)
