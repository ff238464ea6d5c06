"""One test per op type that the OpenVINO backend lowers (src/backends/openvino/*.cc, the
`t["op_type"]` entries of its lowering table): a program holding that op alone (with a cast to
int32 after ops whose result is bool, since a model output cannot be bool) runs on backend
"reference" and, when this build has OpenVINO, on backend "openvino", where the op must run
(backend_check.check_all_backends). The outputs are compared with the reference backend's, which
the other op tests compare with NumPy and PyTorch.

Tolerances: exact for integer and bool results and for ops that only move, select or compare
values or round them exactly; rtol 1e-5 for fp32 elementwise math (OpenVINO's CPU plugin has
its own vectorized transcendentals, a few units in the last place apart from ours); rtol 1e-4
for ops that sum many products or terms (matrix products, convolution, pooling averages,
normalizations, reductions, the LSTM), whose summation order differs.

test_every_lowering_has_a_test checks that CASES covers the table, so a new lowering needs a
test here; tests/python/tools/test_op_completeness.py checks that every op type is lowered or
declared unlowered with a reason.
"""

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb

import backend_check
import coremlrt
from mil_helpers import save_program, tensor_spec
from nn_helpers import save_spec

RNG = np.random.default_rng(71)
EXACT = (0.0, 0.0)
ELEMENTWISE = (1e-5, 1e-6)
SUMS = (1e-4, 1e-5)


def normal(*shape, scale=1.0):
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def positive(*shape):
    return RNG.uniform(0.25, 4.0, shape).astype(np.float32)


def const(*shape, scale=0.5):
    return normal(*shape, scale=scale)


def as_int32(v):
    return mb.cast(x=v, dtype="int32", name="out")


def uniform(low, high, *shape):
    return RNG.uniform(low, high, shape).astype(np.float32)


X = {"x": normal(2, 3, 4, 5, scale=2.0)}
# Past both knees of the clamping activations (hard sigmoid's at -3 and 3) and softplus's large
# and very small values.
X_WIDE = {"x": normal(2, 3, 4, 5, scale=8.0)}
X_UNIT = {"x": uniform(-0.95, 0.95, 2, 3, 4, 5)}  # inside the inverse sine, cosine and tanh's domain
XP = {"x": positive(2, 3, 4, 5)}
XY = {"x": normal(2, 3, 4, 5, scale=2.0), "y": normal(3, 1, 5, scale=2.0)}
XYP = {"x": positive(2, 3, 4, 5), "y": positive(3, 1, 5)}


def unary(op, inputs=X, tol=ELEMENTWISE, **params):
    return inputs, lambda v: getattr(mb, op)(x=v["x"], name="out", **params), tol


class Layer:
    """A case for an op type that no MIL program holds but a neuralNetwork layer lowers onto
    (asinh, acosh: src/format/neural_network/elementwise_layers.cc): `add(builder)` adds the layer
    reading input "x" and writing "out"."""

    def __init__(self, inputs, add, tol):
        self.inputs, self.add, self.tol = inputs, add, tol


def binary(op, inputs=XY, tol=ELEMENTWISE):
    return inputs, lambda v: getattr(mb, op)(x=v["x"], y=v["y"], name="out"), tol


def comparison(op):
    return XY, lambda v: as_int32(getattr(mb, op)(x=v["x"], y=mb.round(x=v["y"]))), EXACT


def reduction(op, inputs=X):
    return inputs, lambda v: getattr(mb, op)(x=v["x"], axes=[1, -1], keep_dims=False, name="out"), SUMS


W_CONV, B_CONV = const(6, 3, 3, 3), const(6)
W_LINEAR, B_LINEAR = const(7, 5), const(7)
W_MATMUL = const(5, 6)
MEAN, VAR, GAMMA, BETA = const(3), positive(3), const(3), const(3)
H, I, T, B = 6, 5, 4, 2
W_IH, W_HH, B_LSTM = const(4 * H, I), const(4 * H, H), const(4 * H)
INDICES = np.array([2, 0, 3, 3, 1], np.int32)

