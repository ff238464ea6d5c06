"""Shape, slice, gather/scatter, constexpr (weight decompression) and resize kernels.

Each test builds a small MIL program with pip's coremltools, runs it with coremlrt and
compares with a reference computed here in numpy (or torch, for the PyTorch-defined ops).
Several ops share one program to keep the number of conversions (the slow part) small.
"""

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import get_new_symbol, types

import backend_check
import coremlrt
from mil_helpers import save_program

RNG = np.random.default_rng(1234)


def run(prog, tmp_path, inputs, target=ct.target.iOS18, fp16=False, name="model"):
    path = save_program(prog, tmp_path, name=name, fp16=fp16, target=target)
    return backend_check.load(path).predict(inputs)


def rand(*shape):
    return RNG.standard_normal(shape).astype(np.float32)


def check(out, expected, atol=0.0):
    for key, want in expected.items():
        got = np.asarray(out[key])
        assert got.shape == want.shape, (key, got.shape, want.shape)
        np.testing.assert_allclose(got, want, rtol=0, atol=atol, err_msg=key)


# ----------------------------------------------------------------------------- layout ops


def test_layout_ops(tmp_path):
    x = rand(2, 3, 4, 5)
    y = rand(2, 3, 4, 5)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape), mb.TensorSpec(shape=y.shape)], opset_version=ct.target.iOS18)
    def prog(x, y):
        return (
            mb.reshape(x=x, shape=[0, -1, 2, 0], name="reshape"),  # iOS17 rule: 0s right-aligned
            mb.reshape(x=x, shape=[0, 8, 0], name="reshape_rank3"),  # left 0 <- 3, right 0 <- 5
            # unmatched 0 -> 1 (flatten2d, not reshape, first: coremltools would merge two reshapes)
            mb.reshape(x=mb.flatten2d(x=x, axis=3), shape=[0, 0, -1], name="reshape_grow"),
            mb.expand_dims(x=mb.reshape(x=x, shape=[6, 4, 5]), axes=[0, -1], name="expand"),
            # size-4 axis 2 is listed but not squeezed (PyTorch behaviour)
            mb.squeeze(x=mb.expand_dims(x=mb.reshape(x=x, shape=[6, 4, 5]), axes=[1, 3]), axes=[1, -2, 2], name="squeeze"),
            mb.transpose(x=x, perm=[3, 0, 2, 1], name="transpose"),
            mb.reverse(x=x, axes=[1, -1], name="reverse"),
            mb.flatten2d(x=x, axis=-2, name="flatten"),
            mb.concat(values=[x, y, x], axis=2, name="concat"),
            mb.concat(values=[x, y], axis=1, interleave=True, name="interleave"),
            mb.stack(values=[x, y], axis=2, name="stack"),
            mb.tile(x=x, reps=[1, 2, 1, 3], name="tile"),
            mb.pad(x=x, pad=[1, 2, 3, 0], mode="constant", constant_val=1.5, name="pad_constant"),
            mb.pad(x=x, pad=[0, 1, 3, 2, 2, 1], mode="reflect", name="pad_reflect"),
            mb.pad(x=x, pad=[2, 1, 0, 3], mode="replicate", name="pad_replicate"),
            mb.sliding_windows(x=x, axis=-1, size=2, stride=2, name="windows"),
        )

    out = run(prog, tmp_path, {"x": x, "y": y})
    check(out, {
        "reshape": x.reshape(2, 6, 2, 5),
        "reshape_rank3": x.reshape(3, 8, 5),
        "reshape_grow": x.reshape(1, 24, 5),
        "expand": x.reshape(1, 6, 4, 5, 1),
        "squeeze": x.reshape(6, 4, 5),
        "transpose": x.transpose(3, 0, 2, 1),
        "reverse": x[:, ::-1, :, ::-1],
        "flatten": x.reshape(6, 20),
        "concat": np.concatenate([x, y, x], axis=2),
        "interleave": np.stack([x, y], axis=2).reshape(2, 6, 4, 5),
        "stack": np.stack([x, y], axis=2),
        "tile": np.tile(x, (1, 2, 1, 3)),
        "pad_constant": np.pad(x, [(0, 0), (0, 0), (1, 2), (3, 0)], constant_values=1.5),
        "pad_reflect": np.pad(x, [(0, 0), (0, 1), (3, 2), (2, 1)], mode="reflect"),
        "pad_replicate": np.pad(x, [(0, 0), (0, 0), (2, 1), (0, 3)], mode="edge"),
        "windows": np.stack([x[..., 0:2], x[..., 2:4]], axis=-2),
    })


