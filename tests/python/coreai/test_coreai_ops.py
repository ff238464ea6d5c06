"""One Core AI op per model (written with coreai's authoring API, or converted from torch with
coreai-torch), predicted by coremlrt and by coreai-core's own runtime (coreai.runtime), whose
outputs are the reference: odd shapes, broadcasting, negative axes and each element type the
translation takes. Skipped when coreai-core / coreai-torch are not installed.

Float outputs must agree within the rounding of their element type, scaled to the output
(_TOLERANCE ulps of max(1, max |reference|)); integer and bool outputs exactly. Bool results are
cast to si32 in the model (Core ML outputs cannot be bool), ui32 results likewise.
"""

import warnings

import numpy as np
import pytest

pytest.importorskip("coreai")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # coreai-torch warns about torch versions newer than it was tested with
    coreai_torch = pytest.importorskip("coreai_torch")
import coreai.authoring as ca  # noqa: E402
import coreai.runtime  # noqa: E402

if coreai.runtime.NDArray.__module__.startswith("coremlrt"):
    # COREMLRT_COREAI=1 puts coremlrt behind coreai.runtime (python/coremlrt_coreai_hook.py): it
    # cannot be the reference it would be compared with.
    pytest.skip("coreai.runtime is coremlrt's stand-in in this process", allow_module_level=True)

import coremlrt  # noqa: E402
import coremlrt.coreai  # noqa: E402
from coreai_helpers import author, coreai_predict  # noqa: E402

F32, F16, I32 = np.float32, np.float16, np.int32
# Units in the last place of the output's element type, times max(1, max |reference|): the
# two runtimes round differently (libm, summation order), never by more than a few ulps.
_TOLERANCE = {np.dtype(F32): 16, np.dtype(F16): 4}

# Observed max |coremlrt - coreai runtime| per case, relative to the scale above; printed at
# the end of the module's tests (pytest -s shows it).
_SEEN = {}


@pytest.fixture(scope="module", autouse=True)
def _report_differences():
    yield
    if _SEEN:
        worst = sorted(_SEEN.items(), key=lambda item: -item[1])
        print("\nmax |coremlrt - coreai runtime| / max(1, max |output|), largest first:")
        print("\n".join(f"  {key}: {value:.3g}" for key, value in worst[:25]))


def _feed(shape, dtype, domain, rng):
    if domain == "int":
        return rng.integers(-9, 10, shape).astype(dtype)
    if domain.startswith("idx"):  # indices in [-n, n)
        n = int(domain[3:])
        return rng.integers(-n, n, shape).astype(dtype)
    if domain.startswith("nat"):  # in [0, n)
        return rng.integers(0, int(domain[3:]), shape).astype(dtype)
    if domain == "nonzero":
        values = rng.integers(1, 10, shape) * rng.choice([-1, 1], shape)
        return values.astype(dtype)
    x = rng.standard_normal(shape)
    if domain == "pos":
        x = np.abs(x) * 2 + 0.1
    elif domain == "unit":
        x = np.tanh(x) * 0.95
    elif domain == "ge1":
        x = np.abs(x) * 2 + 1
    elif domain == "half":  # multiples of 0.5: halfway cases of round
        x = np.round(x * 4) / 2
    else:
        x = x * 3
    return x.astype(dtype)


def _inputs(specs):
    return [(s[0], s[1]) for s in specs]


def _check(path, specs, tmp_path, key, feeds=None, seed=0):
    rng = np.random.default_rng(seed)
    if feeds is None:
        feeds = {f"x{i}": _feed(s[0], s[1], s[2] if len(s) > 2 else "normal", rng) for i, s in enumerate(specs)}
    want = coreai_predict(path, feeds)
    got = coremlrt.MLModel(path, cache_dir=tmp_path / "cache").predict(feeds)
    assert sorted(got) == sorted(want)
    for name, reference in want.items():
        result = got[name]
        assert result.shape == reference.shape, (name, result.shape, reference.shape)
        if reference.dtype == F16:  # coremlrt returns float16 outputs widened to float32, as coremltools does
            assert result.dtype == F32 and np.array_equal(result.astype(F16).astype(F32), result, equal_nan=True)
            result = result.astype(F16)
        assert result.dtype == reference.dtype, (name, result.dtype, reference.dtype)
        if reference.dtype.kind in "iub":
            np.testing.assert_array_equal(result, reference, err_msg=name)
            _SEEN[key] = max(_SEEN.get(key, 0.0), 0.0)
            continue
        finite = np.isfinite(reference)  # NaN and infinities must match exactly
        np.testing.assert_array_equal(result[~finite], reference[~finite], err_msg=name)
        scale = max(1.0, float(np.abs(reference[finite]).max())) if finite.any() else 1.0
        atol = _TOLERANCE[reference.dtype] * float(np.finfo(reference.dtype).eps) * scale
        diff = np.abs(result[finite].astype(np.float64) - reference[finite].astype(np.float64))
        _SEEN[key] = max(_SEEN.get(key, 0.0), float(diff.max()) / scale if diff.size else 0.0)
        np.testing.assert_allclose(result, reference, rtol=0, atol=atol, err_msg=name)
    return got


def _constant(value):
    from coreai.authoring.constant import constant

    return constant(value)


def _as_i32(value):
    return ca.cast(value, I32)


def _axes(*axes):
    return np.array(axes, I32)


# -- elementwise ----------------------------------------------------------------------------
# unary op -> input domain
_UNARY = {
    "relu": "normal", "sigmoid": "normal", "tanh": "normal", "exp": "normal", "sqrt": "pos", "abs_": "normal",
    "sin": "normal", "cos": "normal", "tan": "unit", "erf": "normal", "silu": "normal", "asin": "unit",
    "acos": "unit", "atan": "normal", "atanh": "unit", "sinh": "normal", "cosh": "normal", "asinh": "normal",
    "acosh": "ge1", "round_": "half", "log": "pos", "rsqrt": "pos",
}
_UNARY_CASES = [(f"{op}-{np.dtype(d).name}", op, d) for op in _UNARY for d in (F32, F16)]


