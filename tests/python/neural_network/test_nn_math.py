"""neuralNetwork math layers (element-wise, comparisons and logical layers, reductions,
sorting, matrix products, embeddings, one-hot, triangular masks) and quantized weights,
built with coremltools' NeuralNetworkBuilder in both blob layouts where the layer allows
it, run by coremlrt and compared with numpy or torch."""

import os
import warnings

import numpy as np
import pytest

import coremlrt

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")

from coremltools.models import datatypes  # noqa: E402
from coremltools.models.neural_network import NeuralNetworkBuilder  # noqa: E402
from nn_helpers import save_and_load  # noqa: E402
from coremltools.models.neural_network import quantization_utils  # noqa: E402

RTOL, ATOL = 1e-5, 1e-5
LAYOUTS = ["rank5", "exact"]
rng = np.random.default_rng(0)


def builder_for(layout, inputs):
    """inputs: [(name, per-image shape)]; rank-5 takes shapes of rank 1 or 3 as they are, the
    exact layout gets them with a leading batch axis of 1."""
    exact = layout == "exact"
    features = [(n, datatypes.Array(*((1, *s) if exact else s))) for n, s in inputs]
    return NeuralNetworkBuilder(features, [("out", None)], disable_rank5_shape_mapping=exact)


def exact_builder(inputs, outputs=("out",)):
    """A builder in the exact-rank layout for inputs [(name, shape)]."""
    return NeuralNetworkBuilder([(n, datatypes.Array(*s)) for n, s in inputs], [(o, None) for o in outputs],
                                disable_rank5_shape_mapping=True)


def predict(tmp_path, builder, feeds):
    return save_and_load(tmp_path, builder).predict({k: np.asarray(v, dtype=np.float32) for k, v in feeds.items()})


def run(tmp_path, builder, feeds, layout):
    """Runs on per-image arrays and returns 'out' per image (the exact layout's batch axis dropped)."""
    if layout == "exact":
        feeds = {k: v[None] for k, v in feeds.items()}
    out = predict(tmp_path, builder, feeds)["out"]
    if layout == "exact":
        assert out.shape[0] == 1
        out = out[0]
    return out


def check(actual, expected, rtol=RTOL, atol=ATOL):
    expected = np.asarray(expected, dtype=np.float32)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=atol)


def randn(*shape):
    return rng.standard_normal(shape).astype(np.float32)


# ---------------------------------------------------------------- element-wise (rank-5 era)

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode,alpha", [("ADD", None), ("ADD", 2.5), ("MULTIPLY", None), ("MULTIPLY", -1.5),
                                        ("MAX", None), ("MIN", None), ("AVE", None)])
def test_elementwise(tmp_path, layout, mode, alpha):
    shape = (3, 4, 5)
    single = alpha is not None
    names = ["a"] if single else ["a", "b", "c"]
    b = builder_for(layout, [(n, shape) for n in names])
    b.add_elementwise("op", names, "out", mode, alpha=alpha)
    feeds = {n: randn(*shape) for n in names}
    xs = [feeds[n] for n in names]
    expected = {
        "ADD": lambda: xs[0] + alpha if single else xs[0] + xs[1] + xs[2],
        "MULTIPLY": lambda: xs[0] * alpha if single else xs[0] * xs[1] * xs[2],
        "MAX": lambda: np.maximum(np.maximum(xs[0], xs[1]), xs[2]),
        "MIN": lambda: np.minimum(np.minimum(xs[0], xs[1]), xs[2]),
        "AVE": lambda: (xs[0] + xs[1] + xs[2]) / 3,
    }[mode]()
    check(run(tmp_path, b, feeds, layout), expected)


