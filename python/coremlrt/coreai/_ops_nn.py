"""Network ops: matmul, convolutions, pooling, softmax and interpolation.

Core AI convolutions and pools take no padding (a separate ``pad`` does it), so the MIL ops get
``pad_type = valid``, or ``custom`` with the amounts of a pad folded into them
(``Var.spatial_pad``, _ops_shape.py ``_pad``); transposed convolutions crop symmetrically and
take their output size from the result type.
"""

import itertools

import numpy as np

from ._common import FLOAT, FLOAT_INT
from ._registry import translates


def _check(t, op, value, kinds):
    if t.kind(value) not in kinds:
        t.fail(f"{op.name}: element type {t.kind(value)} is not supported (MIL's op takes {'/'.join(kinds)})")


@translates("coreai.batch_matmul", "coreai.decomposable.broadcasting_batch_matmul")
def _matmul(t, op):
    x, y = op.operands
    _check(t, op, x, FLOAT_INT)
    a, b = t.constant(x), t.constant(y)
    if a is not None and b is not None:
        t.fold(op, np.matmul(a, b))
        return
    # A transposed Var names the untransposed weight (_ops_shape.py _transpose).
    transpose_x, transpose_y = (bool(getattr(t.values[v], "transposed", False)) for v in (x, y))
    t.emit(op, "matmul", {"x": t.operand(x), "y": t.operand(y), "transpose_x": t.param(transpose_x, "bool"),
                          "transpose_y": t.param(transpose_y, "bool")})


def _padding(t, value, spatial):
    """pad_type and pad of a conv or pool reading ``value``: a folded pad's, or none."""
    pad = getattr(t.values[value], "spatial_pad", None)
    if pad is not None:
        if len(pad) != 2 * spatial:
            t.fail(f"a folded pad of {len(pad)} amounts read by an op with {spatial} spatial dims")
        return {"pad_type": t.param("custom", "string"), "pad": t.param(pad, "int32")}
    return {"pad_type": t.param("valid", "string"), "pad": t.param([0] * 2 * spatial, "int32")}


@translates("coreai.conv2d", "coreai.conv3d")
def _conv(t, op):
    _check(t, op, op.operands[0], FLOAT)
    strides = t.ints(op, 2, "stride")
    t.emit(op, "conv", {"x": t.operand(op.operands[0]), "weight": t.operand(op.operands[1]),
                        "strides": t.param(strides, "int32"), "dilations": t.param(t.ints(op, 3, "dilation"), "int32"),
                        "groups": t.param(t.ints(op, 4, "groups")[0], "int32"),
                        **_padding(t, op.operands[0], len(strides))})


@translates("coreai.conv_transpose2d", "coreai.conv_transpose3d")
def _conv_transpose(t, op):
    """The transposed convolution's full extent cropped by ``padding`` on both sides of each
    dim; the output size (with output_pad) is the result type's, given as output_shape."""
    _check(t, op, op.operands[0], FLOAT)
    strides = t.ints(op, 2, "stride")
    padding = t.ints(op, 3, "padding")
    if len(padding) != len(strides):
        t.fail(f"coreai.conv_transpose: padding {padding} is not one value per spatial dim")
    out = t.static(op.results[0])
    t.emit(op, "conv_transpose", {
        "x": t.operand(op.operands[0]), "weight": t.operand(op.operands[1]), "strides": t.param(strides, "int32"),
        "dilations": t.param(t.ints(op, 4, "dilation"), "int32"),
        "groups": t.param(t.ints(op, 6, "groups")[0], "int32"),
        "pad_type": t.param("custom", "string"), "pad": t.param([p for p in padding for _ in (0, 1)], "int32"),
        "output_shape": t.param(out, "int32")})


def _pool_arguments(t, op, kernel, strides, dilations, ceil_mode):
    _check(t, op, op.operands[0], FLOAT)
    if any(d != 1 for d in dilations):
        t.fail(f"{op.name}: dilation {dilations} is not supported (MIL pooling has none)")
    return {"x": t.operand(op.operands[0]), "kernel_sizes": t.param(kernel, "int32"),
            "strides": t.param(strides, "int32"), **_padding(t, op.operands[0], len(kernel)),
            "ceil_mode": t.param(ceil_mode, "bool")}


