"""Elementwise unary ops, activations and reductions (docs/design/coreml-format.md: "Elementwise unary ops
and cast", "Activations", "Reductions").

Each test builds one MIL program holding several ops, converts it with coremltools and
compares coremlrt's outputs with NumPy / PyTorch references computed in float64. fp16
programs (coremltools' FLOAT16 precision: fp32 I/O, casts around an fp16 body) are compared
against references computed from the fp16-rounded inputs.
"""

import math

import coremltools as ct
import numpy as np
import pytest
import torch
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

import backend_check
from mil_helpers import save_program
from op_references import REDUCTIONS

RNG = np.random.default_rng(1234)
NAN, INF = float("nan"), float("inf")


def run(prog, tmp_path, inputs, fp16=False, target=None):
    path = save_program(prog, tmp_path, fp16=fp16, target=target)
    return backend_check.predict(path, inputs)


def as_ref(x, fp16):
    """What the program computes on: the input, rounded to fp16 for fp16 programs, in float64."""
    return (x.astype(np.float16) if fp16 else x).astype(np.float64)


def check(actual, expected, fp16, rtol=None, atol=None):
    """Compares with the reference rounded to the output dtype (so fp16 overflows to inf)."""
    if fp16:
        with np.errstate(over="ignore"):
            expected = np.asarray(expected).astype(np.float16).astype(np.float64)
    rtol = rtol if rtol is not None else (1e-2 if fp16 else 1e-5)
    atol = atol if atol is not None else (1e-3 if fp16 else 1e-6)
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, rtol=rtol, atol=atol, equal_nan=True)


def op(mb_name, **params):
    """A builder for `mb.<mb_name>(x=x, **params)` whose output gets the given name."""
    return lambda x, name: getattr(mb, mb_name)(x=x, name=name, **params)


def vec(fn):
    return np.vectorize(fn, otypes=[np.float64])


def torch_ref(fn):
    return lambda x: fn(torch.from_numpy(x)).numpy()


def sigmoid(x):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


# name -> (builder, float64 reference). Every op here is applied to finite inputs that
# include exact halves (for round) and zero.
FLOAT_OPS = {
    "abs": (op("abs"), np.abs),
    "atan": (op("atan"), np.arctan),
    "cos": (op("cos"), np.cos),
    "sin": (op("sin"), np.sin),
    "tan": (op("tan"), np.tan),
    "cosh": (op("cosh"), np.cosh),
    "sinh": (op("sinh"), np.sinh),
    "tanh": (op("tanh"), np.tanh),
    "ceil": (op("ceil"), np.ceil),
    "floor": (op("floor"), np.floor),
    "round": (op("round"), np.round),  # NumPy rounds halves to even, as MIL does
    "erf": (op("erf"), vec(math.erf)),
    "exp": (op("exp"), np.exp),
    "exp2": (op("exp2"), np.exp2),
    "square": (op("square"), np.square),
    "sign": (op("sign"), np.sign),
    "clip": (op("clip", alpha=-1.5, beta=2.0), lambda x: np.clip(x, -1.5, 2.0)),
    "threshold": (op("threshold", alpha=0.25), lambda x: np.maximum(x, 0.25)),
    "relu": (op("relu"), lambda x: np.maximum(x, 0)),
    "relu6": (op("relu6"), lambda x: np.clip(x, 0, 6)),
    "sigmoid": (op("sigmoid"), torch_ref(torch.sigmoid)),
    "silu": (op("silu"), torch_ref(torch.nn.functional.silu)),
    "softplus": (op("softplus"), torch_ref(torch.nn.functional.softplus)),
    "softsign": (op("softsign"), torch_ref(torch.nn.functional.softsign)),
    "elu": (op("elu", alpha=0.75), torch_ref(lambda t: torch.nn.functional.elu(t, alpha=0.75))),
    "leaky_relu": (op("leaky_relu", alpha=0.125), torch_ref(lambda t: torch.nn.functional.leaky_relu(t, 0.125))),
    "thresholded_relu": (op("thresholded_relu", alpha=0.5), lambda x: np.where(x >= 0.5, x, 0.0)),
    "linear_activation": (op("linear_activation", alpha=1.5, beta=-0.25), lambda x: 1.5 * x - 0.25),
    "scaled_tanh": (op("scaled_tanh", alpha=2.0, beta=0.5), lambda x: 2.0 * np.tanh(0.5 * x)),
    "sigmoid_hard": (op("sigmoid_hard", alpha=0.25, beta=0.5), lambda x: np.clip(0.25 * x + 0.5, 0, 1)),
    "clamped_relu": (op("clamped_relu", alpha=0.5, beta=3.0),
                     lambda x: np.where(x >= 0, np.minimum(x, 3.0), np.minimum(0.5 * x, 3.0))),
    "gelu_exact": (op("gelu"), torch_ref(torch.nn.functional.gelu)),
    "gelu_tanh": (op("gelu", mode="TANH_APPROXIMATION"),
                  torch_ref(lambda t: torch.nn.functional.gelu(t, approximate="tanh"))),
    "gelu_sigmoid": (op("gelu", mode="SIGMOID_APPROXIMATION"), lambda x: x * sigmoid(1.702 * x)),
}