@pytest.mark.parametrize("case,op,dtype", _UNARY_CASES, ids=[c[0] for c in _UNARY_CASES])
def test_unary(case, op, dtype, tmp_path):
    specs = [((2, 3, 5), dtype, _UNARY[op])]
    path = author(tmp_path / "m.aimodel", _inputs(specs), getattr(ca, op))
    _check(path, specs, tmp_path, case)


def _gelu(mode):
    return lambda x: ca.gelu(x, approximate=mode)


_BINARY = ["broadcasting_add", "broadcasting_sub", "broadcasting_mul", "broadcasting_divide",
           "broadcasting_floor_divide", "broadcasting_maximum", "broadcasting_minimum", "broadcasting_modulo",
           "broadcasting_pow"]
_COMPARE = ["broadcasting_equal", "broadcasting_not_equal", "broadcasting_greater"]
_LOGICAL = ["broadcasting_and", "broadcasting_or", "broadcasting_xor", "broadcasting_bitwise_and",
            "broadcasting_bitwise_or", "broadcasting_bitwise_xor"]
_PLAIN = ["add", "sub", "mul", "divide", "floor_divide", "maximum", "minimum", "modulo", "pow_"]


def _pair(dtype, domain_x="normal", domain_y="normal"):
    return [((2, 1, 5), dtype, domain_x), ((3, 1), dtype, domain_y)]


def _binary_cases():
    cases = []
    for op in _BINARY:
        short = op.replace("broadcasting_", "")
        positive = short in ("pow", "divide", "floor_divide", "modulo")
        for dtype in (F32, F16, I32):
            if dtype == I32:
                specs = _pair(I32, "int", "nonzero" if positive else "int")
                if short == "pow":
                    specs = [((2, 1, 5), I32, "int"), ((3, 1), I32, "nat4")]
            else:
                specs = _pair(dtype, "pos" if short == "pow" else "normal", "pos" if short == "pow" else "normal")
            cases.append((f"{short}-{np.dtype(dtype).name}", specs, lambda x, y, op=op: getattr(ca, op)(x, y)))
    for op in _COMPARE:
        for dtype in (F32, I32):
            specs = _pair(dtype, "nat3" if dtype == I32 else "half", "nat3" if dtype == I32 else "half")
            cases.append((f"{op[13:]}-{np.dtype(dtype).name}", specs,
                          lambda x, y, op=op: _as_i32(getattr(ca, op)(x, y))))
    for op in _LOGICAL:
        cases.append((op[13:], _pair(F32), lambda x, y, op=op: _as_i32(
            getattr(ca, op)(ca.broadcasting_greater(x, np.float32(0)), ca.broadcasting_greater(y, np.float32(0))))))
    for op in _PLAIN:
        same = [((3, 4), F32, "pos"), ((3, 4), F32, "pos")]
        cases.append((f"plain-{op}", same, lambda x, y, op=op: getattr(ca, op)(x, y)))
    same = [((3, 4), F32, "half"), ((3, 4), F32, "half")]
    for op in ("equal", "not_equal", "greater"):
        cases.append((f"plain-{op}", same, lambda x, y, op=op: _as_i32(getattr(ca, op)(x, y))))
    for op in ("and_", "or_", "xor_", "bitwise_and", "bitwise_or", "bitwise_xor"):
        cases.append((f"plain-{op}", same, lambda x, y, op=op: _as_i32(getattr(ca, op)(
            ca.greater(x, np.zeros((3, 4), F32)), ca.greater(y, np.zeros((3, 4), F32))))))
    # add and mul of bools are or and and (the docstrings).
    for op in ("add", "mul"):
        cases.append((f"bool-{op}", same, lambda x, y, op=op: _as_i32(getattr(ca, op)(
            ca.greater(x, np.zeros((3, 4), F32)), ca.greater(y, np.zeros((3, 4), F32))))))
    cases += [
        ("not", [((2, 7), F32)], lambda x: _as_i32(ca.not_(ca.broadcasting_greater(x, np.float32(0))))),
        ("relu-int32", [((2, 7), I32, "int")], ca.relu),
        ("abs-int32", [((2, 7), I32, "int")], ca.abs_),
        ("gelu-none", [((3, 9), F32)], _gelu("none")),
        ("gelu-tanh", [((3, 9), F32)], _gelu("tanh")),
        ("gelu-sigmoid", [((3, 9), F16)], _gelu("sigmoid")),
        ("where", [((2, 1, 5), F32), ((3, 1), F32), ((5,), F32)],
         lambda c, a, b: ca.broadcasting_where(ca.broadcasting_greater(c, np.float32(0)), a, b)),
        ("plain-where", [((3, 4), F32), ((3, 4), I32, "int"), ((3, 4), I32, "int")],
         lambda c, a, b: ca.where(ca.greater(c, np.zeros((3, 4), F32)), a, b)),
        ("cast-f32-si32", [((4, 5), F32)], lambda x: ca.cast(x, I32)),
        ("cast-si32-f16", [((4, 5), I32, "int")], lambda x: ca.cast(x, F16)),
        ("cast-f32-f16", [((4, 5), F32)], lambda x: ca.cast(x, F16)),
        ("cast-f16-f32", [((4, 5), F16)], lambda x: ca.cast(x, F32)),
        ("cast-f32-bool-f32", [((4, 5), F32, "half")], lambda x: ca.cast(ca.cast(x, np.bool_), F32)),
    ]
    return cases


_BINARY_CASES = _binary_cases()


@pytest.mark.parametrize("case", _BINARY_CASES, ids=[c[0] for c in _BINARY_CASES])
def test_binary_and_logical(case, tmp_path):
    key, specs, body = case
    path = author(tmp_path / "m.aimodel", _inputs(specs), body)
    _check(path, specs, tmp_path, key)


