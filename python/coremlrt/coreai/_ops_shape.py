"""Shape ops: constants, shapes, slices, concatenation, padding, tiling, gathers and scatters
(the shape family, src/ops/shape.cc, as onnx_export/ops_shape.py holds it: slices are
src/ops/slice.cc's, gathers and scatters src/ops/gather.cc's, range and non_zero
src/ops/tensor_ops.cc's).

Integer operands that configure an op (permutations, shapes, axes, slice bounds, padding,
repetitions) must be constants and become the MIL op's parameters; ops whose data operands
are constants too are folded in numpy (a weight's transpose, a composite's shape arithmetic).
"""

import numpy as np

from ._common import Var
from ._ops_control_flow import write_through
from ._registry import translates


@translates("coreai.constant")
def _constant(t, op):
    if t.constant(op.results[0]) is not None:  # a graph inlined again: the same array
        return
    t.values[op.results[0]] = t.read_constant(op)


def _matmul_users_only(value, operands=(1,)):
    """Whether every use of a value is as an operand of a batch matmul (by default the right
    one, y)."""
    uses = list(value.uses)
    return bool(uses) and all(use.owner.name in ("coreai.decomposable.broadcasting_batch_matmul",
                                                 "coreai.batch_matmul") and use.operand_number in operands
                              for use in uses)


@translates("coreai.transpose")
def _transpose(t, op):
    perm = t.ints(op, 1, "permutation")
    source = t.values[op.operands[0]]
    if isinstance(source, np.ndarray):
        rank = source.ndim
        swaps_last = rank >= 2 and perm == list(range(rank - 2)) + [rank - 1, rank - 2]
        if swaps_last and _matmul_users_only(op.results[0], (0, 1)):
            # A weight transposed only for matmul (coreai-torch's Linear; a tied embedding's
            # table read by the output projection too): matmul reads the weight as it is, with
            # transpose_x / transpose_y, so weight.bin holds it once (const_name writes an array
            # once per block, whatever reads it).
            var = Var(t.operand(op.operands[0]), t.const_dtype(op.operands[0]),
                      list(source.shape[:-2]) + [source.shape[-1], source.shape[-2]])
            var.transposed = True
            t.values[op.results[0]] = var
            return
        t.fold(op, source.transpose(perm))
        return
    if source.compressed and perm == [1, 0] and _matmul_users_only(op.results[0]):
        # A compressed weight transposed for matmul (coreai-torch's Linear): matmul reads it
        # with transpose_y, so the engine keeps it packed (docs/design/compressed-weights.md).
        var = Var(source.name, source.dtype, source.dims[::-1], compressed=True)
        var.transposed = True
        t.values[op.results[0]] = var
        return
    t.emit(op, "transpose", {"x": source.name, "perm": t.param(perm, "int32")})


@translates("coreai.reshape")
def _reshape(t, op):
    dims = t.dims(op.results[0])
    source = t.values[op.operands[0]]
    new_shape = t.constant(op.operands[1])
    if None not in dims:
        shape = dims
    elif new_shape is not None:
        shape = [int(d) for d in new_shape.reshape(-1)]  # at most one -1, inferred as MIL infers it
    else:
        shape = None
    if isinstance(source, np.ndarray) and shape is not None:
        t.fold(op, source.reshape(shape))
        return
    target = t.param(shape, "int32") if shape is not None else t.operand(op.operands[1], "int32")
    t.emit(op, "reshape", {"x": t.operand(op.operands[0]), "shape": target})


@translates("coreai.expand_dims", "coreai.shrink_dims")
def _expand_or_shrink(t, op):
    """expand_dims / shrink_dims: a reshape to the result's dims (expand_dims / squeeze where
    they are dynamic)."""
    dims = t.dims(op.results[0])
    source = t.values[op.operands[0]]
    if None not in dims:
        if isinstance(source, np.ndarray):
            t.fold(op, source.reshape(dims))
        else:
            t.emit(op, "reshape", {"x": source.name, "shape": t.param(dims, "int32")})
        return
    expand = op.name == "coreai.expand_dims"
    rank = len(dims) if expand else len(t.dims(op.operands[0]))
    axes = sorted(a % rank for a in t.ints(op, 1, "axes"))
    t.emit(op, "expand_dims" if expand else "squeeze", {"x": t.operand(op.operands[0]),
                                                        "axes": t.param(axes, "int32")})


