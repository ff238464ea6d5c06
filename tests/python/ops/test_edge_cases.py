"""Edge cases of elementwise and reduction ops: broadcasting with rank mismatch and size-1 dims
on either side, zero-size dims, NaN/inf, integer division and overflow, fp16 rounding.

Shape-op and cast edge cases (negative axes, empty tensors, rank-0 results, fp16 rounding of
casts) are in test_edge_cases_shape_cast.py.

References are computed here with NumPy (or PyTorch). Where NumPy's semantics differ from the
MIL ones documented in docs/design/coreml-format.md ("Elementwise binary ops", "Elementwise unary ops and
cast", "Numeric pitfalls"), the MIL ones are followed and a comment says so. Several ops share one
program: converting is the slow part.
"""

import coremltools as ct
import numpy as np
import pytest
import torch
from coremltools.converters.mil import Builder as mb

import backend_check
from mil_helpers import predict_program as run
from mil_helpers import tensor_spec as spec
from op_references import REDUCTIONS as ALL_REDUCTIONS

RNG = np.random.default_rng(2024)
NAN, INF = float("nan"), float("inf")
INT32_MIN, INT32_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max


def program(inputs, target, body):
    """mb.program over many named inputs: the builder names inputs after the function's
    parameters, so a function with those parameters is generated. body gets {name: var}."""
    names = list(inputs)
    namespace = {"body": body, "names": names}
    exec(f"def prog({', '.join(names)}):\n    return body(dict(zip(names, [{', '.join(names)}])))", namespace)
    return mb.program(input_specs=[spec(a) for a in inputs.values()], opset_version=target)(namespace["prog"])


def assert_same(actual, expected, name, rtol=0.0, atol=0.0):
    """Shape and values (NaN == NaN); fp16 outputs come back as fp32, so expected is widened."""
    expected = np.asarray(expected)
    assert actual.shape == expected.shape, (name, actual.shape, expected.shape)
    if expected.dtype.kind == "f":
        np.testing.assert_allclose(actual.astype(np.float64), expected.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True, err_msg=name)
    else:
        np.testing.assert_array_equal(actual, expected, err_msg=name)


def floor_div_ref(x, y):
    # MIL: "x / y rounded toward -inf". NumPy's floor_divide follows Python's divmod instead,
    # which differs at special values (inf // 2 is nan there, -5 // inf is -1).
    if x.dtype.kind == "i":
        return np.floor_divide(x, y)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.floor(x / y).astype(x.dtype)


def real_div_ref(x, y):
    if x.dtype.kind == "i":
        # Declared int32 (docs/design/coreml-format.md, "Numeric pitfalls"); coremltools' value inference
        # divides exactly and stores as int32, truncating toward zero. INT32_MIN / -1 wraps to
        # INT32_MIN there.
        with np.errstate(over="ignore", invalid="ignore"):
            return np.where((x == INT32_MIN) & (y == -1), INT32_MIN, np.trunc(x / y)).astype(np.int32)
    return x / y


def mod_ref(x, y):
    # MIL follows Python's %: the result takes the sign of y, as NumPy's mod does.
    return np.mod(x, y)


ARITHMETIC = {
    "add": np.add,
    "sub": np.subtract,
    "mul": np.multiply,
    "real_div": real_div_ref,
    "floor_div": floor_div_ref,
    "mod": mod_ref,
    "maximum": np.maximum,  # NaN on either side gives NaN, as in NumPy
    "minimum": np.minimum,
}
COMPARISONS = {
    "equal": np.equal,
    "not_equal": np.not_equal,
    "greater": np.greater,
    "greater_equal": np.greater_equal,
    "less": np.less,
    "less_equal": np.less_equal,
}
LOGICAL = {"logical_and": np.logical_and, "logical_or": np.logical_or, "logical_xor": np.logical_xor}

