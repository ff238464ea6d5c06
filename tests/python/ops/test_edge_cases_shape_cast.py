"""Edge cases of shape ops and casts: negative axes, zero-size dims, size-1 dims and rank-0
results, cast truncation, rounding to fp16 (ties to even) and bool conversions.

References are computed here with NumPy. Elementwise and reduction edge cases are in
test_edge_cases.py.
"""

import coremltools as ct
import numpy as np
import pytest
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

from mil_helpers import predict_program as run
from mil_helpers import tensor_spec as spec

RNG = np.random.default_rng(77)
NAN, INF = float("nan"), float("inf")
INT32_MIN, INT32_MAX = np.iinfo(np.int32).min, np.iinfo(np.int32).max


def check_all(out, expected):
    """Exact shapes and values (NaN == NaN): these ops move values without arithmetic."""
    for name, want in expected.items():
        want = np.asarray(want)
        got = out[name]
        assert got.shape == want.shape, (name, got.shape, want.shape)
        np.testing.assert_array_equal(got, want, err_msg=name)


# ----------------------------------------------------------------------------- negative axes

TARGETS = pytest.mark.parametrize("target", [ct.target.iOS15, ct.target.iOS17], ids=["iOS15", "iOS17"])


@TARGETS
def test_negative_axes(tmp_path, target):
    x = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    x3 = RNG.standard_normal((1, 3, 4)).astype(np.float32)
    x1 = RNG.standard_normal((2, 3, 1)).astype(np.float32)
    s = RNG.standard_normal((1, 3, 1, 4)).astype(np.float32)

    @mb.program(input_specs=[spec(x), spec(x3), spec(x1), spec(s)], opset_version=target)
    def prog(x, x3, x1, s):
        split_a = mb.split(x=x, split_sizes=[1, 2], axis=-2)
        split_b = mb.split(x=x, num_splits=2, axis=-3)
        return (
            mb.concat(values=[x, x1], axis=-1, name="concat_last"),
            mb.concat(values=[x3, x], axis=-3, name="concat_first"),
            mb.identity(x=split_a[0], name="split_a0"), mb.identity(x=split_a[1], name="split_a1"),
            mb.identity(x=split_b[0], name="split_b0"), mb.identity(x=split_b[1], name="split_b1"),
            mb.softmax(x=x, axis=-3, name="softmax"),
            mb.gather(x=x, indices=np.array([3, 0, 3], np.int32), axis=-1, name="gather_last"),
            mb.gather(x=x, indices=np.array([[2, 0], [1, 1]], np.int32), axis=-2, name="gather_rank2_indices"),
            # axes count in the output's rank: -1 and -3 of a rank-5 result are 4 and 2.
            mb.expand_dims(x=x, axes=[-1, -3], name="expand"),
            mb.squeeze(x=s, axes=[-2], name="squeeze_one"),
            mb.squeeze(x=s, axes=[-4, -2], name="squeeze_two"),
            # An end of -3 on a size-2 dim lies before the dim: MIL clamps it to index 0, which
            # is excluded (coremltools infers size 1); Python slicing would run past 0 and take 2.
            mb.slice_by_index(x=x, begin=[-1, -2, -1], end=[-3, 3, 0], stride=[-1, 1, -1], name="slice_negative"),
            mb.slice_by_index(x=x, begin=[0, -1, 0], end=[0, 0, -1], end_mask=[True, False, False],
                              squeeze_mask=[False, True, False], name="slice_squeeze_negative"),
            mb.slice_by_size(x=x, begin=[-1, 0, -3], size=[1, -1, 2], name="slice_by_size"),
            mb.reverse(x=x, axes=[-1, -3], name="reverse"),
            mb.transpose(x=x, perm=[2, 0, 1], name="transpose"),
            mb.reduce_max(x=x, axes=[-2], name="reduce_max"),
            mb.reduce_sum(x=x, axes=[-1, -3], keep_dims=True, name="reduce_sum"),
            mb.cumsum(x=x, axis=-1, name="cumsum"),
            mb.stack(values=[x, x], axis=-1, name="stack"),
            mb.flatten2d(x=x, axis=-1, name="flatten2d"),
        )

    out = run(prog, tmp_path, {"x": x, "x3": x3, "x1": x1, "s": s}, target)
    x64 = x.astype(np.float64)
    e = np.exp(x64 - x64.max(0))
    expected = {
        "concat_last": np.concatenate([x, x1], -1), "concat_first": np.concatenate([x3, x], -3),
        "split_a0": x[:, :1], "split_a1": x[:, 1:], "split_b0": x[:1], "split_b1": x[1:],
        "gather_last": x[..., [3, 0, 3]], "gather_rank2_indices": np.take(x, [[2, 0], [1, 1]], axis=-2),
        "expand": np.expand_dims(x, (-1, -3)), "squeeze_one": np.squeeze(s, -2), "squeeze_two": np.squeeze(s, (-4, -2)),
        "slice_negative": x[-1:0:-1, -2:3, -1:0:-1], "slice_squeeze_negative": x[:, -1, 0:-1],
        "slice_by_size": x[-1:, 0:, -3:-1], "reverse": x[::-1, :, ::-1], "transpose": x.transpose(2, 0, 1),
        "reduce_max": x.max(-2), "stack": np.stack([x, x], -1), "flatten2d": x.reshape(6, 4),
    }
    assert expected["expand"].shape == (2, 3, 1, 4, 1)
    check_all(out, expected)
    np.testing.assert_allclose(out["softmax"], e / e.sum(0), rtol=1e-6, atol=1e-7)
    np.testing.assert_allclose(out["reduce_sum"], x64.sum((-1, -3), keepdims=True), rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(out["cumsum"], np.cumsum(x64, -1), rtol=1e-6, atol=1e-6)


def test_gather_negative_indices_ios15(tmp_path):
    """The iOS15 gather counts negative indices from the end (iOS17 treats them as out of range)."""
    x = RNG.standard_normal((3, 4)).astype(np.float32)

    @mb.program(input_specs=[spec(x)], opset_version=ct.target.iOS15)
    def prog(x):
        return (mb.gather(x=x, indices=np.array([-1, 0, -3], np.int32), axis=-2, name="rows"),
                mb.gather(x=x, indices=np.array([[-4, 3]], np.int32), axis=1, name="columns"))

    out = run(prog, tmp_path, {"x": x}, ct.target.iOS15)
    check_all(out, {"rows": x[[-1, 0, -3]], "columns": x[:, [[-4, 3]]]})


# ----------------------------------------------------------------------------- casts


def fp16_neighbourhood():
    """fp32 values at and around the midpoints between fp16 neighbours, and past the ends."""
    ulp_at_1, ulp_at_2048 = 2.0**-10, 2.0
    return np.array([
        1 + ulp_at_1 / 2,            # tie between 1 and 1 + 2^-10: even mantissa, 1
        1 + 3 * ulp_at_1 / 2,        # tie between 1 + 2^-10 and 1 + 2^-9: 1 + 2^-9
        1 + ulp_at_1 / 2 + 2**-22,   # just above the tie: rounds up
        1 + ulp_at_1 / 2 - 2**-22,   # just below the tie: rounds down
        -(1 + ulp_at_1 / 2),         # ties are symmetric
        2048 + ulp_at_2048 / 2,      # 2049 -> 2048
        2048 + 3 * ulp_at_2048 / 2,  # 2051 -> 2052
        65504, 65519.996, 65520, -65520, 1e6,  # largest fp16; below and at the overflow tie
        2.0**-24, 2.0**-25, 3 * 2.0**-25, 2.0**-26,  # subnormals: smallest, ties to 0 and to 2^-23
        0.1, -0.0, INF, -INF, NAN,
    ], np.float32)


@TARGETS
def test_casts(tmp_path, target):
    f = np.array([-2.7, -2.5, -0.5, -0.0, 0.0, 0.5, 2.5, 2.7, 1e9, -1e9, 2147483520.0, -2147483648.0,
                  16777216.0, -7.999], np.float32)
    h = fp16_neighbourhood()
    i = np.array([0, 1, -1, 2049, 2051, 4097, 65504, 65519, 65520, 70000, -70000, 16777217, INT32_MAX, INT32_MIN],
                 np.int32)
    z = np.array([0.0, -0.0, 1e-30, -3.0, NAN, INF, -INF], np.float32)

    @mb.program(input_specs=[spec(f), spec(h), spec(i), spec(z)], opset_version=target)
    def prog(f, h, i, z):
        to_bool = mb.cast(x=z, dtype="bool")
        return (
            mb.cast(x=f, dtype="int32", name="f_int32"),
            mb.cast(x=mb.cast(x=f, dtype="fp16"), dtype="int32", name="f_fp16_int32"),
            mb.cast(x=h, dtype="fp16", name="h_fp16"),
            mb.cast(x=i, dtype="fp16", name="i_fp16"),
            mb.cast(x=i, dtype="fp32", name="i_fp32"),
            mb.cast(x=to_bool, dtype="int32", name="z_bool_int32"),
            mb.cast(x=to_bool, dtype="fp16", name="z_bool_fp16"),
            mb.cast(x=to_bool, dtype="fp32", name="z_bool_fp32"),
            mb.cast(x=mb.cast(x=i, dtype="bool"), dtype="int32", name="i_bool_int32"),
        )

    out = run(prog, tmp_path, {"f": f, "h": h, "i": i, "z": z}, target)
    with np.errstate(over="ignore"):
        expected = {
            # float -> int truncates toward zero (docs/design/coreml-format.md, "Numeric pitfalls"); every
            # value is in range.
            "f_int32": np.trunc(f.astype(np.float64)).astype(np.int32),
            "h_fp16": h.astype(np.float16),
            "i_fp16": i.astype(np.float16),
            "i_fp32": i.astype(np.float32),
            "z_bool_int32": (z != 0).astype(np.int32),  # NaN is nonzero, so true
            "z_bool_fp16": (z != 0).astype(np.float16),
            "z_bool_fp32": (z != 0).astype(np.float32),
            "i_bool_int32": (i != 0).astype(np.int32),
        }
    # fp32 -> fp16 -> int32: 1e9 and beyond become inf in fp16, whose int32 value is unspecified;
    # compare the representable ones only.
    with np.errstate(over="ignore"):
        f16 = f.astype(np.float16)
    finite = np.isfinite(f16)
    np.testing.assert_array_equal(out["f_fp16_int32"][finite], np.trunc(f16[finite].astype(np.float64)).astype(np.int32))
    assert list(expected["f_int32"][:8]) == [-2, -2, 0, 0, 0, 0, 2, 2]
    assert list(expected["h_fp16"][:7].astype(np.float64)) == [1, 1 + 2**-9, 1 + 2**-10, 1, -1, 2048, 2052]
    assert list(expected["i_fp16"][3:6].astype(np.float64)) == [2048, 2052, 4096]
    check_all(out, expected)
    # Signed zeros: -0.0 stays -0.0 through fp16.
    assert np.signbit(out["h_fp16"][list(h).index(0.0)])


def test_fp32_values_fed_to_an_fp16_input_round_to_nearest_even(tmp_path):
    """An fp32 array given for an fp16 input is rounded like cast(dtype="fp16")."""
    h = fp16_neighbourhood()

    @mb.program(input_specs=[mb.TensorSpec(shape=h.shape, dtype=types.fp16)], opset_version=ct.target.iOS17)
    def prog(h):
        return mb.identity(x=h, name="same")

    with np.errstate(over="ignore"):
        out = run(prog, tmp_path, {"h": h}, ct.target.iOS17)
        expected = h.astype(np.float16)
    check_all(out, {"same": expected})
    assert np.signbit(out["same"][list(h).index(0.0)])


def test_ios17_narrow_integer_casts(tmp_path):
    """iOS17 adds int8/uint8/int16/uint16 casts; in-range values truncate toward zero. (The
    outputs are cast back to int32: narrow integers are not model output types.)"""
    f = np.array([-128.9, -3.7, -0.9, 0.9, 3.7, 127.9, 255.5, 0.0], np.float32)
    g = np.array([-32768.5, -1.5, 1.5, 32767.9, 65535.9, 0.99, 1000.5, 0.0], np.float32)

    @mb.program(input_specs=[spec(f), spec(g)], opset_version=ct.target.iOS17)
    def prog(f, g):
        return (mb.cast(x=mb.cast(x=mb.slice_by_size(x=f, begin=[0], size=[6]), dtype="int8"),
                        dtype="int32", name="to_int8"),
                mb.cast(x=mb.cast(x=mb.slice_by_size(x=f, begin=[2], size=[6]), dtype="uint8"), dtype="int32",
                        name="to_uint8"),
                mb.cast(x=mb.cast(x=mb.slice_by_size(x=g, begin=[0], size=[4]), dtype="int16"), dtype="int32",
                        name="to_int16"),
                mb.cast(x=mb.cast(x=mb.slice_by_size(x=g, begin=[2], size=[6]), dtype="uint16"), dtype="int32",
                        name="to_uint16"))

    out = run(prog, tmp_path, {"f": f, "g": g}, ct.target.iOS17)
    # (Outputs named like a dtype would be renamed by coremltools, hence the prefix.)
    check_all(out, {"to_int8": np.trunc(f[:6]).astype(np.int32), "to_uint8": np.trunc(f[2:]).astype(np.int32),
                    "to_int16": np.trunc(g[:4]).astype(np.int32), "to_uint16": np.trunc(g[2:]).astype(np.int32)})


# ----------------------------------------------------------------------------- empty tensors


def test_empty_tensors(tmp_path):
    e = np.zeros((2, 0, 3), np.float32)
    full = RNG.standard_normal((2, 2, 3)).astype(np.float32)
    a = np.zeros((2, 0), np.float32)
    b = np.zeros((0, 3), np.float32)
    k = np.zeros((0, 4), np.int32)

    @mb.program(input_specs=[spec(e), spec(full), spec(a), spec(b), spec(k)], opset_version=ct.target.iOS17)
    def prog(e, full, a, b, k):
        return (
            mb.relu(x=e, name="relu"),
            mb.add(x=e, y=np.ones((1, 3), np.float32), name="add_broadcast"),
            mb.mul(x=e, y=mb.slice_by_size(x=full, begin=[0, 0, 0], size=[2, 1, 3]), name="mul_stretched_against_empty"),
            mb.concat(values=[e, full, e], axis=1, name="concat_empty_parts"),
            mb.concat(values=[e, e], axis=-1, name="concat_all_empty"),
            # A 0 in a reshape target copies a dim of x (iOS15: same position, iOS17: right-aligned;
            # both pick the empty one here).
            mb.reshape(x=e, shape=[3, 0, 2], name="reshape"),
            mb.transpose(x=e, perm=[2, 1, 0], name="transpose"),
            mb.slice_by_index(x=full, begin=[0, 1, 0], end=[2, 1, 3], name="slice_to_empty"),
            mb.cast(x=k, dtype="fp32", name="cast"),
            mb.add(x=k, y=np.int32(1), name="int_add"),
            # An empty inner dimension sums nothing: zeros.
            mb.matmul(x=a, y=b, name="matmul_empty_inner"),
            mb.softmax(x=e, axis=-1, name="softmax"),
        )

    out = run(prog, tmp_path, {"e": e, "full": full, "a": a, "b": b, "k": k}, ct.target.iOS17)
    check_all(out, {
        "relu": e, "add_broadcast": e, "mul_stretched_against_empty": e,
        "concat_empty_parts": full, "concat_all_empty": np.zeros((2, 0, 6), np.float32),
        "reshape": np.zeros((3, 0, 2), np.float32), "transpose": np.zeros((3, 0, 2), np.float32),
        "slice_to_empty": full[:, 1:1], "cast": np.zeros((0, 4), np.float32), "int_add": np.zeros((0, 4), np.int32),
        "matmul_empty_inner": np.zeros((2, 3), np.float32), "softmax": e,
    })


# ----------------------------------------------------------------------------- size-1 and rank-0


@TARGETS
def test_size_one_and_rank_zero(tmp_path, target):
    one = np.array([2.5], np.float32)
    cube = np.array([[[-1.5]]], np.float32)
    v = RNG.standard_normal(5).astype(np.float32)
    w = RNG.standard_normal((5, 2)).astype(np.float32)
    col = RNG.standard_normal((1, 3, 1)).astype(np.float32)

    @mb.program(input_specs=[spec(one), spec(cube), spec(v), spec(w), spec(col)], opset_version=target)
    def prog(one, cube, v, w, col):
        scalar = mb.reduce_sum(x=one)  # rank 0
        return (
            mb.identity(x=scalar, name="reduce_to_scalar"),
            mb.reduce_max(x=cube, keep_dims=True, name="reduce_keep"),
            mb.squeeze(x=cube, name="squeeze_all"),
            mb.squeeze(x=cube, axes=[-1], name="squeeze_last"),
            mb.expand_dims(x=scalar, axes=[0], name="expand_scalar"),
            mb.expand_dims(x=one, axes=[-1], name="expand_one"),
            mb.add(x=cube, y=scalar, name="add_rank0"),
            mb.mul(x=scalar, y=v, name="mul_rank0_left"),
            mb.gather(x=v, indices=np.int32(3), axis=0, name="gather_scalar_index"),
            mb.softmax(x=one, name="softmax_single"),
            mb.softmax(x=col, axis=-1, name="softmax_size1_axis"),
            mb.slice_by_index(x=one, begin=[0], end=[1], squeeze_mask=[True], name="slice_to_scalar"),
            mb.concat(values=[one, one, v], axis=0, name="concat_size1"),
            mb.transpose(x=col, perm=[2, 0, 1], name="transpose_size1"),
            mb.reduce_argmax(x=col, axis=-1, name="argmax_size1_axis"),
            mb.tile(x=one, reps=[3], name="tile"),
            mb.matmul(x=v, y=w, name="vector_matrix"),  # v gets a leading 1, removed again
        )

    out = run(prog, tmp_path, {"one": one, "cube": cube, "v": v, "w": w, "col": col}, target)
    expected = {
        "reduce_to_scalar": np.float32(2.5), "reduce_keep": cube, "squeeze_all": np.float32(-1.5),
        "squeeze_last": cube[..., 0], "expand_scalar": one, "expand_one": one[:, None],
        "add_rank0": cube + 2.5, "mul_rank0_left": 2.5 * v, "gather_scalar_index": v[3],
        "softmax_single": np.ones(1, np.float32), "softmax_size1_axis": np.ones((1, 3, 1), np.float32),
        "slice_to_scalar": np.float32(2.5), "concat_size1": np.concatenate([one, one, v]),
        "transpose_size1": col.transpose(2, 0, 1), "argmax_size1_axis": np.zeros((1, 3), np.int32),
        "tile": np.full(3, 2.5, np.float32),
    }
    check_all(out, expected)
    np.testing.assert_allclose(out["vector_matrix"], v.astype(np.float64) @ w, rtol=1e-6, atol=1e-6)
    assert out["vector_matrix"].shape == (2,)


# ----------------------------------------------------------------------------- large copies


def test_large_copies_split_over_threads(tmp_path):
    # Copies of 256 KiB and more are split along their outermost dim over the threads
    # (src/ops/strided.cc, copy_strided): slices with steps, reversed or squeezed, a transpose,
    # a concat and a slice update must still move every element exactly.
    x = RNG.standard_normal((6, 12, 256, 64)).astype(np.float32)
    update = RNG.standard_normal((12, 256, 64)).astype(np.float32)

    @mb.program(input_specs=[spec(x), spec(update)], opset_version=ct.target.iOS18)
    def prog(x, update):
        return (
            mb.slice_by_index(x=x, begin=[2, 0, 0, 0], end=[3, 12, 256, 64], squeeze_mask=[True, False, False, False],
                              name="layer"),
            mb.slice_by_index(x=x, begin=[5, 11, 255, 1], end=[0, 0, 0, 64], stride=[-2, -1, -3, 2],
                              end_mask=[False, True, True, False], name="reversed_steps"),
            mb.transpose(x=x, perm=[2, 0, 3, 1], name="transposed"),
            mb.concat(values=[x, x], axis=2, name="joined"),
            mb.slice_update(x=x, update=update, begin=[4, 0, 0, 0], end=[5, 12, 256, 64],
                            squeeze_mask=[True, False, False, False], name="updated"),
        )

    updated = x.copy()
    updated[4] = update
    expected = {
        "layer": x[2],
        "reversed_steps": x[5:0:-2, ::-1, ::-3, 1::2],
        "transposed": x.transpose(2, 0, 3, 1),
        "joined": np.concatenate([x, x], axis=2),
        "updated": updated,
    }
    check_all(run(prog, tmp_path, {"x": x, "update": update}, ct.target.iOS18), expected)