def test_add_broadcasts_channel_vector_rank5(tmp_path):
    b = builder_for("rank5", [("a", (3, 4, 5)), ("b", (3,))])
    b.add_elementwise("op", ["a", "b"], "out", "ADD")
    a, v = randn(3, 4, 5), randn(3)
    check(run(tmp_path, b, {"a": a, "b": v}, "rank5"), a + v[:, None, None])


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("cosine", [False, True])
def test_dot(tmp_path, layout, cosine):
    b = builder_for(layout, [("a", (6, 1, 1)), ("b", (6, 1, 1))])
    b.add_elementwise("op", ["a", "b"], "out", "COS" if cosine else "DOT")
    a, c = randn(6, 1, 1), randn(6, 1, 1)
    expected = np.sum(a * c, axis=0, keepdims=True)
    if cosine:
        expected = expected / (np.linalg.norm(a) * np.linalg.norm(c))
    check(run(tmp_path, b, {"a": a, "b": c}, layout), expected)


def _unary_reference(mode, x, alpha, eps):
    return {
        "sqrt": lambda: np.sqrt(x),
        "rsqrt": lambda: 1 / np.sqrt(x + eps),
        "inverse": lambda: 1 / (x + eps),
        "power": lambda: x ** alpha,
        "exp": lambda: np.exp(x),
        "log": lambda: np.log(x + eps),
        "abs": lambda: np.abs(x),
        "threshold": lambda: np.maximum(x, alpha),
    }[mode]()


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", ["sqrt", "rsqrt", "inverse", "power", "exp", "log", "abs", "threshold"])
def test_unary(tmp_path, layout, mode):
    x = rng.uniform(0.5, 2.0, (2, 3, 4)).astype(np.float32)
    scale, shift, alpha, eps = 1.5, 0.25, 1.7, 1e-3
    b = builder_for(layout, [("x", x.shape)])
    b.add_unary("op", "x", "out", mode, alpha=alpha, shift=shift, scale=scale, epsilon=eps)
    expected = _unary_reference(mode, scale * x.astype(np.float64) + shift, alpha, eps)
    check(run(tmp_path, b, {"x": x}, layout), expected)


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("shape", [(1,), (4,), (1, 5, 6), (4, 5, 6)])
def test_bias_and_scale(tmp_path, layout, shape):
    x = randn(4, 5, 6)
    bias, scale = randn(*shape), randn(*shape)
    as_chw = lambda v: v.reshape((4, 1, 1)) if len(shape) == 1 and shape[0] == 4 else v  # noqa: E731
    b = builder_for(layout, [("x", x.shape)])
    b.add_scale("scale", W=scale, b=bias, has_bias=True, input_name="x", output_name="s", shape_scale=list(shape),
                shape_bias=list(shape))
    b.add_bias("bias", b=bias, input_name="s", output_name="out", shape_bias=list(shape))
    expected = (x * as_chw(scale) + as_chw(bias)) + as_chw(bias)
    check(run(tmp_path, b, {"x": x}, layout), expected)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_prelu_and_parametric_softplus(tmp_path, layout):
    x = randn(3, 4, 5)
    alpha, beta = rng.uniform(0.1, 0.9, 3).astype(np.float32), rng.uniform(0.5, 1.5, 3).astype(np.float32)
    b = builder_for(layout, [("x", x.shape)])
    b.add_activation("prelu", "PRELU", "x", "p", params=alpha)
    b.add_activation("softplus", "PARAMETRICSOFTPLUS", "p", "out", params=[alpha, beta])
    p = np.where(x > 0, x, alpha[:, None, None] * x)
    expected = alpha[:, None, None] * np.log1p(np.exp(beta[:, None, None] * p))
    check(run(tmp_path, b, {"x": x}, layout), expected)


@pytest.mark.parametrize("layout", LAYOUTS)
def test_clamped_relu(tmp_path, layout):
    x = randn(3, 4, 5) * 3
    b = builder_for(layout, [("x", x.shape)])
    b.add_clamped_relu("op", "x", "out", alpha=0.25, beta=2.0)
    check(run(tmp_path, b, {"x": x}, layout), np.minimum(np.where(x >= 0, x, 0.25 * x), 2.0))


# ---------------------------------------------------------------- broadcastable and functions

BROADCASTABLE = {
    "add": (lambda b: b.add_add_broadcastable, np.add),
    "subtract": (lambda b: b.add_subtract_broadcastable, np.subtract),
    "multiply": (lambda b: b.add_multiply_broadcastable, np.multiply),
    "divide": (lambda b: b.add_divide_broadcastable, np.divide),
    "max": (lambda b: b.add_max_broadcastable, np.maximum),
    "min": (lambda b: b.add_min_broadcastable, np.minimum),
    "mod": (lambda b: b.add_mod_broadcastable, np.mod),
    "floor_div": (lambda b: b.add_floor_div_broadcastable, np.floor_divide),
    "pow": (lambda b: b.add_pow_broadcastable, np.power),
}