_WHERE = ("coreai.where", "coreai.decomposable.broadcasting_where")


@translates("coreai.broadcast_in_dims")
def _broadcast_in_dims(t, op):
    """tile: the sizes at the (size-1) axes, 1 elsewhere; computed sizes are put in place with
    slices and a concat."""
    shape = t.dims(op.operands[0])
    axes = [a % len(shape) if -len(shape) <= a < len(shape) else None for a in t.ints(op, 2, "axes")]
    count = t.dims(op.operands[1])[0]
    if None in axes or len(axes) != count or any(shape[a] != 1 for a in axes):
        t.fail(f"coreai.broadcast_in_dims: axes {t.ints(op, 2, 'axes')} do not name size-1 dimensions of {shape}")
    sizes = t.constant(op.operands[1])
    source = t.values[op.operands[0]]
    if sizes is not None:
        reps = [1] * len(shape)
        for a, size in zip(axes, sizes.reshape(-1)):
            reps[a] = int(size)
        if isinstance(source, np.ndarray):
            t.fold(op, np.tile(source, reps))
            return
        uses = list(op.results[0].uses)
        if uses and all(u.owner.name in _WHERE and u.operand_number == 1 for u in uses) \
                and None not in t.dims(op.results[0]):
            # Read only as the value a where selects: the where may take the source as a
            # slice_update (_ops_elementwise.py _where) and the tile is written there if not.
            var = Var(source.name, source.dtype, t.dims(op.results[0]))
            var.tiled = (source, reps)
            t.values[op.results[0]] = var
            return
        t.emit(op, "tile", {"x": source.name, "reps": t.param(reps, "int32")})
        return
    computed = t.operand(op.operands[1], "int32")
    pieces = []
    for d in range(len(shape)):
        if d in axes:
            j = axes.index(d)
            pieces.append(t.aux("slice_by_index", {"x": computed, "begin": t.param([j], "int32"),
                                                   "end": t.param([j + 1], "int32")}, "int32", [1]).name)
        else:
            pieces.append(t.param([1], "int32"))
    reps = t.aux("concat", {"values": f"({', '.join(pieces)})", "axis": t.param(0, "int32"),
                            "interleave": t.param(False, "bool")}, "int32", [len(shape)])
    t.emit(op, "tile", {"x": t.operand(op.operands[0]), "reps": reps.name})


@translates("coreai.broadcast_to")
def _broadcast_to(t, op):
    """tile after prepending unit dims: a dim of size 1 repeats to the target's size, any other
    is the target's already. With a computed target or dims unknown until prediction, the
    repetitions are computed the same way at prediction (shape, equal, select)."""
    target = t.constant(op.operands[1])
    dims = t.dims(op.operands[0])
    source = t.values[op.operands[0]]
    if isinstance(source, np.ndarray) and target is not None:
        t.fold(op, np.broadcast_to(source, [int(d) for d in target]))
        return
    rank = len(t.dims(op.results[0]))
    padded = [1] * (rank - len(dims)) + dims
    var = t.as_var(op.operands[0])
    name = var.name
    if rank != len(dims):
        name = t.aux("expand_dims", {"x": name, "axes": t.param(list(range(rank - len(dims))), "int32")},
                     var.dtype, padded).name
    if target is not None and None not in padded:
        target = [int(d) for d in target]
        if any(d not in (1, want) for d, want in zip(padded, target)):
            t.fail(f"coreai.broadcast_to: {op.operands[0].type} does not broadcast to {target}")
        reps = t.param([want if d == 1 else 1 for d, want in zip(padded, target)], "int32")
    else:
        shape = t.aux("shape", {"x": name}, "int32", [rank])
        is_one = t.aux("equal", {"x": shape.name, "y": t.param(1, "int32")}, "bool", [rank])
        reps = t.aux("select", {"cond": is_one.name, "a": t.operand(op.operands[1], "int32"),
                                "b": t.param(np.ones(rank), "int32")}, "int32", [rank]).name
    t.emit(op, "tile", {"x": name, "reps": reps})