# op type -> (inputs, body building the op from {name: var}, (rtol, atol)).
CASES = {
    # elementwise_binary.cc, elementwise_unary.cc, activation.cc, misc.cc (select)
    "abs": unary("abs"),
    "add": binary("add"),
    "ceil": unary("ceil", tol=EXACT),
    "clip": unary("clip", alpha=-1.5, beta=2.0, tol=EXACT),
    "cos": unary("cos"),
    "elu": unary("elu", alpha=0.75),
    "equal": comparison("equal"),
    "erf": unary("erf"),
    "exp": unary("exp"),
    "exp2": unary("exp2"),
    "floor": unary("floor", tol=EXACT),
    "floor_div": binary("floor_div", XYP, EXACT),
    "gelu": unary("gelu", mode="TANH_APPROXIMATION"),
    "greater": comparison("greater"),
    "greater_equal": comparison("greater_equal"),
    "inverse": unary("inverse", XP, epsilon=1e-4),
    "leaky_relu": unary("leaky_relu", alpha=0.125),
    "less": comparison("less"),
    "less_equal": comparison("less_equal"),
    "linear_activation": unary("linear_activation", alpha=1.5, beta=-0.25),
    "log": unary("log", XP),
    "logical_not": (X, lambda v: as_int32(mb.logical_not(x=mb.greater(x=v["x"], y=0.0))), EXACT),
    "maximum": binary("maximum", tol=EXACT),
    "minimum": binary("minimum", tol=EXACT),
    "mod": binary("mod", XYP),
    "mul": binary("mul"),
    "not_equal": comparison("not_equal"),
    "pow": binary("pow", XYP),
    "real_div": binary("real_div", XYP),
    "relu": unary("relu", tol=EXACT),
    "relu6": unary("relu6", tol=EXACT),
    "rsqrt": unary("rsqrt", XP),
    "select": (XY, lambda v: mb.select(cond=mb.greater(x=v["x"], y=0.0), a=v["x"], b=v["y"], name="out"), EXACT),
    "sigmoid": unary("sigmoid"),
    "silu": unary("silu"),
    "sin": unary("sin"),
    "softmax": unary("softmax", axis=-1),
    "softsign": unary("softsign"),
    "sqrt": unary("sqrt", XP),
    "square": unary("square"),
    "sub": binary("sub"),
    "tanh": unary("tanh"),
    "tan": unary("tan", {"x": uniform(-1.2, 1.2, 2, 3, 4, 5)}),
    "sinh": unary("sinh"),
    "cosh": unary("cosh"),
    "asin": unary("asin", X_UNIT),
    "acos": unary("acos", X_UNIT),
    "atan": unary("atan"),
    "asinh": Layer(X, lambda b: b.add_asinh("op", "x", "out"), ELEMENTWISE),
    "acosh": Layer({"x": uniform(1.0, 9.0, 2, 3, 4, 5)}, lambda b: b.add_acosh("op", "x", "out"), ELEMENTWISE),
    "atanh": unary("atanh", X_UNIT),
    # Halves among the values: they round to even.
    "round": unary("round", {"x": (RNG.integers(-12, 12, (2, 3, 4, 5)) / 4).astype(np.float32)}, tol=EXACT),
    "sign": unary("sign", {"x": np.round(normal(2, 3, 4, 5))}, tol=EXACT),
    "threshold": unary("threshold", alpha=0.3, tol=EXACT),
    "logical_and": (XY, lambda v: as_int32(mb.logical_and(x=mb.greater(x=v["x"], y=0.0), y=mb.less(x=v["y"], y=0.5))),
                    EXACT),
    "logical_or": (XY, lambda v: as_int32(mb.logical_or(x=mb.greater(x=v["x"], y=0.0), y=mb.less(x=v["y"], y=0.5))),
                   EXACT),
    "logical_xor": (XY, lambda v: as_int32(mb.logical_xor(x=mb.greater(x=v["x"], y=0.0), y=mb.less(x=v["y"], y=0.5))),
                    EXACT),
    # activation.cc
    "clamped_relu": unary("clamped_relu", X_WIDE, alpha=0.2, beta=3.0),
    "prelu": unary("prelu", alpha=const(3)),
    "scaled_tanh": unary("scaled_tanh", alpha=1.5, beta=0.7),
    # hardsigmoid as coremltools writes it (hardswish's second half)
    "sigmoid_hard": unary("sigmoid_hard", X_WIDE, alpha=1.0 / 6, beta=0.5),
    "softplus": unary("softplus", X_WIDE),
    "softplus_parametric": unary("softplus_parametric", alpha=positive(3), beta=const(3)),
    # hardswish's first half: x >= -3 ? x : 0
    "thresholded_relu": unary("thresholded_relu", X_WIDE, alpha=-3.0, tol=EXACT),
    # gather.cc: indices computed at run time (the region checks their range, and that a
    # scatter's are distinct), negative ones among them where the op wraps them.
    "gather_along_axis": ({"x": normal(2, 3, 4, 5), "indices": RNG.integers(-4, 4, (2, 3, 2, 5)).astype(np.int32)},
                          lambda v: mb.gather_along_axis(x=v["x"], indices=v["indices"], axis=2, name="out"), EXACT),
    "gather_nd": ({"x": normal(2, 3, 4, 5), "indices": np.array([[[0, -1], [1, 2]], [[-2, 0], [1, -3]]], np.int32)},
                  lambda v: mb.gather_nd(x=v["x"], indices=v["indices"], name="out"), EXACT),
    "scatter": ({"data": normal(4, 3, 5), "indices": np.array([3, 0, 1], np.int32), "updates": normal(3, 3, 5)},
                lambda v: mb.scatter(data=v["data"], indices=v["indices"], updates=v["updates"], axis=0, mode="sub",
                                     name="out"), EXACT),
    "scatter_along_axis": ({"data": normal(2, 3, 6), "indices": np.argsort(RNG.random((2, 3, 4)), axis=2).astype(np.int32),
                            "updates": normal(2, 3, 4)},
                           lambda v: mb.scatter_along_axis(data=v["data"], indices=v["indices"], updates=v["updates"],
                                                           axis=2, mode="max", name="out"), EXACT),
    "scatter_nd": ({"data": normal(4, 5, 3), "indices": np.array([[3, 1], [0, 4], [3, 0]], np.int32),
                    "updates": normal(3, 3)},
                   lambda v: mb.scatter_nd(data=v["data"], indices=v["indices"], updates=v["updates"], mode="mul",
                                           name="out"), EXACT),
    # tensor_ops.cc
    "argsort": unary("argsort", axis=1, ascending=True, tol=EXACT),
    "band_part": unary("band_part", lower=1, upper=2, tol=EXACT),
    "cumsum": (X, lambda v: (mb.cumsum(x=v["x"], axis=1, exclusive=True, reverse=True, name="out"),
                             mb.cumsum(x=mb.cast(x=v["x"], dtype="int32"), axis=-1, name="ints")), ELEMENTWISE),
    "fill_like": (X, lambda v: mb.add(x=v["x"], y=mb.fill_like(ref_tensor=v["x"], value=2.5), name="out"), EXACT),
    "one_hot": ({"indices": np.array([[0, 3, -1], [5, 2, 4]], np.int32)},
                lambda v: mb.one_hot(indices=v["indices"], one_hot_vector_size=5, axis=1, on_value=2.0, off_value=-1.0,
                                     name="out"), EXACT),
    "sliding_windows": unary("sliding_windows", axis=3, size=3, stride=2, tol=EXACT),
    "topk": (X, lambda v: mb.topk(x=v["x"], k=3, axis=-1, ascending=False, name="out"), EXACT),
    # linear.cc, conv.cc, pool.cc, attention.cc
    "avg_pool": unary("avg_pool", kernel_sizes=[2, 2], strides=[1, 2], pad_type="valid", tol=SUMS),
    "conv": ({"x": normal(2, 3, 8, 7)},
             lambda v: mb.conv(x=v["x"], weight=W_CONV, bias=B_CONV, strides=[1, 2], pad_type="same", name="out"), SUMS),
    "linear": unary("linear", weight=W_LINEAR, bias=B_LINEAR, tol=SUMS),
    "matmul": unary("matmul", y=W_MATMUL, tol=SUMS),
    # A bool mask and a float mask, broadcast over the batch dims; no mask, rank 3.
    "scaled_dot_product_attention": (
        {"q": normal(2, 3, 4, 8), "k": normal(2, 3, 5, 8), "v": normal(2, 3, 5, 6), "m": normal(4, 5)},
        lambda v: (mb.scaled_dot_product_attention(query=v["q"], key=v["k"], value=v["v"],
                                                   attn_mask=mb.greater(x=v["m"], y=-0.5), name="bool_mask"),
                   mb.scaled_dot_product_attention(query=v["q"], key=v["k"], value=v["v"], attn_mask=v["m"],
                                                   name="float_mask"),
                   mb.scaled_dot_product_attention(query=mb.reshape(x=v["q"], shape=[6, 4, 8]),
                                                   key=mb.reshape(x=v["k"], shape=[6, 5, 8]),
                                                   value=mb.reshape(x=v["v"], shape=[6, 5, 6]), name="rank3")), SUMS),
    "max_pool": unary("max_pool", kernel_sizes=[2, 3], strides=[2, 1], pad_type="valid", tol=EXACT),
    # normalization.cc
    "batch_norm": unary("batch_norm", mean=MEAN, variance=VAR, gamma=GAMMA, beta=BETA, epsilon=1e-3, tol=SUMS),
    "l2_norm": unary("l2_norm", epsilon=1e-6, tol=SUMS),
    "instance_norm": unary("instance_norm", gamma=GAMMA, beta=BETA, epsilon=1e-3, tol=SUMS),
    "layer_norm": unary("layer_norm", axes=[-1], gamma=const(5), beta=const(5), epsilon=1e-3, tol=SUMS),
    # reduction.cc
    "reduce_l1_norm": reduction("reduce_l1_norm"),
    "reduce_l2_norm": reduction("reduce_l2_norm"),
    # int32 too (torch.any as coremltools writes it), with values fp32 does not hold
    "reduce_max": ({"x": normal(2, 3, 4, 5), "n": RNG.integers(-2**31, 2**31, (2, 3, 4, 5)).astype(np.int32)},
                   lambda v: (mb.reduce_max(x=v["x"], axes=[1, -1], name="out"),
                              mb.reduce_max(x=v["n"], axes=[0, 2], keep_dims=True, name="ints")), SUMS),
    "reduce_min": ({"x": normal(2, 3, 4, 5), "n": RNG.integers(-2**31, 2**31, (2, 3, 4, 5)).astype(np.int32)},
                   lambda v: (mb.reduce_min(x=v["x"], axes=[1, -1], name="out"),
                              mb.reduce_min(x=v["n"], axes=[3], name="ints")), SUMS),
    "reduce_mean": reduction("reduce_mean"),
    "reduce_prod": reduction("reduce_prod", XP),
    "reduce_sum": reduction("reduce_sum"),
    "reduce_sum_square": reduction("reduce_sum_square"),
    "reduce_log_sum": reduction("reduce_log_sum", XP),
    "reduce_log_sum_exp": reduction("reduce_log_sum_exp"),
    "reduce_argmax": unary("reduce_argmax", axis=1, keep_dims=False, tol=EXACT),
    "reduce_argmin": unary("reduce_argmin", axis=-1, keep_dims=True, tol=EXACT),
    # recurrent.cc
    "lstm": ({"x": normal(T, B, I), "h0": normal(B, H), "c0": normal(B, H)},
             lambda v: mb.lstm(x=v["x"], initial_h=v["h0"], initial_c=v["c0"], weight_ih=W_IH, weight_hh=W_HH,
                               bias=B_LSTM, direction="forward", output_sequence=True, name="out"), SUMS),
    # shape.cc, slice.cc, gather.cc (gather), misc.cc (cast: every pair of dtypes in test_cast; identity)
    "cast": ({"x": RNG.integers(-1000, 1000, (2, 3, 4, 5)).astype(np.int32)},
             lambda v: mb.cast(x=v["x"], dtype="fp32", name="out"), EXACT),
    "concat": (XY, lambda v: mb.concat(values=[v["x"], mb.tile(x=mb.expand_dims(x=v["y"], axes=[0]),
                                                                 reps=[2, 1, 1, 1])], axis=2, name="out"), EXACT),
    "expand_dims": unary("expand_dims", axes=[-2], tol=EXACT),
    "reshape_like": ({"x": normal(2, 3, 4, 5), "ref": normal(6, 20)},
                     lambda v: mb.reshape_like(x=v["x"], ref_tensors=(v["ref"],), begins=(0,), ends=(2,),
                                               end_masks=(True,), name="out"), EXACT),
    "reverse": unary("reverse", axes=[0, -1], tol=EXACT),
    "stack": ({"x": normal(2, 3, 4), "y": normal(2, 3, 4)},
              lambda v: mb.stack(values=[v["x"], v["y"], v["x"]], axis=2, name="out"), EXACT),
    # space.cc
    "depth_to_space": unary("depth_to_space", {"x": normal(1, 8, 3, 4)}, block_size=2, tol=EXACT),
    "space_to_depth": unary("space_to_depth", {"x": normal(1, 2, 4, 6)}, block_size=2, tol=EXACT),
    "pixel_shuffle": unary("pixel_shuffle", {"x": normal(2, 8, 3, 4)}, upscale_factor=2, tol=EXACT),
    "pixel_unshuffle": unary("pixel_unshuffle", {"x": normal(2, 2, 4, 6)}, downscale_factor=np.uint32(2), tol=EXACT),
    "flatten2d": unary("flatten2d", axis=2, tol=EXACT),
    "gather": unary("gather", indices=INDICES, axis=-1, tol=EXACT),
    # Each mode, over the edges of the last two dims.
    "pad": (X, lambda v: tuple(mb.pad(x=v["x"], pad=[1, 2, 2, 0], mode=mode, constant_val=1.5, name=mode)
                               for mode in ("constant", "reflect", "replicate")), EXACT),
    "identity": unary("identity", tol=EXACT),
    "reshape": unary("reshape", shape=[6, 20], tol=EXACT),
    "slice_by_index": unary("slice_by_index", begin=[0, 1, 0, 1], end=[2, 3, 4, 5], stride=[1, 1, 2, 2], tol=EXACT),
    "slice_by_size": unary("slice_by_size", begin=[1, 0, 1, 2], size=[1, 3, 2, -1], tol=EXACT),
    "split": (X, lambda v: mb.split(x=v["x"], split_sizes=[1, 2], axis=1, name="out"), EXACT),
    "squeeze": ({"x": normal(2, 1, 4, 1)}, lambda v: mb.squeeze(x=v["x"], axes=[1, 3], name="out"), EXACT),
    "tile": unary("tile", reps=[1, 2, 1, 3], tol=EXACT),
    "transpose": unary("transpose", perm=[3, 1, 0, 2], tol=EXACT),
}