def test_slices(tmp_path):
    x = rand(4, 6, 8)
    u = rand(2, 3, 8)
    begin = np.array([1, -9, -3], dtype=np.int32)  # known at run time only: -9 clamps to 0

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape), mb.TensorSpec(shape=u.shape),
                             mb.TensorSpec(shape=(3,), dtype=types.int32)], opset_version=ct.target.iOS18)
    def prog(x, u, b):
        return (
            mb.slice_by_index(x=x, begin=[1, -1, 0], end=[4, 0, 8], stride=[2, -2, 3], name="strided"),
            mb.slice_by_index(x=x, begin=[0, 5, 0], end=[0, 0, -1], stride=[1, -1, 1], begin_mask=[True, False, False],
                              end_mask=[True, True, False], name="masks"),
            mb.slice_by_index(x=x, begin=[-1, 2, 0], end=[0, 6, 8], squeeze_mask=[True, False, False], name="squeezed"),
            mb.slice_by_index(x=x, begin=b, end=[4, 6, 8], name="runtime_begin"),
            mb.slice_by_index(x=x, begin=[0, -9, 2], end=[4, 100, 8], stride=[1, 1, 2], name="clamped"),
            mb.slice_by_size(x=x, begin=[1, -4, 2], size=[2, 3, 3], name="by_size"),
            # (coremltools mis-infers the shape for size -1 with a negative begin, so not combined)
            mb.slice_by_size(x=x, begin=[1, 2, 2], size=[2, -1, 3], name="by_size_end"),
            mb.slice_update(x=x, update=u, begin=[0, 1, 0], end=[4, 6, 8], stride=[2, 2, 1], name="update"),
        )

    out = run(prog, tmp_path, {"x": x, "u": u, "b": begin})
    updated = x.copy()
    updated[0:4:2, 1:6:2, :] = u
    check(out, {
        "strided": x[1:4:2, -1:0:-2, 0:8:3],
        "masks": x[:, 5::-1, 0:-1],
        "squeezed": x[-1, 2:6, :],
        "runtime_begin": x[1:, -9:, -3:],
        "clamped": x[0:4, -9:100, 2:8:2],
        "by_size": x[1:3, 2:5, 2:5],
        "by_size_end": x[1:3, 2:, 2:5],
        "update": updated,
    })


def test_slices_of_one_run_view_their_input_yet_outputs_are_the_callers_own(tmp_path):
    # Slices that select one run of memory are views of x (src/ops/slice.cc): of the caller's
    # input, of an engine buffer that is itself an output, and read by a later op. Outputs must
    # still be arrays of their own.
    x = rand(4, 6, 8)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS18)
    def prog(x):
        y = mb.add(x=x, y=np.float32(1.0), name="y")
        rows = mb.slice_by_index(x=y, begin=[1, 0, 0], end=[3, 6, 8], name="rows")
        doubled = mb.mul(x=x, y=np.float32(2.0))  # not an output: its slice is the one view of it
        return (y, rows, mb.relu(x=rows, name="relu_rows"),
                mb.slice_by_index(x=doubled, begin=[3, 0, 0], end=[4, 6, 8], name="doubled_last"),
                mb.slice_by_index(x=x, begin=[2, 0, 0], end=[3, 6, 8], squeeze_mask=[True, False, False], name="layer"),
                mb.slice_by_index(x=x, begin=[0, 3, 0], end=[4, 4, 8], name="not_one_run"))

    original = x.copy()
    out = run(prog, tmp_path, {"x": x})
    expected = {"y": original + 1, "rows": original[1:3] + 1, "relu_rows": np.maximum(original[1:3] + 1, 0),
                "doubled_last": original[3:4] * 2,
                "layer": original[2], "not_one_run": original[:, 3:4]}
    check(out, expected)
    x[:] = 0  # the caller's input changes after the prediction: no output sees it
    check(out, expected)
    for a in out:
        for b in out:
            assert a >= b or not np.shares_memory(out[a], out[b]), (a, b)