# -- reductions, scans and sorts ------------------------------------------------------------
def _reduce_cases():
    cases = []
    for op in ("reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_product"):
        for dtype in (F32, F16) + (() if op == "reduce_mean" else (I32,)):
            domain = {I32: "int", F32: "normal", F16: "normal"}[dtype]
            if op == "reduce_product":
                domain = "nat3" if dtype == I32 else "unit"
            cases.append((f"{op}-{np.dtype(dtype).name}", [((3, 4, 5), dtype, domain)],
                          lambda x, op=op: getattr(ca, op)(x, _axes(-1, 0))))
    cases += [
        ("all", [((3, 4, 5), I32, "nat3")], lambda x: _as_i32(ca.all_(ca.greater(x, np.zeros((3, 4, 5), I32)),
                                                                         _axes(1)))),
        ("any", [((3, 4, 5), I32, "nat3")], lambda x: _as_i32(ca.any_(
            ca.broadcasting_greater(x, np.int32(1)), _axes(-1, 0)))),
        ("argmax-f32", [((3, 7, 2), F32)], lambda x: _as_i32(ca.argmax(x, np.int32(-2)))),
        ("argmax-si32-ties", [((3, 7, 2), I32, "nat3")], lambda x: _as_i32(ca.argmax(x, np.int32(1)))),
        ("scan-sum", [((3, 4, 5), F32)], lambda x: ca.scan(x, np.uint32(1), np.bool_(False))),
        ("scan-sum-reverse-si32", [((3, 4, 5), I32, "int")], lambda x: ca.scan(x, np.uint32(2), np.bool_(True))),
    ]
    for descending in (False, True):
        for dtype, domain in ((F32, "half"), (I32, "nat3")):
            name = f"{'desc' if descending else 'asc'}-{np.dtype(dtype).name}"
            cases.append((f"sort-{name}", [((4, 9), dtype, domain)], lambda x, d=descending: ca.sort(
                x, np.int32(-1), np.bool_(d), np.bool_(True))))
            cases.append((f"argsort-{name}", [((4, 9), dtype, domain)], lambda x, d=descending: _as_i32(ca.argsort(
                x, np.int32(-1), np.bool_(d), np.bool_(True)))))
    cases += [
        ("symmetric_quantization_statistics", [((4, 6), F32)],
         lambda x: ca.symmetric_quant_stats(x, np.array([-128, 127], F32), np.int32(1))),
        ("asymmetric_quantization_statistics-float", [((4, 6), F32)],
         lambda x: ca.asymmetric_quant_stats(x, np.array([0, 255], F32), np.int32(0))),
        ("asymmetric_quantization_statistics-si32", [((4, 6), F32)],
         lambda x: ca.asymmetric_quant_stats(x, np.array([-128, 127], I32), np.int32(-1))),
    ]
    return cases


_REDUCE_CASES = _reduce_cases()


@pytest.mark.parametrize("case", _REDUCE_CASES, ids=[c[0] for c in _REDUCE_CASES])
def test_reductions(case, tmp_path):
    key, specs, body = case
    path = author(tmp_path / "m.aimodel", _inputs(specs), body)
    _check(path, specs, tmp_path, key)


# -- tensor ops -----------------------------------------------------------------------------
def _tensor_cases():
    idx = _axes
    return [
        ("transpose", [((2, 3, 5), F32)], lambda x: ca.transpose(x, np.array([2, 0, 1], np.uint32))),
        ("reshape", [((2, 3, 5), F32)], lambda x: ca.reshape(x, np.array([5, -1], I32))),
        ("reshape-scalar", [((1, 1), I32, "int")], lambda x: ca.reshape(x, np.zeros(0, I32))),
        ("expand_dims", [((3, 5), F32)], lambda x: ca.expand_dims(x, idx(-1, 0))),
        ("shrink_dims", [((1, 3, 1, 5), F16)], lambda x: ca.shrink_dims(x, idx(-2, 0))),
        ("broadcast_in_dims", [((2, 1, 5), I32, "int")], lambda x: ca.broadcast_in_dims(
            x, np.array([3], np.uint32), idx(-2))),
        ("broadcast_to", [((3, 1), F32)], lambda x: ca.broadcast_to(x, np.array([2, 3, 4], np.uint32))),
        ("broadcast_shapes-get_shape", [((3, 1, 4), F32), ((5, 1), F32)], lambda x, y: _as_i32(
            ca.broadcast_shapes(ca.get_shape(x), ca.get_shape(y)))),
        ("range-f32", [((1,), F32, "pos")], lambda x: ca.range_(np.float32(0.5), np.float32(7.25), np.float32(0.75))),
        ("slice", [((5, 7, 4), F32)], lambda x: ca.slice_(x, idx(-4, 6, 3), idx(5, 1, 0), idx(2, -2, -1))),
        ("slice-clamped", [((5, 7), I32, "int")], lambda x: ca.slice_(x, idx(9, -9), idx(-9, 99), idx(-1, 3))),
        ("slice_update", [((5, 7), F32), ((2, 3), F32)], lambda x, u: ca.slice_update(
            x, idx(-4, 6), idx(5, 0), idx(2, -2), u)),
        ("concat", [((2, 3), F32), ((2, 1), F32)], lambda x, y: ca.concat(np.int32(-1), [x, y, x])),
        ("split", [((4, 7), F32)], lambda x: ca.split(x, np.array(3, np.uint32), np.int32(-1))),
        ("split-sections", [((4, 7), I32, "int")], lambda x: ca.split(x, np.array([1, 3], np.uint32), np.int32(0))),
        ("tile", [((2, 3), F32)], lambda x: ca.tile(x, np.array([2, 3], np.uint32))),
        ("tile-inner", [((2, 3, 2), I32, "int")], lambda x: ca.tile(x, np.array([3], np.uint32))),
        ("reverse", [((3, 4, 5), F32)], lambda x: ca.reverse(x, idx(0, -1))),
        ("gather_nd", [((4, 5, 3), F32), ((2, 3, 2), I32, "idx4")], lambda x, i: ca.gather_nd(x, i)),
        ("gather_along_axis", [((4, 5, 3), F32), ((4, 2, 3), I32, "idx5")],
         lambda x, i: ca.gather_along_axis(x, i, np.int32(-2))),
        ("scatter_nd", [((6, 3), F32), ((2, 1), I32, "idx3"), ((2, 3), F32)],
         lambda x, i, u: ca.scatter_nd(x, i, u)),
    ] + [(f"pad-{mode}", [((2, 3, 4), F32)], lambda x, mode=mode: ca.pad(
        x, np.array([0, 0, 2, 1, 1, 3], np.uint32), np.float32(1.5), mode))
         for mode in ("constant", "reflect", "replicate", "symmetric", "circular")]