CAST_DTYPES = ("fp32", "fp16", "int32", "int16", "uint16", "int8", "uint8", "bool")
# Floats at the edges of each integer type and between (NaN, infinities, halves, values past every
# bound), and integers that wrap in each narrower type.
CAST_FLOATS = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 0.5, -0.5, 1.75, -1.75, 127.875, 128.5, -128.75, -129.0,
                        255.5, 256.0, 300.0, -300.0, 32767.9, 32768.0, -32769.0, 65535.5, 65536.0, 70000.0, -70000.0,
                        3e9, -3e9, 2147483520.0, 2147483648.0, -2147483648.0, 1e30], np.float32)
CAST_INTS = np.array([0, 1, -1, 127, 128, -128, -129, 255, 256, 300, -300, 32767, 32768, -32769, 65535, 65536, 70000,
                      -70000, 16777217, 2147483647, -2147483648, 123456789], np.int32)
# Values fp16 holds exactly, for the casts to fp16: a region computes fp16 values in fp32 (fp16 or
# wider, docs/design/architecture.md law 6), so only these give Core ML's exact fp16 results.
CAST_FP16_EXACT = np.array([0, 1, -1, 2, 127, -128, 255, 256, -300, 2048, -4096, 32768], np.float32)
# ... and integers fp16 holds exactly once wrapped into each integer dtype (-128 is 65408 in uint16).
CAST_FP16_EXACT_INTS = np.array([0, 1, 2, 127, -128, 255, 256, 2048, -4096, 32768], np.int32)