def test_reshape_ios15_zero_rule_and_runtime_shapes(tmp_path):
    x = rand(2, 3, 4)
    n = np.array([7], dtype=np.int32)
    idx = np.array([[0, 4, 2], [9, 1, -1]], dtype=np.int32)

    # A flexible first dim keeps shape/fill from being folded by the converter.
    batch = get_new_symbol()

    @mb.program(input_specs=[mb.TensorSpec(shape=(batch, 3, 4)), mb.TensorSpec(shape=(1,), dtype=types.int32),
                             mb.TensorSpec(shape=idx.shape, dtype=types.int32), mb.TensorSpec(shape=x.shape)],
                opset_version=ct.target.iOS15)
    def prog(x, n, idx, y):
        end = mb.squeeze(x=n)
        return (
            mb.reshape(x=y, shape=[0, -1, 2], name="reshape"),  # iOS15: 0 copies dim 0 (same rank)
            mb.shape(x=x, name="shape"),
            mb.fill(shape=mb.shape(x=x), value=2.5, name="fill"),
            mb.range_1d(end=end, start=1, step=2, name="range"),
            mb.range_1d(end=mb.cast(x=end, dtype="fp32"), start=0.5, step=1.25, name="range_f"),
            mb.one_hot(indices=idx, one_hot_vector_size=5, axis=1, on_value=3.0, off_value=-1.0, name="one_hot"),
            mb.tile(x=x, reps=mb.concat(values=[n, [1, 2]], axis=0), name="tile_runtime"),
            mb.pad(x=x, pad=mb.concat(values=[[1, 0, 0, 1], n, [1]], axis=0), name="pad_runtime"),
        )

    out = run(prog, tmp_path, {"x": x, "n": n, "idx": idx, "y": x}, target=ct.target.iOS15)
    one_hot = np.where(np.arange(5)[None, :, None] == idx[:, None, :], 3.0, -1.0).astype(np.float32)
    check(out, {
        "reshape": x.reshape(2, 6, 2),
        "shape": np.array([2, 3, 4], dtype=np.int32),
        "fill": np.full((2, 3, 4), 2.5, np.float32),
        "range": np.arange(1, 7, 2, dtype=np.int32),
        "range_f": np.arange(0.5, 7, 1.25, dtype=np.float32),
        "one_hot": one_hot,
        "tile_runtime": np.tile(x, (7, 1, 2)),
        "pad_runtime": np.pad(x, [(1, 0), (0, 1), (7, 1)]),
    })


def test_tensor_ops(tmp_path):
    x = rand(3, 4, 5)
    ties = RNG.integers(-3, 3, size=(4, 6)).astype(np.int32)
    lengths = np.array([2, 0, 4, 3], dtype=np.int32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape), mb.TensorSpec(shape=ties.shape, dtype=types.int32),
                             mb.TensorSpec(shape=lengths.shape, dtype=types.int32)], opset_version=ct.target.iOS18)
    def prog(x, t, lengths):
        values, indices = mb.topk(x=x, k=3, axis=1, name="topk")
        small, small_idx = mb.topk(x=t, k=4, axis=-1, ascending=True, name="topk_asc")
        return (
            mb.cumsum(x=x, axis=1, name="cumsum"),
            mb.cumsum(x=x, axis=-1, exclusive=True, reverse=True, name="cumsum_er"),
            mb.band_part(x=x, lower=1, upper=2, name="band"),
            mb.band_part(x=x, lower=-1, upper=0, name="lower_tri"),
            mb.argsort(x=t, axis=1, name="argsort_desc"),
            mb.argsort(x=t, axis=0, ascending=True, name="argsort_asc"),
            values, indices, small, small_idx,
            mb.fill_like(ref_tensor=x, value=-2.0, name="fill_like"),
            mb.reverse_sequence(x=x, lengths=mb.slice_by_size(x=lengths, begin=[0], size=[3]), seq_axis=2,
                                batch_axis=0, name="rev_seq"),
            mb.cast(x=mb.non_zero(x=t), dtype="fp32", name="non_zero"),
        )

    out = run(prog, tmp_path, {"x": x, "t": ties, "lengths": lengths})
    m, n = np.meshgrid(np.arange(4), np.arange(5), indexing="ij")
    order = np.argsort(-x, axis=1, kind="stable")[:, :3]
    asc = np.argsort(ties, axis=-1, kind="stable")[:, :4]
    rev = x.copy()
    for b, length in enumerate(lengths[:3]):
        rev[b, :, :length] = x[b, :, :length][:, ::-1]
    excl = np.flip(np.cumsum(np.flip(x, -1), -1), -1) - x
    check(out, {
        "cumsum": np.cumsum(x, axis=1),
        "band": np.where((m - n <= 1) & (n - m <= 2), x, 0),
        "lower_tri": np.where(n <= m, x, 0),
        "argsort_desc": np.argsort(-ties, axis=1, kind="stable").astype(np.int32),
        "argsort_asc": np.argsort(ties, axis=0, kind="stable").astype(np.int32),
        "topk_0": np.take_along_axis(x, order, axis=1),
        "topk_1": order.astype(np.int32),
        "topk_asc_0": np.take_along_axis(ties, asc, axis=-1),
        "topk_asc_1": asc.astype(np.int32),
        "fill_like": np.full(x.shape, -2.0, np.float32),
        "rev_seq": rev,
        "non_zero": np.argwhere(ties).astype(np.float32),
    })
    np.testing.assert_allclose(out["cumsum_er"], excl, atol=1e-5)


