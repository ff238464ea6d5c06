"""Reductions, arg-reductions, scans, sorts and the quantization statistics (the reduction
family, src/ops/reduction.cc; MIL's cumsum and argsort kernels are in src/ops/tensor_ops.cc).

Core AI keeps reduced dims (size 1), as MIL's reductions do with ``keep_dims = true``. The
region-defined ``reduce`` and ``reduce_index`` are refused before loading (``__init__.py``):
coreai-core cannot read them back from bytecode.
"""

import numpy as np

from ._common import BOOL, COMPUTED, FLOAT, FLOAT_INT
from ._registry import translates

_REDUCE = {"reduce_sum": ("reduce_sum", np.sum), "reduce_mean": ("reduce_mean", np.mean),
           "reduce_max": ("reduce_max", np.max), "reduce_min": ("reduce_min", np.min),
           "reduce_product": ("reduce_prod", np.prod)}


def _axes(t, op, index, rank):
    axes = t.ints(op, index, "axes")
    if any(not -rank <= a < rank for a in axes):
        t.fail(f"{op.name}: axes {axes} are out of range for rank {rank}")
    return sorted({a % rank for a in axes})


def _check(t, op, value, kinds):
    if t.kind(value) not in kinds:
        t.fail(f"{op.name}: element type {t.kind(value)} is not supported (MIL's reductions take "
               f"{'/'.join(kinds)})")


@translates(*(f"coreai.{name}" for name in _REDUCE))
def _reduce(t, op):
    mil_op, fold = _REDUCE[op.name.rsplit(".", 1)[-1]]
    x = op.operands[0]
    _check(t, op, x, FLOAT if mil_op == "reduce_mean" else FLOAT_INT)
    axes = _axes(t, op, 1, len(t.dims(x)))
    source = t.constant(x)
    if source is not None:
        t.fold(op, fold(source, axis=tuple(axes), keepdims=True))
        return
    t.emit(op, mil_op, {"x": t.operand(x), "axes": t.param(axes, "int32"), "keep_dims": t.param(True, "bool")})


def _bool_reduce(t, op, x, axes, mil_op):
    """all / any over bools: the min / max of the values as int32."""
    var = t.as_var(x)
    as_int = t.aux("cast", {"x": var.name, "dtype": t.param("int32", "string")}, "int32", var.dims)
    dims = [1 if i in axes else d for i, d in enumerate(var.dims)]
    reduced = t.aux(mil_op, {"x": as_int.name, "axes": t.param(axes, "int32"), "keep_dims": t.param(True, "bool")},
                    "int32", dims)
    return reduced


@translates("coreai.all", "coreai.any")
def _all_any(t, op):
    x = op.operands[0]
    _check(t, op, x, BOOL)
    axes = _axes(t, op, 1, len(t.dims(x)))
    source = t.constant(x)
    is_all = op.name == "coreai.all"
    if source is not None:
        t.fold(op, (np.all if is_all else np.any)(source, axis=tuple(axes), keepdims=True))
        return
    reduced = _bool_reduce(t, op, x, axes, "reduce_min" if is_all else "reduce_max")
    t.emit(op, "cast", {"x": reduced.name, "dtype": t.param("bool", "string")})


@translates("coreai.argmax")
def _argmax(t, op):
    x = op.operands[0]
    _check(t, op, x, FLOAT_INT)
    axis = t.axis(op, 1, len(t.dims(x)))
    # Ties go to the first index in both (src/ops/reduction.cc).
    t.emit(op, "reduce_argmax", {"x": t.operand(x), "axis": t.param(axis, "int32"),
                                 "keep_dims": t.param(True, "bool")})


# scan_op is an integer attribute: sum, product, min, max (coreai's scan builder).
_SCAN_COMBINERS = {0: "sum", 1: "product", 2: "min", 3: "max"}


@translates("coreai.scan")
def _scan(t, op):
    code = int(str(op.attributes["scan_op"]).split(":")[0]) if "scan_op" in op.attributes else 0
    combiner = _SCAN_COMBINERS.get(code, str(code))
    if combiner != "sum":
        t.fail(f"coreai.scan: combiner '{combiner}' has no MIL counterpart (MIL's cumsum adds only)")
    x = op.operands[0]
    _check(t, op, x, FLOAT_INT)
    axis = t.axis(op, 1, len(t.dims(x)))
    reverse = bool(t.const_of(op.operands[2], "reverse", op).reshape(()))
    t.emit(op, "cumsum", {"x": t.operand(x), "axis": t.param(axis, "int32"), "exclusive": t.param(False, "bool"),
                          "reverse": t.param(reverse, "bool")})