@pytest.mark.parametrize("source", CAST_DTYPES)
def test_cast(tmp_path, source):
    """A value of dtype `source` cast to every other dtype, each result read back as int32 or fp32
    (a model output cannot be bool or a narrow integer). From fp16 to the floats only: casts from
    fp16 to an integer or bool stay on our kernels (src/backends/openvino/misc.cc)."""
    floats = source in ("fp32", "fp16")
    x = CAST_FLOATS if floats else CAST_INTS
    if source == "fp16":  # the values the cast to fp16 below gives exactly
        x = x[~(np.abs(x) < np.inf) | (np.abs(x) <= 65504)].astype(np.float16).astype(np.float32)
    inputs = {"x": x, "exact": CAST_FP16_EXACT if floats else CAST_FP16_EXACT_INTS}

    @mb.program(input_specs=[tensor_spec(v) for v in inputs.values()], opset_version=ct.target.iOS18)
    def prog(x, exact):
        def as_source(v):
            return v if source in ("fp32", "int32") else mb.cast(x=v, dtype=source)

        outputs = []
        for target in CAST_DTYPES:
            if target == source or (source == "fp16" and target not in ("fp32", "fp16")):
                continue
            y = mb.cast(x=as_source(exact if target == "fp16" else x), dtype=target)
            outputs.append(mb.cast(x=y, dtype="fp32" if target == "fp16" else "int32", name=target)
                           if target not in ("fp32", "int32") else mb.identity(x=y, name=target))
        return tuple(outputs)

    backend_check.check_all_backends(save_program(prog, tmp_path), inputs, "cast", *EXACT)