# Ops whose results at NaN and +-inf are well defined; the special-value input goes through these.
SPECIAL_OPS = ["abs", "atan", "tanh", "ceil", "floor", "round", "erf", "exp", "exp2", "square", "sign", "clip",
               "threshold", "relu", "relu6", "sigmoid", "softplus", "leaky_relu", "clamped_relu"]

# The ops of SPECIAL_OPS whose results at NaN or +-inf differ on OpenVINO (its CPU plugin's own
# kernels): the test asserts exactly these differ there, and compares the others.
OPENVINO_SPECIAL_DIFFERENCES = {
    "exp": "exp(NaN) is inf",
}


def finite_input(shape):
    x = np.clip(RNG.standard_normal(shape) * 3, -8, 8).astype(np.float32)
    halves = np.array([0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 3.5, 0.0, -0.0], np.float32)
    x.reshape(-1)[: halves.size] = halves
    return x


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_float_unary_and_activations(tmp_path, fp16):
    x = finite_input((4, 24))
    s = np.array([NAN, INF, -INF, 0.0, -1.0, 1.0], np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape), mb.TensorSpec(shape=s.shape)],
                opset_version=ct.target.iOS18)
    def prog(x, s):
        outs = [build(x, name) for name, (build, _) in FLOAT_OPS.items()]
        return tuple(outs + [FLOAT_OPS[name][0](s, "special_" + name) for name in SPECIAL_OPS])

    out = run(prog, tmp_path, {"x": x, "s": s}, fp16=fp16)
    for name, (_, ref) in FLOAT_OPS.items():
        check(out[name], ref(as_ref(x, fp16)), fp16)
    differ = set()
    with np.errstate(invalid="ignore", over="ignore"):
        for name in SPECIAL_OPS:
            try:
                check(out["special_" + name], FLOAT_OPS[name][1](as_ref(s, fp16)), fp16)
            except AssertionError:
                if backend_check.current_backend() != "openvino":
                    raise
                differ.add(name)
    if backend_check.current_backend() == "openvino":
        assert differ == set(OPENVINO_SPECIAL_DIFFERENCES), "special values on OpenVINO"


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_domain_restricted_unary(tmp_path, fp16):
    u = RNG.uniform(-0.95, 0.95, (3, 10)).astype(np.float32)  # inside (-1, 1)
    p = RNG.uniform(0.05, 20, (3, 10)).astype(np.float32)
    p[0, 0] = 0.0

    @mb.program(input_specs=[mb.TensorSpec(shape=u.shape), mb.TensorSpec(shape=p.shape)],
                opset_version=ct.target.iOS18)
    def prog(u, p):
        return (mb.acos(x=u, name="acos"), mb.asin(x=u, name="asin"), mb.atanh(x=u, name="atanh"),
                mb.sqrt(x=p, name="sqrt"), mb.rsqrt(x=p, name="rsqrt"), mb.rsqrt(x=p, epsilon=0.5, name="rsqrt_eps"),
                mb.inverse(x=p, name="inverse"), mb.inverse(x=p, epsilon=2.0, name="inverse_eps"),
                mb.log(x=p, name="log"), mb.log(x=p, epsilon=0.25, name="log_eps"))

    out = run(prog, tmp_path, {"u": u, "p": p}, fp16=fp16)
    ur, pr = as_ref(u, fp16), as_ref(p, fp16)
    check(out["acos"], np.arccos(ur), fp16)
    check(out["asin"], np.arcsin(ur), fp16)
    check(out["atanh"], np.arctanh(ur), fp16)
    check(out["sqrt"], np.sqrt(pr), fp16)
    # epsilon is always added, also to positive x. In the iOS17+ opsets epsilon keeps its own
    # dtype (fp32 here) in an fp16 program, so the default 1e-45 still counts: log(0) is finite.
    eps_log = float(np.float32(1e-45))
    check(out["rsqrt"], 1 / np.sqrt(pr + 1e-12), fp16)
    check(out["rsqrt_eps"], 1 / np.sqrt(pr + 0.5), fp16)
    check(out["inverse"], 1 / (pr + 1e-4), fp16)
    check(out["inverse_eps"], 1 / (pr + 2.0), fp16)
    check(out["log"], np.log(pr + eps_log), fp16)
    check(out["log_eps"], np.log(pr + 0.25), fp16)