# (x shape, y shape): rank mismatch with size-1 dims on both sides, a size-1 vector against a
# matrix, outer-product-like, zero-size dims (stretched and not), equal shapes, all-ones.
BROADCAST_SHAPES = [
    ((2, 1, 4), (3, 1)),
    ((1,), (2, 3)),
    ((4, 1), (1, 5)),
    ((2, 0, 3), (1, 3)),
    ((0, 1), (1, 4)),
    ((3, 2), (3, 2)),
    ((1, 1, 1), (1,)),
]


def operands(shape, dtype, divisor):
    """Small exact values: integers, or multiples of 0.5 for floats. Divisors are nonzero and
    chosen so that every float quotient is far from an integer or exactly one, which keeps
    floor(x / y) free of rounding ambiguity."""
    if dtype == np.int32:
        values = np.array([-4, -3, -2, -1, 1, 2, 3, 4]) if divisor else np.arange(-9, 10)
    else:
        values = np.array([-4, -3, -2, -1.5, -1, -0.5, 0.5, 1, 1.5, 2, 3, 4]) if divisor else np.arange(-12, 13) / 2
    return RNG.choice(values, size=shape).astype(dtype)


def exponents(shape, dtype):
    # Integer powers are defined for non-negative exponents only (NumPy refuses negative ones).
    values = [0, 1, 2, 3] if dtype == np.int32 else [0, 1, 2, 3, -1, 0.5]
    return RNG.choice(values, size=shape).astype(dtype)


@pytest.mark.parametrize("dtype,target", [(np.float32, ct.target.iOS15), (np.float32, ct.target.iOS17),
                                          (np.float16, ct.target.iOS17), (np.int32, ct.target.iOS15)],
                         ids=["fp32-iOS15", "fp32-iOS17", "fp16-iOS17", "int32-iOS15"])