COMPARISONS = ("equal", "not_equal", "less", "less_equal", "greater", "greater_equal")
# Pairs that fp32 cannot tell apart (above 2^24), the int32 extremes, and pairs that differ only
# in the low bits or only in the high ones.
COMPARED_X = np.array([16777217, 16777216, 2147483647, -2147483648, -2147483647, 123456789, 4096, -4096, 4095, 0,
                       -1, 7, 1 << 20, -(1 << 20) - 1], np.int32)
COMPARED_Y = np.array([16777216, 16777217, 2147483646, -2147483647, -2147483648, 123456789, 4095, -4095, 4096, -1,
                       0, 7, (1 << 20) + 4096, -(1 << 20)], np.int32)


@pytest.mark.parametrize("op_type", COMPARISONS)
def test_int32_comparisons_are_exact(tmp_path, op_type):
    """The CPU plugin compares int32 in fp32; the lowering compares split values
    (src/backends/openvino/elementwise_binary.cc), so values fp32 rounds alike still compare
    as Core ML compares them."""
    inputs = {"x": COMPARED_X, "y": COMPARED_Y}

    @mb.program(input_specs=[tensor_spec(v) for v in inputs.values()], opset_version=ct.target.iOS18)
    def prog(x, y):
        return (mb.cast(x=getattr(mb, op_type)(x=x, y=y), dtype="int32", name="pairs"),
                mb.cast(x=getattr(mb, op_type)(x=x, y=mb.const(val=np.int32(16777216))), dtype="int32",
                        name="with_scalar"))

    path = save_program(prog, tmp_path)
    expected = backend_check.check_all_backends(path, inputs, op_type, 0, 0)
    want = getattr(np, op_type)(COMPARED_X, COMPARED_Y).astype(np.int32)
    np.testing.assert_array_equal(expected["pairs"], want)