def test_ios15_fp16_epsilon_has_x_dtype(tmp_path):
    """iOS15 declares epsilon with x's dtype, so in fp16 the default 1e-45 is 0 and log(0) = -inf."""
    x = np.array([0.0, 1e-3, 1.0, 5.0], np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS15)
    def prog(x):
        # iOS15 clip does not validate alpha < beta: min(max(x, 2), 1) is 1 everywhere.
        return mb.log(x=x, name="log"), mb.inverse(x=x, name="inverse"), mb.clip(x=x, alpha=2.0, beta=1.0, name="clip")

    out = run(prog, tmp_path, {"x": x}, fp16=True, target=ct.target.iOS15)
    xr = as_ref(x, True)
    with np.errstate(divide="ignore"):
        check(out["log"], np.log(xr), True)
    check(out["inverse"], 1 / (xr + float(np.float16(1e-4))), True)
    check(out["clip"], np.ones_like(xr), True)


def test_int32_unary(tmp_path):
    x = np.array([[-7, -1, 0, 1, 2, 3, 20, -(2**31)], [5, -5, 11, -3, 4, 0, 7, 2**31 - 1]], np.int32)
    e = np.array([0, 1, 2, 10, 20], np.int32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape, dtype=types.int32),
                             mb.TensorSpec(shape=e.shape, dtype=types.int32)], opset_version=ct.target.iOS18)
    def prog(x, e):
        return (mb.abs(x=x, name="abs"), mb.sign(x=x, name="sign"), mb.threshold(x=x, alpha=np.int32(2), name="thr"),
                mb.square(x=e, name="square"), mb.exp2(x=e, name="exp2"))

    out = run(prog, tmp_path, {"x": x, "e": e})
    for name in out:
        assert out[name].dtype == np.int32, name
    np.testing.assert_array_equal(out["abs"], np.abs(x))  # NumPy wraps abs(INT32_MIN) to itself
    np.testing.assert_array_equal(out["sign"], np.sign(x))
    np.testing.assert_array_equal(out["thr"], np.maximum(x, 2))
    np.testing.assert_array_equal(out["square"], e * e)
    np.testing.assert_array_equal(out["exp2"], 2**e)