def test_space_and_batch_rearrangements(tmp_path):
    torch = pytest.importorskip("torch")
    x = rand(2, 8, 4, 6)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS18)
    def prog(x):
        s2b = mb.space_to_batch(x=x, block_shape=[2, 2], paddings=[[1, 1], [0, 2]], name="s2b")
        return (
            mb.depth_to_space(x=x, block_size=2, name="d2s"),
            mb.space_to_depth(x=x, block_size=2, name="s2d"),
            mb.pixel_shuffle(x=x, upscale_factor=2, name="shuffle"),
            mb.pixel_unshuffle(x=x, downscale_factor=np.uint32(2), name="unshuffle"),
            s2b,
            mb.batch_to_space(x=s2b, block_shape=[2, 2], crops=[[1, 1], [0, 2]], name="b2s"),
        )

    out = run(prog, tmp_path, {"x": x})
    n, c, h, w = x.shape
    d2s = x.reshape(n, 2, 2, c // 4, h, w).transpose(0, 3, 4, 1, 5, 2).reshape(n, c // 4, h * 2, w * 2)
    s2d = x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 3, 5, 1, 2, 4).reshape(n, c * 4, h // 2, w // 2)
    padded = np.pad(x, [(0, 0), (0, 0), (1, 1), (0, 2)])
    s2b = padded.reshape(n, c, 3, 2, 4, 2).transpose(3, 5, 0, 1, 2, 4).reshape(n * 4, c, 3, 4)
    check(out, {
        "d2s": d2s,
        "s2d": s2d,
        "shuffle": torch.nn.functional.pixel_shuffle(torch.from_numpy(x), 2).numpy(),
        "unshuffle": torch.nn.functional.pixel_unshuffle(torch.from_numpy(x), 2).numpy(),
        "s2b": s2b,
        "b2s": x,
    })


# ----------------------------------------------------------------------------- gather / scatter


def test_gather_family(tmp_path):
    x = rand(3, 4, 5)
    i1 = RNG.integers(0, 4, size=(2, 3)).astype(np.int32)
    ib = RNG.integers(0, 4, size=(3, 2)).astype(np.int32)  # batch_dims=1 along axis 1
    ind = np.array([[0, 3], [2, 1], [1, 0]], dtype=np.int32)  # gather_nd tuples (k = 2)
    iaa = RNG.integers(0, 5, size=(3, 4, 7)).astype(np.int32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)] +
                [mb.TensorSpec(shape=a.shape, dtype=types.int32) for a in (i1, ib, ind, iaa)],
                opset_version=ct.target.iOS18)
    def prog(x, i1, ib, ind, iaa):
        return (
            mb.gather(x=x, indices=i1, axis=1, name="gather"),
            mb.gather(x=x, indices=ib, axis=1, batch_dims=1, name="gather_batch"),
            mb.gather(x=x, indices=mb.cast(x=i1, dtype="int16"), axis=-2, name="gather_int16"),
            mb.gather_nd(x=x, indices=ind, name="gather_nd"),
            mb.gather_nd(x=x, indices=mb.expand_dims(x=ib, axes=[-1]), batch_dims=1, name="gather_nd_batch"),
            mb.gather_along_axis(x=x, indices=iaa, axis=2, name="along"),
        )

    out = run(prog, tmp_path, {"x": x, "i1": i1, "ib": ib, "ind": ind, "iaa": iaa})
    check(out, {
        "gather": np.take(x, i1, axis=1),
        "gather_batch": np.stack([x[b][ib[b]] for b in range(3)]),
        "gather_int16": np.take(x, i1, axis=1),
        "gather_nd": x[ind[:, 0], ind[:, 1]],
        "gather_nd_batch": np.stack([x[b][ib[b]] for b in range(3)]),
        "along": np.take_along_axis(x, iaa, axis=2),
    })


