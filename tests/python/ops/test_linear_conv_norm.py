"""linear/matmul/einsum, conv/conv_transpose, pooling, normalization, attention and recurrent
kernels, checked against PyTorch or NumPy references computed here.

Programs are built with coremltools' MIL builder and converted with an empty pass pipeline so
that the op under test reaches the engine unchanged (the default pipeline may rewrite it).
"""

import os
import warnings

import numpy as np
import pytest

warnings.filterwarnings("ignore")
ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")
import torch.nn.functional as F  # noqa: E402
from coremltools.converters.mil import Builder as mb  # noqa: E402
from coremltools.converters.mil.mil import types  # noqa: E402

import backend_check  # noqa: E402
import coremlrt  # noqa: E402
from mil_helpers import save_program  # noqa: E402

RNG = np.random.default_rng(1234)


def rand(*shape, dtype=np.float32):
    return RNG.standard_normal(shape).astype(dtype)


def build(prog, tmp_path, name="model"):
    """fp32 program -> .mlpackage with the op kept as written (empty pass pipeline)."""
    model = ct.convert(prog, convert_to="mlprogram", compute_precision=ct.precision.FLOAT32,
                       minimum_deployment_target=ct.target.iOS18, skip_model_load=True,
                       pass_pipeline=ct.PassPipeline.EMPTY)
    path = os.path.join(str(tmp_path), name + ".mlpackage")
    model.save(path)
    return path


def run(prog, tmp_path, inputs, name="model"):
    return backend_check.load(build(prog, tmp_path, name)).predict(inputs)


def check(actual, expected, rtol=1e-4, atol=1e-4):
    expected = np.asarray(expected, dtype=np.float64)
    actual = np.asarray(actual)
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    np.testing.assert_allclose(actual.astype(np.float64), expected, rtol=rtol, atol=atol)


def assert_fp16_values(a):
    """fp16 outputs come back as float32 arrays (coremltools behaviour); their values must be fp16's."""
    np.testing.assert_array_equal(a, a.astype(np.float16).astype(a.dtype))


def spec(shape, dtype=types.fp32):
    return mb.TensorSpec(shape=shape, dtype=dtype)


def t(a):
    return torch.from_numpy(np.ascontiguousarray(a)).double()


# ---------------------------------------------------------------------------------------------
# linear, matmul, einsum