def test_binary_ops_broadcast(tmp_path, dtype, target):
    inputs = {}
    for i, (xs, ys) in enumerate(BROADCAST_SHAPES):
        inputs[f"x{i}"] = operands(xs, dtype, divisor=False)
        inputs[f"y{i}"] = operands(ys, dtype, divisor=True)
        inputs[f"e{i}"] = exponents(ys, dtype)
    # Equal values in some pairs so that equal / less_equal see ties.
    inputs["x5"][0] = inputs["y5"][0]

    def body(named):
        outs = []
        for i in range(len(BROADCAST_SHAPES)):
            x, y, e = named[f"x{i}"], named[f"y{i}"], named[f"e{i}"]
            outs += [getattr(mb, op)(x=x, y=y, name=f"{op}{i}") for op in ARITHMETIC]
            outs.append(mb.pow(x=x, y=e, name=f"pow{i}"))
            # bool outputs are cast to int32: Core ML model outputs cannot be bool.
            outs += [mb.cast(x=getattr(mb, op)(x=x, y=y), dtype="int32", name=f"{op}{i}") for op in COMPARISONS]
            positive, small = mb.greater(x=x, y=dtype(0)), mb.less(x=y, y=dtype(2))
            outs += [mb.cast(x=getattr(mb, op)(x=positive, y=small), dtype="int32", name=f"{op}{i}") for op in LOGICAL]
        # A rank-0 constant on either side.
        outs.append(mb.sub(x=dtype(5), y=named["x0"], name="scalar_left"))
        outs.append(mb.mul(x=named["x0"], y=dtype(3), name="scalar_right"))
        return tuple(outs)

    out = run(program(inputs, target, body), tmp_path, inputs, target)
    fp16 = dtype == np.float16
    openvino = backend_check.current_backend() == "openvino"
    for i, (xs, ys) in enumerate(BROADCAST_SHAPES):
        x, y, e = inputs[f"x{i}"], inputs[f"y{i}"], inputs[f"e{i}"]
        for op, ref in ARITHMETIC.items():
            # fp16 ops compute in float and round once, exactly what NumPy's float16 does. OpenVINO's
            # CPU plugin divides fp32 to within one unit in the last place, not always correctly rounded.
            rtol = 2.0**-23 if op == "real_div" and dtype == np.float32 and openvino else 0.0
            assert_same(out[f"{op}{i}"], ref(x, y), f"{op}{i}", rtol=rtol)
        with np.errstate(divide="ignore", invalid="ignore"):
            want_pow = np.power(x.astype(np.float64), e).astype(dtype) if dtype != np.int32 else np.power(x, e)
        assert_same(out[f"pow{i}"], want_pow, f"pow{i}", rtol=1e-3 if fp16 else 1e-6)
        for op, ref in COMPARISONS.items():
            assert_same(out[f"{op}{i}"], ref(x, y).astype(np.int32), f"{op}{i}")
        for op, ref in LOGICAL.items():
            assert_same(out[f"{op}{i}"], ref(x > 0, y < 2).astype(np.int32), f"{op}{i}")
    x0 = inputs["x0"]
    assert_same(out["scalar_left"], dtype(5) - x0, "scalar_left")
    assert_same(out["scalar_right"], x0 * dtype(3), "scalar_right")


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
def test_binary_special_values(tmp_path, dtype):
    """Every pair of signed zeros, finite values, infinities and NaN: division by zero gives
    +-inf or NaN, NaN propagates through maximum/minimum from either side, comparisons with NaN
    are false (not_equal true)."""
    specials = np.array([0.0, -0.0, 1.0, -1.0, 2.5, -2.5, INF, -INF, NAN], dtype)
    x, y = specials.reshape(-1, 1), specials.reshape(1, -1)

    @mb.program(input_specs=[spec(x), spec(y)], opset_version=ct.target.iOS17)
    def prog(x, y):
        outs = [getattr(mb, op)(x=x, y=y, name=op) for op in ARITHMETIC]
        outs.append(mb.pow(x=x, y=y, name="pow"))
        outs += [mb.cast(x=getattr(mb, op)(x=x, y=y), dtype="int32", name=op) for op in COMPARISONS]
        return tuple(outs)

    out = run(prog, tmp_path, {"x": x, "y": y}, ct.target.iOS17)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for op, ref in ARITHMETIC.items():
            assert_same(out[op], ref(x, y), op)
        assert_same(out["pow"], np.power(x, y), "pow")
        for op, ref in COMPARISONS.items():
            assert_same(out[op], ref(x, y).astype(np.int32), op)
    assert np.isnan(out["maximum"][-1]).all() and np.isnan(out["maximum"][:, -1]).all()
    assert np.isnan(out["minimum"][-1]).all() and np.isnan(out["minimum"][:, -1]).all()


def test_fp16_arithmetic_rounds_to_nearest_even(tmp_path):
    """fp16-typed ops round each result to fp16 (ties to even) and overflow to inf."""
    x = np.array([2048, 2048, 2048, 1, 1, 65504, 300, 0.1, -65504, 6e-8], np.float16)
    y = np.array([1, 3, 5, 2**-11, 3 * 2**-11, 16, 300, 0.2, 32, 0.5], np.float16)

    @mb.program(input_specs=[spec(x), spec(y)], opset_version=ct.target.iOS17)
    def prog(x, y):
        return (mb.add(x=x, y=y, name="add"), mb.sub(x=x, y=y, name="sub"), mb.mul(x=x, y=y, name="mul"),
                mb.real_div(x=x, y=y, name="real_div"))

    out = run(prog, tmp_path, {"x": x, "y": y}, ct.target.iOS17)
    with np.errstate(over="ignore"):
        expected = {"add": x + y, "sub": x - y, "mul": x * y, "real_div": x / y}
    assert expected["add"][0] == 2048 and expected["add"][1] == 2052 and np.isinf(expected["add"][5])
    for name, want in expected.items():
        assert_same(out[name], want, name)