@translates("coreai.broadcast_shapes")
def _broadcast_shapes(t, op):
    a, b = (t.constant(v) for v in op.operands)
    if a is not None and b is not None:
        t.fold(op, np.array(np.broadcast_shapes(tuple(int(d) for d in a), tuple(int(d) for d in b))))
        return
    # Right-aligned, the shorter padded with 1s; where a dim of a is 1 the result is b's dim,
    # elsewhere a's (b's is then 1 or the same).
    length = max(t.static(v)[0] for v in op.operands)
    padded = []
    for value in op.operands:
        var = t.as_var(value, "int32")
        missing = length - var.dims[0]
        if missing:
            ones = t.const(np.ones(missing, np.int32), "int32")
            var = t.aux("concat", {"values": f"({ones}, {var.name})", "axis": t.param(0, "int32"),
                                   "interleave": t.param(False, "bool")}, "int32", [length])
        padded.append(var)
    is_one = t.aux("equal", {"x": padded[0].name, "y": t.param(1, "int32")}, "bool", [length])
    t.emit(op, "select", {"cond": is_one.name, "a": padded[1].name, "b": padded[0].name})


@translates("coreai.get_shape")
def _get_shape(t, op):
    dims = t.dims(op.operands[0])
    if None not in dims:
        t.fold(op, np.array(dims, np.int64))
        return
    t.emit(op, "shape", {"x": t.operand(op.operands[0])})


@translates("coreai.range")
def _range(t, op):
    if t.all_constant(op.operands):
        start, stop, step = (t.constant(v).reshape(()) for v in op.operands)
        t.fold(op, np.arange(start, stop, step))
        return
    if t.kind(op.operands[0]) not in ("f32", "f16", "si32", "i32"):
        t.fail(f"coreai.range of element type {t.kind(op.operands[0])} is not supported")
    start, stop, step = (t.operand(v) for v in op.operands)
    t.emit(op, "range_1d", {"start": start, "end": stop, "step": step})