def test_scatter_family(tmp_path):
    data = rand(5, 3)
    upd = rand(4, 3)
    idx = np.array([3, 0, 3, 1], dtype=np.int32)  # a duplicate: combined in order
    idx_aa = np.array([[2, 0], [1, 1], [0, 2], [2, 2], [1, 0]], dtype=np.int32)
    upd_aa = rand(5, 2)
    idx_nd = np.array([[4], [1], [4]], dtype=np.int32)
    upd_nd = rand(3, 3)

    specs = [mb.TensorSpec(shape=a.shape, dtype=types.int32 if a.dtype == np.int32 else types.fp32)
             for a in (data, upd, idx, idx_aa, upd_aa, idx_nd, upd_nd)]

    @mb.program(input_specs=specs, opset_version=ct.target.iOS18)
    def prog(data, upd, idx, idx_aa, upd_aa, idx_nd, upd_nd):
        outs = [mb.scatter(data=data, indices=idx, updates=upd, mode=m, name="scatter_" + m)
                for m in ("add", "sub", "mul", "max", "min")]
        outs.append(mb.scatter(data=data, indices=mb.slice_by_size(x=idx, begin=[1], size=[2]),
                               updates=mb.slice_by_size(x=upd, begin=[1, 0], size=[2, 3]), mode="update",
                               name="scatter_update"))
        outs.append(mb.scatter(data=mb.transpose(x=data, perm=[1, 0]), indices=idx, axis=1,
                               updates=mb.transpose(x=upd, perm=[1, 0]), mode="add", name="scatter_axis1"))
        outs.append(mb.scatter_along_axis(data=data, indices=idx_aa, updates=upd_aa, axis=1, mode="add", name="along_add"))
        outs.append(mb.scatter_along_axis(data=data, indices=idx_aa, updates=upd_aa, axis=1, mode="update", name="along_update"))
        outs.append(mb.scatter_nd(data=data, indices=idx_nd, updates=upd_nd, mode="add", name="nd_add"))
        outs.append(mb.scatter_nd(data=data, indices=mb.concat(values=[idx_nd, mb.floor_div(x=idx_nd, y=2)], axis=1),
                                  updates=mb.slice_by_index(x=upd_nd, begin=[0, 0], end=[3, 1], squeeze_mask=[False, True]),
                                  mode="div", name="nd_div"))
        return tuple(outs)

    out = run(prog, tmp_path, {"data": data, "upd": upd, "idx": idx, "idx_aa": idx_aa, "upd_aa": upd_aa,
                               "idx_nd": idx_nd, "upd_nd": upd_nd})
    expected = {}
    for mode, fn in (("add", np.add), ("sub", np.subtract), ("mul", np.multiply), ("max", np.maximum), ("min", np.minimum)):
        ref = data.copy()
        fn.at(ref, idx, upd)
        expected["scatter_" + mode] = ref
    ref = data.copy()
    ref[idx[1:3]] = upd[1:3]
    expected["scatter_update"] = ref
    expected["scatter_axis1"] = expected["scatter_add"].T
    ref = data.copy()
    np.add.at(ref, (np.arange(5)[:, None], idx_aa), upd_aa)
    expected["along_add"] = ref
    ref = data.copy()
    np.put_along_axis(ref, idx_aa, upd_aa, axis=1)
    expected["along_update"] = ref
    ref = data.copy()
    np.add.at(ref, idx_nd[:, 0], upd_nd)
    expected["nd_add"] = ref
    ref = data.copy()
    np.divide.at(ref, (idx_nd[:, 0], idx_nd[:, 0] // 2), upd_nd[:, 0])
    expected["nd_div"] = ref
    check(out, expected, atol=1e-6)


def test_gather_negative_indices_ios16_and_out_of_range_error(tmp_path):
    x = rand(5, 3)
    idx = np.array([-1, 0, -5, 4], dtype=np.int32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape), mb.TensorSpec(shape=idx.shape, dtype=types.int32)],
                opset_version=ct.target.iOS16)
    def prog(x, idx):
        return mb.gather(x=x, indices=idx, axis=0, name="g")

    path = save_program(prog, tmp_path, target=ct.target.iOS16)
    model = backend_check.load(path)
    check(model.predict({"x": x, "idx": idx}), {"g": x[idx]})
    for bad in (5, -6):
        with pytest.raises(coremlrt.Error, match="out of range"):
            model.predict({"x": x, "idx": np.array([0, bad, 1, 2], dtype=np.int32)})


# ----------------------------------------------------------------------------- constexpr_*
# Weights are decompressed at load; each program adds them to an input of zeros so that the
# output is exactly the decompressed weight. References are plain numpy.


def pack_lsb_first(values, nbits):
    bits = ((values.astype(np.uint16)[:, None] >> np.arange(nbits)) & 1).astype(np.uint8).ravel()
    return np.packbits(bits, bitorder="little")


def test_constexpr_ios16_attribute_forms(tmp_path):
    q = RNG.integers(-128, 128, size=(4, 6)).astype(np.int8)
    q_scale = RNG.uniform(0.01, 0.1, size=4).astype(np.float32)
    q_zp = RNG.integers(-5, 5, size=4).astype(np.int8)
    half = rand(4, 6).astype(np.float16)
    lut = rand(4)  # 2-bit palette
    lut_idx = RNG.integers(0, 4, size=24).astype(np.uint8)
    dense = rand(4, 6) * (RNG.random((4, 6)) < 0.4)
    u8 = RNG.integers(0, 256, size=(3, 5)).astype(np.uint8)

    @mb.program(input_specs=[mb.TensorSpec(shape=(4, 6))], opset_version=ct.target.iOS16)
    def prog(z):
        w_affine = mb.constexpr_affine_dequantize(quantized_data=q, zero_point=q_zp, scale=q_scale, axis=0)
        w_u8 = mb.constexpr_affine_dequantize(quantized_data=u8, zero_point=np.uint8(128), scale=np.float32(0.5), axis=1)
        w_cast = mb.constexpr_cast(source_val=half, output_dtype="fp32")
        w_lut = mb.constexpr_lut_to_dense(lut=lut, indices=pack_lsb_first(lut_idx, 2), shape=np.uint32([4, 6]))
        mask = (dense != 0).ravel()
        w_sparse = mb.constexpr_sparse_to_dense(nonzero_data=dense.ravel()[mask], mask=pack_lsb_first(mask, 1),
                                                shape=np.uint32([4, 6]))
        return (mb.add(x=z, y=w_affine, name="affine"), mb.add(x=mb.slice_by_size(x=z, begin=[0, 0], size=[3, 5]), y=w_u8, name="affine_u8"),
                mb.add(x=z, y=w_cast, name="cast"), mb.add(x=z, y=w_lut, name="lut"), mb.add(x=z, y=w_sparse, name="sparse"))

    out = run(prog, tmp_path, {"z": np.zeros((4, 6), np.float32)}, target=ct.target.iOS16)
    check(out, {
        "affine": (q.astype(np.float32) - q_zp[:, None]) * q_scale[:, None],
        "affine_u8": (u8.astype(np.float32) - 128) * 0.5,
        "cast": half.astype(np.float32),
        "lut": lut[lut_idx].reshape(4, 6),
        "sparse": dense,
    }, atol=1e-6)


