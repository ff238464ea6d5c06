"""Compressed weights and quantization: lut_to_dense, blockwise_shift_scale, dequantize,
the bitmask-sparse ops and quantize (the constexpr family, src/ops/constexpr.cc; a computed
value's dequantize / quantize is src/ops/quantization.cc's).

Constant operands become MIL's iOS18 ``constexpr_*`` ops (docs/design/compressed-weights.md),
whose packed inputs the engine keeps packed: sub-byte indices and codes are written to
weight.bin packed as MIL stores them. dequantize / quantize of computed values become MIL's
iOS17 ``dequantize`` / ``quantize``.
"""

import numpy as np

from ._common import FLOAT, NUMPY_OF_MIL, Sparse, Var, element_type
from ._registry import translates


def _stored(t, value, what, op):
    """The MIL name of a constexpr input: a constant in its own element type (sub-byte ones
    packed), or a constexpr op's output."""
    held = t.values[value]
    if isinstance(held, Var) and held.compressed and not held.transposed:
        return held.name
    if not isinstance(held, np.ndarray):
        t.fail(f"{op.name}: {what} must be a constant (a compressed weight)")
    return t.const_name(held, element_type(value.type, t.where)[0])


@translates("coreai.lut_to_dense")
def _lut_to_dense(t, op):
    indices, lut = op.operands[0], op.operands[1]
    table = t.const_of(lut, "lut", op)
    arguments = {"indices": _stored(t, indices, "indices", op), "lut": _stored(t, lut, "lut", op)}
    if table.shape[-1] > 1:  # vector palettes: the axis the vectors run along
        arguments["vector_axis"] = t.param(t.axis(op, 2, len(t.dims(indices))), "int32")
    t.emit(op, "constexpr_lut_to_dense", arguments, compressed=True)


def _shift_scale(t, op, data, scale, offset1, offset2, block_shape):
    """constexpr_blockwise_shift_scale computing scale * (data - offset1) + offset2 per block.
    MIL's op has one offset, subtracted before the scale: offset2 joins it as
    offset1 - offset2 / scale, in the scale's dtype (the result rounds as fp32 (fp16) would)."""
    arguments = {"data": _stored(t, data, "data", op)}
    scales = t.const_of(scale, "scale", op).reshape(block_shape)
    shift = t.const_of(offset1, "offset1", op).reshape(block_shape)
    bias = t.const_of(offset2, "offset2", op).reshape(block_shape)
    scale_dtype = element_type(scale.type, t.where)[0]
    if scale_dtype not in ("fp32", "fp16"):
        t.fail(f"{op.name}: a scale of element type {t.kind(scale)} is not supported")
    arguments["scale"] = t.const(np.ascontiguousarray(scales), scale_dtype)
    if bias.any():
        with np.errstate(all="ignore"):
            combined = shift.astype(np.float64) - bias.astype(np.float64) / scales.astype(np.float64)
        arguments["offset"] = t.const(combined.astype(NUMPY_OF_MIL[scale_dtype]), scale_dtype)
    elif shift.any():
        arguments["offset"] = t.const(np.ascontiguousarray(shift), element_type(offset1.type, t.where)[0])
    t.emit(op, "constexpr_blockwise_shift_scale", arguments, compressed=True)


@translates("coreai.blockwise_shift_scale")
def _blockwise_shift_scale(t, op):
    data, scale, offset1, offset2 = op.operands
    _shift_scale(t, op, data, scale, offset1, offset2, t.dims(scale))


def _per_axis_shape(t, op, rank, parameter):
    """The block grid of dequantize / quantize parameters: per tensor (an axis list of every
    dim, scalar parameters) or per channel along one axis."""
    axis = t.const_of(op.operands[4], "axis", op)
    if axis.ndim == 1:
        if sorted(int(a) % rank for a in axis) != list(range(rank)) or parameter.size != 1:
            t.fail(f"{op.name}: an axis list must name every dim, with scalar parameters")
        return [1] * rank, None
    axis = int(axis) % rank
    shape = [1] * rank
    shape[axis] = parameter.size
    return shape, axis


