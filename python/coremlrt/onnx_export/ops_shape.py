"""Shape and indexing ops.

MIL index parameters are int32 where ONNX wants int64, so run-time indices and shapes pass a
Cast; constant ones are written as int64 initializers. Slices follow src/ops/slice.cc: Python
slicing with clamping (ONNX Slice clamps the same way), a masked begin/end meaning "from the
start"/"to the end" in the stride's direction, a squeezed dim taking the single element at
begin.
"""

import numpy as np

from .graph import Unsupported
from .registry import translates

INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min


def int64_input(v, param):
    """An index parameter as int64: a constant initializer, or a Cast of the run-time value."""
    if v.is_constant(param):
        return v.builder.const_int64(v.ints(param), param)
    if v.dtype(param) == "int64":
        return v.input(param)
    return v.builder.node("Cast", [v.input(param)], to=7)  # TensorProto.INT64


def _static_dims(type_dict):
    dims = type_dict["dims"]
    return dims if type_dict["rank"] >= 0 and all(d >= 0 for d in dims) else None


@translates("reshape")
def reshape(v):
    b = v.builder
    dims = _static_dims(v.outputs[0]["type"])
    if dims is not None:
        shape = b.const_int64(dims, "shape")
    elif v.is_constant("shape"):
        target = v.ints("shape")
        if 0 in target and b.ios_version < 17:
            raise Unsupported("a shape with 0 before iOS17 (right-aligned) with unknown dims")
        shape = b.const_int64(target, "shape")
    else:
        if b.ios_version < 17:
            raise Unsupported("a run-time shape before iOS17")
        shape = int64_input(v, "shape")
    b.node("Reshape", [v.input("x"), shape], [v.output()])


@translates("reshape_like")
def reshape_like(v):
    dims = _static_dims(v.outputs[0]["type"])
    if dims is None:
        raise Unsupported("reshape_like to a shape known only at run time")
    v.builder.node("Reshape", [v.input("x"), v.builder.const_int64(dims, "shape")], [v.output()])


@translates("transpose")
def transpose(v):
    rank = v.rank("x")
    v.builder.node("Transpose", [v.input("x")], [v.output()], perm=[p % rank for p in v.ints("perm")])


@translates("concat")
def concat(v):
    b = v.builder
    axis = int(v.scalar("axis"))
    if not v.scalar("interleave", False):
        b.node("Concat", v.inputs("values"), [v.output()], axis=axis)
        return
    # Interleaved: out[.., i * n + k, ..] = values[k][.., i, ..]: stack after the axis, then merge.
    dims = _static_dims(v.outputs[0]["type"])
    if dims is None:
        raise Unsupported("interleaved concat to a shape known only at run time")
    rank = len(dims)
    axis %= rank
    expanded = [b.node("Unsqueeze", [x, b.const_int64([axis + 1], "axes")]) for x in v.inputs("values")]
    stacked = b.node("Concat", expanded, axis=axis + 1)
    b.node("Reshape", [stacked, b.const_int64(dims, "shape")], [v.output()])


@translates("stack")
def stack(v):
    b = v.builder
    axis = int(v.scalar("axis"))
    expanded = [b.node("Unsqueeze", [x, b.const_int64([axis], "axes")]) for x in v.inputs("values")]
    b.node("Concat", expanded, [v.output()], axis=axis)


@translates("split")
def split(v):
    b = v.builder
    axis = int(v.scalar("axis"))
    sizes = v.ints("split_sizes")
    if sizes is None:
        count = len(v.outputs)
        sizes = [out["type"]["dims"][axis] for out in v.outputs]
        if any(s < 0 for s in sizes):
            b.node("Split", [v.input("x")], [v.output(i) for i in range(count)], axis=axis, num_outputs=count)
            return
    b.node("Split", [v.input("x"), b.const_int64(sizes, "split")], [v.output(i) for i in range(len(v.outputs))],
           axis=axis)


@translates("squeeze")
def squeeze(v):
    b = v.builder
    axes = v.ints("axes")
    inputs = [v.input("x")] + ([b.const_int64(axes, "axes")] if axes is not None else [])
    if axes is None and v.output_rank() == 0 and v.rank("x") >= 0:
        inputs = [v.input("x")]
    b.node("Squeeze", inputs, [v.output()])


