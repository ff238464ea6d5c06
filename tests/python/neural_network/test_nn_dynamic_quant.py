"""innerProduct and batchedMatmul with int8DynamicQuantize (src/ops/dynamic_quantization.cc):
the input is quantized to int8 per tensor at run time (scale max|x| / 127, round half to even,
clamp to [-127, 127]), multiplied by the int8 weights with int32 accumulation and dequantized.
Expected values come from a numpy emulation of that scheme and, as coremltools' own
test_quantization.py checks, from the float model within an SNR bound. A layer's float bias is
added after the product, as Core ML does although NeuralNetwork.proto asks for none; the other
forms it rules out for the flag are refused at load with the reason."""

import contextlib
import io
import warnings

import numpy as np
import pytest

import coremlrt
from nn_helpers import save_and_load

ct = pytest.importorskip("coremltools")

from coremltools.models import datatypes  # noqa: E402
from coremltools.models.neural_network import NeuralNetworkBuilder  # noqa: E402
from coremltools.models.neural_network.quantization_utils import (  # noqa: E402
    activate_int8_int8_matrix_multiplications,
)

C_OUT, C_IN = 16, 32


def emulate(x, codes, weight_scale):
    """The kernel's arithmetic in numpy: x [.., C_in] fp32, codes int8 [C_out, C_in]."""
    x = np.asarray(x, np.float32)
    max_abs = np.max(np.abs(x))
    if max_abs == 0:
        return np.zeros(x.shape[:-1] + (codes.shape[0],), np.float32)
    scale_x = np.float32(max_abs) / np.float32(127)
    q = np.clip(np.rint(x / scale_x), -127, 127).astype(np.int32)
    acc = q.reshape(-1, x.shape[-1]) @ codes.astype(np.int32).T  # int32 accumulation
    y = acc.astype(np.float64) * np.float64(scale_x) * np.float64(weight_scale)
    return y.astype(np.float32).reshape(x.shape[:-1] + (codes.shape[0],))


def snr_db(reference, got):
    noise = reference.ravel() - got.ravel()
    noise_var = np.sum(noise ** 2) / noise.size + 1e-7
    return (10 * np.log10(np.sum(reference.ravel() ** 2) / reference.size / noise_var),
            10 * np.log10(np.amax(reference.ravel() ** 2) / noise_var))


def activate(builder):
    with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        activate_int8_int8_matrix_multiplications(builder.spec)


def matmul_params(builder):
    layer = builder.spec.neuralNetwork.layers[0]
    params = getattr(layer, layer.WhichOneof("layer"))
    assert params.int8DynamicQuantize
    codes = np.frombuffer(params.weights.int8RawValue, np.int8).reshape(C_OUT, C_IN)
    return codes, params.weights.quantization.linearQuantization.scale[0]


def weights(seed=1988):
    rng = np.random.default_rng(seed)
    return rng.uniform(-10, 10, (C_OUT, C_IN))


def exact_builder(shape):
    return NeuralNetworkBuilder([("data", datatypes.Array(*shape))], [("out", None)],
                                disable_rank5_shape_mapping=True)


def add_inner_product(builder, W, **kwargs):
    builder.add_inner_product("ip", W=W, b=None, input_channels=C_IN, output_channels=C_OUT, has_bias=False,
                              input_name="data", output_name="out", **kwargs)


def add_batched_matmul(builder, W, **kwargs):
    # The layer takes W as [C_in, C_out] and stores it transposed, [C_out, C_in].
    builder.add_batched_mat_mul("bmm", ["data"], "out", weight_matrix_rows=C_IN, weight_matrix_columns=C_OUT,
                                W=W.T if isinstance(W, np.ndarray) else W, **kwargs)