def test_constexpr_ios18_input_forms(tmp_path):
    # blockwise shift/scale: int4 data with an int4 offset, blocks of 2 rows x 2 columns
    d4 = RNG.integers(-8, 8, size=(4, 6)).astype(types.np_int4_dtype)
    s4 = RNG.uniform(0.1, 1, size=(2, 3)).astype(np.float32)
    o4 = RNG.integers(-8, 8, size=(2, 3)).astype(types.np_int4_dtype)
    # uint8 data, fp16 scale, no offset: output is fp16
    d8 = RNG.integers(0, 256, size=(4, 6)).astype(np.uint8)
    s16 = RNG.uniform(0.01, 0.1, size=(4, 1)).astype(np.float16)
    # grouped lut (one 16-entry table per pair of rows), uint4 indices
    idx4 = RNG.integers(0, 16, size=(4, 6)).astype(types.np_uint4_dtype)
    lut4 = rand(2, 1, 16, 1)
    # vector lut: each uint2 index expands into 2 values along axis 1
    idx2 = RNG.integers(0, 4, size=(4, 3)).astype(types.np_uint2_dtype)
    lutv = rand(1, 1, 4, 2)
    # sparse: uint1 mask
    mask = (RNG.random((4, 6)) < 0.5).astype(types.np_uint1_dtype)
    nz = rand(int(mask.sum()))
    # lut_to_sparse (vector along axis 0) and sparse shift/scale, each feeding sparse_to_dense
    mask_v = (RNG.random((2, 6)) < 0.5).astype(types.np_uint1_dtype)
    nz_idx = RNG.integers(0, 4, size=int(mask_v.sum())).astype(types.np_uint2_dtype)
    nz_q = RNG.integers(-100, 100, size=int(mask.sum())).astype(np.int8)
    s_sp = RNG.uniform(0.1, 1, size=(2, 1)).astype(np.float32)
    o_sp = RNG.integers(-3, 3, size=(2, 1)).astype(np.int8)

    @mb.program(input_specs=[mb.TensorSpec(shape=(4, 6))], opset_version=ct.target.iOS18)
    def prog(z):
        w = {
            "shift_scale": mb.constexpr_blockwise_shift_scale(data=d4, scale=s4, offset=o4),
            "shift_scale_fp16": mb.cast(x=mb.constexpr_blockwise_shift_scale(data=d8, scale=s16), dtype="fp32"),
            "lut_grouped": mb.constexpr_lut_to_dense(indices=idx4, lut=lut4),
            "lut_vector": mb.constexpr_lut_to_dense(indices=idx2, lut=lutv, vector_axis=1),
            "sparse": mb.constexpr_sparse_to_dense(nonzero_data=nz, mask=mask),
        }
        m, v = mb.constexpr_lut_to_sparse(indices_mask=mask_v, indices_nonzero_data=nz_idx, lut=lutv, vector_axis=0)
        w["lut_sparse"] = mb.constexpr_sparse_to_dense(nonzero_data=v, mask=m)
        m, v = mb.constexpr_sparse_blockwise_shift_scale(data_mask=mask, nonzero_data=nz_q, scale=s_sp, offset=o_sp)
        w["sparse_shift_scale"] = mb.constexpr_sparse_to_dense(nonzero_data=v, mask=m)
        return tuple(mb.add(x=z, y=value, name=key) for key, value in w.items())

    out = run(prog, tmp_path, {"z": np.zeros((4, 6), np.float32)})
    rep = lambda a, r, c: np.repeat(np.repeat(a, r, axis=0), c, axis=1)  # noqa: E731
    sparse = np.zeros((4, 6), np.float32)
    sparse[mask != 0] = nz
    idx_dense = np.zeros((2, 6), np.int64)
    idx_dense[mask_v != 0] = nz_idx
    lut_sparse = lutv[0, 0][idx_dense].transpose(0, 2, 1).reshape(4, 6)  # vector along axis 0
    lut_sparse *= np.repeat(mask_v != 0, 2, axis=0)
    q_dense = np.zeros((4, 6), np.float32)
    q_dense[mask != 0] = nz_q
    check(out, {
        "shift_scale": rep(s4, 2, 2) * (d4.astype(np.float32) - rep(o4.astype(np.float32), 2, 2)),
        "shift_scale_fp16": (d8.astype(np.float16) * np.repeat(s16, 6, axis=1)).astype(np.float32),
        "lut_grouped": np.where(np.arange(4)[:, None] < 2, lut4[0, 0, :, 0][idx4.astype(int)], lut4[1, 0, :, 0][idx4.astype(int)]),
        "lut_vector": lutv[0, 0][idx2.astype(int)].reshape(4, 6),
        "sparse": sparse,
        "lut_sparse": lut_sparse,
        "sparse_shift_scale": np.where(mask != 0, (q_dense - np.repeat(o_sp, 2, axis=0)) * np.repeat(s_sp, 2, axis=0), 0),
    }, atol=1e-6)