@translates("coreai.max_pool_2d", "coreai.max_pool_3d")
def _max_pool(t, op):
    ceil_mode = bool(t.const_of(op.operands[4], "ceil_mode", op).reshape(()))
    t.emit(op, "max_pool", _pool_arguments(t, op, t.ints(op, 1, "kernel_size"), t.ints(op, 2, "stride"),
                                           t.ints(op, 3, "dilation"), ceil_mode))


@translates("coreai.sum_pool_2d", "coreai.sum_pool_3d")
def _sum_pool(t, op):
    kernel, strides = t.ints(op, 1, "kernel_size"), t.ints(op, 2, "stride")
    arguments = _pool_arguments(t, op, kernel, strides, t.ints(op, 3, "dilation"), False)
    if all(k == 1 for k in kernel) and all(s == 1 for s in strides):
        t.emit(op, "identity", {"x": arguments["x"]})
        return
    # A window sum is the window average (no padding) times the window size.
    arguments["exclude_padding_from_average"] = t.param(True, "bool")
    var = t.as_var(op.operands[0])
    average = t.aux("avg_pool", arguments, var.dtype, t.dims(op.results[0]))
    t.emit(op, "mul", {"x": average.name, "y": t.param(float(np.prod(kernel)), var.dtype)})


@translates("coreai.softmax")
def _softmax(t, op):
    _check(t, op, op.operands[0], FLOAT)
    axis = t.axis(op, 1, len(t.dims(op.operands[0])))
    t.emit(op, "softmax", {"x": t.operand(op.operands[0]), "axis": t.param(axis, "int32")})


def _mode(t, op):
    text = str(op.attributes["interpolation_mode"])
    mode = text[text.find("<") + 1:text.rfind(">")] if "<" in text else text.strip('"')
    if mode not in ("linear", "nearest_neighbor"):
        t.fail(f"{op.name}: interpolation mode '{mode}' is not supported")
    return mode


@translates("coreai.interpolate")
def _interpolate(t, op):
    """Interpolation one dim at a time, which is what N-linear interpolation is: along each dim
    whose coordinates are not the identity, the output gathers its two neighbours (one for
    nearest_neighbor) with weights computed here, in float32, from the docstring's
    coord = (i + 0.5 - offset) / scale - 0.5, clamped to the input."""
    x = op.operands[0]
    _check(t, op, x, FLOAT)
    mode = _mode(t, op)
    var = t.as_var(x)
    rank = len(var.dims)
    sizes = t.ints(op, 1, "output_shape")
    scales = t.const_of(op.operands[2], "scale", op).astype(np.float32).reshape(-1)
    offsets = t.const_of(op.operands[3], "offset", op).astype(np.float32).reshape(-1)
    if not len(sizes) == len(scales) == len(offsets) == rank:
        t.fail("coreai.interpolate: output_shape, scale and offset need one value per dim")
    numpy_dtype = np.float16 if var.dtype == "fp16" else np.float32
    for axis in range(rank):
        n, out = var.dims[axis], sizes[axis]
        if n == out and scales[axis] == 1 and offsets[axis] == 0:
            continue  # coord = i
        if n is None:
            t.fail("coreai.interpolate: an interpolated dim is dynamic")
        i = np.arange(out, dtype=np.float32)
        coord = np.clip((i + np.float32(0.5) - offsets[axis]) / scales[axis] - np.float32(0.5),
                        np.float32(0), np.float32(n - 1)).astype(np.float32)
        dims = list(var.dims)
        dims[axis] = out
        axis_param = t.param(axis, "int32")
        if mode == "nearest_neighbor":
            index = np.round(coord).astype(np.int32)  # halves to even, as the docstring says
            var = t.aux("gather", {"x": var.name, "indices": t.const(index, "int32"), "axis": axis_param},
                        var.dtype, dims)
            continue
        low = np.floor(coord)
        weight = (coord - low).astype(np.float32)
        low = low.astype(np.int32)
        high = np.minimum(low + 1, n - 1).astype(np.int32)
        lower = t.aux("gather", {"x": var.name, "indices": t.const(low, "int32"), "axis": axis_param}, var.dtype, dims)
        if not weight.any():
            var = lower
            continue
        upper = t.aux("gather", {"x": var.name, "indices": t.const(high, "int32"), "axis": axis_param},
                      var.dtype, dims)
        shape = [1] * rank
        shape[axis] = out
        near = t.aux("mul", {"x": lower.name, "y": t.const((1 - weight).astype(numpy_dtype).reshape(shape),
                                                           var.dtype)}, var.dtype, dims)
        far = t.aux("mul", {"x": upper.name, "y": t.const(weight.astype(numpy_dtype).reshape(shape), var.dtype)},
                    var.dtype, dims)
        var = t.aux("add", {"x": near.name, "y": far.name}, var.dtype, dims)
    t.emit(op, "identity", {"x": var.name})