def _sort_indices(t, op):
    """The int32 indices that sort operand 0 along the dim of operand 1 (argsort's order).

    MIL's argsort is stable and puts NaN last when ascending, first when descending
    (src/ops/tensor_ops.cc); Core AI puts NaN last either way, so a descending float sort is
    an ascending sort of -x (equal values stay equal, in order)."""
    x = op.operands[0]
    _check(t, op, x, FLOAT_INT)
    var = t.as_var(x)
    axis = t.axis(op, 1, len(var.dims), "dim")
    descending = bool(t.const_of(op.operands[2], "descending", op).reshape(()))
    key, ascending = var.name, not descending
    if descending and var.dtype in ("fp32", "fp16"):
        key = t.aux("mul", {"x": var.name, "y": t.param(-1, var.dtype)}, var.dtype, var.dims).name
        ascending = True
    return var, axis, {"x": key, "axis": t.param(axis, "int32"), "ascending": t.param(ascending, "bool")}


@translates("coreai.argsort")
def _argsort(t, op):
    _, _, arguments = _sort_indices(t, op)
    t.emit(op, "argsort", arguments)


@translates("coreai.sort")
def _sort(t, op):
    var, axis, arguments = _sort_indices(t, op)
    indices = t.aux("argsort", arguments, "int32", var.dims)
    t.emit(op, "gather_along_axis", {"x": var.name, "indices": indices.name, "axis": t.param(axis, "int32")})


@translates("coreai.symmetric_quantization_statistics", "coreai.asymmetric_quantization_statistics")
def _statistics(t, op):
    """Per-channel quantization statistics along an axis, computed as the docstrings write them."""
    x, value_range = op.operands[0], op.operands[1]
    _check(t, op, x, FLOAT)
    var = t.as_var(x)
    rank = len(var.dims)
    axis = t.axis(op, 2, rank)
    bounds = t.const_of(value_range, "range", op).reshape(-1)
    others = [i for i in range(rank) if i != axis]
    channel = [var.dims[axis]]
    reduced = {}
    for mil_op in ("reduce_max", "reduce_min"):
        reduced[mil_op] = t.aux(mil_op, {"x": var.name, "axes": t.param(others, "int32"),
                                         "keep_dims": t.param(False, "bool")}, var.dtype, channel)
    span = t.param(float(bounds[1]) - float(bounds[0]), var.dtype)
    if op.name == "coreai.symmetric_quantization_statistics":
        magnitudes = [t.aux("abs", {"x": reduced[m].name}, var.dtype, channel).name for m in reduced]
        largest = t.aux("maximum", {"x": magnitudes[0], "y": magnitudes[1]}, var.dtype, channel)
        doubled = t.aux("mul", {"x": largest.name, "y": t.param(2, var.dtype)}, var.dtype, channel)
        t.emit(op, "real_div", {"x": doubled.name, "y": span})
        return
    zero = t.param(0, var.dtype)
    high = t.aux("maximum", {"x": reduced["reduce_max"].name, "y": zero}, var.dtype, channel)
    low = t.aux("minimum", {"x": reduced["reduce_min"].name, "y": zero}, var.dtype, channel)
    width = t.aux("sub", {"x": high.name, "y": low.name}, var.dtype, channel)
    scale = t.aux("real_div", {"x": width.name, "y": span}, var.dtype, channel)
    t.values[op.results[0]] = scale
    ratio = t.aux("real_div", {"x": low.name, "y": scale.name}, var.dtype, channel)
    integer = t.kind(value_range) not in FLOAT
    if integer:  # rounded only for an integer range; halves go to the even neighbour
        ratio = t.aux("round", {"x": ratio.name}, var.dtype, channel)
    shifted = t.aux("sub", {"x": t.param(float(bounds[0]), var.dtype), "y": ratio.name}, var.dtype, channel)
    clipped = t.aux("clip", {"x": shifted.name, "alpha": t.param(float(bounds[0]), var.dtype),
                             "beta": t.param(float(bounds[1]), var.dtype)}, var.dtype, channel)
    zero_point = op.results[1]
    dtype = COMPUTED.get(t.kind(zero_point))
    if dtype is None:
        t.fail(f"{op.name}: a zero point of element type {t.kind(zero_point)} is not supported")
    if dtype == var.dtype:
        t.values[zero_point] = clipped
        return
    cast = t.aux("cast", {"x": clipped.name, "dtype": t.param(dtype, "string")}, dtype, channel)
    t.values[zero_point] = cast