@pytest.mark.parametrize("op", sorted(BROADCASTABLE))
def test_broadcastable(tmp_path, op):
    add_layer, reference = BROADCASTABLE[op]
    b = exact_builder([("a", (2, 3, 4)), ("b", (3, 1))])
    add_layer(b)("op", ["a", "b"], "out")
    a, c = randn(2, 3, 4), randn(3, 1)
    if op == "pow":
        a = np.abs(a) + 0.5
    if op in ("divide", "mod", "floor_div"):
        c = np.where(np.abs(c) < 0.2, 0.5, c).astype(np.float32)
    out = predict(tmp_path, b, {"a": a, "b": c})["out"]
    check(out, reference(a.astype(np.float64), c), rtol=1e-5, atol=1e-4)


COMPARISONS = {
    "greater": (lambda b, n, i, a: b.add_greater_than(n, i, "out", alpha=a), np.greater),
    "greater_equal": (lambda b, n, i, a: b.add_greater_than(n, i, "out", use_greater_than_equal=True, alpha=a),
                      np.greater_equal),
    "less": (lambda b, n, i, a: b.add_less_than(n, i, "out", alpha=a), np.less),
    "less_equal": (lambda b, n, i, a: b.add_less_than(n, i, "out", use_less_than_equal=True, alpha=a), np.less_equal),
    "equal": (lambda b, n, i, a: b.add_equal(n, i, "out", alpha=a), np.equal),
    "not_equal": (lambda b, n, i, a: b.add_not_equal(n, i, "out", alpha=a), np.not_equal),
}


@pytest.mark.parametrize("op", sorted(COMPARISONS))
@pytest.mark.parametrize("inputs", [1, 2])
def test_comparison(tmp_path, op, inputs):
    add_layer, reference = COMPARISONS[op]
    a = rng.integers(-2, 3, (2, 3, 4)).astype(np.float32)
    c = rng.integers(-2, 3, (3, 4)).astype(np.float32)
    b = exact_builder([("a", a.shape), ("b", c.shape)][:inputs])
    add_layer(b, "op", ["a", "b"][:inputs], 1.0)
    out = predict(tmp_path, b, {"a": a, "b": c} if inputs == 2 else {"a": a})["out"]
    check(out, reference(a, c if inputs == 2 else 1.0).astype(np.float32))


@pytest.mark.parametrize("mode", ["AND", "OR", "XOR", "NOT"])
def test_logical(tmp_path, mode):
    a = rng.integers(-1, 2, (3, 4)).astype(np.float32)
    c = rng.integers(0, 2, (3, 4)).astype(np.float32) * 0.5
    names = ["a"] if mode == "NOT" else ["a", "b"]
    b = exact_builder([(n, (3, 4)) for n in names])
    b.add_logical("op", names, "out", mode)
    expected = {"AND": np.logical_and, "OR": np.logical_or, "XOR": np.logical_xor}.get(mode)
    expected = np.logical_not(a != 0) if mode == "NOT" else expected(a != 0, c != 0)
    out = predict(tmp_path, b, {"a": a, "b": c} if mode != "NOT" else {"a": a})["out"]
    check(out, expected.astype(np.float32))


FUNCTIONS = {
    "ceil": np.ceil, "floor": np.floor, "sign": np.sign, "round": np.round, "exp2": np.exp2,
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan,
    "sinh": np.sinh, "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh,
    "atanh": np.arctanh, "erf": lambda v: torch.erf(torch.from_numpy(v)).numpy(),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_function(tmp_path, layout, name):
    if name in ("asin", "acos", "atanh"):
        x = rng.uniform(-0.9, 0.9, (2, 3, 4))
    elif name == "acosh":
        x = rng.uniform(1.1, 3.0, (2, 3, 4))
    elif name == "round":
        x = np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 0.2, -0.7] * 3).reshape(2, 3, 4)
    else:
        x = rng.uniform(-2.0, 2.0, (2, 3, 4))
    x = x.astype(np.float32)
    b = builder_for(layout, [("x", x.shape)])
    getattr(b, "add_" + name)("op", "x", "out")
    check(run(tmp_path, b, {"x": x}, layout), FUNCTIONS[name](x))