_TENSOR_CASES = _tensor_cases()


@pytest.mark.parametrize("case", _TENSOR_CASES, ids=[c[0] for c in _TENSOR_CASES])
def test_tensor_ops(case, tmp_path):
    key, specs, body = case
    path = author(tmp_path / "m.aimodel", _inputs(specs), body)
    _check(path, specs, tmp_path, key)


@pytest.mark.parametrize("mode", ["update", "add", "sub", "mul", "div", "max", "min"])
def test_scatter_along_axis(mode, tmp_path):
    specs = [((3, 5), F32), ((3, 2), I32, "idx5"), ((3, 2), F32, "pos")]
    # Distinct indices per row: which of two updates of one element wins is not defined.
    feeds = {"x0": _feed((3, 5), F32, "normal", np.random.default_rng(1)),
             "x1": np.array([[0, -1], [3, 1], [-5, 2]], I32), "x2": _feed((3, 2), F32, "pos", np.random.default_rng(2))}
    path = author(tmp_path / "m.aimodel", _inputs(specs), lambda x, i, u: ca.scatter_along_axis(
        ca.TensorType((3, 5), F32), x, i, u, np.int32(-1), scatter_mode=mode))
    _check(path, specs, tmp_path, f"scatter_along_axis-{mode}", feeds=feeds)


# -- network ops ----------------------------------------------------------------------------
def _weights(shape, seed, dtype=F32):
    return (np.random.default_rng(seed).standard_normal(shape) * 0.5).astype(dtype)


def _u32(*values):
    return np.array(values, np.uint32)


def _nn_cases():
    return [
        ("batch_matmul", [((2, 3, 4), F32), ((2, 4, 5), F32)], ca.batch_matmul),
        ("broadcasting_batch_matmul-f16", [((2, 1, 3, 4), F16), ((3, 4, 2), F16)], ca.broadcasting_batch_matmul),
        ("conv2d", [((1, 4, 7, 6), F32)], lambda x: ca.conv2d(x, _weights((6, 2, 3, 2), 1), _u32(2, 1), _u32(1, 2),
                                                              np.uint32(2))),
        ("conv3d", [((1, 2, 5, 6, 4), F32)], lambda x: ca.conv3d(x, _weights((3, 2, 2, 3, 2), 2), _u32(1, 2, 1),
                                                                 _u32(1, 1, 2), np.uint32(1))),
        ("conv_transpose2d", [((1, 4, 5, 4), F32)], lambda x: ca.conv_transpose2d(
            x, _weights((4, 3, 3, 2), 3), _u32(2, 3), _u32(1, 0), _u32(1, 2), _u32(1, 2), np.uint32(2))),
        ("conv_transpose3d", [((1, 2, 3, 4, 3), F32)], lambda x: ca.conv_transpose3d(
            x, _weights((2, 3, 2, 2, 3), 4), _u32(2, 1, 2), _u32(0, 1, 1), _u32(1, 1, 1), _u32(1, 0, 0),
            np.uint32(1))),
        ("max_pool_2d-ceil", [((1, 3, 7, 8), F32)], lambda x: ca.maxpool2d(
            ca.TensorType((1, 3, 3, 3), F32), x, _u32(3, 2), _u32(2, 3), _u32(1, 1), np.bool_(True))),
        ("max_pool_3d", [((1, 2, 5, 6, 4), F16)], lambda x: ca.maxpool3d(
            ca.TensorType((1, 2, 2, 5, 2), F16), x, _u32(2, 2, 2), _u32(2, 1, 2), _u32(1, 1, 1), np.bool_(False))),
        ("sum_pool_2d", [((1, 3, 7, 8), F32)], lambda x: ca.sumpool2d(
            x, _u32(3, 2), _u32(2, 3), _constant(_u32(1, 1)))),
        ("sum_pool_3d", [((1, 2, 5, 6, 4), F32)], lambda x: ca.sumpool3d(
            x, _u32(2, 3, 2), _u32(1, 2, 2), _constant(_u32(1, 1, 1)))),
        ("softmax", [((2, 5, 3), F32)], lambda x: ca.softmax(x, np.int32(-2))),
        ("softmax-f16", [((2, 5, 3), F16)], lambda x: ca.softmax(x, np.int32(2))),
        ("interpolate-linear", [((1, 2, 5, 4), F32)], lambda x: ca.interpolate(
            x, np.array([1, 2, 9, 10], I32), np.array([1, 1, 1.8, 2.5], F32), np.zeros(4, F32), "linear")),
        ("interpolate-linear-align-corners", [((2, 3, 4), F32)], lambda x: ca.interpolate(
            x, np.array([2, 3, 7], I32), np.array([1, 1, 2], F32), np.array([0, 0, -0.5], F32), "linear")),
        ("interpolate-nearest", [((1, 2, 5, 4), F16)], lambda x: ca.interpolate(
            x, np.array([1, 2, 3, 8], I32), np.array([1, 1, 0.6, 2], F32), np.zeros(4, F32), "nearest_neighbor")),
        ("interpolate_coordinates-linear", [((4, 5), F32), ((6, 2), F32)],
         lambda x, c: ca.interpolate_coordinates(x, c, "linear")),
        ("interpolate_coordinates-nearest", [((3, 4, 5), F32), ((6, 3), F32, "half")],
         lambda x, c: ca.interpolate_coordinates(x, c, "nearest_neighbor")),
    ]


_NN_CASES = _nn_cases()