@translates("expand_dims")
def expand_dims(v):
    b = v.builder
    b.node("Unsqueeze", [v.input("x"), b.const_int64(v.ints("axes"), "axes")], [v.output()])


@translates("flatten2d")
def flatten2d(v):
    v.builder.node("Flatten", [v.input("x")], [v.output()], axis=int(v.scalar("axis", 1)))


def _slice_bounds(v, rank, begin_param, end_values, strides, masks):
    """(starts, ends) inputs of a Slice over every dim."""
    b = v.builder
    begin_mask, end_mask, squeeze_mask = masks
    begin_fill = [0 if s > 0 else INT64_MAX for s in strides]
    end_fill = [INT64_MAX if s > 0 else INT64_MIN for s in strides]
    if v.is_constant(begin_param):
        begin = v.ints(begin_param)
        starts = [begin_fill[d] if begin_mask[d] else begin[d] for d in range(rank)]
    else:
        starts = b.node("Where", [b.initializer(np.asarray(begin_mask), "begin_mask"),
                                  b.const_int64(begin_fill, "begin_fill"), int64_input(v, begin_param)])
    if end_values is not None:
        if isinstance(end_values, list):
            ends = [end_fill[d] if end_mask[d] else end_values[d] for d in range(rank)]
        else:
            ends = b.node("Where", [b.initializer(np.asarray(end_mask), "end_mask"), b.const_int64(end_fill, "end_fill"),
                                    end_values])
    else:
        ends = end_fill
    if any(squeeze_mask):
        # A squeezed dim takes [begin, begin + 1); -1 + 1 would be 0, so its end is "to the end".
        if isinstance(starts, list):
            ends = list(ends) if isinstance(ends, list) else ends
            if isinstance(ends, list):
                for d in range(rank):
                    if squeeze_mask[d]:
                        ends[d] = INT64_MAX if starts[d] == -1 else starts[d] + 1
        if not isinstance(starts, list) or not isinstance(ends, list):
            start_t = starts if not isinstance(starts, list) else b.const_int64(starts, "starts")
            end_t = ends if not isinstance(ends, list) else b.const_int64(ends, "ends")
            one = b.const_int64(1, "one")
            next_index = b.node("Add", [start_t, one])
            squeezed_end = b.node("Where", [b.node("Equal", [start_t, b.const_int64(-1, "minus_one")]),
                                            b.const_int64(INT64_MAX, "int64_max"), next_index])
            ends = b.node("Where", [b.initializer(np.asarray(squeeze_mask), "squeeze_mask"), squeezed_end, end_t])
    starts = b.const_int64(starts, "starts") if isinstance(starts, list) else starts
    ends = b.const_int64(ends, "ends") if isinstance(ends, list) else ends
    return starts, ends


def _masks(v, rank):
    def bools(param):
        c = v.constant(param)
        return [False] * rank if c is None else [bool(x) for x in c.array.reshape(-1)]
    return bools("begin_mask"), bools("end_mask"), bools("squeeze_mask")


@translates("slice_by_index")
def slice_by_index(v):
    b = v.builder
    rank = v.rank("x")
    strides = v.ints("stride", [1] * rank)
    masks = _masks(v, rank)
    if v.has("end"):
        end = v.ints("end") if v.is_constant("end") else int64_input(v, "end")
    else:
        end = None
    starts, ends = _slice_bounds(v, rank, "begin", end, strides, masks)
    squeeze_axes = [d for d in range(rank) if masks[2][d]]
    sliced = b.node("Slice", [v.input("x"), starts, ends, b.const_int64(list(range(rank)), "axes"),
                              b.const_int64(strides, "steps")], None if squeeze_axes else [v.output()])
    if squeeze_axes:
        b.node("Squeeze", [sliced, b.const_int64(squeeze_axes, "axes")], [v.output()])


@translates("slice_by_size")
def slice_by_size(v):
    b = v.builder
    rank = v.rank("x")
    begin = int64_input(v, "begin")
    if v.is_constant("size") and v.is_constant("begin"):
        starts, sizes = v.ints("begin"), v.ints("size")
        ends = [INT64_MAX if s == -1 else st + s for st, s in zip(starts, sizes)]
        ends = [INT64_MAX if e == 0 and st < 0 else e for e, st in zip(ends, starts)]
        end = b.const_int64(ends, "ends")
    else:
        size = int64_input(v, "size")
        to_end = b.node("Equal", [size, b.const_int64(-1, "minus_one")])
        end = b.node("Where", [to_end, b.const_int64(INT64_MAX, "int64_max"), b.node("Add", [begin, size])])
    b.node("Slice", [v.input("x"), begin, end, b.const_int64(list(range(rank)), "axes")], [v.output()])