def slice_bounds(t, op, dims, starts, ends, strides):
    """MIL slice_by_index parameters (begin, end, end_mask) and the sizes for a Core AI slice.

    Core AI wraps a negative start or end once when it is below the lower bound of its range
    (0, or -1 for the end of a reverse slice) and clamps; MIL's slice_by_index is Python's
    slicing, which does the same except that it reads an end of -1 as the last element: such an
    end (a reverse slice through index 0) becomes end_mask. A dim of unknown size keeps the
    bounds as given, which then mean the same to both."""
    begin, end, end_mask, sizes = [], [], [], []
    for n, start, stop, step in zip(dims, starts, ends, strides):
        if step == 0:
            t.fail(f"{op.name}: stride 0")
        if n is None:
            start, stop = (min(max(v, -2 ** 31), 2 ** 31 - 1) for v in (start, stop))
            begin.append(start)
            end.append(0 if step < 0 and stop == -1 else stop)
            end_mask.append(step < 0 and stop == -1)
            sizes.append(None)
            continue
        low = 0 if step > 0 else -1  # the lower bound of the valid range, per direction
        start = start + n if start < 0 else start
        stop = stop + n if stop < low else stop
        if step > 0:
            start, stop = min(max(start, 0), n), min(max(stop, 0), n)
        else:
            start, stop = min(max(start, 0), n - 1), min(max(stop, -1), n - 1)
        sizes.append(max(0, -(-(stop - start) // step)))
        begin.append(start)
        end.append(max(stop, 0))
        end_mask.append(stop == -1)
    return begin, end, end_mask, sizes


def _numpy_index(begin, end, end_mask, strides):
    return tuple(slice(b, None if m else e, st) for b, e, m, st in zip(begin, end, end_mask, strides))


@translates("coreai.slice")
def _slice(t, op):
    dims = t.dims(op.operands[0])
    strides = t.ints(op, 3, "strides")
    begin, end, end_mask, sizes = slice_bounds(t, op, dims, t.ints(op, 1, "start_indices"),
                                               t.ints(op, 2, "end_indices"), strides)
    result = t.dims(op.results[0])
    if any(s is not None and r is not None and s != r for s, r in zip(sizes, result)):
        t.fail(f"coreai.slice: resolved sizes {sizes} differ from the result type {op.results[0].type}")
    source = t.values[op.operands[0]]
    if isinstance(source, np.ndarray):
        t.fold(op, source[_numpy_index(begin, end, end_mask, strides)])
        return
    known = [s if r is None else r for s, r in zip(sizes, result)]
    [var] = t.emit(op, "slice_by_index", {"x": source.name, "begin": t.param(begin, "int32"),
                                          "end": t.param(end, "int32"), "stride": t.param(strides, "int32"),
                                          "end_mask": t.param(end_mask, "bool")}, dims=[known])
    box = _box(dims, begin, end, end_mask, strides)
    if box is not None:
        var.window = (op.operands[0], box)


def _box(dims, begin, end, end_mask, strides):
    """(begin, end) of a unit-stride slice of static dims, non-negative and clamped; None otherwise."""
    if None in dims or any(s != 1 for s in strides):
        return None
    lo = [min(max(b + d if b < 0 else b, 0), d) for b, d in zip(begin, dims)]
    hi = [d if m else min(max(e + d if e < 0 else e, 0), d) for e, m, d in zip(end, end_mask, dims)]
    return lo, hi


@translates("coreai.slice_update")
def _slice_update(t, op):
    dims = t.dims(op.operands[0])
    strides = t.ints(op, 3, "strides")
    begin, end, end_mask, sizes = slice_bounds(t, op, dims, t.ints(op, 1, "start_indices"),
                                               t.ints(op, 2, "end_indices"), strides)
    update = op.operands[4]
    if any(s is not None and u is not None and s != u for s, u in zip(sizes, t.dims(update))):
        t.fail(f"coreai.slice_update: resolved sizes {sizes} differ from the update's {update.type}")
    source, new = t.constant(op.operands[0]), t.constant(update)
    if source is not None and new is not None:
        folded = source.copy()
        folded[_numpy_index(begin, end, end_mask, strides)] = new
        t.fold(op, folded)
        return
    t.emit(op, "slice_update", {"x": t.operand(op.operands[0]), "update": t.operand(update),
                                "begin": t.param(begin, "int32"), "end": t.param(end, "int32"),
                                "stride": t.param(strides, "int32"), "end_mask": t.param(end_mask, "bool")})
    write_through(t, op, op.operands[0])


@translates("coreai.concat")
def _concat(t, op):
    rank = len(t.dims(op.operands[1]))
    axis = t.axis(op, 0, rank, "dimension")
    pieces = list(op.operands)[1:]
    if t.all_constant(pieces):
        t.fold(op, np.concatenate([t.constant(p) for p in pieces], axis))
        return
    dtype = t.values[next(p for p in pieces if t.constant(p) is None)].dtype
    values = [t.operand(p, dtype) for p in pieces]
    t.emit(op, "concat", {"values": f"({', '.join(values)})", "axis": t.param(axis, "int32"),
                          "interleave": t.param(False, "bool")})


@translates("coreai.split")
def _split(t, op):
    dims = t.dims(op.operands[0])
    axis = t.axis(op, 2, len(dims), "dim")
    if dims[axis] is None:
        t.fail(f"coreai.split: the split dimension of {op.operands[0].type} is dynamic")
    sizes = t.const_of(op.operands[1], "split_size_or_sections", op)
    if sizes.ndim == 0:  # chunks of that size, the last one the remainder
        size = int(sizes)
        sizes = [min(size, dims[axis] - start) for start in range(0, dims[axis], size)]
    else:
        sizes = [int(v) for v in sizes.reshape(-1)]
    got = [t.dims(r)[axis] for r in op.results]
    if sizes != got or sum(sizes) != dims[axis]:
        t.fail(f"coreai.split: sections {sizes} do not give the result sizes {got}")
    source = t.values[op.operands[0]]
    if isinstance(source, np.ndarray):
        for index, piece in enumerate(np.split(source, np.cumsum(sizes)[:-1], axis)):
            t.fold(op, piece, index)
        return
    if len(sizes) == 1:
        t.emit(op, "identity", {"x": source.name})
        return
    t.emit(op, "split", {"x": source.name, "split_sizes": t.param(sizes, "int32"), "axis": t.param(axis, "int32")})


# The readers a constant-mode pad folds into, with the pad value that reading makes implicit:
# a convolution's custom padding is zeros; our max_pool (src/ops/pool.cc) clips its windows to
# the input and starts from -inf, which is padding with -inf. Average and sum pools are not
# folded (their divisor and ceil_mode windows would need matching case by case).
_PAD_READERS = {"coreai.conv2d": 0.0, "coreai.conv3d": 0.0,
                "coreai.max_pool_2d": -np.inf, "coreai.max_pool_3d": -np.inf}


def _foldable_pad(t, op, mode, padding, value, rank):
    """The MIL ``pad`` (before, after per spatial dim) when every reader of this pad takes it
    as its own padding (_PAD_READERS): constant mode, the readers' pad value, non-negative
    amounts on spatial dims only (the last rank - 2). None otherwise."""
    uses = list(op.results[0].uses)
    if mode != "constant" or not uses or rank < 3 or any(p < 0 for p in padding):
        return None
    for use in uses:
        reader = use.owner
        if _PAD_READERS.get(reader.name) != float(value) or use.operand_number != 0:
            return None
        if reader.name.startswith("coreai.max_pool"):
            # ceil_mode's extra window is bounded by the padding it sees (src/ops/pool.cc).
            ceil_mode = t.constant(reader.operands[4])
            if ceil_mode is None or bool(ceil_mode.reshape(())):
                return None
    spatial = rank - 2
    pairs = [(0, 0)] * (rank - len(padding) // 2) + [(padding[2 * i], padding[2 * i + 1])
                                                     for i in range(len(padding) // 2)]
    if len(pairs) != rank or any(pairs[d] != (0, 0) for d in range(rank - spatial)):
        return None
    return [p for pair in pairs[rank - spatial:] for p in pair]


@translates("coreai.pad")
def _pad(t, op):
    mode = str(op.attributes["padding_mode"])
    mode = mode[mode.find("<") + 1:mode.rfind(">")]
    padding = t.ints(op, 1, "padding")
    value = t.const_of(op.operands[2], "padding value", op).reshape(())
    source = op.operands[0]
    if not any(padding):  # nothing to pad (a composite's pad with padding 0)
        t.values[op.results[0]] = t.values[source]
        return
    dims = t.dims(source)
    # The padded dims (a composite's pad may leave them dynamic in the result type); pairs
    # (before, after) apply to the last len(padding) / 2 dimensions.
    padded = list(dims)
    first = len(padded) - len(padding) // 2
    for d in range(len(padding) // 2):
        if padded[first + d] is not None:
            padded[first + d] += padding[2 * d] + padding[2 * d + 1]
    folded = _foldable_pad(t, op, mode, padding, value, len(dims))
    if folded is not None and isinstance(t.values[source], Var):
        # A separate pad op would run outside the backend's regions (it has no pad lowering)
        # and split the network at every padded convolution; the readers pad instead.
        var = Var(t.values[source].name, t.values[source].dtype, padded)
        var.spatial_pad = folded
        t.values[op.results[0]] = var
        return
    if mode in ("symmetric", "circular"):
        _pad_by_slices(t, op, mode, padding, first, padded)
        return
    if mode not in ("constant", "reflect", "replicate"):
        t.fail(f"coreai.pad: padding mode '{mode}' has no MIL counterpart")
    # MIL pads the last len(pad)/2 dimensions; drop leading all-zero pairs it need not see.
    while len(padding) > 2 and padding[0] == 0 and padding[1] == 0 and mode != "constant":
        padding = padding[2:]
    var = t.as_var(source)
    constant = t.param(float(value), "fp32")  # read as a number whatever x's dtype (src/ops/shape.cc)
    t.emit(op, "pad", {"x": var.name, "pad": t.param(padding, "int32"), "mode": t.param(mode, "string"),
                       "constant_val": constant}, dims=[padded])


def _pad_by_slices(t, op, mode, padding, first, padded):
    """symmetric and circular padding, which MIL's pad lacks: each padded dim is the
    concatenation of slices of the input (reversed for symmetric) around it."""
    var = t.as_var(op.operands[0])
    rank = len(var.dims)
    for d in range(len(padding) // 2):
        axis = first + d
        before, after = padding[2 * d], padding[2 * d + 1]
        if not before and not after:
            continue
        pieces = []
        for count, at_start in ((before, True), (after, False)):
            if not count:
                pieces.append(None)
                continue
            # circular: the before part is the input's last `count` elements, the after part
            # its first; symmetric: the first (last) `count` elements, reversed.
            take_end = at_start == (mode == "circular")
            begin = [0] * rank
            end = [0] * rank
            end_mask = [True] * rank
            if take_end:
                begin[axis] = -count
            else:
                end[axis], end_mask[axis] = count, False
            dims = list(var.dims)
            dims[axis] = count
            piece = t.aux("slice_by_index", {"x": var.name, "begin": t.param(begin, "int32"),
                                             "end": t.param(end, "int32"), "end_mask": t.param(end_mask, "bool")},
                          var.dtype, dims)
            if mode == "symmetric":
                piece = t.aux("reverse", {"x": piece.name, "axes": t.param([axis], "int32")}, var.dtype, dims)
            pieces.append(piece)
        names = [p.name for p in (pieces[0], var, pieces[1]) if p is not None]
        dims = list(var.dims)
        dims[axis] = padded[axis]
        var = t.aux("concat", {"values": f"({', '.join(names)})", "axis": t.param(axis, "int32"),
                               "interleave": t.param(False, "bool")}, var.dtype, dims)
    t.emit(op, "identity", {"x": var.name}, dims=[var.dims])


@translates("coreai.tile")
def _tile(t, op):
    reps = t.ints(op, 1, "dims")
    rank = len(t.dims(op.operands[0]))
    reps = [1] * (rank - len(reps)) + reps  # the repetitions apply to the innermost dims
    source = t.values[op.operands[0]]
    if isinstance(source, np.ndarray):
        t.fold(op, np.tile(source, reps))
        return
    t.emit(op, "tile", {"x": source.name, "reps": t.param(reps, "int32")})


@translates("coreai.reverse")
def _reverse(t, op):
    rank = len(t.dims(op.operands[0]))
    axes = sorted(a % rank for a in t.ints(op, 1, "dims"))
    source = t.values[op.operands[0]]
    if isinstance(source, np.ndarray):
        t.fold(op, np.flip(source, axes))
        return
    if not axes:
        t.values[op.results[0]] = source
        return
    t.emit(op, "reverse", {"x": source.name, "axes": t.param(axes, "int32")})


@translates("coreai.gather_nd")
def _gather_nd(t, op):
    # Negative indices wrap once; MIL's gather ops without validate_indices wrap them too,
    # and coremlrt fails a prediction on an index outside [-size, size).
    x, indices = op.operands
    table, where = t.values[x], t.constant(indices)
    if isinstance(table, np.ndarray) and where is not None:
        t.fold(op, table[tuple(np.moveaxis(where, -1, 0))])
        return
    index_dims = t.dims(indices)
    if isinstance(table, Var) and table.compressed and index_dims[-1] == 1:
        # Rows of a compressed table (an embedding): gather along axis 0, which reads it packed.
        rows = t.aux("reshape", {"x": t.operand(indices, "int32"), "shape": t.param(
            [-1 if d is None else d for d in index_dims[:-1]], "int32")}, "int32", index_dims[:-1])
        t.emit(op, "gather", {"x": table.name, "indices": rows.name, "axis": t.param(0, "int32")})
        return
    t.emit(op, "gather_nd", {"x": t.operand(x), "indices": t.operand(indices, "int32"),
                             "batch_dims": t.param(0, "int32")})


@translates("coreai.gather_along_axis")
def _gather_along_axis(t, op):
    x, indices = op.operands[0], op.operands[1]
    rank = len(t.dims(x))
    axis = t.axis(op, 2, rank)
    if t.all_constant([x, indices]):
        t.fold(op, np.take_along_axis(t.constant(x), t.constant(indices).astype(np.int64), axis))
        return
    t.emit(op, "gather_along_axis", {"x": t.operand(x), "indices": t.operand(indices, "int32"),
                                     "axis": t.param(axis, "int32")})


def wrapped_indices(t, indices_value, sizes):
    """Indices with negative entries wrapped once (+ size): MIL's iOS17+ scatters take
    [0, size) only. ``sizes`` broadcasts against the indices."""
    held = t.values[indices_value]
    sizes = np.asarray(sizes, np.int32)
    if isinstance(held, np.ndarray):
        return t.const(np.where(held < 0, held + sizes, held).astype(np.int32), "int32")
    var = t.as_var(indices_value, "int32")
    negative = t.aux("less", {"x": var.name, "y": t.param(0, "int32")}, "bool", var.dims)
    shifted = t.aux("add", {"x": var.name, "y": t.const(sizes, "int32")}, "int32", var.dims)
    return t.aux("select", {"cond": negative.name, "a": shifted.name, "b": var.name}, "int32", var.dims).name


@translates("coreai.scatter_nd")
def _scatter_nd(t, op):
    # Only the replace update function (the region yields its second argument) is MIL's
    # scatter_nd mode "update"; other update functions are refused.
    block = op.regions[0].blocks[0]
    body = [o.operation for o in block.operations]
    if not (len(body) == 1 and body[0].name == "coreai.yield" and len(block.arguments) == 2
            and body[0].operands[0] == block.arguments[1]):
        t.fail(f"coreai.scatter_nd with an update function other than replace "
               f"({', '.join(o.name for o in body)}) is not supported")
    shape = t.static(op.operands[0])
    # Operands (input, indices, updates), whatever order the printed form shows them in.
    depth = int(t.dims(op.operands[1])[-1])
    wrapped = wrapped_indices(t, op.operands[1], shape[:depth])
    updates = t.operand(op.operands[2])
    [var] = t.emit(op, "scatter_nd", {"data": t.operand(op.operands[0]), "indices": wrapped,
                                      "updates": updates, "mode": t.param("update", "string")})
    var.scatter = (op.operands[0], wrapped, updates)
    write_through(t, op, op.operands[0])


def _only_use(value, names):
    """The op that is the one use of ``value`` when its name is one of ``names``; else None."""
    uses = list(value.uses)
    if len(uses) != 1:
        return None
    owner = getattr(uses[0].owner, "operation", uses[0].owner)
    return owner if owner.name in names else None


def _producer(value, names):
    owner = getattr(value.owner, "operation", value.owner)
    return owner if getattr(owner, "name", None) in names else None


def window_scatter(t, op, box):
    """coreai-torch writes ``x[i].index_copy_(d, rows, v)`` (a KV-cache row into one layer of a
    stacked cache) as where(layer mask, broadcast(reshape(scatter_nd(reshape(slice(x, box)),
    indices, v))), x): copy the box out, scatter into the copy, put the copy back. When every
    value between is read once, that is one scatter_nd into x whose index tuples start with the
    box's fixed leading coordinates: written so (the slice, scatter_nd and reshapes taken back),
    it copies no box, and a state's update is done in place (src/runtime/state_update.h).
    ``op`` is the where, ``box`` the (begin, end) it writes. Returns whether it was written."""
    x = op.operands[2]
    tile = _producer(op.operands[1], ("coreai.broadcast_in_dims",))
    if tile is None or _only_use(op.operands[1], _WHERE) is None:
        return False
    chain = [tile.operands[0]]  # reshape(scatter_nd(...)), scatter_nd, reshape(slice), slice
    for names in (("coreai.reshape",), ("coreai.scatter_nd",), ("coreai.reshape",), ("coreai.slice",)):
        owner = _producer(chain[-1], names)
        if owner is None or len(list(chain[-1].uses)) != 1:
            return False
        chain.append(owner.operands[0])
    if chain[-1] != x:
        return False
    scattered, window = (getattr(t.values.get(chain[i]), attr, None) for i, attr in ((1, "scatter"), (3, "window")))
    if scattered is None or window is None or scattered[0] != chain[2] or window[0] != x:
        return False
    begin, end = box
    if [list(window[1][0]), list(window[1][1])] != [list(begin), list(end)]:
        return False
    # The box's leading dims of extent 1 are the ones the reshape into the scatter drops.
    extent = [e - b for b, e in zip(begin, end)]
    data_dims = t.dims(chain[2])
    lead = len(extent) - len(data_dims)
    if lead < 1 or extent[:lead] != [1] * lead or extent[lead:] != list(data_dims) \
            or list(t.dims(chain[0])) != extent:
        return False
    index_dims = list(t.dims(_producer(chain[1], ("coreai.scatter_nd",)).operands[1]))
    if None in index_dims or any(begin[d] != 0 or end[d] != t.dims(x)[d] for d in range(lead, len(extent))):
        return False
    names = [t.values[value].name for value in chain[:4]]
    # Each must be an op of this block of its own (not an alias of another value's name).
    if len(set(names)) != 4 or not all(t.retractable(name) for name in names):
        return False
    for name in names:
        t.retract(name)
    leading = t.const(np.broadcast_to(np.asarray(begin[:lead], np.int32), index_dims[:-1] + [lead]).copy(), "int32")
    tuples = t.aux("concat", {"values": f"({leading}, {scattered[1]})", "axis": t.param(-1, "int32"),
                              "interleave": t.param(False, "bool")}, "int32", index_dims[:-1] + [index_dims[-1] + lead])
    t.emit(op, "scatter_nd", {"data": t.operand(x), "indices": tuples.name, "updates": scattered[2],
                              "mode": t.param("update", "string")})
    write_through(t, op, x)
    return True


_SCATTER_MODES = ("update", "add", "sub", "mul", "div", "max", "min")


@translates("coreai.scatter_along_axis")
def _scatter_along_axis(t, op):
    mode = "update"
    if "scatter_mode" in op.attributes:
        text = str(op.attributes["scatter_mode"])
        mode = text[text.find("<") + 1:text.rfind(">")] if "<" in text else text.strip('"')
    if mode not in _SCATTER_MODES:
        t.fail(f"coreai.scatter_along_axis: scatter mode '{mode}' has no MIL counterpart")
    data, indices, updates = op.operands[0], op.operands[1], op.operands[2]
    shape = t.dims(data)
    axis = t.axis(op, 3, len(shape))
    if shape[axis] is None:
        t.fail("coreai.scatter_along_axis: the scatter axis is dynamic")
    wrapped = wrapped_indices(t, indices, shape[axis])
    t.emit(op, "scatter_along_axis", {"data": t.operand(data), "indices": wrapped, "updates": t.operand(updates),
                                      "axis": t.param(axis, "int32"), "mode": t.param(mode, "string")})


@translates("coreai.non_zero")
def _non_zero(t, op):
    source = t.values[op.operands[0]]
    if isinstance(source, np.ndarray):
        t.fold(op, np.argwhere(source))
        return
    t.emit(op, "non_zero", {"x": source.name})