@pytest.mark.parametrize("mode", ["max", "min"])
def test_int32_scatter_max_min_are_exact(tmp_path, mode):
    """scatter's max / min on int32 keep values that fp32 cannot tell apart (above 2^24)."""
    data = np.array([[16777217, 5], [16777216, -16777217], [2147483647, 0]], np.int32)
    updates = np.array([[16777216, 6], [16777217, -16777216]], np.int32)
    inputs = {"data": data, "updates": updates}

    @mb.program(input_specs=[tensor_spec(v) for v in inputs.values()], opset_version=ct.target.iOS18)
    def prog(data, updates):
        return mb.scatter(data=data, indices=np.array([0, 1], np.int32), updates=updates, axis=0, mode=mode,
                          name="out")

    expected = backend_check.check_all_backends(save_program(prog, tmp_path), inputs, "scatter", 0, 0)
    want = data.copy()
    want[:2] = (np.maximum if mode == "max" else np.minimum)(data[:2], updates)
    np.testing.assert_array_equal(expected["out"], want)


def test_every_lowering_has_a_test():
    if not backend_check.LOWERED_OP_TYPES:
        pytest.skip("no src/backends/openvino sources beside the tests")
    assert sorted(set(backend_check.LOWERED_OP_TYPES) - set(CASES)) == [], "lowerings without a test here"
    assert sorted(set(CASES) - set(backend_check.LOWERED_OP_TYPES)) == [], "tests of op types OpenVINO does not lower"