@pytest.mark.parametrize("case", _NN_CASES, ids=[c[0] for c in _NN_CASES])
def test_network_ops(case, tmp_path):
    key, specs, body = case
    path = author(tmp_path / "m.aimodel", _inputs(specs), body)
    _check(path, specs, tmp_path, key)


# -- control flow ---------------------------------------------------------------------------
def _raw(value):
    return value._to_mlir()


def _value(raw):
    from coreai.authoring import Value

    return Value._from_mlir(raw)


def _if_model(x, y):
    """then: x * 2 and x + y; else: x - 1 and y * 3."""
    from coreai._compiler.dialects.coreai import control_flow_ops as cf

    total = ca.reduce_sum(x, _axes(0, 1))
    condition = ca.reshape(ca.broadcasting_greater(total, np.float32(0)), np.zeros(0, I32))
    results, (then_block, else_block) = cf.if_([_raw(x).type, _raw(y).type], _raw(condition))
    with then_block:
        cf.yield_([_raw(ca.broadcasting_mul(x, np.float32(2))), _raw(ca.add(x, y))])
    with else_block:
        cf.yield_([_raw(ca.broadcasting_sub(x, np.float32(1))), _raw(ca.broadcasting_mul(y, np.float32(3)))])
    return [_value(r) for r in results]


def _while_model(x, n, forward=True):
    """Counts i from 0 while i < n, x -> x * 2 + 1 each time. With forward=False the condition
    passes on (i, x * 0.5) instead of its arguments: the body and the results see those."""
    from coreai._compiler.dialects.coreai import control_flow_ops as cf

    limit = ca.reshape(n, np.zeros(0, I32))
    start = _constant(np.array(0, I32))
    results, (before, after) = cf.while_([_raw(start).type, _raw(x).type], [_raw(start), _raw(x)])
    with before:
        i, current = (_value(a) for a in before.arguments)
        passed = current if forward else ca.broadcasting_mul(current, np.float32(0.5))
        cf.condition(_raw(ca.greater(limit, i)), _raw(i), _raw(passed))
    with after:
        i, current = (_value(a) for a in after.arguments)
        step = ca.broadcasting_add(ca.broadcasting_mul(current, np.float32(2)), np.float32(1))
        cf.yield_([_raw(ca.add(i, _constant(np.array(1, I32)))), _raw(step)])
    return [_value(r) for r in results]


def test_if_becomes_cond(tmp_path):
    specs = [((2, 3), F32), ((2, 3), F32)]
    path = author(tmp_path / "m.aimodel", _inputs(specs), _if_model)
    rng = np.random.default_rng(3)
    for sign in (1, -1):  # both branches
        feeds = {"x0": np.abs(rng.standard_normal((2, 3))).astype(F32) * sign,
                 "x1": rng.standard_normal((2, 3)).astype(F32)}
        _check(path, specs, tmp_path, "if", feeds=feeds)
    assert "cond(" in open(coremlrt.coreai.compile_aimodel(path, tmp_path / "cache") + "/model.mil").read()


@pytest.mark.parametrize("forward", [True, False], ids=["forwarding", "projecting"])
def test_while_becomes_while_loop(forward, tmp_path):
    specs = [((2, 3), F32), ((1,), I32)]
    path = author(tmp_path / "m.aimodel", _inputs(specs), lambda x, n: _while_model(x, n, forward))
    for count in (0, 1, 4):
        feeds = {"x0": np.arange(6, dtype=F32).reshape(2, 3) - 2, "x1": np.array([count], I32)}
        _check(path, specs, tmp_path, f"while-{'forwarding' if forward else 'projecting'}", feeds=feeds)
    assert "while_loop(" in open(coremlrt.coreai.compile_aimodel(path, tmp_path / "cache") + "/model.mil").read()


def _isolated_group(x, y):
    from coreai._compiler.dialects import _coreai_ops_gen as gen
    from coreai._compiler.ir import InsertionPoint

    raw = [_raw(x), _raw(y)]
    op = gen.IsolatedGroupOp([raw[0].type], raw, "Interpreter")
    block = op.regions[0].blocks.append(raw[0].type, raw[1].type)
    with InsertionPoint(block):
        a, b = (_value(v) for v in block.arguments)
        gen.YieldOp([_raw(ca.add(ca.relu(a), b))])
    return _value(op.results[0])


def test_isolated_group_is_inlined(tmp_path):
    specs = [((2, 3), F32), ((2, 3), F32)]
    path = author(tmp_path / "m.aimodel", _inputs(specs), _isolated_group)
    _check(path, specs, tmp_path, "isolated_group")


def test_target_spec_is_ignored(tmp_path):
    """A module's coreai.target_spec only says which hardware to compile for."""
    from coreai._compiler.dialects import _coreai_ops_gen as gen
    from coreai._compiler.ir import Attribute
    from coreai.authoring import AIProgram, Module, TensorType
    from coreai.authoring.graph_builder import GraphOp

    module = Module.create()
    with module:
        gen.TargetSpecOp(Attribute.parse('#coreai.target_spec<triple = "", soc = "", delegateOptions = {}>'))
        graph = GraphOp("main", input_types=[TensorType((3,), F32)._to_mlir_type()], result_types=[],
                        input_names=["x0"], result_names=[])
        with graph.block:
            graph.outputs_spec = [("y0", _raw(ca.relu(_value(graph.arguments[0]))))]
    AIProgram(module).save_asset(tmp_path / "m.aimodel")
    _check(str(tmp_path / "m.aimodel"), [((3,), F32)], tmp_path, "target_spec")


# -- compression ----------------------------------------------------------------------------
def _export_and_convert(module, args, path, outputs, dynamic=None, sub_byte=False):
    """Converts with coreai-torch from torch.export (with dynamic shapes, and with the export
    passed through coreai-torch's sub-byte pass for its compression modules)."""
    import torch
    from coreai_torch._compression import utils

    def export(m):
        program = torch.export.export(m, args=args, dynamic_shapes=dynamic).run_decompositions(
            coreai_torch.get_decomp_table())
        return utils.inject_subbyte_tensors(program) if sub_byte else program

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converter = coreai_torch.TorchConverter(mode=coreai_torch.TorchConverter.Mode.RELEASE)
        converter.add_pytorch_module(module, export_fn=export, input_names=[f"x{i}" for i in range(len(args))],
                                     output_names=outputs)
        converter.to_coreai().save_asset(path)
    return str(path)