CASES = {
    # layer kind, the builder's input shape, rank-5 mapping, the array fed
    "inner_product_rank2": (add_inner_product, (5, C_IN), False, (5, C_IN)),
    "inner_product_rank1": (add_inner_product, (C_IN,), False, (C_IN,)),
    "inner_product_rank4": (add_inner_product, (3, 8, 2, 2), False, (3, 8, 2, 2)),
    "inner_product_rank5_layout": (add_inner_product, (C_IN,), True, (C_IN,)),
    "batched_matmul_rank2": (add_batched_matmul, (5, C_IN), False, (5, C_IN)),
    "batched_matmul_rank3": (add_batched_matmul, (2, 3, C_IN), False, (2, 3, C_IN)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_the_integer_scheme_and_the_float_model(tmp_path, case):
    add, shape, rank5, fed = CASES[case]
    builder = NeuralNetworkBuilder([("data", datatypes.Array(*shape))], [("out", None)],
                                   disable_rank5_shape_mapping=not rank5)
    W = weights()
    add(builder, W)
    activate(builder)
    codes, weight_scale = matmul_params(builder)
    model = save_and_load(tmp_path, builder)
    rng = np.random.default_rng(7)
    # The uniform [0, 1) input of coremltools' test, then a normal one of both signs.
    for uniform, x in ((True, rng.random(fed).astype(np.float32)), (False, rng.normal(0, 3, fed).astype(np.float32))):
        got = model.predict({"data": x})["out"]
        rows = x.reshape(-1, C_IN)
        want = emulate(rows, codes, weight_scale)
        np.testing.assert_array_equal(got.reshape(-1, C_OUT), want)
        # Shapes as the float layer gives them: rank 4 and the rank-5 layout fold to [.., C_out, 1, 1].
        if case == "inner_product_rank4":
            assert got.shape == (3, C_OUT, 1, 1)
        elif case != "inner_product_rank5_layout":
            assert got.shape == fed[:-1] + (C_OUT,)
        if uniform:  # coremltools' bound against the float layer, for its input distribution
            snr, psnr = snr_db(rows.astype(np.float64) @ W.T, got.reshape(-1, C_OUT))
            assert snr >= 40 and psnr >= 40, (snr, psnr)


def int8_layer(add, codes, scale=0.5):
    """A layer of int8 weight codes [C_out, C_in] (the stored layout of both layer kinds; the
    builder takes batchedMatmul's as [C_in, C_out] and transposes them)."""
    builder = exact_builder((C_IN,))
    stored = np.ascontiguousarray(codes.T) if add is add_batched_matmul else codes
    add(builder, stored.tobytes(), int_8_dynamic_quantize=True, is_quantized_weight=True, quantization_type="linear",
        nbits=8, quant_scale=np.array([scale]))
    return builder


@pytest.mark.parametrize("add", [add_inner_product, add_batched_matmul])
def test_input_ties_round_half_to_even(tmp_path, add):
    # max|x| = 127 makes scale_x 1, so x / scale_x is x: 0.5, 1.5, 2.5, -2.5 and -3.5 are ties.
    codes = np.zeros((C_OUT, C_IN), np.int8)
    for i in range(C_OUT):
        codes[i, i] = 1  # output i reads q_x[i]
    model = save_and_load(tmp_path, int8_layer(add, codes, scale=1.0))
    x = np.zeros(C_IN, np.float32)
    x[:6] = [127, 0.5, 1.5, 2.5, -2.5, -3.5]
    got = model.predict({"data": x})["out"]
    np.testing.assert_array_equal(got[:6], [127, 0, 2, 2, -2, -4])
    np.testing.assert_array_equal(got, emulate(x, codes, 1.0))


def test_weight_codes_cover_the_int8_range(tmp_path):
    rng = np.random.default_rng(3)
    codes = rng.integers(-128, 128, (C_OUT, C_IN)).astype(np.int8)
    codes[0, :] = -128
    model = save_and_load(tmp_path, int8_layer(add_inner_product, codes, scale=0.03125))
    x = rng.normal(0, 1, C_IN).astype(np.float32)
    np.testing.assert_array_equal(model.predict({"data": x})["out"], emulate(x, codes, 0.03125))


def test_all_zero_input_gives_zeros_and_nan_gives_nan(tmp_path):
    codes = np.arange(C_OUT * C_IN).reshape(C_OUT, C_IN).astype(np.int8)
    model = save_and_load(tmp_path, int8_layer(add_inner_product, codes))
    zeros = model.predict({"data": np.zeros(C_IN, np.float32)})["out"]
    np.testing.assert_array_equal(zeros, np.zeros(C_OUT, np.float32))
    x = np.ones(C_IN, np.float32)
    x[3] = np.nan
    assert np.isnan(model.predict({"data": x})["out"]).all()


def test_each_prediction_takes_its_own_scale(tmp_path):
    codes = np.random.default_rng(5).integers(-127, 128, (C_OUT, C_IN)).astype(np.int8)
    model = save_and_load(tmp_path, int8_layer(add_inner_product, codes))
    small = np.linspace(-1, 1, C_IN).astype(np.float32)
    large = small * 1000
    large[0] = 5000
    outs = model.predict([{"data": small}, {"data": large}])
    np.testing.assert_array_equal(outs[0]["out"], emulate(small, codes, 0.5))
    np.testing.assert_array_equal(outs[1]["out"], emulate(large, codes, 0.5))


def refusal(tmp_path, builder):
    with pytest.raises(coremlrt.Error) as info:
        save_and_load(tmp_path, builder).predict({"data": np.ones(C_IN, np.float32)})
    return str(info.value)


@pytest.mark.parametrize("kind", ["inner_product", "batched_matmul"])
def test_a_bias_is_added_to_the_dequantized_product(tmp_path, kind):
    # NeuralNetwork.proto lists hasBias == false among the flag's requirements, yet
    # activate_int8_int8_matrix_multiplications sets the flag on biased layers, and coremltools'
    # tests of them pass on macOS: Core ML adds the fp32 bias after dequantizing.
    bias = np.random.default_rng(3).uniform(-10, 10, C_OUT)
    builder = exact_builder((5, C_IN))
    W = weights()
    if kind == "inner_product":
        builder.add_inner_product("ip", W=W, b=bias, input_channels=C_IN, output_channels=C_OUT,
                                  has_bias=True, input_name="data", output_name="out")
    else:
        add_batched_matmul(builder, W, bias=bias)
    activate(builder)
    codes, weight_scale = matmul_params(builder)
    model = save_and_load(tmp_path, builder)
    x = np.random.default_rng(7).random((5, C_IN)).astype(np.float32)
    got = model.predict({"data": x})["out"]
    np.testing.assert_array_equal(got, emulate(x, codes, weight_scale) + bias.astype(np.float32))
    snr, psnr = snr_db(x.astype(np.float64) @ W.T + bias, got)
    assert snr >= 40 and psnr >= 40, (snr, psnr)
    # An all-zero input quantizes to nothing: the bias alone.
    np.testing.assert_array_equal(model.predict({"data": np.zeros((5, C_IN), np.float32)})["out"],
                                  np.tile(bias.astype(np.float32), (5, 1)))


def mutated(edit):
    builder = int8_layer(add_inner_product, np.ones((C_OUT, C_IN), np.int8))
    edit(builder.spec.neuralNetwork.layers[0].innerProduct.weights)
    return builder


@pytest.mark.parametrize("edit, reason", [
    (lambda w: setattr(w.quantization, "numberOfBits", 4), "numberOfBits == 8; these have 4"),
    (lambda w: w.quantization.linearQuantization.scale.append(0.25), "one linear-quantization scale; these have 2"),
    (lambda w: w.quantization.linearQuantization.bias.append(1.0), "an empty linear-quantization bias"),
    (lambda w: w.quantization.lookupTableQuantization.floatValue.extend([0.0] * 256),
     "linearly quantized weights; these have a lookup table"),
    (lambda w: w.ClearField("quantization"), "linearly quantized weights; these have no quantization"),
    (lambda w: setattr(w, "rawValue", bytes(C_OUT * C_IN)), "the weights in int8RawValue only"),
    (lambda w: setattr(w, "int8RawValue", bytes(C_OUT * C_IN - 1)), "int8RawValue holds 511 weights; expected 32 x 16"),
], ids=["nbits4", "two_scales", "linear_bias", "lookup_table", "unquantized", "raw_value", "short"])
def test_forms_the_specification_rules_out_are_refused(tmp_path, edit, reason):
    message = refusal(tmp_path, mutated(edit))
    assert "'ip'" in message and reason in message


def test_batched_matmul_of_two_inputs_is_refused(tmp_path):
    builder = NeuralNetworkBuilder([("data", datatypes.Array(2, C_IN)), ("other", datatypes.Array(C_IN, 3))],
                                   [("out", None)], disable_rank5_shape_mapping=True)
    builder.add_batched_mat_mul("bmm", ["data", "other"], "out")
    builder.spec.neuralNetwork.layers[0].batchedMatmul.int8DynamicQuantize = True
    with pytest.raises(coremlrt.Error) as info:
        save_and_load(tmp_path, builder).predict({"data": np.ones((2, C_IN), np.float32),
                                                  "other": np.ones((C_IN, 3), np.float32)})
    assert "'bmm'" in str(info.value) and "requires one input" in str(info.value)