# ----------------------------------------------------------------------------- resizing


def grid(mode, n_in, n_out):
    """Sample positions of the Core ML sampling modes (docs/design/coreml-format.md, "Resizing and
    sampling"), clamped."""
    i = np.arange(n_out, dtype=np.float64)
    if mode == "STRICT_ALIGN_CORNERS":
        p = i * (n_in - 1) / (n_out - 1) if n_out > 1 else 0 * i
    elif mode == "ALIGN_CORNERS":
        p = i * (n_in - 1) / (n_out - 1) if n_out > 1 else 0 * i + (n_in - 1) / 2
    elif mode == "DEFAULT":
        p = i * n_in / n_out
    elif mode == "OFFSET_CORNERS":
        delta = max(1, n_in - 1) / n_out
        p = 0.5 * delta + i * delta
    else:  # UNALIGN_CORNERS
        p = (i + 0.5) * n_in / n_out - 0.5
    return np.clip(p, 0, n_in - 1)


def linear_resize(x, axis, pos):
    lo = np.floor(pos).astype(int)
    hi = np.minimum(lo + 1, x.shape[axis] - 1)
    w = (pos - lo).reshape([-1 if d == axis % x.ndim else 1 for d in range(x.ndim)])
    return np.take(x, lo, axis) * (1 - w) + np.take(x, hi, axis) * w