def test_int32_division_and_overflow(tmp_path):
    """floor_div floors and mod takes the divisor's sign (Python semantics, docs/design/coreml-format.md,
    "Numeric pitfalls"); real_div truncates. Overflow wraps modulo 2^32 as in NumPy and coremltools' value
    inference, and INT32_MIN / -1 must not trap."""
    x = np.array([7, -7, 7, -7, 6, -6, 0, 0, 1, -1, INT32_MIN, INT32_MIN, INT32_MAX, INT32_MAX, -5, 5], np.int32)
    y = np.array([2, 2, -2, -2, 3, -3, 5, -5, -1, 1, -1, 3, -1, INT32_MIN, 7, -7], np.int32)
    a = np.array([INT32_MAX, INT32_MIN, 65536, INT32_MIN, 46341, -7], np.int32)
    b = np.array([1, -1, 65536, -1, 46341, 3], np.int32)
    base = np.array([3, -3, 2, 7, -1, 0], np.int32)
    power = np.array([21, 3, 31, 12, 7, 0], np.int32)

    @mb.program(input_specs=[spec(x), spec(y), spec(a), spec(b), spec(base), spec(power)],
                opset_version=ct.target.iOS15)
    def prog(x, y, a, b, base, power):
        return (mb.floor_div(x=x, y=y, name="floor_div"), mb.mod(x=x, y=y, name="mod"),
                mb.real_div(x=x, y=y, name="real_div"),
                mb.add(x=a, y=b, name="add"), mb.sub(x=a, y=b, name="sub"), mb.mul(x=a, y=b, name="mul"),
                mb.pow(x=base, y=power, name="pow"))

    out = run(prog, tmp_path, {"x": x, "y": y, "a": a, "b": b, "base": base, "power": power}, ct.target.iOS15)
    with np.errstate(over="ignore"):
        expected = {"floor_div": np.floor_divide(x, y), "mod": np.mod(x, y), "real_div": real_div_ref(x, y),
                    "add": a + b, "sub": a - b, "mul": a * b, "pow": np.power(base, power)}
    # The signs, spelled out: floor, not truncation.
    assert list(expected["floor_div"][:4]) == [3, -4, -4, 3] and list(expected["mod"][:4]) == [1, 1, -1, -1]
    assert list(expected["real_div"][:4]) == [3, -3, -3, 3]
    assert expected["floor_div"][10] == INT32_MIN and expected["mod"][10] == 0
    for name, want in expected.items():
        assert out[name].dtype == np.int32, name
        assert_same(out[name], want, name)


def test_int32_scatter_div_by_minus_one(tmp_path):
    """scatter's "div" mode divides like real_div: truncating, and INT32_MIN / -1 wraps to
    INT32_MIN instead of trapping (SIGFPE)."""
    data = np.array([INT32_MIN, 7, -7, 9], np.int32)
    updates = np.array([-1, -2, 2, 0], np.int32)
    indices = np.array([0, 1, 2, 3], np.int32)

    @mb.program(input_specs=[spec(data), spec(updates)], opset_version=ct.target.iOS15)
    def prog(data, updates):
        return mb.scatter(data=data, indices=indices, updates=updates, axis=0, mode="div", name="out")

    out = run(prog, tmp_path, {"data": data, "updates": updates}, ct.target.iOS15)
    # Division by zero is undefined in MIL; coremlrt gives 0 there (not checked).
    assert_same(out["out"][:3], np.array([INT32_MIN, -3, -3], np.int32), "scatter div")


# ----------------------------------------------------------------------------- unary ops