def _compressed_linear(kind):
    """A Linear(8, 6) whose weight coreai-torch writes compressed (its compression modules,
    registered as parametrizations), and the MIL constexpr op that must hold it."""
    import torch
    from coreai_torch._compression import custom_layers as layers, utils

    torch.manual_seed(0)
    linear = torch.nn.Linear(8, 6)
    wrap = utils.wrap_for_parametrization
    if kind == "lut-ui4-grouped":
        module = wrap(layers.PalettizeModule)(torch.randint(0, 16, (6, 8), dtype=torch.uint8), torch.randn(2, 1, 16, 1))
    elif kind == "lut-ui2-vector":
        module = wrap(layers.PalettizeModule)(torch.randint(0, 4, (3, 8), dtype=torch.uint8),
                                              torch.randn(1, 1, 4, 2), 0)
    elif kind == "si8-zero-point":
        module = wrap(layers.WeightDequantizeModule)(torch.randint(-128, 128, (6, 8), dtype=torch.int8),
                                                     torch.rand(6, 1) * 0.01,
                                                     torch.randint(-3, 3, (6, 1), dtype=torch.int8))
    elif kind == "si4-blocks":
        module = wrap(layers.WeightDequantizeModule)(torch.randint(-8, 8, (6, 8), dtype=torch.int8),
                                                     torch.rand(6, 2) * 0.01, None, None, torch.int4)
    elif kind == "ui4-minval":
        module = wrap(layers.WeightDequantizeModule)(torch.randint(0, 16, (6, 8), dtype=torch.uint8),
                                                     torch.rand(6, 2) * 0.01, None, torch.randn(6, 2) * 0.1,
                                                     torch.uint4)
    elif kind == "sparse":
        mask = torch.rand(6, 8) > 0.5
        module = wrap(layers.SparseModule)(torch.randn(int(mask.sum())), mask.to(torch.uint8))
    else:  # "si8-lut-shift-scale": palettized int8 values, then scaled
        module = wrap(layers.ScaledPalettizeModule)(torch.randint(0, 4, (6, 8), dtype=torch.uint8),
                                                    torch.randint(-100, 100, (1, 1, 4, 1), dtype=torch.int8),
                                                    torch.rand(6, 1) * 0.01, 0)
    torch.nn.utils.parametrize.register_parametrization(linear, "weight", module)
    return linear.eval()


_COMPRESSED = {"lut-ui4-grouped": "constexpr_lut_to_dense", "lut-ui2-vector": "constexpr_lut_to_dense",
               "si8-zero-point": "constexpr_blockwise_shift_scale", "si4-blocks": "constexpr_blockwise_shift_scale",
               "ui4-minval": "constexpr_blockwise_shift_scale", "sparse": "constexpr_sparse_to_dense",
               "si8-lut-shift-scale": "constexpr_blockwise_shift_scale"}


@pytest.mark.parametrize("kind", list(_COMPRESSED))
def test_compressed_weights_stay_compressed(kind, tmp_path):
    """coreai-torch's compressed Linear: lut_to_dense, blockwise_shift_scale and the sparse ops
    become constexpr ops (sub-byte data packed in weight.bin), which matmul reads packed (with
    transpose_y for the transposed weight), except where the engine folds (vector palettes)."""
    import torch

    path = _export_and_convert(_compressed_linear(kind), (torch.randn(2, 8),), tmp_path / "m.aimodel", ["y0"],
                               sub_byte=True)
    _check(path, [((2, 8), F32)], tmp_path, f"compressed-{kind}")
    model = coremlrt.MLModel(path, cache_dir=tmp_path / "cache")
    placements = {p["op_type"]: p["backend"] for p in model.placements()}
    assert _COMPRESSED[kind] in placements, placements
    expected = "folded" if kind == "lut-ui2-vector" else "packed"
    assert placements[_COMPRESSED[kind]] == expected, placements
    assert "transpose" not in placements  # matmul reads the weight with transpose_y


