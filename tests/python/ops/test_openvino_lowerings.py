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
test here.
"""

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb

import backend_check
from mil_helpers import save_program, tensor_spec

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


X = {"x": normal(2, 3, 4, 5, scale=2.0)}
XP = {"x": positive(2, 3, 4, 5)}
XY = {"x": normal(2, 3, 4, 5, scale=2.0), "y": normal(3, 1, 5, scale=2.0)}
XYP = {"x": positive(2, 3, 4, 5), "y": positive(3, 1, 5)}


def unary(op, inputs=X, tol=ELEMENTWISE, **params):
    return inputs, lambda v: getattr(mb, op)(x=v["x"], name="out", **params), tol


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
    # linear.cc, conv.cc, pool.cc
    "avg_pool": unary("avg_pool", kernel_sizes=[2, 2], strides=[1, 2], pad_type="valid", tol=SUMS),
    "conv": ({"x": normal(2, 3, 8, 7)},
             lambda v: mb.conv(x=v["x"], weight=W_CONV, bias=B_CONV, strides=[1, 2], pad_type="same", name="out"), SUMS),
    "linear": unary("linear", weight=W_LINEAR, bias=B_LINEAR, tol=SUMS),
    "matmul": unary("matmul", y=W_MATMUL, tol=SUMS),
    "max_pool": unary("max_pool", kernel_sizes=[2, 3], strides=[2, 1], pad_type="valid", tol=EXACT),
    # normalization.cc
    "batch_norm": unary("batch_norm", mean=MEAN, variance=VAR, gamma=GAMMA, beta=BETA, epsilon=1e-3, tol=SUMS),
    "instance_norm": unary("instance_norm", gamma=GAMMA, beta=BETA, epsilon=1e-3, tol=SUMS),
    "layer_norm": unary("layer_norm", axes=[-1], gamma=const(5), beta=const(5), epsilon=1e-3, tol=SUMS),
    # reduction.cc
    "reduce_l1_norm": reduction("reduce_l1_norm"),
    "reduce_l2_norm": reduction("reduce_l2_norm"),
    "reduce_max": reduction("reduce_max"),
    "reduce_mean": reduction("reduce_mean"),
    "reduce_min": reduction("reduce_min"),
    "reduce_prod": reduction("reduce_prod", XP),
    "reduce_sum": reduction("reduce_sum"),
    # recurrent.cc
    "lstm": ({"x": normal(T, B, I), "h0": normal(B, H), "c0": normal(B, H)},
             lambda v: mb.lstm(x=v["x"], initial_h=v["h0"], initial_c=v["c0"], weight_ih=W_IH, weight_hh=W_HH,
                               bias=B_LSTM, direction="forward", output_sequence=True, name="out"), SUMS),
    # shape.cc, slice.cc, gather.cc, misc.cc (cast, identity)
    # (The lowering casts to fp16 and fp32 only: casts to int32 stay on our kernels.)
    "cast": ({"x": RNG.integers(-1000, 1000, (2, 3, 4, 5)).astype(np.int32)},
             lambda v: mb.cast(x=v["x"], dtype="fp32", name="out"), EXACT),
    "concat": (XY, lambda v: mb.concat(values=[v["x"], mb.tile(x=mb.expand_dims(x=v["y"], axes=[0]),
                                                                 reps=[2, 1, 1, 1])], axis=2, name="out"), EXACT),
    "expand_dims": unary("expand_dims", axes=[-2], tol=EXACT),
    "flatten2d": unary("flatten2d", axis=2, tol=EXACT),
    "gather": unary("gather", indices=INDICES, axis=-1, tol=EXACT),
    "identity": unary("identity", tol=EXACT),
    "reshape": unary("reshape", shape=[6, 20], tol=EXACT),
    "slice_by_index": unary("slice_by_index", begin=[0, 1, 0, 1], end=[2, 3, 4, 5], stride=[1, 1, 2, 2], tol=EXACT),
    "slice_by_size": unary("slice_by_size", begin=[1, 0, 1, 2], size=[1, 3, 2, -1], tol=EXACT),
    "split": (X, lambda v: mb.split(x=v["x"], split_sizes=[1, 2], axis=1, name="out"), EXACT),
    "squeeze": ({"x": normal(2, 1, 4, 1)}, lambda v: mb.squeeze(x=v["x"], axes=[1, 3], name="out"), EXACT),
    "tile": unary("tile", reps=[1, 2, 1, 3], tol=EXACT),
    "transpose": unary("transpose", perm=[3, 1, 0, 2], tol=EXACT),
}


def test_every_lowering_has_a_test():
    if not backend_check.LOWERED_OP_TYPES:
        pytest.skip("no src/backends/openvino sources beside the tests")
    assert sorted(set(backend_check.LOWERED_OP_TYPES) - set(CASES)) == [], "lowerings without a test here"
    assert sorted(set(CASES) - set(backend_check.LOWERED_OP_TYPES)) == [], "tests of op types OpenVINO does not lower"


@pytest.mark.parametrize("op_type", sorted(CASES))
def test_lowering(tmp_path, op_type):
    inputs, body, (rtol, atol) = CASES[op_type]
    names = list(inputs)

    # The builder names a program's inputs after its function's parameters.
    namespace = {"body": body}
    exec(f"def prog({', '.join(names)}):\n    return body(dict(zip({names!r}, [{', '.join(names)}])))", namespace)
    prog = mb.program(input_specs=[tensor_spec(inputs[n]) for n in names],
                      opset_version=ct.target.iOS18)(namespace["prog"])
    path = save_program(prog, tmp_path)
    backend_check.check_all_backends(path, inputs, op_type, rtol, atol)