def test_logical_not(tmp_path):
    x = np.array([[1.0, -2.0, 3.0], [0.5, 0.0, -1.0]], np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.cast(x=mb.logical_not(x=mb.greater(x=x, y=0.0)), dtype="int32", name="y")

    np.testing.assert_array_equal(run(prog, tmp_path, {"x": x})["y"], (~(x > 0)).astype(np.int32))


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_per_channel_activations(tmp_path, fp16):
    x4 = (RNG.standard_normal((2, 3, 4, 5)) * 2).astype(np.float32)
    x3 = (RNG.standard_normal((2, 3, 7)) * 2).astype(np.float32)
    x5 = (RNG.standard_normal((1, 3, 2, 3, 4)) * 2).astype(np.float32)
    alpha = np.array([0.25, -0.5, 2.0], np.float32)
    beta = np.array([1.0, 0.5, 3.0], np.float32)
    shared = np.full(3, 0.125, np.float32)  # rank 3 and 5 prelu need one shared slope

    @mb.program(input_specs=[mb.TensorSpec(shape=x4.shape), mb.TensorSpec(shape=x3.shape),
                             mb.TensorSpec(shape=x5.shape)], opset_version=ct.target.iOS18)
    def prog(x4, x3, x5):
        return (mb.prelu(x=x4, alpha=alpha, name="prelu4"), mb.prelu(x=x3, alpha=shared, name="prelu3"),
                mb.prelu(x=x5, alpha=shared, name="prelu5"),
                mb.softplus_parametric(x=x4, alpha=alpha, beta=beta, name="spp4"),
                mb.softplus_parametric(x=x3, alpha=alpha, beta=beta, name="spp3"))

    # Keep coremltools from rewriting the shared-slope prelus into leaky_relu.
    pipeline = ct.PassPipeline.DEFAULT
    pipeline.remove_passes(["common::prelu_to_lrelu"])
    model = ct.convert(prog, convert_to="mlprogram", pass_pipeline=pipeline, skip_model_load=True,
                       compute_precision=ct.precision.FLOAT16 if fp16 else ct.precision.FLOAT32,
                       minimum_deployment_target=ct.target.iOS18)
    model.save(str(tmp_path / "model.mlpackage"))
    out = backend_check.load(str(tmp_path / "model.mlpackage")).predict({"x4": x4, "x3": x3, "x5": x5})

    r4, r3, r5 = as_ref(x4, fp16), as_ref(x3, fp16), as_ref(x5, fp16)
    a4, b4 = alpha.reshape(1, 3, 1, 1), beta.reshape(1, 3, 1, 1)
    check(out["prelu4"], np.where(r4 > 0, r4, a4 * r4), fp16)
    check(out["prelu3"], np.where(r3 > 0, r3, 0.125 * r3), fp16)
    check(out["prelu5"], np.where(r5 > 0, r5, 0.125 * r5), fp16)
    check(out["spp4"], a4 * np.logaddexp(0, b4 * r4), fp16)
    check(out["spp3"], alpha.reshape(1, 3, 1) * np.logaddexp(0, beta.reshape(1, 3, 1) * r3), fp16)


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_softmax(tmp_path, fp16):
    x = (RNG.standard_normal((2, 3, 5)) * 4).astype(np.float32)
    x[0, 0, :] = [1000, 999, 998, 0, -1000]  # needs the max subtraction to stay finite in fp32
    x[1, 2, :] = 7.0  # uniform row

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS18)
    def prog(x):
        return (mb.softmax(x=x, name="default"), mb.softmax(x=x, axis=0, name="ax0"),
                mb.softmax(x=x, axis=1, name="ax1"), mb.softmax(x=x, axis=-2, name="axm2"))

    out = run(prog, tmp_path, {"x": x}, fp16=fp16)
    t = torch.from_numpy(as_ref(x, fp16))
    for name, axis in [("default", -1), ("ax0", 0), ("ax1", 1), ("axm2", -2)]:
        check(out[name], torch.softmax(t, dim=axis).numpy(), fp16)