def save_layer(case, tmp_path):
    from coremltools.models import datatypes
    from coremltools.models.neural_network import NeuralNetworkBuilder

    builder = NeuralNetworkBuilder([(n, datatypes.Array(*v.shape)) for n, v in case.inputs.items()], [("out", None)],
                                   disable_rank5_shape_mapping=True)
    case.add(builder)
    return save_spec(tmp_path, builder.spec)


@pytest.mark.parametrize("op_type", sorted(CASES))
def test_lowering(tmp_path, op_type):
    if isinstance(CASES[op_type], Layer):
        case = CASES[op_type]
        backend_check.check_all_backends(save_layer(case, tmp_path), case.inputs, op_type, *case.tol)
        return
    inputs, body, (rtol, atol) = CASES[op_type]
    names = list(inputs)

    # The builder names a program's inputs after its function's parameters.
    namespace = {"body": body}
    exec(f"def prog({', '.join(names)}):\n    return body(dict(zip({names!r}, [{', '.join(names)}])))", namespace)
    prog = mb.program(input_specs=[tensor_spec(inputs[n]) for n in names],
                      opset_version=ct.target.iOS18)(namespace["prog"])
    path = save_program(prog, tmp_path)
    backend_check.check_all_backends(path, inputs, op_type, rtol, atol)