@translates("coreai.dequantize")
def _dequantize(t, op):
    data, scale, offset1, offset2 = op.operands[:4]
    rank = len(t.dims(data))
    scales = t.const_of(scale, "scale", op)
    block_shape, axis = _per_axis_shape(t, op, rank, scales)
    if t.constant(data) is not None:  # a quantized weight
        _shift_scale(t, op, data, scale, offset1, offset2, block_shape)
        return
    var = t.as_var(data)
    if var.dtype not in ("int8", "uint8"):
        t.fail(f"{op.name}: a computed input of element type {t.kind(data)} is not supported (MIL's "
               f"dequantize takes int8 and uint8)")
    shift = t.const_of(offset1, "offset1", op)
    bias = t.const_of(offset2, "offset2", op)
    scale_dtype = element_type(scale.type, t.where)[0]
    arguments = {"input": var.name, "scale": t.const(scales, scale_dtype),
                 "zero_point": t.const(shift, var.dtype)}
    if axis is not None:
        arguments["axis"] = t.param(axis, "int32")
    out_dtype = element_type(op.results[0].type, t.where)[0]
    if out_dtype != scale_dtype:
        t.fail(f"{op.name}: a result of another float type than the scale is not supported")
    if not bias.any():
        t.emit(op, "dequantize", arguments)
        return
    scaled = t.aux("dequantize", arguments, scale_dtype, var.dims)
    t.emit(op, "add", {"x": scaled.name, "y": t.const(bias.reshape(block_shape), out_dtype)})


@translates("coreai.quantize")
def _quantize(t, op):
    """q = clip(round((x - offset2) / scale) + offset1): MIL's quantize rounds x / scale half
    to even (src/ops/quantization.cc) and clips to int8 or uint8."""
    data, scale, offset1, offset2 = op.operands[:4]
    out_kind = t.kind(op.results[0])
    if out_kind not in ("si8", "ui8", "i8"):
        t.fail(f"{op.name}: quantizing to {out_kind} is not supported (MIL's quantize makes int8 and uint8)")
    if t.kind(data) not in FLOAT:
        t.fail(f"{op.name}: an input of element type {t.kind(data)} is not supported")
    var = t.as_var(data)
    rank = len(var.dims)
    scales = t.const_of(scale, "scale", op)
    block_shape, axis = _per_axis_shape(t, op, rank, scales)
    bias = t.const_of(offset2, "offset2", op)
    out_dtype = "uint8" if out_kind == "ui8" else "int8"
    name = var.name
    if bias.any():
        name = t.aux("sub", {"x": name, "y": t.const(bias.reshape(block_shape).astype(bias.dtype), var.dtype)},
                     var.dtype, var.dims).name
    arguments = {"input": name, "scale": t.const(scales, element_type(scale.type, t.where)[0]),
                 "zero_point": t.const(t.const_of(offset1, "offset1", op), out_dtype),
                 "output_dtype": t.param(out_dtype, "string")}
    if axis is not None:
        arguments["axis"] = t.param(axis, "int32")
    t.emit(op, "quantize", arguments)


@translates("coreai.build_sparse_with_bitmask")
def _build_sparse(t, op):
    values, mask = op.operands
    bits, count = t.constant(mask), t.dims(values)[0]
    if bits is None or int(np.count_nonzero(bits)) != count:
        t.fail(f"{op.name}: the bitmask must be a constant with one set bit per value ({count})")
    t.values[op.results[0]] = Sparse(_stored(t, values, "values", op), _stored(t, mask, "bitmask", op),
                                     t.dims(mask), t.dims(values)[0])


def _sparse_of(t, op, value):
    held = t.values[value]
    if not isinstance(held, Sparse):
        t.fail(f"{op.name}: the sparse operand must be built from constants (build_sparse_with_bitmask)")
    return held


@translates("coreai.sparse_with_bitmask_to_dense")
def _sparse_to_dense(t, op):
    sparse = _sparse_of(t, op, op.operands[0])
    t.emit(op, "constexpr_sparse_to_dense", {"nonzero_data": sparse.values, "mask": sparse.mask}, compressed=True)


@translates("coreai.lut_to_sparse_with_bitmask")
def _lut_to_sparse(t, op):
    sparse = _sparse_of(t, op, op.operands[0])
    lut = op.operands[1]
    table = t.const_of(lut, "lut", op)
    arguments = {"indices_mask": sparse.mask, "indices_nonzero_data": sparse.values,
                 "lut": _stored(t, lut, "lut", op)}
    dims = list(sparse.dims)
    vector = table.shape[-1]
    if vector > 1:
        axis = t.axis(op, 2, len(dims))
        arguments["vector_axis"] = t.param(axis, "int32")
        dims[axis] *= vector
    dtype = element_type(lut.type, t.where)[0]
    count = sparse.count * vector
    mask, values = t.aux_many("constexpr_lut_to_sparse", arguments, [("uint1", dims), (dtype, [count])])
    t.values[op.results[0]] = Sparse(values.name, mask.name, dims, count)