def softmax_rows(tmp_path, fp16, with_nan):
    """Rows of 8-lane blocks and a tail (37) and of whole blocks (256), as a decode step's
    attention gives them: masked (-inf) and far-below-the-max entries (-100, where e^x is under
    the smallest normal float) get 0; with_nan: a NaN anywhere makes its row NaN."""
    rows = []
    for length in (37, 256):
        x = (RNG.standard_normal((5, length)) * 6).astype(np.float32)
        x[1, length // 2:] = -np.inf
        x[2, ::3] = x[2].max() - 100.0
        if with_nan:
            x[3, length - 1] = np.nan
            x[4, 9] = np.nan
        rows.append(x)

    @mb.program(input_specs=[mb.TensorSpec(shape=rows[0].shape), mb.TensorSpec(shape=rows[1].shape)],
                opset_version=ct.target.iOS18)
    def prog(x, y):
        return mb.softmax(x=x, axis=-1, name="r37"), mb.softmax(x=y, axis=-1, name="r256")

    out = run(prog, tmp_path, {"x": rows[0], "y": rows[1]}, fp16=fp16)
    for name, x in zip(("r37", "r256"), rows):
        want = torch.softmax(torch.from_numpy(as_ref(x, fp16)), dim=-1).numpy()
        check(out[name], want, fp16, atol=1e-3 if fp16 else 1e-7)
        assert (np.isnan(out[name]) == np.isnan(want)).all(), name
        assert (out[name][1, x.shape[1] // 2:] == 0).all() and (out[name][2, ::3] == 0).all(), name


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_softmax_long_rows(tmp_path, fp16):
    softmax_rows(tmp_path, fp16, with_nan=False)


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_softmax_long_rows_with_nan(tmp_path, fp16):
    softmax_rows(tmp_path, fp16, with_nan=True)


def softmax_columns(tmp_path, fp16, with_nan):
    """Softmax over an axis before the last (a segmentation map's classes): the positions after
    the axis are softmaxes of their own, computed eight at a time in blocks of 64 and a padded
    tail (117 = 64 + 53 positions). Masked (-inf) entries get 0; with_nan: a column of -inf
    only, and a column holding a NaN, are NaN. 1 and 2 threads give the same bits."""
    x = (RNG.standard_normal((2, 21, 9, 13)) * 6).astype(np.float32)
    x[0, :10, 4, 5] = -np.inf
    x[0, 7, 2, 2] = 1000.0  # needs the max subtraction
    if with_nan:
        x[1, :, 8, 12] = -np.inf
        x[1, 3, 0, 0] = np.nan

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.softmax(x=x, axis=1, name="classes"), mb.softmax(x=x, axis=2, name="rows")

    path = save_program(prog, tmp_path, fp16=fp16)
    one = backend_check.load(path, threads=1).predict({"x": x})
    two = backend_check.load(path, threads=2).predict({"x": x})
    t = torch.from_numpy(as_ref(x, fp16))
    for name, axis in (("classes", 1), ("rows", 2)):
        want = torch.softmax(t, dim=axis).numpy()
        np.testing.assert_array_equal(one[name], two[name])
        check(two[name], want, fp16, atol=1e-3 if fp16 else 1e-7)
        assert (np.isnan(two[name]) == np.isnan(want)).all(), name
    assert (two["classes"][0, :10, 4, 5] == 0).all()


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_softmax_down_columns(tmp_path, fp16):
    softmax_columns(tmp_path, fp16, with_nan=False)


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_softmax_down_columns_with_nan(tmp_path, fp16):
    softmax_columns(tmp_path, fp16, with_nan=True)


AXES = [(None, False), ([1], False), ([-1, 0], True), ([2, 0, 1], False), ([-2], True), (None, True)]


@pytest.mark.parametrize("fp16", [False, True], ids=["fp32", "fp16"])
def test_reductions(tmp_path, fp16):
    # Values near 1 keep products well scaled; the one negative value tells l1 from sum and is
    # outweighed in every group reduce_log_sum sees (no AXES entry reduces axis 0 alone).
    x = RNG.uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    x[0, 0, 0] = -1.25

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS18)
    def prog(x):
        outs = []
        for name in REDUCTIONS:
            for i, (axes, keep) in enumerate(AXES):
                outs.append(getattr(mb, name)(x=x, axes=axes, keep_dims=keep, name=f"{name}_{i}"))
        return tuple(outs)

    out = run(prog, tmp_path, {"x": x}, fp16=fp16)
    xr = as_ref(x, fp16)
    for name, ref in REDUCTIONS.items():
        for i, (axes, keep) in enumerate(AXES):
            key = f"{name}_{i}"
            expected = np.asarray(ref(xr, axis=None if axes is None else tuple(axes), keepdims=keep))
            assert out[key].shape == expected.shape, key
            check(out[key], expected, fp16)


def test_reduction_stability_and_nan(tmp_path):
    x = np.array([[1000.0, 999.0, -INF], [-INF, -INF, -INF], [NAN, 1.0, 2.0], [INF, 0.0, 1.0]], np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS18)
    def prog(x):
        return (mb.reduce_log_sum_exp(x=x, axes=[1], name="lse"), mb.reduce_max(x=x, axes=[-1], name="max"),
                mb.reduce_min(x=x, axes=[1], name="min"), mb.reduce_sum(x=x, axes=[1], name="sum"))

    out = run(prog, tmp_path, {"x": x})
    t = torch.from_numpy(x.astype(np.float64))
    check(out["lse"], torch.logsumexp(t, dim=1).numpy(), False)
    with np.errstate(invalid="ignore"):
        check(out["max"], np.max(x.astype(np.float64), axis=1), False)  # NaN propagates
        check(out["min"], np.min(x.astype(np.float64), axis=1), False)
        check(out["sum"], np.sum(x.astype(np.float64), axis=1), False)


def test_int32_reductions(tmp_path):
    x = RNG.integers(-9, 10, (3, 4, 5)).astype(np.int32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape, dtype=types.int32)], opset_version=ct.target.iOS18)
    def prog(x):
        return (mb.reduce_sum(x=x, axes=[1], name="sum"), mb.reduce_max(x=x, axes=[0, 2], keep_dims=True, name="max"),
                mb.reduce_min(x=x, name="min"), mb.reduce_prod(x=x, axes=[-1], name="prod"),
                mb.reduce_mean(x=x, axes=[2], name="mean"), mb.reduce_l1_norm(x=x, axes=[1], name="l1"))

    out = run(prog, tmp_path, {"x": x})
    x64 = x.astype(np.int64)
    expected = {"sum": x64.sum(1), "max": x64.max((0, 2), keepdims=True), "min": x64.min(), "prod": x64.prod(-1),
                # coremltools' value inference: float mean, then astype(int32), which truncates toward zero
                "mean": x64.mean(2).astype(np.int32), "l1": np.abs(x64).sum(1)}
    for name, ref in expected.items():
        assert out[name].dtype == np.int32, name
        np.testing.assert_array_equal(out[name], ref, err_msg=name)