def test_linear_fp32_bias_and_no_bias(tmp_path):
    x = rand(2, 5, 16)
    w, b = rand(12, 16), rand(12)

    @mb.program(input_specs=[spec(x.shape)], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.linear(x=x, weight=w, bias=b, name="y"), mb.linear(x=x, weight=w, name="z")

    out = run(prog, tmp_path, {"x": x})
    check(out["y"], x @ w.T + b)
    check(out["z"], x @ w.T)


def test_linear_fp16_with_fp32_weights(tmp_path):
    # iOS17+: weight and bias dtypes are independent of x's; the output stays fp16.
    x = rand(3, 16).astype(np.float16)
    w, b = rand(8, 16), rand(8)

    @mb.program(input_specs=[spec(x.shape, types.fp16)], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.linear(x=x, weight=w, bias=b, name="y")

    y = run(prog, tmp_path, {"x": x})["y"]
    assert_fp16_values(y)
    check(y, x.astype(np.float64) @ w.T + b, rtol=1e-2, atol=1e-2)


def test_linear_fp16_program(tmp_path):
    x = rand(4, 32)
    w, b = rand(24, 32) * 0.2, rand(24)

    @mb.program(input_specs=[spec(x.shape)], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.linear(x=x, weight=w, bias=b, name="y")

    y = backend_check.load(save_program(prog, tmp_path, fp16=True)).predict({"x": x})["y"]
    check(y, x @ w.T + b, rtol=1e-2, atol=1e-2)


def test_matmul_shapes_and_transposes(tmp_path):
    a = rand(2, 1, 3, 4)
    b = rand(5, 6, 4)
    v = rand(4)
    m = rand(4, 7)
    c = rand(3, 4, 2)
    d = rand(3, 5, 4)

    @mb.program(input_specs=[spec(a.shape), spec(b.shape), spec(v.shape), spec(m.shape), spec(c.shape),
                             spec(d.shape)], opset_version=ct.target.iOS18)
    def prog(a, b, v, m, c, d):
        return (mb.matmul(x=a, y=b, transpose_y=True, name="bcast"),
                mb.matmul(x=v, y=m, name="vec_mat"),
                mb.matmul(x=mb.reshape(x=v, shape=[1, 4]), y=m, transpose_y=False, name="row_mat"),
                mb.matmul(x=c, y=d, transpose_x=True, transpose_y=True, name="both_t"),
                mb.matmul(x=d, y=m, name="shared_y"))

    out = run(prog, tmp_path, {"a": a, "b": b, "v": v, "m": m, "c": c, "d": d})
    check(out["bcast"], np.matmul(a, np.swapaxes(b, -1, -2)))
    check(out["vec_mat"], v @ m)
    check(out["row_mat"], v[None] @ m)
    check(out["both_t"], np.matmul(np.swapaxes(c, -1, -2), np.swapaxes(d, -1, -2)))
    check(out["shared_y"], d @ m)


def test_decode_attention_matmuls_fp16(tmp_path):
    # A decode step's attention: one query row per head against fp16 keys and values. One row
    # widens the fp16 values as the tiles load them, four rows widen them into a block first
    # (src/ops/gemm_axpy.cc, axpy_widens_while_loading); the heads are spread over threads whole
    # (gemm_each). Every way sums each element in the same order, so the bits are the same.
    heads, length, depth = 12, 256, 64
    q = (rand(heads, 4, depth) * 0.2).astype(np.float16)
    k = (rand(heads, length, depth) * 0.2).astype(np.float16)
    v = rand(heads, length, depth).astype(np.float16)

    def attend(rows, threads):
        @mb.program(input_specs=[spec((heads, rows, depth), types.fp16), spec(k.shape, types.fp16),
                                 spec(v.shape, types.fp16)], opset_version=ct.target.iOS18)
        def prog(q, k, v):
            scores = mb.matmul(x=q, y=k, transpose_y=True, name="scores")
            return scores, mb.matmul(x=mb.softmax(x=scores, axis=-1), y=v, name="out")

        model = coremlrt.MLModel(build(prog, tmp_path, f"attend{rows}"), backend="reference", threads=threads)
        return model.predict({"q": q[:, :rows], "k": k, "v": v})

    one, four, four_alone = attend(1, 2), attend(4, 2), attend(4, 1)
    for name in ("scores", "out"):
        assert_fp16_values(four[name])
        np.testing.assert_array_equal(one[name], four[name][:, :1], err_msg=name)
        np.testing.assert_array_equal(four_alone[name], four[name], err_msg=name)
    scores = np.matmul(q.astype(np.float64), np.swapaxes(k.astype(np.float64), -1, -2))
    check(four["scores"], scores, rtol=2e-3, atol=2e-3)
    # The probabilities are rounded to fp16 before the second product, as the program says.
    probs = four["scores"].astype(np.float64)
    probs = np.exp(probs - probs.max(-1, keepdims=True))
    probs = (probs / probs.sum(-1, keepdims=True)).astype(np.float16).astype(np.float64)
    check(four["out"], probs @ v.astype(np.float64), rtol=1e-2, atol=1e-2)


def test_matmul_const_operands_and_int32(tmp_path):
    x = rand(2, 3, 8)
    wy = rand(6, 8)  # const y, transposed
    wx = rand(5, 2)  # const x
    i = RNG.integers(-50, 50, size=(3, 4)).astype(np.int32)
    j = RNG.integers(-50, 50, size=(4, 2)).astype(np.int32)

    @mb.program(input_specs=[spec(x.shape), spec(i.shape, types.int32), spec(j.shape, types.int32)],
                opset_version=ct.target.iOS18)
    def prog(x, i, j):
        return (mb.matmul(x=x, y=wy, transpose_y=True, name="const_y"),
                mb.matmul(x=wx, y=mb.reshape(x=x, shape=[3, 2, 8]), name="const_x"),
                mb.matmul(x=i, y=j, name="ints"))

    out = run(prog, tmp_path, {"x": x, "i": i, "j": j})
    check(out["const_y"], x @ wy.T)
    check(out["const_x"], np.matmul(wx, x.reshape(3, 2, 8)))
    assert out["ints"].dtype == np.int32
    np.testing.assert_array_equal(out["ints"], i.astype(np.int64) @ j)


def test_matmul_fp16_x_with_fp32_const_y(tmp_path):
    x = rand(3, 8).astype(np.float16)
    w = rand(8, 5)

    @mb.program(input_specs=[spec(x.shape, types.fp16)], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.matmul(x=x, y=w, name="y")

    y = run(prog, tmp_path, {"x": x})["y"]
    assert_fp16_values(y)
    check(y, x.astype(np.float64) @ w, rtol=1e-2, atol=1e-2)


def test_einsum_patterns(tmp_path):
    a4, b4 = rand(2, 3, 4, 5), rand(2, 5, 4, 6)
    a3, b3 = rand(3, 1, 5), rand(5, 4, 2)  # h broadcasts (1 vs 4)

    @mb.program(input_specs=[spec(a4.shape), spec(b4.shape), spec(a3.shape), spec(b3.shape)],
                opset_version=ct.target.iOS18)
    def prog(a4, b4, a3, b3):
        return (mb.einsum(values=(a4, b4), equation="nchw,nwhu->nchu", name="r4"),
                mb.einsum(values=(a3, b3), equation="abc,cbd->abd", name="r3"))

    out = run(prog, tmp_path, {"a4": a4, "b4": b4, "a3": a3, "b3": b3})
    check(out["r4"], np.einsum("nchw,nwhu->nchu", a4, b4))
    check(out["r3"], np.einsum("chw,whr->chr", np.broadcast_to(a3, (3, 4, 5)), b3))


# ---------------------------------------------------------------------------------------------
# conv, conv_transpose


def same_pads(size, kernel, stride, dilation=1, lower=False):
    out = -(-size // stride)
    total = max(0, (out - 1) * stride + (kernel - 1) * dilation + 1 - size)
    small = total // 2
    return (total - small, small) if lower else (small, total - small)


def torch_pad_list(pads):
    """[(before, after)] per spatial dim -> F.pad's last-dim-first flat list."""
    flat = []
    for before, after in reversed(pads):
        flat += [before, after]
    return flat


CONV_CASES = [
    # spatial shape, C_in, C_out, kernel, strides, dilations, groups, pad_type, pad, bias
    ((11,), 4, 6, (3,), (2,), (1,), 2, "custom", [2, 1], True),
    ((9, 10), 4, 6, (3, 2), (2, 1), (1, 2), 2, "custom", [1, 2, 0, 1], True),
    ((10, 9), 3, 5, (3, 3), (2, 2), (1, 1), 1, "same", None, False),
    ((8, 7), 3, 4, (2, 4), (1, 1), (1, 1), 1, "same_lower", None, True),
    ((12, 12), 6, 12, (3, 3), (1, 1), (2, 2), 6, "same", None, True),  # depthwise x2, dilated
    ((7, 7), 8, 5, (1, 1), (1, 1), (1, 1), 1, "valid", None, True),    # pointwise fast path
    # depthwise (one channel per group): computed directly, without unfolding
    ((13, 11), 5, 5, (3, 3), (2, 2), (1, 1), 5, "custom", [1, 2, 0, 1], True),
    ((12, 12), 4, 4, (3, 3), (1, 1), (2, 2), 4, "same", None, False),
    ((17,), 3, 3, (5,), (3,), (1,), 3, "valid", None, True),
    ((4, 5, 6), 2, 2, (3, 3, 3), (1, 2, 1), (1, 1, 1), 2, "same", None, True),
    ((40, 40), 64, 64, (3, 3), (1, 1), (1, 1), 64, "same", None, True),  # spread over the pool
    ((5, 6, 7), 2, 3, (3, 2, 3), (2, 1, 2), (1, 1, 1), 1, "same", None, True),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=lambda c: f"{len(c[0])}d-{c[7]}-g{c[6]}")
def test_conv(tmp_path, case):
    spatial, cin, cout, kernel, strides, dil, groups, pad_type, pad, has_bias = case
    x = rand(2, cin, *spatial)
    w = rand(cout, cin // groups, *kernel)
    b = rand(cout)
    kwargs = dict(weight=w, strides=list(strides), dilations=list(dil), groups=groups, pad_type=pad_type)
    if pad is not None:
        kwargs["pad"] = pad
    if has_bias:
        kwargs["bias"] = b

    @mb.program(input_specs=[spec(x.shape)], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.conv(x=x, name="y", **kwargs)

    y = run(prog, tmp_path, {"x": x})["y"]
    if pad_type == "custom":
        pads = [(pad[2 * i], pad[2 * i + 1]) for i in range(len(spatial))]
    elif pad_type == "valid":
        pads = [(0, 0)] * len(spatial)
    else:
        pads = [same_pads(s, k, st, d, pad_type == "same_lower") for s, k, st, d in zip(spatial, kernel, strides, dil)]
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[len(spatial)]
    ref = conv(F.pad(t(x), torch_pad_list(pads)), t(w), t(b) if has_bias else None, stride=strides,
               dilation=dil, groups=groups)
    check(y, ref.numpy())


def test_conv_fp16_program(tmp_path):
    x = rand(1, 8, 12, 12)
    w = rand(16, 8, 3, 3) * 0.2

    @mb.program(input_specs=[spec(x.shape)], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.conv(x=x, weight=w, pad_type="same", name="y")

    y = backend_check.load(save_program(prog, tmp_path, fp16=True)).predict({"x": x})["y"]
    check(y, F.conv2d(t(x), t(w), padding=1).numpy(), rtol=1e-2, atol=2e-2)


CONV_T_CASES = [
    # spatial shape, C_in, C_out, kernel, strides, dilations, groups, pad_type, pad, output_shape
    ((5, 6), 4, 3, (3, 3), (2, 2), (1, 1), 1, "custom", [1, 1, 0, 0], None),
    ((5, 4), 4, 6, (3, 2), (2, 3), (2, 1), 2, "custom", [2, 1, 0, 1], None),
    ((7,), 3, 2, (4,), (3,), (1,), 1, "valid", None, None),
    ((4, 5), 2, 3, (3, 3), (2, 2), (1, 1), 1, "same", None, None),
    ((4, 5), 2, 3, (3, 3), (2, 2), (1, 1), 1, "same", None, [1, 3, 7, 9]),
    ((4, 5), 2, 3, (3, 3), (2, 2), (1, 1), 1, "custom", [1, 1, 1, 1], [1, 3, 8, 10]),  # output_padding-like
    ((3, 4, 3), 2, 2, (2, 3, 2), (2, 1, 2), (1, 1, 1), 1, "valid", None, None),
]


@pytest.mark.parametrize("case", CONV_T_CASES, ids=lambda c: f"{len(c[0])}d-{c[7]}-g{c[6]}-{c[9] is not None}")
def test_conv_transpose(tmp_path, case):
    spatial, cin, cout, kernel, strides, dil, groups, pad_type, pad, output_shape = case
    n = 1
    x = rand(n, cin, *spatial)
    w = rand(cin, cout // groups, *kernel)
    b = rand(cout)
    kwargs = dict(weight=w, bias=b, strides=list(strides), dilations=list(dil), groups=groups, pad_type=pad_type)
    if pad is not None:
        kwargs["pad"] = pad
    if output_shape is not None:
        kwargs["output_shape"] = output_shape

    @mb.program(input_specs=[spec(x.shape)], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.conv_transpose(x=x, name="y", **kwargs)

    y = run(prog, tmp_path, {"x": x})["y"]
    # Reference: the full (uncropped) transposed convolution, then crop `before` and take D_out.
    convt = {1: F.conv_transpose1d, 2: F.conv_transpose2d, 3: F.conv_transpose3d}[len(spatial)]
    full = convt(t(x), t(w), None, stride=strides, dilation=dil, groups=groups).numpy()
    index = [slice(None), slice(None)]
    ref = np.zeros((n, cout) + tuple(y.shape[2:]))
    for i, size in enumerate(spatial):
        full_size = (size - 1) * strides[i] + (kernel[i] - 1) * dil[i] + 1
        if pad_type == "custom":
            before = pad[2 * i]
            d_out = full_size - pad[2 * i] - pad[2 * i + 1]
        elif pad_type == "same":
            d_out = size * strides[i]
            before = 0
        else:
            before, d_out = 0, full_size
        if output_shape is not None:
            d_out = output_shape[2 + i]
        if pad_type == "same":
            before = max(0, full_size - d_out) // 2
        assert y.shape[2 + i] == d_out
        index.append(slice(before, before + d_out))
    cropped = full[tuple(index)]
    ref[(slice(None), slice(None)) + tuple(slice(0, s) for s in cropped.shape[2:])] = cropped
    ref += b.reshape((1, cout) + (1,) * len(spatial))
    check(y, ref)
    if pad_type == "custom" and output_shape is None and pad[0] == pad[1] and pad[-2] == pad[-1]:
        sym = tuple(pad[2 * i] for i in range(len(spatial)))
        check(y, convt(t(x), t(w), t(b), stride=strides, padding=sym, dilation=dil, groups=groups).numpy())


# ---------------------------------------------------------------------------------------------
# pooling


POOL_CASES = [
    # kind, spatial, kernel, strides, pad_type, pad, ceil_mode, exclude_padding
    ("avg", (9, 10), (3, 3), (2, 2), "custom", [1, 1, 1, 1], False, False),
    ("avg", (9, 10), (3, 3), (2, 2), "custom", [1, 0, 1, 1], False, True),
    ("avg", (9, 10), (3, 2), (2, 2), "custom", [1, 1, 0, 0], True, False),
    ("avg", (8, 9), (3, 3), (2, 2), "custom", [1, 1, 1, 1], True, True),
    ("avg", (15,), (4,), (3,), "same", None, False, True),
    ("avg", (15,), (4,), (3,), "valid", None, True, False),
    ("avg", (4, 6, 5), (2, 2, 2), (2, 2, 2), "valid", None, False, False),
    ("max", (7, 8), (2, 3), (2, 2), "same", None, False, False),
    ("max", (7, 8), (3, 2), (2, 3), "same_lower", None, False, False),
    ("max", (9, 9), (3, 3), (2, 2), "valid", None, True, False),
    ("max", (5, 6, 7), (3, 3, 3), (2, 2, 2), "custom", [1, 0, 1, 1, 0, 1], False, False),
    ("max", (11,), (3,), (2,), "custom", [1, 1], False, False),
    ("l2", (8, 7), (2, 3), (2, 2), "valid", None, False, False),
    ("l2", (10,), (3,), (2,), "same", None, False, False),
]


def torch_pool_reference(kind, x, kernel, strides, pads, ceil_mode, exclude):
    dims = len(kernel)
    xt = t(x)
    if ceil_mode:  # symmetric padding: torch's own padding and ceil rule
        sym = tuple(p[0] for p in pads)
        if kind == "max":
            return {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[dims](xt, kernel, strides, sym, ceil_mode=True)
        return {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[dims](
            xt, kernel, strides, sym, ceil_mode=True, count_include_pad=not exclude)
    avg = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}[dims]
    flat = torch_pad_list(pads)
    if kind == "max":
        return {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}[dims](
            F.pad(xt, flat, value=-np.inf), kernel, strides)
    size = float(np.prod(kernel))
    sums = avg(F.pad(xt, flat), kernel, strides) * size
    if kind == "l2":
        return torch.sqrt(avg(F.pad(xt * xt, flat), kernel, strides) * size)
    if exclude:
        counts = avg(F.pad(torch.ones_like(xt), flat), kernel, strides) * size
        return sums / counts
    return sums / size


@pytest.mark.parametrize("case", POOL_CASES, ids=lambda c: f"{c[0]}-{len(c[1])}d-{c[4]}-ceil{int(c[6])}")
def test_pool(tmp_path, case):
    kind, spatial, kernel, strides, pad_type, pad, ceil_mode, exclude = case
    x = rand(2, 3, *spatial)
    kwargs = dict(kernel_sizes=list(kernel), strides=list(strides), pad_type=pad_type, ceil_mode=ceil_mode)
    if pad is not None:
        kwargs["pad"] = pad
    if kind == "avg":
        kwargs["exclude_padding_from_average"] = exclude
    op = {"avg": mb.avg_pool, "max": mb.max_pool, "l2": mb.l2_pool}[kind]

    @mb.program(input_specs=[spec(x.shape)], opset_version=ct.target.iOS18)
    def prog(x):
        return op(x=x, name="y", **kwargs)

    y = run(prog, tmp_path, {"x": x})["y"]
    if pad_type == "custom":
        pads = [(pad[2 * i], pad[2 * i + 1]) for i in range(len(spatial))]
    elif pad_type == "valid":
        pads = [(0, 0)] * len(spatial)
    else:
        pads = [same_pads(s, k, st, 1, pad_type == "same_lower") for s, k, st in zip(spatial, kernel, strides)]
    check(y, torch_pool_reference(kind, x, kernel, strides, pads, ceil_mode, exclude).numpy())


# ---------------------------------------------------------------------------------------------
# normalization


def test_batch_and_instance_norm(tmp_path):
    x3, x4, x5 = rand(2, 4, 7), rand(2, 3, 5, 6), rand(1, 2, 3, 4, 5)
    mean, var, gamma, beta = rand(3), np.abs(rand(3)) + 0.1, rand(3), rand(3)
    g4, b4 = rand(4), rand(4)

    @mb.program(input_specs=[spec(x3.shape), spec(x4.shape), spec(x5.shape)], opset_version=ct.target.iOS18)
    def prog(x3, x4, x5):
        return (mb.batch_norm(x=x4, mean=mean, variance=var, gamma=gamma, beta=beta, epsilon=1e-3, name="bn4"),
                mb.batch_norm(x=x5, mean=mean[:2], variance=var[:2], name="bn5"),
                mb.instance_norm(x=x3, gamma=g4, beta=b4, epsilon=1e-4, name="in3"),
                mb.instance_norm(x=x4, name="in4"))

    out = run(prog, tmp_path, {"x3": x3, "x4": x4, "x5": x5})
    check(out["bn4"], F.batch_norm(t(x4), t(mean), t(var), t(gamma), t(beta), eps=1e-3).numpy())
    check(out["bn5"], F.batch_norm(t(x5), t(mean[:2]), t(var[:2]), eps=1e-5).numpy())
    check(out["in3"], F.instance_norm(t(x3), weight=t(g4), bias=t(b4), eps=1e-4).numpy())
    check(out["in4"], F.instance_norm(t(x4), eps=1e-5).numpy())


def np_layer_norm(x, axes, gamma=None, beta=None, eps=1e-5):
    x = x.astype(np.float64)
    mean = x.mean(axis=tuple(axes), keepdims=True)
    var = ((x - mean) ** 2).mean(axis=tuple(axes), keepdims=True)
    y = (x - mean) / np.sqrt(var + eps)
    shape = [x.shape[a] if a in axes else 1 for a in range(x.ndim)]
    if gamma is not None:
        y = y * gamma.reshape(shape)
    if beta is not None:
        y = y + beta.reshape(shape)
    return y


def test_layer_norm(tmp_path):
    x = rand(2, 3, 4, 5) * 3 + 1
    g2, b2 = rand(4, 5), rand(4, 5)
    g1 = rand(3)

    @mb.program(input_specs=[spec(x.shape)], opset_version=ct.target.iOS18)
    def prog(x):
        return (mb.layer_norm(x=x, axes=[-2, -1], gamma=g2, beta=b2, epsilon=1e-3, name="last2"),
                mb.layer_norm(x=x, axes=[0, 1, 2, 3], name="all"),
                mb.layer_norm(x=x, axes=[1], gamma=g1, name="middle"),
                mb.layer_norm(x=x, axes=[0, 2], name="scattered"))

    out = run(prog, tmp_path, {"x": x})
    check(out["last2"], np_layer_norm(x, [2, 3], g2, b2, eps=1e-3))
    check(out["all"], np_layer_norm(x, [0, 1, 2, 3]))
    check(out["middle"], np_layer_norm(x, [1], g1))
    check(out["scattered"], np_layer_norm(x, [0, 2]))


def test_layer_norm_fp16_program(tmp_path):
    x = rand(3, 64)
    g, b = rand(64), rand(64)

    @mb.program(input_specs=[spec(x.shape)], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.layer_norm(x=x, axes=[-1], gamma=g, beta=b, name="y")

    y = backend_check.load(save_program(prog, tmp_path, fp16=True)).predict({"x": x})["y"]
    check(y, F.layer_norm(t(x), (64,), t(g), t(b)).numpy(), rtol=1e-2, atol=2e-2)


def test_l2_norm_and_local_response_norm(tmp_path):
    x3, x4 = rand(3, 4, 5), rand(2, 6, 3, 4)

    @mb.program(input_specs=[spec(x3.shape), spec(x4.shape)], opset_version=ct.target.iOS18)
    def prog(x3, x4):
        return (mb.l2_norm(x=x3, name="l2_3"), mb.l2_norm(x=x4, epsilon=1e-2, name="l2_4"),
                mb.local_response_norm(x=x4, size=3, name="lrn3"),
                mb.local_response_norm(x=x4, size=5, alpha=0.1, beta=0.6, k=2.0, name="lrn5"))

    out = run(prog, tmp_path, {"x3": x3, "x4": x4})
    x3d, x4d = x3.astype(np.float64), x4.astype(np.float64)
    check(out["l2_3"], x3d / np.sqrt((x3d ** 2).sum() + 1e-6))
    check(out["l2_4"], x4d / np.sqrt((x4d ** 2).sum(axis=(1, 2, 3), keepdims=True) + 1e-2))
    check(out["lrn3"], F.local_response_norm(t(x4), 3, alpha=1e-4, beta=0.75, k=1.0).numpy())
    check(out["lrn5"], F.local_response_norm(t(x4), 5, alpha=0.1, beta=0.6, k=2.0).numpy())


# ---------------------------------------------------------------------------------------------
# scaled_dot_product_attention


def test_sdpa_masks(tmp_path):
    q, k, v = rand(2, 3, 5, 8), rand(2, 3, 7, 8), rand(2, 3, 7, 4)
    bool_mask = RNG.random((5, 7)) > 0.3
    bool_mask[:, 0] = True  # every row attends somewhere
    float_mask = rand(3, 1, 7)

    @mb.program(input_specs=[spec(q.shape), spec(k.shape), spec(v.shape), spec(bool_mask.shape, types.bool),
                             spec(float_mask.shape)], opset_version=ct.target.iOS18)
    def prog(q, k, v, bm, fm):
        return (mb.scaled_dot_product_attention(query=q, key=k, value=v, name="plain"),
                mb.scaled_dot_product_attention(query=q, key=k, value=v, attn_mask=bm, name="bool_mask"),
                mb.scaled_dot_product_attention(query=q, key=k, value=v, attn_mask=fm, name="float_mask"))

    out = run(prog, tmp_path, {"q": q, "k": k, "v": v, "bm": bool_mask, "fm": float_mask})
    sdpa = F.scaled_dot_product_attention
    check(out["plain"], sdpa(t(q), t(k), t(v)).numpy())
    check(out["bool_mask"], sdpa(t(q), t(k), t(v), attn_mask=torch.from_numpy(bool_mask)).numpy())
    check(out["float_mask"], sdpa(t(q), t(k), t(v), attn_mask=t(float_mask)).numpy())


def test_sdpa_fp16_rank3(tmp_path):
    q, k, v = rand(4, 6, 16), rand(4, 9, 16), rand(4, 9, 8)
    mask = rand(6, 9).astype(np.float16)

    @mb.program(input_specs=[spec(q.shape, types.fp16), spec(k.shape, types.fp16), spec(v.shape, types.fp16),
                             spec(mask.shape, types.fp16)], opset_version=ct.target.iOS18)
    def prog(q, k, v, m):
        return mb.scaled_dot_product_attention(query=q, key=k, value=v, attn_mask=m, name="y")

    f16 = {n: a.astype(np.float16) for n, a in {"q": q, "k": k, "v": v}.items()}
    y = run(prog, tmp_path, dict(f16, m=mask))["y"]
    assert_fp16_values(y)
    ref = F.scaled_dot_product_attention(t(f16["q"]), t(f16["k"]), t(f16["v"]), attn_mask=t(mask))
    check(y, ref.numpy(), rtol=1e-2, atol=1e-2)


def test_sdpa_heads_over_threads(tmp_path):
    # Twelve heads, each with a mask of its own or all sharing a causal one: computed whole by
    # one thread each, the results must be the same bits at 1 and 2 threads, and PyTorch's.
    q, k, v = rand(2, 6, 9, 16), rand(2, 6, 33, 16), rand(2, 6, 33, 8)
    per_head = rand(2, 6, 9, 33)
    causal = np.triu(np.full((9, 33), -np.inf, np.float32), 25)

    @mb.program(input_specs=[spec(q.shape), spec(k.shape), spec(v.shape), spec(per_head.shape), spec(causal.shape)],
                opset_version=ct.target.iOS18)
    def prog(q, k, v, r, c):
        return (mb.scaled_dot_product_attention(query=q, key=k, value=v, attn_mask=r, name="per_head"),
                mb.scaled_dot_product_attention(query=q, key=k, value=v, attn_mask=c, name="causal"))

    path = build(prog, tmp_path)
    feed = {"q": q, "k": k, "v": v, "r": per_head, "c": causal}
    one = coremlrt.MLModel(path, backend="reference", threads=1).predict(feed)
    two = coremlrt.MLModel(path, backend="reference", threads=2).predict(feed)
    sdpa = F.scaled_dot_product_attention
    for name, mask in (("per_head", per_head), ("causal", causal)):
        np.testing.assert_array_equal(one[name], two[name])
        check(two[name], sdpa(t(q), t(k), t(v), attn_mask=t(mask)).numpy())


# ---------------------------------------------------------------------------------------------
# recurrent layers


def torch_to_ifoz(a):
    """PyTorch LSTM gate blocks [i, f, g, o] -> Core ML [i, f, o, z]."""
    i, f, g, o = np.split(a, 4)
    return np.concatenate([i, f, o, g])


def np_sigmoid(v):
    return 1 / (1 + np.exp(-v))


def np_lstm(x, h, c, wih, whh, b, peep, clip, reverse):
    """Core ML gate order, peephole and cell clip, one direction; returns (sequence, h, c)."""
    hidden = whh.shape[1]
    outs = []
    steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
    p_i, p_f, p_o = np.split(peep, 3)
    for s in steps:
        g = x[s] @ wih.T + h @ whh.T + b
        gi, gf, go, gz = (g[:, n * hidden:(n + 1) * hidden] for n in range(4))
        i, f = np_sigmoid(gi + c * p_i), np_sigmoid(gf + c * p_f)
        c = np.clip(f * c + i * np.tanh(gz), -clip, clip)
        h = np_sigmoid(go + c * p_o) * np.tanh(c)
        outs.append(h)
    return np.stack(outs), h, c


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
def test_lstm_vs_torch(tmp_path, direction):
    seq, batch, inp, hid = 5, 3, 6, 4
    bidir = direction == "bidirectional"
    lstm = torch.nn.LSTM(inp, hid, bidirectional=bidir).double()
    sd = {k: v.detach().numpy() for k, v in lstm.state_dict().items()}
    x = rand(seq, batch, inp)
    dirs = 2 if bidir else 1
    h0, c0 = rand(dirs, batch, hid), rand(dirs, batch, hid)
    params = dict(weight_ih=torch_to_ifoz(sd["weight_ih_l0"]), weight_hh=torch_to_ifoz(sd["weight_hh_l0"]),
                  bias=torch_to_ifoz(sd["bias_ih_l0"] + sd["bias_hh_l0"]))
    if bidir:
        params.update(weight_ih_back=torch_to_ifoz(sd["weight_ih_l0_reverse"]),
                      weight_hh_back=torch_to_ifoz(sd["weight_hh_l0_reverse"]),
                      bias_back=torch_to_ifoz(sd["bias_ih_l0_reverse"] + sd["bias_hh_l0_reverse"]))
    params = {k: v.astype(np.float32) for k, v in params.items()}
    # Core ML states are [b, D*H] with the forward half first.
    h0_cm = np.concatenate(list(h0), axis=1)
    c0_cm = np.concatenate(list(c0), axis=1)

    @mb.program(input_specs=[spec(x.shape), spec(h0_cm.shape), spec(c0_cm.shape)], opset_version=ct.target.iOS18)
    def prog(x, h, c):
        seq_out, h_n, c_n = mb.lstm(x=x, initial_h=h, initial_c=c, direction=direction, output_sequence=True,
                                    **params)
        last, _, _ = mb.lstm(x=x, initial_h=h, initial_c=c, direction=direction, output_sequence=False, **params)
        return (mb.identity(x=seq_out, name="seq"), mb.identity(x=h_n, name="h"), mb.identity(x=c_n, name="c"),
                mb.identity(x=last, name="last"))

    out = run(prog, tmp_path, {"x": x, "h": h0_cm, "c": c0_cm})
    # A reverse layer emits its sequence in processing order: run torch on the flipped input.
    xt = t(x[::-1].copy()) if direction == "reverse" else t(x)
    ref, (hn, cn) = lstm(xt, (t(h0), t(c0)))
    ref = ref.detach().numpy()
    hn = np.concatenate(list(hn.detach().numpy()), axis=1)
    cn = np.concatenate(list(cn.detach().numpy()), axis=1)
    check(out["seq"], ref)
    check(out["h"], hn)
    check(out["c"], cn)
    check(out["last"], hn[None])


@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("batch, hidden", [(1, 136), (2, 136), (1, 132)])
def test_wide_lstm_steps_split_over_threads(tmp_path, direction, batch, hidden):
    # Wide enough that each step's units are split into blocks run on several threads
    # (src/ops/recurrent.cc, StepBlocks): batch 1 with H a multiple of 8 takes the dot-product
    # kernels, the others gemm per block. Every thread count gives the same bits.
    seq, inp = 37, 40
    dirs = 2 if direction == "bidirectional" else 1
    weights = [(rand(4 * hidden, inp) * 0.2, rand(4 * hidden, hidden) * 0.1, rand(4 * hidden)) for _ in range(dirs)]
    x, h0, c0 = rand(seq, batch, inp), rand(batch, dirs * hidden), rand(batch, dirs * hidden)
    params = dict(weight_ih=weights[0][0], weight_hh=weights[0][1], bias=weights[0][2])
    if dirs == 2:
        params.update(weight_ih_back=weights[1][0], weight_hh_back=weights[1][1], bias_back=weights[1][2])

    @mb.program(input_specs=[spec(x.shape), spec(h0.shape), spec(c0.shape)], opset_version=ct.target.iOS18)
    def prog(x, h, c):
        seq_out, h_n, c_n = mb.lstm(x=x, initial_h=h, initial_c=c, direction=direction, output_sequence=True,
                                    **params)
        return mb.identity(x=seq_out, name="seq"), mb.identity(x=h_n, name="h"), mb.identity(x=c_n, name="c")

    path = build(prog, tmp_path)
    feeds = {"x": x, "h": h0, "c": c0}
    outs = [coremlrt.MLModel(path, backend="reference", threads=n).predict(feeds) for n in (1, 2, 3)]
    for other in outs[1:]:
        for name in ("seq", "h", "c"):
            np.testing.assert_array_equal(other[name], outs[0][name], err_msg=name)
    sequences, hs, cs = [], [], []
    for d in range(dirs):
        wih, whh, b = (w.astype(np.float64) for w in weights[d])
        part = slice(d * hidden, (d + 1) * hidden)
        ys, h, c = np_lstm(x.astype(np.float64), h0[:, part].astype(np.float64), c0[:, part].astype(np.float64),
                           wih, whh, b, np.zeros(3 * hidden), np.inf, direction == "reverse" or d == 1)
        # A bidirectional layer aligns its backward half with input time.
        sequences.append(ys[::-1] if d == 1 else ys)
        hs.append(h)
        cs.append(c)
    check(outs[0]["seq"], np.concatenate(sequences, axis=2))
    check(outs[0]["h"], np.concatenate(hs, axis=1))
    check(outs[0]["c"], np.concatenate(cs, axis=1))


def test_lstm_initial_state_of_more_rows_than_the_batch(tmp_path):
    """The lstm coremltools writes for torch's LSTM over pack_padded_sequence (mlprogram): its
    _pack_padded_sequence passes the sequence lengths on as the PackedSequence's batch_sizes, so
    the zero initial state is filled with lengths[0] rows (the longest sequence) where the batch
    has 3. Core ML gives torch's result; the state's first batch rows are the initial state."""
    seq, batch, inp, hid = 10, 3, 4, 6
    lstm = torch.nn.LSTM(inp, hid).double()
    sd = {k: v.detach().numpy() for k, v in lstm.state_dict().items()}
    params = dict(weight_ih=torch_to_ifoz(sd["weight_ih_l0"]), weight_hh=torch_to_ifoz(sd["weight_hh_l0"]),
                  bias=torch_to_ifoz(sd["bias_ih_l0"] + sd["bias_hh_l0"]))
    params = {k: v.astype(np.float32) for k, v in params.items()}
    x, lengths = rand(seq, batch, inp), np.array([10, 5, 1], np.int32)

    @mb.program(input_specs=[spec(x.shape), spec(lengths.shape, types.int32)], opset_version=ct.target.iOS15)
    def prog(x, lengths):
        longest = mb.slice_by_index(x=lengths, begin=[0], end=[1], end_mask=[False], squeeze_mask=[True])
        shape = mb.concat(values=(np.int32(1), longest, np.int32(hid)), axis=0)
        zeros = mb.squeeze(x=mb.fill(shape=shape, value=0.0), axes=[0])
        y, h, c = mb.lstm(x=x, initial_h=zeros, initial_c=zeros, output_sequence=True, **params)
        return mb.identity(x=y, name="y"), mb.identity(x=h, name="h"), mb.identity(x=c, name="c")

    out = run(prog, tmp_path, {"x": x, "lengths": lengths})
    ref, (hn, cn) = lstm(t(x))
    check(out["y"], ref.detach().numpy())
    check(out["h"], hn.detach().numpy()[0])
    check(out["c"], cn.detach().numpy()[0])


def test_lstm_step_kernels_sum_as_gemm_does(tmp_path):
    # One sequence alone takes the step kernel of its own (gate_dots, src/ops/recurrent_dots.cc);
    # the same sequence twice in a batch takes gemm per block. Both sum every element in gemm's
    # order, so the results are the same bits.
    seq, inp, hidden = 5, 40, 136
    w_ih, w_hh, b = rand(4 * hidden, inp) * 0.2, rand(4 * hidden, hidden) * 0.1, rand(4 * hidden)
    x = rand(seq, 1, inp)

    def sequence(batch):
        zeros = np.zeros((batch, hidden), np.float32)

        @mb.program(input_specs=[spec((seq, batch, inp))], opset_version=ct.target.iOS18)
        def prog(x):
            y, _, _ = mb.lstm(x=x, initial_h=zeros, initial_c=zeros, weight_ih=w_ih, weight_hh=w_hh, bias=b,
                              output_sequence=True)
            return mb.identity(x=y, name="y")

        model = coremlrt.MLModel(build(prog, tmp_path, f"b{batch}"), backend="reference", threads=2)
        return model.predict({"x": np.repeat(x, batch, axis=1)})["y"]

    one, two = sequence(1), sequence(2)
    np.testing.assert_array_equal(two[:, 0], two[:, 1])
    np.testing.assert_array_equal(one[:, 0], two[:, 0])


def test_lstm_peephole_clip_fp16(tmp_path):
    seq, batch, inp, hid = 6, 2, 5, 3
    wih, whh, b = rand(4 * hid, inp), rand(4 * hid, hid), rand(4 * hid)
    peep = rand(3 * hid)
    x, h0, c0 = rand(seq, batch, inp), rand(batch, hid), rand(batch, hid)

    def make(dtype):
        np_dtype = np.float16 if dtype == types.fp16 else np.float32  # weights share x's dtype

        @mb.program(input_specs=[spec(x.shape, dtype), spec(h0.shape, dtype), spec(c0.shape, dtype)],
                    opset_version=ct.target.iOS18)
        def prog(x, h, c):
            seq_out, h_n, c_n = mb.lstm(x=x, initial_h=h, initial_c=c, weight_ih=wih.astype(np_dtype),
                                        weight_hh=whh.astype(np_dtype), bias=b.astype(np_dtype),
                                        peephole=peep.astype(np_dtype), clip=np_dtype(0.7), direction="reverse",
                                        output_sequence=True)
            return mb.identity(x=seq_out, name="seq"), mb.identity(x=h_n, name="h"), mb.identity(x=c_n, name="c")
        return prog

    ref_seq, ref_h, ref_c = np_lstm(x.astype(np.float64), h0, c0, wih, whh, b, peep, 0.7, reverse=True)
    out = run(make(types.fp32), tmp_path, {"x": x, "h": h0, "c": c0}, name="fp32")
    check(out["seq"], ref_seq)
    check(out["h"], ref_h)
    check(out["c"], ref_c)
    assert np.abs(out["c"]).max() <= 0.7 + 1e-6
    f16 = {"x": x.astype(np.float16), "h": h0.astype(np.float16), "c": c0.astype(np.float16)}
    out16 = run(make(types.fp16), tmp_path, f16, name="fp16")
    assert_fp16_values(out16["seq"])
    check(out16["seq"], ref_seq, rtol=2e-2, atol=2e-2)


@pytest.mark.parametrize("reset_after", [True, False])
def test_gru(tmp_path, reset_after):
    seq, batch, inp, hid = 5, 2, 4, 3
    x, h0 = rand(seq, batch, inp), rand(batch, hid)
    w_ir, w_iz, w_in = rand(hid, inp), rand(hid, inp), rand(hid, inp)
    w_hr, w_hz, w_hn = rand(hid, hid), rand(hid, hid), rand(hid, hid)
    b_ir, b_iz, b_in, b_hr, b_hz, b_hn = (rand(hid) for _ in range(6))
    params = dict(weight_ih=np.concatenate([w_ir, w_in, w_iz]), weight_hh=np.concatenate([w_hr, w_hn, w_hz]),
                  input_bias=np.concatenate([b_ir, b_in, b_iz]), bias=np.concatenate([b_hr, b_hn, b_hz]),
                  reset_after=reset_after)

    @mb.program(input_specs=[spec(x.shape), spec(h0.shape)], opset_version=ct.target.iOS18)
    def prog(x, h):
        fwd, h_n = mb.gru(x=x, initial_h=h, output_sequence=True, **params)
        rev, _ = mb.gru(x=x, initial_h=h, output_sequence=False, direction="reverse", **params)
        return mb.identity(x=fwd, name="seq"), mb.identity(x=h_n, name="h"), mb.identity(x=rev, name="rev")

    out = run(prog, tmp_path, {"x": x, "h": h0})

    def reference(xs):
        h = h0.astype(np.float64)
        outs = []
        for s in range(xs.shape[0]):
            r = np_sigmoid(xs[s] @ w_ir.T + b_ir + h @ w_hr.T + b_hr)
            z = np_sigmoid(xs[s] @ w_iz.T + b_iz + h @ w_hz.T + b_hz)
            if reset_after:  # PyTorch's formulation
                n = np.tanh(xs[s] @ w_in.T + b_in + r * (h @ w_hn.T + b_hn))
            else:
                n = np.tanh(xs[s] @ w_in.T + b_in + (r * h) @ w_hn.T + b_hn)
            h = (1 - z) * n + z * h
            outs.append(h)
        return np.stack(outs)

    ref = reference(x.astype(np.float64))
    check(out["seq"], ref)
    check(out["h"], ref[-1])
    check(out["rev"], reference(x[::-1].astype(np.float64))[-1:])
    if reset_after:
        gru = torch.nn.GRU(inp, hid).double()
        gru.load_state_dict({"weight_ih_l0": t(np.concatenate([w_ir, w_iz, w_in])),
                             "weight_hh_l0": t(np.concatenate([w_hr, w_hz, w_hn])),
                             "bias_ih_l0": t(np.concatenate([b_ir, b_iz, b_in])),
                             "bias_hh_l0": t(np.concatenate([b_hr, b_hz, b_hn]))})
        check(out["seq"], gru(t(x), t(h0[None]))[0].detach().numpy())


@pytest.mark.parametrize("activation", ["tanh", "relu"])
def test_rnn_vs_torch(tmp_path, activation):
    seq, batch, inp, hid = 6, 2, 4, 5
    rnn = torch.nn.RNN(inp, hid, nonlinearity=activation).double()
    sd = {k: v.detach().numpy().astype(np.float32) for k, v in rnn.state_dict().items()}
    x, h0 = rand(seq, batch, inp), rand(batch, hid)

    @mb.program(input_specs=[spec(x.shape), spec(h0.shape)], opset_version=ct.target.iOS18)
    def prog(x, h):
        kw = dict(weight_ih=sd["weight_ih_l0"], weight_hh=sd["weight_hh_l0"],
                  bias=sd["bias_ih_l0"] + sd["bias_hh_l0"], activation=activation, output_sequence=True)
        fwd, h_n = mb.rnn(x=x, initial_h=h, **kw)
        rev, _ = mb.rnn(x=x, initial_h=h, direction="reverse", **kw)
        return mb.identity(x=fwd, name="seq"), mb.identity(x=h_n, name="h"), mb.identity(x=rev, name="rev")

    out = run(prog, tmp_path, {"x": x, "h": h0})
    ref, hn = rnn(t(x), t(h0[None]))
    check(out["seq"], ref.detach().numpy())
    check(out["h"], hn[0].detach().numpy())
    check(out["rev"], rnn(t(x[::-1].copy()), t(h0[None]))[0].detach().numpy())


# ---------------------------------------------------------------------------------------------
# converted PyTorch modules


def convert_torch(module, example, tmp_path, name):
    traced = torch.jit.trace(module.eval(), example)
    model = ct.convert(traced, inputs=[ct.TensorType(name="x", shape=example.shape)], convert_to="mlprogram",
                       compute_precision=ct.precision.FLOAT32, minimum_deployment_target=ct.target.iOS18,
                       skip_model_load=True)
    path = os.path.join(str(tmp_path), name + ".mlpackage")
    model.save(path)
    return backend_check.load(path)


class SmallCNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2, groups=2, padding=1, bias=False)
        self.up = torch.nn.ConvTranspose2d(8, 4, 2, stride=2)

    def forward(self, x):
        x = torch.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(x, 2, ceil_mode=True)
        x = F.avg_pool2d(self.conv2(x), 3, stride=1, padding=1, count_include_pad=False)
        return self.up(x)


def test_converted_torch_cnn(tmp_path):
    torch.manual_seed(0)
    module = SmallCNN()
    with torch.no_grad():  # non-trivial BatchNorm statistics
        module.bn1.running_mean.uniform_(-0.5, 0.5)
        module.bn1.running_var.uniform_(0.5, 2.0)
    x = torch.randn(2, 3, 15, 17)
    model = convert_torch(module, x, tmp_path, "cnn")
    (y,) = model.predict({"x": x.numpy()}).values()
    check(y, module(x).detach().numpy(), rtol=1e-4, atol=1e-4)


class SmallLSTM(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(6, 8, batch_first=True, bidirectional=True)
        self.head = torch.nn.Linear(16, 3)

    def forward(self, x):
        return self.head(self.lstm(x)[0])


def test_converted_torch_bidirectional_lstm(tmp_path):
    torch.manual_seed(1)
    module = SmallLSTM()
    x = torch.randn(2, 7, 6)
    model = convert_torch(module, x, tmp_path, "lstm")
    (y,) = model.predict({"x": x.numpy()}).values()
    check(y, module(x).detach().numpy(), rtol=1e-4, atol=1e-4)