def test_clip(tmp_path):
    x = randn(2, 3, 4)
    b = builder_for("rank5", [("x", x.shape)])
    b.add_clip("op", "x", "out", min_value=-0.5, max_value=0.75)
    check(run(tmp_path, b, {"x": x}, "rank5"), np.clip(x, -0.5, 0.75))


# ---------------------------------------------------------------- reductions and sorting

@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("mode", ["sum", "avg", "prod", "logsum", "sumsquare", "L1", "L2", "max", "min", "argmax"])
@pytest.mark.parametrize("axis", ["CHW", "HW", "C", "H", "W"])
def test_legacy_reduce(tmp_path, layout, mode, axis):
    if mode == "argmax" and axis in ("CHW", "HW"):
        pytest.skip("argmax reduces one axis")
    x = rng.uniform(0.5, 1.5, (3, 4, 5)).astype(np.float32)
    axes = {"CHW": (0, 1, 2), "HW": (1, 2), "C": (0,), "H": (1,), "W": (2,)}[axis]
    b = builder_for(layout, [("x", x.shape)])
    b.add_reduce("op", "x", "out", axis=axis, mode=mode, epsilon=1e-3)
    x64 = x.astype(np.float64)
    expected = {
        "sum": lambda: x64.sum(axes, keepdims=True),
        "avg": lambda: x64.mean(axes, keepdims=True),
        "prod": lambda: x64.prod(axes, keepdims=True),
        "logsum": lambda: np.log(x64 + 1e-3).sum(axes, keepdims=True),
        "sumsquare": lambda: (x64 ** 2).sum(axes, keepdims=True),
        "L1": lambda: np.abs(x64).sum(axes, keepdims=True),
        "L2": lambda: np.sqrt((x64 ** 2).sum(axes, keepdims=True)),
        "max": lambda: x64.max(axes, keepdims=True),
        "min": lambda: x64.min(axes, keepdims=True),
        "argmax": lambda: np.expand_dims(np.argmax(x64, axes[0]), axes[0]),
    }[mode]()
    check(run(tmp_path, b, {"x": x}, layout), expected, rtol=1e-5, atol=1e-4)


REDUCTIONS = {
    "sum": np.sum, "mean": np.mean, "prod": np.prod, "max": np.max, "min": np.min,
    "l1": lambda v, axis, keepdims: np.abs(v).sum(axis, keepdims=keepdims),
    "l2": lambda v, axis, keepdims: np.sqrt((v ** 2).sum(axis, keepdims=keepdims)),
    "sumsquare": lambda v, axis, keepdims: (v ** 2).sum(axis, keepdims=keepdims),
    "logsum": lambda v, axis, keepdims: np.log(v.sum(axis, keepdims=keepdims)),
    "logsumexp": lambda v, axis, keepdims: np.log(np.exp(v).sum(axis, keepdims=keepdims)),
}