@translates("slice_update")
def slice_update(v):
    """x with a slice replaced by `update`: ScatterND at the slice's indices, built as a grid of
    one Range per dim (begin may be known only at run time: a KV-cache write at the position)."""
    b = v.builder
    rank = v.rank("x")
    strides = v.ints("stride", [1] * rank)
    if any(s <= 0 for s in strides):
        raise Unsupported("slice_update with a stride below 1")
    begin_mask, _, squeeze_mask = _masks(v, rank)
    x = v.input("x")
    update = v.input("update")
    squeezed = [d for d in range(rank) if squeeze_mask[d]]
    if squeezed:
        update = b.node("Unsqueeze", [update, b.const_int64(squeezed, "axes")])
    x_shape = b.node("Shape", [x])
    update_shape = b.node("Shape", [update])
    begin = int64_input(v, "begin")
    if any(begin_mask):
        begin = b.node("Where", [b.initializer(np.asarray(begin_mask), "begin_mask"), b.const_int64([0] * rank, "zeros"),
                                 begin])
    # Negative begins count from the end.
    begin = b.node("Where", [b.node("Less", [begin, b.const_int64(0, "zero")]), b.node("Add", [begin, x_shape]), begin])
    columns = []
    for d in range(rank):
        index = b.const_int64(d, "dim")
        start = b.node("Gather", [begin, index], axis=0)
        count = b.node("Gather", [update_shape, index], axis=0)
        step = b.const_int64(strides[d], "step")
        positions = b.node("Range", [start, b.node("Add", [start, b.node("Mul", [count, step])]), step])
        grid_shape = [1] * rank
        grid_shape[d] = -1
        positions = b.node("Reshape", [positions, b.const_int64(grid_shape, "grid_shape")])
        positions = b.node("Expand", [positions, update_shape])
        columns.append(b.node("Unsqueeze", [positions, b.const_int64([-1], "axes")]))
    indices = b.node("Concat", columns, axis=-1)
    b.node("ScatterND", [x, indices, update], [v.output()])


@translates("reverse")
def reverse(v):
    b = v.builder
    rank = v.rank("x")
    axes = [a % rank for a in v.ints("axes", list(range(rank)))]
    if not axes:
        b.node("Identity", [v.input("x")], [v.output()])
        return
    n = len(axes)
    b.node("Slice", [v.input("x"), b.const_int64([-1] * n, "starts"), b.const_int64([INT64_MIN] * n, "ends"),
                     b.const_int64(axes, "axes"), b.const_int64([-1] * n, "steps")], [v.output()])


@translates("gather")
def gather(v):
    b = v.builder
    batch_dims = int(v.scalar("batch_dims", 0))
    rank = v.rank("x")
    axis = int(v.scalar("axis", 0)) % max(rank, 1)
    if batch_dims == 0:
        # ONNX indices are int32 or int64; MIL's may be 8- or 16-bit too.
        indices = v.input("indices") if v.dtype("indices") in ("int32", "int64") else int64_input(v, "indices")
        b.node("Gather", [v.input("x"), indices], [v.output()], axis=axis)
        return
    # With batch dims: the gathered axis moved right after them, GatherND over one index per
    # position, and the index dims moved back to where the axis was.
    x = v.input("x")
    if axis != batch_dims:
        order = list(range(batch_dims)) + [axis] + [d for d in range(batch_dims, rank) if d != axis]
        x = b.node("Transpose", [x], perm=order)
    indices = b.node("Unsqueeze", [int64_input(v, "indices"), b.const_int64([-1], "axes")])
    if axis == batch_dims:
        b.node("GatherND", [x, indices], [v.output()], batch_dims=batch_dims)
        return
    gathered = b.node("GatherND", [x, indices], batch_dims=batch_dims)
    k = v.rank("indices") - batch_dims
    between = axis - batch_dims
    out_rank = v.output_rank()
    perm = list(range(batch_dims)) + list(range(batch_dims + k, batch_dims + k + between)) + \
        list(range(batch_dims, batch_dims + k)) + list(range(batch_dims + k + between, out_rank))
    b.node("Transpose", [gathered], [v.output()], perm=perm)