@translates("coreai.interpolate_coordinates")
def _interpolate_coordinates(t, op):
    """Samples at N points of K coordinates each: the coordinates are clamped to the input;
    nearest_neighbor gathers the rounded point (halves to even), linear the 2^K corners around
    it, weighted by the products of the fractional distances."""
    x, coords = op.operands
    _check(t, op, x, FLOAT)
    mode = _mode(t, op)
    table = t.as_var(x)
    points = t.as_var(coords)
    rank = len(table.dims)
    if None in table.dims:
        t.fail("coreai.interpolate_coordinates: the input's dims must be known")
    count = points.dims[0]
    dtype = points.dtype
    numpy_dtype = np.float16 if dtype == "fp16" else np.float32
    top = np.array([d - 1 for d in table.dims], numpy_dtype)
    clamped = t.aux("maximum", {"x": points.name, "y": t.param(0, dtype)}, dtype, points.dims)
    clamped = t.aux("minimum", {"x": clamped.name, "y": t.const(top, dtype)}, dtype, points.dims)
    if mode == "nearest_neighbor":
        rounded = t.aux("round", {"x": clamped.name}, dtype, points.dims)
        index = t.aux("cast", {"x": rounded.name, "dtype": t.param("int32", "string")}, "int32", points.dims)
        t.emit(op, "gather_nd", {"x": table.name, "indices": index.name, "batch_dims": t.param(0, "int32")})
        return
    low = t.aux("floor", {"x": clamped.name}, dtype, points.dims)
    weight = t.aux("sub", {"x": clamped.name, "y": low.name}, dtype, points.dims)
    rest = t.aux("sub", {"x": t.param(1, dtype), "y": weight.name}, dtype, points.dims)
    low_index = t.aux("cast", {"x": low.name, "dtype": t.param("int32", "string")}, "int32", points.dims)
    high_index = t.aux("add", {"x": low_index.name, "y": t.param(1, "int32")}, "int32", points.dims)
    high_index = t.aux("minimum", {"x": high_index.name, "y": t.const(top.astype(np.int32), "int32")}, "int32",
                       points.dims)
    total = None
    for corner in itertools.product((False, True), repeat=rank):
        upper = t.const(np.array(corner), "bool")
        index = t.aux("select", {"cond": upper, "a": high_index.name, "b": low_index.name}, "int32", points.dims)
        value = t.aux("gather_nd", {"x": table.name, "indices": index.name, "batch_dims": t.param(0, "int32")},
                      table.dtype, [count])
        factors = t.aux("select", {"cond": upper, "a": weight.name, "b": rest.name}, dtype, points.dims)
        product = t.aux("reduce_prod", {"x": factors.name, "axes": t.param([1], "int32"),
                                        "keep_dims": t.param(False, "bool")}, dtype, [count])
        term = t.aux("mul", {"x": value.name, "y": product.name}, table.dtype, [count])
        total = term if total is None else t.aux("add", {"x": total.name, "y": term.name}, table.dtype, [count])
    t.emit(op, "identity", {"x": total.name})