UNARY_SPECIAL = {
    "sqrt": np.sqrt, "sin": np.sin, "cos": np.cos, "tan": np.tan, "sinh": np.sinh, "cosh": np.cosh,
    "asin": np.arcsin, "acos": np.arccos, "atanh": np.arctanh, "exp": np.exp, "floor": np.floor, "ceil": np.ceil,
    "round": np.round, "abs": np.abs, "sign": np.sign, "relu6": lambda v: np.clip(v, 0, 6),
    "elu": lambda v: np.where(v > 0, v, np.expm1(v)),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
def test_unary_special_values(tmp_path, dtype):
    # The extra +-1 and 2 hit the domain edges of asin/acos/atanh (atanh(+-1) = +-inf).
    x = np.array([NAN, INF, -INF, -1.0, -0.0, 0.0, 1.0, 2.0, -0.5, 0.5], dtype)

    @mb.program(input_specs=[spec(x)], opset_version=ct.target.iOS17)
    def prog(x):
        outs = [getattr(mb, op)(x=x, name=op) for op in UNARY_SPECIAL if op != "elu"]
        return tuple(outs + [mb.elu(x=x, alpha=1.0, name="elu")])

    out = run(prog, tmp_path, {"x": x}, ct.target.iOS17)
    fp16 = dtype == np.float16
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        for op, ref in UNARY_SPECIAL.items():
            want = ref(x.astype(np.float64)).astype(dtype)
            assert_same(out[op], want, op, rtol=1e-3 if fp16 else 1e-6, atol=1e-3 if fp16 else 1e-7)
            # Infinities and NaN where the reference has them, not just close values.
            assert (np.isnan(out[op]) == np.isnan(want)).all() and (np.isposinf(out[op]) == np.isposinf(want)).all(), op
    # Signed zeros survive the ops that return their input unchanged there.
    for op in ["floor", "ceil", "round", "sqrt"]:
        assert np.signbit(out[op][4]), op


# ----------------------------------------------------------------------------- reductions


# reduce_log_sum is left to test_unary_activation_reduction.py: these rows have negative sums.
REDUCTIONS = {op: ref for op, ref in ALL_REDUCTIONS.items() if op != "reduce_log_sum"}


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
def test_reductions_with_nan_and_inf_over_negative_axes(tmp_path, dtype):
    # Row 0 has a NaN, row 1 both infinities (their sum is NaN), row 2 +inf and a zero (the
    # product is NaN), row 3 -inf only among finite values, row 4 is finite.
    x = np.array([[1.0, NAN, 2.0, -3.0],
                  [INF, 1.0, -INF, 0.5],
                  [INF, 0.0, 1.0, 2.0],
                  [-INF, -1.0, 4.0, 0.25],
                  [1.5, -2.0, 0.5, 3.0]], dtype)

    @mb.program(input_specs=[spec(x)], opset_version=ct.target.iOS17)
    def prog(x):
        outs = []
        for op in REDUCTIONS:
            outs.append(getattr(mb, op)(x=x, axes=[-1], name=op + "_last"))
            outs.append(getattr(mb, op)(x=x, axes=[-2], keep_dims=True, name=op + "_first"))
        return tuple(outs)

    out = run(prog, tmp_path, {"x": x}, ct.target.iOS17)
    fp16 = dtype == np.float16
    x64 = x.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        for op, ref in REDUCTIONS.items():
            for suffix, axis, keep in [("_last", 1, False), ("_first", 0, True)]:
                want = np.asarray(ref(x64, axis=axis, keepdims=keep)).astype(dtype)
                got = out[op + suffix]
                assert_same(got, want, op + suffix, rtol=1e-3 if fp16 else 1e-6)
                assert (np.isnan(got) == np.isnan(want)).all() and (np.isinf(got) == np.isinf(want)).all(), op + suffix


def test_reductions_over_empty_axes(tmp_path):
    """Reducing an empty axis gives the identity of the reduction (sum 0, prod 1, log-sum-exp
    -inf); the mean is 0/0 = NaN. Reducing a non-empty axis of an empty tensor gives an empty
    result. (reduce_max/min of nothing have no value and are not run.)"""
    x = np.zeros((3, 0, 2), np.float32)
    k = np.zeros((0, 4), np.int32)
    empty_axis_ops = ["reduce_sum", "reduce_mean", "reduce_prod", "reduce_sum_square", "reduce_l1_norm",
                      "reduce_l2_norm", "reduce_log_sum_exp"]  # torch.logsumexp of nothing is -inf too

    @mb.program(input_specs=[spec(x), spec(k)], opset_version=ct.target.iOS15)
    def prog(x, k):
        outs = [getattr(mb, op)(x=x, axes=[1], name=op) for op in empty_axis_ops]
        outs += [mb.reduce_sum(x=x, axes=[-2], keep_dims=True, name="sum_keep"),
                 mb.reduce_sum(x=x, name="sum_all"),
                 mb.reduce_max(x=x, axes=[-1], name="max_nonempty_axis"),
                 mb.reduce_sum(x=k, axes=[0], name="int_sum"), mb.reduce_prod(x=k, axes=[0], name="int_prod"),
                 mb.reduce_sum(x=k, axes=[1], name="int_sum_nonempty_axis")]
        return tuple(outs)

    out = run(prog, tmp_path, {"x": x, "k": k}, ct.target.iOS15)
    identities = {"reduce_sum": 0.0, "reduce_mean": NAN, "reduce_prod": 1.0, "reduce_sum_square": 0.0,
                  "reduce_l1_norm": 0.0, "reduce_l2_norm": 0.0, "reduce_log_sum_exp": -INF}
    for op, value in identities.items():
        assert_same(out[op], np.full((3, 2), value), op)
    assert np.isnan(out["reduce_mean"]).all() and (out["reduce_log_sum_exp"] == -INF).all()
    assert_same(out["sum_keep"], np.zeros((3, 1, 2)), "sum_keep")
    assert_same(out["sum_all"], np.float64(0), "sum_all")
    assert_same(out["max_nonempty_axis"], np.zeros((3, 0)), "max_nonempty_axis")
    assert_same(out["int_sum"], np.zeros(4, np.int32), "int_sum")
    assert_same(out["int_prod"], np.ones(4, np.int32), "int_prod")
    assert_same(out["int_sum_nonempty_axis"], np.zeros(0, np.int32), "int_sum_nonempty_axis")


@pytest.mark.parametrize("dtype", [np.float32, np.float16], ids=["fp32", "fp16"])
def test_softmax_with_infinities_and_nan(tmp_path, dtype):
    # -inf entries get probability 0; a NaN makes its whole slice NaN (as in PyTorch). A row of
    # only -inf has no defined answer and is left out.
    x = np.array([[-INF, 0.0, 1.0, 2.0],
                  [-INF, -INF, 3.0, 3.0],
                  [NAN, 1.0, 2.0, 3.0],
                  [1000.0, -INF, 999.0, 0.0],
                  [5.0, 5.0, 5.0, 5.0]], dtype)

    @mb.program(input_specs=[spec(x)], opset_version=ct.target.iOS17)
    def prog(x):
        # Along axis -2 (down the columns) only column 0 meets the NaN.
        return mb.softmax(x=x, axis=-1, name="rows"), mb.softmax(x=x, axis=-2, name="columns")

    out = run(prog, tmp_path, {"x": x}, ct.target.iOS17)
    fp16 = dtype == np.float16
    t = torch.from_numpy(x.astype(np.float64))
    for name, axis in [("rows", -1), ("columns", -2)]:
        want = torch.softmax(t, dim=axis).numpy()
        assert_same(out[name], want, name, rtol=1e-2 if fp16 else 1e-6, atol=1e-3 if fp16 else 1e-7)
        assert (np.isnan(out[name]) == np.isnan(want)).all(), name
    assert (out["rows"][0, 0] == 0) and (out["rows"][1, :2] == 0).all() and (out["rows"][3, 1] == 0)