@translates("gather_along_axis")
def gather_along_axis(v):
    v.builder.node("GatherElements", [v.input("x"), int64_input(v, "indices")], [v.output()],
                   axis=int(v.scalar("axis", 0)))


@translates("gather_nd")
def gather_nd(v):
    v.builder.node("GatherND", [v.input("x"), int64_input(v, "indices")], [v.output()],
                   batch_dims=int(v.scalar("batch_dims", 0)))


@translates("shape")
def shape(v):
    b = v.builder
    shape_value = b.node("Shape", [v.input("x")])
    b.node("Cast", [shape_value], [v.output()], to=b.onnx_type(v.output_dtype()))


@translates("fill")
def fill(v):
    b = v.builder
    value = v.constant("value")
    dtype = v.output_dtype()
    scalar = 0.0 if value is None else value.scalar()
    np_value = np.asarray([scalar], dtype={"float16": np.float16, "float32": np.float32, "int32": np.int32,
                                           "bool": np.bool_, "int64": np.int64}[b.float_dtype(dtype)])
    from onnx import numpy_helper
    b.node("ConstantOfShape", [int64_input(v, "shape")], [v.output()], value=numpy_helper.from_array(np_value))


@translates("range_1d")
def range_1d(v):
    v.builder.node("Range", [v.input("start"), v.input("end"), v.input("step")], [v.output()])


@translates("tile")
def tile(v):
    v.builder.node("Tile", [v.input("x"), int64_input(v, "reps")], [v.output()])


@translates("select")
def select(v):
    v.builder.node("Where", [v.input("cond"), v.input("a"), v.input("b")], [v.output()])


@translates("pad")
def pad(v):
    b = v.builder
    rank = v.rank("x")
    mode = v.scalar("mode", "constant")
    modes = {"constant": "constant", "reflect": "reflect", "replicate": "edge"}
    if mode not in modes:
        raise Unsupported("pad mode '%s'" % mode)
    pads = v.ints("pad")
    if pads is None:
        raise Unsupported("padding known only at run time")
    padded = len(pads) // 2
    begins = [0] * (rank - padded) + pads[0::2]
    ends = [0] * (rank - padded) + pads[1::2]
    inputs = [v.input("x"), b.const_int64(begins + ends, "pads")]
    if mode == "constant":
        inputs.append(b.const_like(v.scalar("constant_val", 0.0), v.dtype("x"), "pad_value"))
    b.node("Pad", inputs, [v.output()], mode=modes[mode])


@translates("cumsum")
def cumsum(v):
    b = v.builder
    b.node("CumSum", [v.input("x"), b.const_int64(int(v.scalar("axis", 0)), "axis")], [v.output()],
           exclusive=int(bool(v.scalar("exclusive", False))), reverse=int(bool(v.scalar("reverse", False))))


@translates("topk")
def topk(v):
    b = v.builder
    k = b.const_int64([int(v.scalar("k", 1))], "k")
    axis = int(v.scalar("axis", -1))
    values, indices = b.node("TopK", [v.input("x"), k], 2, axis=axis, largest=int(not v.scalar("ascending", False)),
                             sorted=1)
    b.node("Identity", [values], [v.output(0)])
    if len(v.outputs) > 1:
        b.node("Cast", [indices], [v.output(1)], to=b.onnx_type(v.output_dtype(1)))


@translates("band_part")
def band_part(v):
    b = v.builder
    lower, upper = int(v.scalar("lower", -1)), int(v.scalar("upper", -1))
    x = v.input("x")
    if lower == 0 and upper == -1:
        b.node("Trilu", [x], [v.output()], upper=1)
    elif lower == -1 and upper == 0:
        b.node("Trilu", [x], [v.output()], upper=0)
    elif lower == -1 and upper == -1:
        b.node("Identity", [x], [v.output()])
    else:
        upper_part = b.node("Trilu", [x, b.const_int64(-lower, "k")], upper=1) if lower >= 0 else x
        b.node("Trilu", [upper_part, b.const_int64(upper, "k")], [v.output()], upper=0) if upper >= 0 else \
            b.node("Identity", [upper_part], [v.output()])