@pytest.mark.parametrize("op", sorted(REDUCTIONS))
@pytest.mark.parametrize("axes,keepdims", [((1,), True), ((0, -1), False), (None, False), (None, True)])
def test_axis_reduction(tmp_path, op, axes, keepdims):
    x = rng.uniform(0.5, 1.5, (2, 3, 4)).astype(np.float32)
    b = exact_builder([("x", x.shape)])
    getattr(b, "add_reduce_" + op)("op", "x", "out", axes=list(axes) if axes else None, keepdims=keepdims,
                                   reduce_all=axes is None)
    expected = np.asarray(REDUCTIONS[op](x.astype(np.float64), axis=axes, keepdims=keepdims))
    if expected.ndim == 0:
        expected = expected.reshape(1)
    check(predict(tmp_path, b, {"x": x})["out"], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("which", ["argmax", "argmin"])
@pytest.mark.parametrize("axis,keepdims", [(0, True), (-1, False), (1, False)])
def test_arg_reduction(tmp_path, which, axis, keepdims):
    x = randn(3, 4, 5)
    b = exact_builder([("x", x.shape)])
    getattr(b, "add_" + which)("op", "x", "out", axis=axis, keepdims=keepdims)
    expected = getattr(np, which)(x, axis=axis)
    if keepdims:
        expected = np.expand_dims(expected, axis)
    check(predict(tmp_path, b, {"x": x})["out"], expected.astype(np.float32))


@pytest.mark.parametrize("bottom", [False, True])
@pytest.mark.parametrize("axis", [0, -1])
def test_topk(tmp_path, bottom, axis):
    x = randn(4, 6)
    b = exact_builder([("x", x.shape)], outputs=("values", "indices"))
    b.add_topk("op", ["x"], ["values", "indices"], k=3, axis=axis, use_bottom_k=bottom)
    out = predict(tmp_path, b, {"x": x})
    values, indices = torch.topk(torch.from_numpy(x), 3, dim=axis, largest=not bottom, sorted=True)
    check(out["values"], values.numpy())
    check(out["indices"], indices.numpy().astype(np.float32))


def test_topk_k_from_input(tmp_path):
    x = randn(3, 7)
    b = exact_builder([("x", x.shape), ("k", (1,))], outputs=("values", "indices"))
    b.add_topk("op", ["x", "k"], ["values", "indices"], axis=1)
    out = predict(tmp_path, b, {"x": x, "k": np.array([4], np.float32)})
    values, indices = torch.topk(torch.from_numpy(x), 4, dim=1, sorted=True)
    check(out["values"], values.numpy())
    check(out["indices"], indices.numpy().astype(np.float32))


@pytest.mark.parametrize("descending", [False, True])
def test_argsort(tmp_path, descending):
    x = randn(3, 5)
    b = exact_builder([("x", x.shape)])
    b.add_argsort("op", "x", "out", axis=1, descending=descending)
    expected = np.argsort(-x if descending else x, axis=1, kind="stable")
    check(predict(tmp_path, b, {"x": x})["out"], expected.astype(np.float32))


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
def test_cumsum(tmp_path, exclusive, reverse):
    x = randn(3, 5)
    b = exact_builder([("x", x.shape)])
    b.add_cumsum("op", ["x"], "out", axis=1, reverse=reverse, exclusive=exclusive)
    v = x[:, ::-1] if reverse else x
    c = np.cumsum(v, axis=1)
    if exclusive:
        c = np.concatenate([np.zeros((3, 1), np.float32), c[:, :-1]], axis=1)
    check(predict(tmp_path, b, {"x": x})["out"], c[:, ::-1] if reverse else c)


# ---------------------------------------------------------------- matrices, embeddings, masks

@pytest.mark.parametrize("ta,tb", [(False, False), (True, False), (False, True), (True, True)])
def test_batched_matmul_two_inputs(tmp_path, ta, tb):
    a, c = randn(2, 3, 4), randn(1, 4, 5)
    a_in = np.swapaxes(a, -1, -2).copy() if ta else a
    c_in = np.swapaxes(c, -1, -2).copy() if tb else c
    b = exact_builder([("a", a_in.shape), ("b", c_in.shape)])
    b.add_batched_mat_mul("op", ["a", "b"], "out", transpose_a=ta, transpose_b=tb)
    check(predict(tmp_path, b, {"a": a_in, "b": c_in})["out"], a @ c, atol=1e-4)


@pytest.mark.parametrize("a_shape,b_shape", [((5,), (5,)), ((4, 5), (5,)), ((5,), (2, 5, 3))])
def test_batched_matmul_vectors(tmp_path, a_shape, b_shape):
    """A vector A is a row [1, K], a vector B a column [K, 1], and the product keeps both axes."""
    a, c = randn(*a_shape), randn(*b_shape)
    b = exact_builder([("a", a.shape), ("b", c.shape)])
    b.add_batched_mat_mul("op", ["a", "b"], "out")
    a2 = a[None] if a.ndim == 1 else a
    c2 = c[:, None] if c.ndim == 1 else c
    check(predict(tmp_path, b, {"a": a, "b": c})["out"], a2 @ c2, atol=1e-4)


@pytest.mark.parametrize("has_bias", [False, True])
def test_batched_matmul_weights(tmp_path, has_bias):
    x, w, bias = randn(2, 3, 4), randn(4, 6), randn(6)
    b = exact_builder([("x", x.shape)])
    b.add_batched_mat_mul("op", ["x"], "out", weight_matrix_rows=4, weight_matrix_columns=6, W=w,
                          bias=bias if has_bias else None)
    check(predict(tmp_path, b, {"x": x})["out"], x @ w + (bias if has_bias else 0), atol=1e-4)


@pytest.mark.parametrize("has_bias", [False, True])
def test_embedding_rank5(tmp_path, has_bias):
    vocab, size = 7, 5
    w, bias = randn(size, vocab), randn(size)
    b = builder_for("rank5", [("x", (1,))])
    b.add_embedding("emb", W=w, b=bias if has_bias else None, input_dim=vocab, output_channels=size,
                    has_bias=has_bias, input_name="x", output_name="out")
    out = run(tmp_path, b, {"x": np.array([4.0], np.float32)}, "rank5")
    check(out, (w[:, 4] + (bias if has_bias else 0)).reshape(size, 1, 1))  # a [C, 1, 1] image


@pytest.mark.parametrize("has_bias", [False, True])
def test_embedding_nd(tmp_path, has_bias):
    vocab, size = 9, 4
    w, bias = randn(size, vocab), randn(size)
    idx = rng.integers(0, vocab, (2, 3, 1)).astype(np.float32)
    b = exact_builder([("x", idx.shape)])
    b.add_embedding_nd("emb", "x", "out", vocab_size=vocab, embedding_size=size, W=w, b=bias if has_bias else None)
    expected = torch.nn.functional.embedding(torch.from_numpy(idx[..., 0].astype(np.int64)),
                                             torch.from_numpy(w.T.copy())).numpy() + (bias if has_bias else 0)
    check(predict(tmp_path, b, {"x": idx})["out"], expected)


@pytest.mark.parametrize("axis", [-1, 0, 1])
def test_one_hot(tmp_path, axis):
    idx = np.array([[0, 3, 1], [2, 2, 0]], np.float32)
    b = exact_builder([("x", idx.shape)])
    b.add_one_hot("op", ["x"], "out", one_hot_vector_size=4, axis=axis, on_value=2.0, off_value=-1.0)
    hot = torch.nn.functional.one_hot(torch.from_numpy(idx.astype(np.int64)), 4).numpy()
    expected = np.moveaxis(np.where(hot == 1, 2.0, -1.0), -1, axis)
    check(predict(tmp_path, b, {"x": idx})["out"], expected)


def test_one_hot_size_from_input(tmp_path):
    idx = np.array([2, 0, 1], np.float32)
    b = exact_builder([("x", idx.shape), ("n", (1,))])
    b.add_one_hot("op", ["x", "n"], "out", axis=-1, on_value=1.0, off_value=0.0)
    out = predict(tmp_path, b, {"x": idx, "n": np.array([5], np.float32)})["out"]
    check(out, np.eye(5, dtype=np.float32)[idx.astype(np.int64)])


@pytest.mark.parametrize("k", [-2, -1, 0, 1, 2])
def test_triangular(tmp_path, k):
    x = randn(2, 4, 5)
    x[0, 3, 0] = np.inf  # kept or zeroed exactly, never turned into NaN
    for which, reference in (("lower", np.tril), ("upper", np.triu)):
        b = exact_builder([("x", x.shape)])
        getattr(b, "add_%s_triangular" % which)("op", "x", "out", k=k)
        check(predict(tmp_path, b, {"x": x})["out"], reference(x, k))


@pytest.mark.parametrize("lower,upper", [(-1, -1), (0, 0), (1, -1), (-1, 2), (2, 1)])
def test_matrix_band_part(tmp_path, lower, upper):
    x = randn(3, 4, 5)
    b = exact_builder([("x", x.shape)])
    b.add_matrix_band_part("op", "x", "out", num_lower=lower, num_upper=upper)
    m, n = np.arange(4)[:, None], np.arange(5)[None, :]
    keep = ((lower < 0) | (m - n <= lower)) & ((upper < 0) | (n - m <= upper))
    check(predict(tmp_path, b, {"x": x})["out"], np.where(keep, x, 0))


# ---------------------------------------------------------------- quantized weights

def _dequantized(wp, shape):
    """The values coremltools' own dequantizer reads back from quantized weight params."""
    copy = type(wp)()
    copy.CopyFrom(wp)
    if copy.HasField("quantization"):
        quantization_utils._dequantize_wp(copy, shape)
    return np.array(copy.floatValue, np.float64).reshape(shape)


@pytest.mark.parametrize("nbits", [1, 2, 3, 4, 5, 6, 7, 8])
# ("kmeans_lut" fails inside coremltools' quantizer with this numpy; the lookup-table decode is
# covered by "linear_lut" and by test_quantized_weights_from_builder.)
@pytest.mark.parametrize("mode", ["linear", "linear_lut"])
def test_quantized_inner_product(tmp_path, nbits, mode):
    cin, cout = 13, 6
    w, bias = randn(cout, cin), randn(cout)
    b = exact_builder([("x", (cin,))])
    b.add_inner_product("ip", W=w, b=bias, input_channels=cin, output_channels=cout, has_bias=True,
                        input_name="x", output_name="out")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = ct.models.MLModel(b.spec, skip_model_load=True)
        quantized = quantization_utils.quantize_weights(model, nbits, quantization_mode=mode)
    spec = quantized if not hasattr(quantized, "get_spec") else quantized.get_spec()
    layer = spec.neuralNetwork.layers[0]
    assert layer.innerProduct.weights.HasField("quantization")
    if mode == "linear":
        assert len(layer.innerProduct.weights.quantization.linearQuantization.scale) == cout  # per channel
    w_q = _dequantized(layer.innerProduct.weights, (cout, cin))
    b_q = _dequantized(layer.innerProduct.bias, (cout,))  # quantized too, per tensor
    x = randn(cin)
    path = os.path.join(str(tmp_path), "q.mlmodel")
    ct.models.MLModel(spec, skip_model_load=True).save(path)
    out = coremlrt.MLModel(path).predict({"x": x})["out"]
    check(out.reshape(-1), w_q @ x.astype(np.float64) + b_q, rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize("nbits", [3, 8])
def test_quantized_weights_from_builder(tmp_path, nbits):
    """Codes packed by hand (most significant bit first), a per-tensor linear map and a lookup table."""
    vocab, size = 5, 3
    codes = rng.integers(0, 2 ** nbits, (size, vocab))
    bits = np.array([(c >> i) & 1 for c in codes.reshape(-1) for i in reversed(range(nbits))], np.uint8)
    packed = np.packbits(bits).tobytes()
    idx = np.array([[[3]], [[0]]], np.float32)  # [2, 1, 1]
    scale, offset = 0.25, -1.0
    lut = rng.standard_normal(2 ** nbits).astype(np.float32)
    for kind, dense in (("linear", codes * scale + offset), ("lut", lut[codes])):
        b = exact_builder([("x", idx.shape)])
        extra = dict(quant_scale=[scale], quant_bias=[offset]) if kind == "linear" else dict(quant_lut=lut)
        b.add_embedding_nd("emb", "x", "out", vocab_size=vocab, embedding_size=size, W=packed,
                           is_quantized_weight=True, quantization_type=kind, nbits=nbits, **extra)
        expected = dense.T[idx[..., 0].astype(np.int64)]
        check(predict(tmp_path, b, {"x": idx})["out"], expected)


# ---------------------------------------------------------------- refusals

def test_argmax_over_several_axes_is_refused(tmp_path):
    b = builder_for("rank5", [("x", (2, 3, 4))])
    b.add_reduce("op", "x", "out", axis="HW", mode="argmax")
    with pytest.raises(Exception, match="ARGMAX over several axes"):
        run(tmp_path, b, {"x": randn(2, 3, 4)}, "rank5")