@pytest.mark.parametrize("dtype", ["fp32", "fp16", "int32"])
def test_arg_reductions(tmp_path, dtype):
    # Small integers give many ties; the first index wins, as in NumPy.
    x = RNG.integers(-3, 4, (4, 6, 5)).astype(np.int32 if dtype == "int32" else np.float32)
    if dtype != "int32":
        x[1, 2, :] = [1, NAN, 3, NAN, 3]  # the first NaN wins in both directions
    spec = mb.TensorSpec(shape=x.shape, dtype=types.int32 if dtype == "int32" else types.fp32)

    @mb.program(input_specs=[spec], opset_version=ct.target.iOS18)
    def prog(x):
        return (mb.reduce_argmax(x=x, name="max_default"), mb.reduce_argmin(x=x, axis=0, name="min_ax0"),
                mb.reduce_argmax(x=x, axis=1, keep_dims=True, name="max_ax1_keep"),
                mb.reduce_argmin(x=x, axis=-2, name="min_axm2"),
                mb.cast(x=mb.reduce_argmax(x=x, axis=2, output_dtype="uint16"), dtype="int32", name="max_u16"))

    out = run(prog, tmp_path, {"x": x}, fp16=dtype == "fp16")
    expected = {"max_default": np.argmax(x, -1), "min_ax0": np.argmin(x, 0),
                "max_ax1_keep": np.argmax(x, 1, keepdims=True), "min_axm2": np.argmin(x, -2),
                "max_u16": np.argmax(x, 2)}
    for name, ref in expected.items():
        assert out[name].dtype == np.int32, name
        np.testing.assert_array_equal(out[name], ref, err_msg=name)