def test_resize_family(tmp_path):
    torch = pytest.importorskip("torch")
    x = rand(2, 3, 5, 7)
    modes = ["STRICT_ALIGN_CORNERS", "ALIGN_CORNERS", "DEFAULT", "OFFSET_CORNERS", "UNALIGN_CORNERS"]

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape)], opset_version=ct.target.iOS17)
    def prog(x):
        outs = [
            mb.upsample_nearest_neighbor(x=x, scale_factor_height=2, scale_factor_width=3, name="up_nearest"),
            mb.upsample_bilinear(x=x, scale_factor_height=2.0, scale_factor_width=1.5, align_corners=True, name="up_align"),
            mb.upsample_bilinear(x=x, scale_factor_height=2.0, scale_factor_width=1.5, align_corners=False, name="up_half"),
            mb.upsample_bilinear(x=x, scale_factor_height=2.0, scale_factor_width=1.5, align_corners=False,
                                 half_pixel_centers=False, name="up_legacy"),
            mb.resize_nearest_neighbor(x=x, target_size_height=3, target_size_width=11, name="nearest"),
            mb.resize(x=x, shape=np.array([9, 4], np.int32), resized_dims=np.uint32(2), interpolation_mode="LINEAR",
                      sampling_mode="STRICT_ALIGN_CORNERS", name="resize_linear"),
            mb.resize(x=x, shape=np.array([0, 10], np.int32), resized_dims=np.uint32(2),
                      interpolation_mode="NEAREST_NEIGHBOR", name="resize_nearest"),
            mb.crop(x=x, crop_height=[1, 2], crop_width=[0, 3], name="crop"),
        ]
        for mode in modes:
            outs.append(mb.resize_bilinear(x=x, target_size_height=8, target_size_width=4, sampling_mode=mode, name=mode))
        return tuple(outs)

    out = run(prog, tmp_path, {"x": x}, target=ct.target.iOS17)
    tx = torch.from_numpy(x)
    interp = torch.nn.functional.interpolate
    expected = {
        "up_nearest": x.repeat(2, axis=2).repeat(3, axis=3),
        "up_align": interp(tx, size=(10, 10), mode="bilinear", align_corners=True).numpy(),
        "up_half": interp(tx, size=(10, 10), mode="bilinear", align_corners=False).numpy(),
        "nearest": x[:, :, (np.arange(3) * 5) // 3][:, :, :, (np.arange(11) * 7) // 11],
        "resize_linear": interp(tx, size=(9, 4), mode="bilinear", align_corners=True).numpy(),
        # iOS17 resize rounds the DEFAULT grid point i * in / out half up (coremltools' own
        # resize test reads rows 0, 1, 1 for 2 -> 3), unlike resize_nearest_neighbor's floor.
        "resize_nearest": x[:, :, :, np.minimum((np.arange(10) * 7 + 5) // 10, 6)],
        "crop": x[:, :, 1:3, 0:4],
    }
    expected["up_legacy"] = linear_resize(linear_resize(x, 2, grid("DEFAULT", 5, 10)), 3, grid("DEFAULT", 7, 10))
    for mode in modes:
        expected[mode] = linear_resize(linear_resize(x, 2, grid(mode, 5, 8)), 3, grid(mode, 7, 4))
    check(out, expected, atol=1e-5)


def test_crop_resize(tmp_path):
    x = rand(2, 3, 6, 7)
    boxes = np.array([[0.1, 0.2, 0.8, 0.9], [0.0, 0.0, 1.0, 1.0], [0.5, -0.2, 1.3, 0.5]], np.float32)
    box_indices = np.array([1, 0, 1], np.int32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape), mb.TensorSpec(shape=boxes.shape)],
                opset_version=ct.target.iOS17)
    def prog(x, boxes):
        return mb.crop_resize(x=x, boxes=boxes, box_indices=box_indices, target_height=4, target_width=5,
                              normalized_coordinates=True, sampling_mode="ALIGN_CORNERS", pad_value=-7.0, name="crops")

    out = run(prog, tmp_path, {"x": x, "boxes": boxes}, target=ct.target.iOS17)
    # tf.image.crop_and_resize: samples at y1 * (H - 1) + i * (y2 - y1) * (H - 1) / (h - 1),
    # bilinear inside the image, the extrapolation value outside.
    want = np.zeros((3, 3, 4, 5), np.float32)
    for n, (y1, x1, y2, x2) in enumerate(boxes.astype(np.float64)):
        ys = y1 * 5 + np.arange(4) * (y2 - y1) * 5 / 3
        xs = x1 * 6 + np.arange(5) * (x2 - x1) * 6 / 4
        img = x[box_indices[n]].astype(np.float64)
        for i, yy in enumerate(ys):
            for j, xx in enumerate(xs):
                if not (0 <= yy <= 5 and 0 <= xx <= 6):
                    want[n, :, i, j] = -7.0
                    continue
                y0, x0 = int(np.floor(yy)), int(np.floor(xx))
                y1_, x1_ = min(y0 + 1, 5), min(x0 + 1, 6)
                fy, fx = yy - y0, xx - x0
                top = img[:, y0, x0] * (1 - fx) + img[:, y0, x1_] * fx
                bottom = img[:, y1_, x0] * (1 - fx) + img[:, y1_, x1_] * fx
                want[n, :, i, j] = top * (1 - fy) + bottom * fy
    check(out, {"crops": want}, atol=1e-5)


# ----------------------------------------------------------------------------- fp16 programs


def test_fp16_program(tmp_path):
    x = rand(2, 4, 6)
    idx = np.array([2, 0, 5], np.int32)

    @mb.program(input_specs=[mb.TensorSpec(shape=x.shape), mb.TensorSpec(shape=idx.shape, dtype=types.int32)],
                opset_version=ct.target.iOS18)
    def prog(x, idx):
        return (
            mb.transpose(x=mb.concat(values=[x, x], axis=1), perm=[2, 0, 1], name="concat_t"),
            mb.gather(x=x, indices=idx, axis=2, name="gather"),
            mb.pad(x=x, pad=[1, 1, 2, 0], mode="constant", constant_val=0.25, name="pad"),
            mb.cumsum(x=x, axis=2, name="cumsum"),
            mb.upsample_bilinear(x=x, scale_factor_height=2.0, scale_factor_width=2.0, align_corners=True, name="up"),
            mb.slice_by_index(x=x, begin=[0, 3, 0], end=[2, 0, 6], stride=[1, -1, 2], name="slice"),
        )

    out = run(prog, tmp_path, {"x": x, "idx": idx}, fp16=True)
    h = x.astype(np.float16).astype(np.float32)
    rows = grid("STRICT_ALIGN_CORNERS", 4, 8)
    cols = grid("STRICT_ALIGN_CORNERS", 6, 12)
    expected = {
        "concat_t": np.concatenate([h, h], axis=1).transpose(2, 0, 1),
        "gather": h[:, :, idx],
        "pad": np.pad(h, [(0, 0), (1, 1), (2, 0)], constant_values=0.25),
        "slice": h[:, 3:0:-1, ::2],
    }
    check(out, expected)
    np.testing.assert_allclose(out["cumsum"], np.cumsum(h, axis=2), atol=1e-2, rtol=1e-2)
    np.testing.assert_allclose(out["up"], linear_resize(linear_resize(h, 1, rows), 2, cols), atol=3e-3)