def test_compressed_embedding_is_gathered_packed(tmp_path):
    """nn.Embedding with a palettized table: gather_nd of rows becomes gather along axis 0,
    which reads the table packed."""
    import torch
    from coreai_torch._compression import custom_layers as layers, utils

    class Lookup(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Embedding(12, 6)

        def forward(self, ids):
            return self.table(ids) * 2

    torch.manual_seed(0)
    module = Lookup().eval()
    palettize = utils.wrap_for_parametrization(layers.PalettizeModule)(
        torch.randint(0, 16, (12, 6), dtype=torch.uint8), torch.randn(1, 1, 16, 1))
    torch.nn.utils.parametrize.register_parametrization(module.table, "weight", palettize)
    path = _export_and_convert(module, (torch.randint(0, 12, (2, 5)),), tmp_path / "m.aimodel", ["y0"],
                               sub_byte=True)
    feeds = {"x0": np.array([[0, 11, 3, 3, 7], [5, 1, 0, 10, 2]], I32)}
    _check(path, [((2, 5), I32)], tmp_path, "compressed-embedding", feeds=feeds)
    model = coremlrt.MLModel(path, cache_dir=tmp_path / "cache")
    placements = {p["op_type"]: p["backend"] for p in model.placements()}
    assert placements.get("constexpr_lut_to_dense") == "packed" and "gather" in placements, placements


def _sub_byte_constant(values, bits, context):
    """A coreai.constant of unsigned `bits`-bit values, its resource packed least significant
    bits first, as coreai-torch writes one (_custom_to_core.py) and coreai's runtime reads it."""
    from coreai._compiler.dialects._coreai_ops_gen import ConstantOp
    from coreai._compiler.ir import DenseResourceElementsAttr, IntegerType, RankedTensorType

    flat = values.reshape(-1).astype(np.int64)
    packed = np.zeros((flat.size * bits + 7) // 8, np.uint8)
    for i, v in enumerate(flat):
        for b in range(bits):
            packed[(i * bits + b) // 8] |= ((int(v) >> b) & 1) << ((i * bits + b) % 8)
    tensor_type = RankedTensorType.get(list(values.shape), IntegerType.get_unsigned(bits, context))
    return _value(ConstantOp(value=DenseResourceElementsAttr.get_from_buffer(packed, "packed", tensor_type)).result)


def _sparse_palettized(x):
    """build_sparse_with_bitmask of ui2 indices, lut_to_sparse_with_bitmask, then densified."""
    from coreai.authoring.constant import constant

    rng = np.random.default_rng(4)
    mask = (rng.random((6, 8)) > 0.4).astype(np.uint8)
    indices = rng.integers(0, 4, int(mask.sum())).astype(np.uint8)
    context = x._to_mlir().context
    sparse = ca.build_sparse_with_bitmask(_sub_byte_constant(indices, 2, context), _sub_byte_constant(mask, 1, context))
    lut = constant(rng.standard_normal((1, 1, 4, 1)).astype(F32))
    dense = ca.sparse_with_bitmask_to_dense(ca.lut_to_sparse_with_bitmask(sparse, lut, constant(np.int16(0))))
    return ca.broadcasting_batch_matmul(x, ca.transpose(dense, _u32(1, 0)))


def _dequantize_constant(x, per_axis):
    rng = np.random.default_rng(5)
    data = rng.integers(-128, 128, (6, 8)).astype(np.int8)
    if per_axis:
        weight = ca.dequantize(data, (rng.random(6) * 0.01).astype(F32), rng.integers(-3, 3, 6).astype(np.int8),
                               (rng.standard_normal(6) * 0.1).astype(F32), np.int32(0))
    else:
        weight = ca.dequantize(data, np.float32(0.02), np.int8(3), np.float32(0), _axes(0, 1))
    return ca.broadcasting_batch_matmul(x, ca.transpose(weight, _u32(1, 0)))


def _fake_quantize(x, per_axis):
    """quantize then dequantize of a computed value: MIL's quantize and dequantize."""
    if per_axis:
        scale, zero, bias, axis = np.array([0.5, 0.25, 1], F32), np.array([3, -2, 0], np.int8), \
            np.array([0.25, 0, -1], F32), np.int32(1)
    else:
        scale, zero, bias, axis = np.float32(0.5), np.int8(-1), np.float32(0), _axes(0, 1)
    q = ca.quantize(x, scale, zero, bias, axis)
    return _as_i32(q), ca.dequantize(q, scale, zero, bias, axis)


_QUANT_CASES = [
    ("lut_to_sparse_with_bitmask", [((2, 8), F32)], _sparse_palettized),
    ("dequantize-constant-per-axis", [((2, 8), F32)], lambda x: _dequantize_constant(x, True)),
    ("dequantize-constant-per-tensor", [((2, 8), F32)], lambda x: _dequantize_constant(x, False)),
    ("quantize-dequantize-per-tensor", [((4, 3), F32, "half")], lambda x: _fake_quantize(x, False)),
    ("quantize-dequantize-per-axis", [((4, 3), F32, "half")], lambda x: _fake_quantize(x, True)),
]


@pytest.mark.parametrize("case", _QUANT_CASES, ids=[c[0] for c in _QUANT_CASES])
def test_quantization_ops(case, tmp_path):
    key, specs, body = case
    path = author(tmp_path / "m.aimodel", _inputs(specs), body)
    # Halves of the scale: ties of round(x / scale), which both round to even.
    _check(path, specs, tmp_path, key)


# -- dynamic dimensions ---------------------------------------------------------------------
def test_dynamic_dimensions_are_flexible_inputs(tmp_path):
    """A torch module exported with a dynamic batch and sequence length: its ? dims become
    flexible MIL inputs (shapeRange [1, -1]) and every shape it is fed predicts as coreai's
    runtime does (get_shape, dynamic slices, reshapes to computed shapes, concat)."""
    import torch

    class Module(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = torch.nn.LayerNorm(8)
            self.fc = torch.nn.Linear(8, 8)

        def forward(self, x):
            h = torch.nn.functional.gelu(self.fc(self.norm(x)))
            scores = torch.softmax(h @ h.transpose(1, 2) / x.shape[1], -1)
            mixed = torch.cat([scores @ h, x[:, 1:].mean(1, keepdim=True).expand(-1, x.shape[1], -1)], -1)
            return mixed.reshape(x.shape[0], -1), (h > 0).sum(-1)

    torch.manual_seed(0)
    batch, length = torch.export.Dim("batch", min=1, max=16), torch.export.Dim("length", min=3, max=32)
    path = _export_and_convert(Module().eval(), (torch.randn(2, 5, 8),), tmp_path / "m.aimodel", ["y0", "y1"],
                               dynamic=({0: batch, 1: length},))
    import json

    folder = coremlrt.coreai.compile_aimodel(path, tmp_path / "cache")
    (schema,) = json.load(open(folder + "/metadata.json"))[0]["inputSchema"]
    assert schema["shapeRange"] == "[[1, -1], [1, -1], [8, 8]]" and schema["hasShapeFlexibility"] == "1"
    for shape in ((1, 3, 8), (3, 7, 8), (2, 11, 8)):
        feeds = {"x0": np.random.default_rng(sum(shape)).standard_normal(shape).astype(F32)}
        got = _check(path, [(shape, F32)], tmp_path, "dynamic-torch", feeds=feeds)
        assert got["y0"].shape == (shape[0], shape[1] * 16)


def test_non_zero_has_a_dynamic_result(tmp_path):
    specs = [((3, 4), F32, "half")]
    path = author(tmp_path / "m.aimodel", _inputs(specs), lambda x: _as_i32(ca.non_zero(x)))
    _check(path, specs, tmp_path, "non_zero")


# -- converted from torch -------------------------------------------------------------------
def _convert(module, args, path, outputs):
    from coreai_helpers import convert

    return convert(module, args, [f"x{i}" for i in range(len(args))], outputs, path)


def _torch_ops():
    import torch

    F = torch.nn.functional

    class Module(torch.nn.Module):
        """torch functions that coreai-torch writes with the ops translated here."""

        def __init__(self):
            super().__init__()
            self.up = torch.nn.ConvTranspose2d(3, 2, 3, stride=2, padding=1, output_padding=1)

        def forward(self, x, ids):
            image = x.reshape(1, 3, 4, 6)
            return (
                torch.where(x > 0, x, 0.1 * x) + (x >= 0.5) * 2.0 - (x <= -1).float() + (x == x.round()).float(),
                torch.floor(x) + torch.ceil(x * 0.5) + torch.sign(x) + torch.remainder(x, torch.tensor(1.5))
                + torch.fmod(x, -0.7),
                torch.clamp(x, -0.5, 0.75) + torch.reciprocal(x.abs() + 1) + torch.log1p(x.abs()) + x.abs() ** 1.5,
                torch.logsumexp(x, -1) + x.norm(dim=-1) + x.amax(0).sum() + x.argmax(-1).float(),
                torch.cumsum(x, 1) + torch.flip(x, [0]),
                torch.gather(x, 1, ids) * 2,
                torch.topk(x, 3, -1)[0] * 2 + torch.topk(x, 3, 1, largest=False)[1].float(),
                F.interpolate(image, scale_factor=2, mode="bilinear") + F.interpolate(image, scale_factor=2),
                self.up(image) + F.pixel_shuffle(torch.cat([image, image[:, :1]], 1), 2).sum(),
                F.pad(image, (1, 2, 0, 1), mode="circular") * ((x > 0).any() & (x < 5).all()).float(),
            )

    return Module().eval()


def test_torch_functions_predict_as_coreai(tmp_path):
    """A module of torch functions (comparisons, where, rounding, remainders, reductions,
    cumsum, flip, gather, topk (sort, argsort, slice), interpolate, transposed convolution, pixel shuffle,
    circular pad, any/all) converted with coreai-torch."""
    import torch

    torch.manual_seed(0)
    outputs = [f"y{i}" for i in range(10)]
    args = (torch.randn(3, 24), torch.randint(0, 24, (3, 5)))
    path = _convert(_torch_ops(), args, tmp_path / "m.aimodel", outputs)
    for seed in range(2):
        rng = np.random.default_rng(seed)
        feeds = {"x0": (rng.standard_normal((3, 24)) * 2).astype(F32), "x1": rng.integers(0, 24, (3, 5)).astype(I32)}
        _check(path, [((3, 24), F32), ((3, 5), I32)], tmp_path, "torch-functions", feeds=feeds)


def test_torch_control_flow(tmp_path):
    """torch.cond and torch's while_loop, as coreai-torch converts them (if, while)."""
    import torch
    from torch._higher_order_ops.while_loop import while_loop

    class Branches(torch.nn.Module):
        def forward(self, x, n):
            y = torch.cond(x.sum() > 0, lambda v: v * 2 + 1, lambda v: v.abs() - 1, (x,))

            def condition(i, v):
                return i < n

            def body(i, v):
                return i + 1, v * 0.5 + y

            return y, while_loop(condition, body, (torch.zeros((), dtype=torch.int64), x))[1]

    path = _convert(Branches().eval(), (torch.randn(2, 3), torch.tensor(3)), tmp_path / "m.aimodel", ["y0", "y1"])
    for sign, count in ((1, 3), (-1, 0), (1, 5)):
        # The rank-0 input is fed as [1] (Core ML's multi-arrays have rank 1 or more).
        feeds = {"x0": (np.abs(np.random.default_rng(count).standard_normal((2, 3))) * sign).astype(F32)}
        want = coreai_predict(path, {**feeds, "x1": np.array(count, I32)})
        got = coremlrt.MLModel(path, cache_dir=tmp_path / "cache").predict({**feeds, "x1": np.array([count], I32)})
        for name in want:
            np.testing.assert_allclose(got[name], want[name], rtol=0, atol=16 * np.finfo(F32).eps *
                                       max(1.0, float(np.abs(want[name]).max())), err_msg=name)


def test_torch_complex_parts(tmp_path):
    """torch.polar + view_as_real: create_complex read back by real_part and imaginary_part."""
    import torch

    class Polar(torch.nn.Module):
        def forward(self, x):
            return torch.view_as_real(torch.polar(x.abs(), x)) * 2

    path = _convert(Polar().eval(), (torch.randn(2, 3),), tmp_path / "m.aimodel", ["y0"])
    _check(path, [((2, 3), F32)], tmp_path, "torch-complex")


# -- refusals -------------------------------------------------------------------------------
_REFUSALS = [
    ("complex-arithmetic", [((2, 3), F32)],
     lambda x: ca.real_part(ca.add(ca.create_complex(x, x), ca.create_complex(x, x))),
     r"coreai\.add reads a complex value: MIL has no complex element type"),
    ("scan-product", [((2, 3), F32)], lambda x: ca.scan(x, np.uint32(1), np.bool_(False), "product"),
     r"coreai\.scan: combiner 'product' has no MIL counterpart"),
    ("bitwise-int", [((2, 3), I32)], lambda x: ca.bitwise_xor(x, x),
     r"coreai\.bitwise_xor: operands of element types si32, si32 are not supported \(MIL has no bitwise ops\)"),
    ("cast-to-si16", [((2, 3), F32)], lambda x: ca.cast(ca.cast(x, np.int16), F32),
     r"coreai\.cast to si16 of a computed value is not supported"),
]


@pytest.mark.parametrize("case", _REFUSALS, ids=[c[0] for c in _REFUSALS])
def test_refusals_name_the_op_and_why(case, tmp_path):
    _, specs, body, message = case
    path = author(tmp_path / "m.aimodel", _inputs(specs), body)
    with pytest.raises(coremlrt.Error, match=message):
        coremlrt.MLModel(path, cache_dir=tmp_path / "cache")