@translates("argsort")
def argsort(v):
    """A full TopK along the axis: ties keep the lower index first in both (src/ops/tensor_ops.cc)."""
    b = v.builder
    rank = v.rank("x")
    axis = int(v.scalar("axis", -1)) % rank
    x = v.input("x")
    count = b.node("Gather", [b.node("Shape", [x]), b.const_int64([axis], "axis")], axis=0)
    _, indices = b.node("TopK", [x, count], 2, axis=axis, largest=int(not v.scalar("ascending", False)), sorted=1)
    b.node("Cast", [indices], [v.output()], to=b.onnx_type(v.output_dtype()))


@translates("non_zero")
def non_zero(v):
    b = v.builder
    found = b.node("Transpose", [b.node("NonZero", [v.input("x")])], perm=[1, 0])  # [N, rank]
    b.node("Cast", [found], [v.output()], to=b.onnx_type(v.output_dtype()))


@translates("one_hot")
def one_hot(v):
    """A negative index gives all off_value in our kernel; ONNX OneHot would count it from the
    end, so negative indices are moved past the depth first."""
    b = v.builder
    depth = int64_input(v, "one_hot_vector_size")
    indices = int64_input(v, "indices")
    indices = b.node("Where", [b.node("Less", [indices, b.const_int64(0, "zero")]), depth, indices])
    dtype = v.output_dtype()
    values = b.initializer(np.asarray([v.scalar("off_value", 0.0), v.scalar("on_value", 1.0)],
                                      dtype={"float16": np.float16, "float32": np.float32, "int32": np.int32,
                                             "bool": np.bool_}[b.float_dtype(dtype)]), "on_off")
    b.node("OneHot", [indices, depth, values], [v.output()], axis=int(v.scalar("axis", -1)))


@translates("reverse_sequence")
def reverse_sequence(v):
    """For each batch b, the first lengths[b] entries along seq_axis reversed, the rest kept
    (src/ops/shape.cc): ONNX ReverseSequence, whose batch and time axes are 0 and 1, so other
    axes are transposed there and back."""
    b = v.builder
    rank = v.rank("x")
    if rank < 2:
        raise Unsupported("x of rank %s" % rank)
    seq = int(v.scalar("seq_axis", 0)) % rank
    batch = int(v.scalar("batch_axis", 0)) % rank
    if seq == batch:
        raise Unsupported("seq_axis and batch_axis are the same axis")
    lengths = int64_input(v, "lengths")
    if (batch, seq) in ((0, 1), (1, 0)):
        b.node("ReverseSequence", [v.input("x"), lengths], [v.output()], batch_axis=batch, time_axis=seq)
        return
    perm = [batch, seq] + [d for d in range(rank) if d not in (batch, seq)]
    moved = b.node("Transpose", [v.input("x")], perm=perm)
    reversed_ = b.node("ReverseSequence", [moved, lengths], batch_axis=0, time_axis=1)
    b.node("Transpose", [reversed_], [v.output()], perm=[perm.index(d) for d in range(rank)])


@translates("sliding_windows")
def sliding_windows(v):
    """Windows of `size` every `stride` along `axis` (src/ops/tensor_ops.cc): a Gather of the
    index grid start * stride + k ([count, size], count = (n - size) / stride + 1), which puts
    the window dim right after the axis."""
    b = v.builder
    size, stride = int(v.scalar("size")), int(v.scalar("stride", 1))
    if size <= 0 or stride <= 0:
        raise Unsupported("size and stride must be positive")
    rank = v.rank("x")
    if rank < 0:
        raise Unsupported("x of a rank known only at run time")
    axis = int(v.scalar("axis"))
    axis = axis + rank if axis < 0 else axis
    x = v.input("x")
    n = b.node("Gather", [b.node("Shape", [x]), b.const_int64(axis, "axis")], axis=0)
    count = b.node("Add", [b.node("Div", [b.node("Sub", [n, b.const_int64(size, "size")]), b.const_int64(stride, "stride")]),
                   b.const_int64(1, "one")])
    starts = b.node("Mul", [b.node("Range", [b.const_int64(0, "zero"), count, b.const_int64(1, "one")]),
                            b.const_int64(stride, "stride")])
    index = b.node("Add", [b.node("Unsqueeze", [starts, b.const_int64([1], "axes")]),
                           b.const_int64(np.arange(size).reshape(1, size), "window")])
    b.node("Gather", [x, index], [v.output()], axis=axis)
