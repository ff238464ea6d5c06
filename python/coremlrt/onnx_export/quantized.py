"""Compressed weights in the export.

The planner keeps each ``constexpr_*`` result whose kernels can read it packed as a packed tensor
(src/ir/packed.h; python/src/program_bindings.cc hands its parts over). Written out:

* affine codes (``constexpr_affine_dequantize``, ``constexpr_blockwise_shift_scale``) of int8,
  uint8, int4 or uint4 with at most one blocked axis become ``DequantizeLinear`` of the same
  codes, scales and offsets: per tensor, per axis, or block-wise (opset 21, int4/uint4 from
  opset 21 too); ONNX Runtime fuses it with the MatMul that reads it;
* everything else (palettes, sparse masks, blocks along several axes, offsets of another dtype
  than the codes, 1-, 2-, 3- or 6-bit codes) is decoded by our own decoder into a dense
  initializer: ONNX has no operator for these forms that runtimes execute packed.

A weight read by ``linear`` is written transposed ([in, out], what MatMul reads), by permuting
the codes, scales and offsets, so no Transpose runs at inference.
"""

import numpy as np
from onnx import TensorProto, helper

_CODE_TYPES = {"int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "int4": TensorProto.INT4,
               "uint4": TensorProto.UINT4}


def pack_4bit(array, dtype):
    """An ONNX 4-bit tensor's raw bytes: two elements per byte, the first in the low nibble."""
    flat = (np.asarray(array).reshape(-1).astype(np.int16) & 0xF).astype(np.uint8)
    if flat.size % 2:
        flat = np.concatenate([flat, np.zeros(1, np.uint8)])
    return (flat[0::2] | (flat[1::2] << 4)).tobytes()


def code_initializer(builder, array, dtype, hint):
    if dtype in ("int4", "uint4"):
        name = builder.fresh(hint)
        builder.initializers.append(helper.make_tensor(name, _CODE_TYPES[dtype], list(array.shape),
                                                       pack_4bit(array, dtype), raw=True))
        return name
    return builder.initializer(array.astype(np.int8 if dtype == "int8" else np.uint8), hint)


class Deferred:
    """A packed weight, written when first read (and once per orientation)."""

    def __init__(self, name, packed):
        self.name = name
        self.packed = packed
        self.emitted = {}

    def emit(self, builder, transpose=False):
        """The weight's ONNX name. Its nodes go to the main graph even while a subgraph (a loop
        body, a branch) is being built, so every later reader, inside or outside, can use them."""
        if transpose not in self.emitted:
            saved = builder.nodes
            builder.nodes = builder.main_nodes
            try:
                self.emitted[transpose] = self._write(builder, transpose)
            finally:
                builder.nodes = saved
        return self.emitted[transpose]

    def dequantize_form(self, opset):
        """(axis, block_size) of a DequantizeLinear that reproduces the weight, or the reason
        it is decoded instead."""
        p = self.packed
        if p["map"] not in ("affine", "shift_scale") or p["codes"] is None or p["nonzero_only"]:
            return None, "its form (%s) has no ONNX operator" % p["form"]
        if p["codes_dtype"] not in _CODE_TYPES:
            return None, "its codes are %s" % p["codes_dtype"]
        if p["offset"] is not None and p["offset_dtype"] != p["codes_dtype"]:
            return None, "its offsets (%s) are not of its codes' type" % p["offset_dtype"]
        if p["codes_dtype"] in ("int4", "uint4") and opset < 21:
            return None, "4-bit types need opset 21"
        shape, groups = p["shape"], p["groups"]
        blocked = [d for d in range(len(shape)) if groups[d] > 1 and shape[d] // groups[d] > 1]
        if len(blocked) > 1:
            return None, "it has blocks along several axes"
        if blocked:
            if opset < 21:
                return None, "block-wise scales need opset 21"
            return blocked[0], shape[blocked[0]] // groups[blocked[0]]
        varying = [d for d in range(len(shape)) if groups[d] > 1]
        if not varying:
            return -1, 0  # one scale
        if len(varying) == 1:
            return varying[0], 0  # per axis
        if opset < 21:
            return None, "scales per element along several axes need opset 21"
        return varying[0], 1  # block size 1 along one axis, full along the others

    def _write(self, builder, transpose):
        p = self.packed
        axis, block = self.dequantize_form(builder.opset)
        if axis is None:
            dense = p["decode"]()
            if transpose:
                dense = np.swapaxes(dense, -1, -2)
            return builder.initializer(np.ascontiguousarray(dense), self.name + ("_t" if transpose else ""))
        shape, groups = list(p["shape"]), list(p["groups"])
        rank = len(shape)
        codes = p["codes"].reshape(shape)
        scale = p["scale"].reshape(groups)
        offset = None if p["offset"] is None else p["offset"].reshape(groups)
        if block > 0:
            # Block-wise: scales of the same rank as the codes, full along every other axis.
            target = [groups[d] if d == axis else shape[d] for d in range(rank)]
            scale = np.broadcast_to(scale, target)
            offset = None if offset is None else np.broadcast_to(offset, target)
        elif axis >= 0:
            scale, offset = scale.reshape(-1), (None if offset is None else offset.reshape(-1))
        else:
            scale, offset = scale.reshape(()), (None if offset is None else offset.reshape(()))
        if transpose:
            perm = list(range(rank - 2)) + [rank - 1, rank - 2]
            codes = codes.transpose(perm)
            if block > 0:
                scale = scale.transpose(perm)
                offset = None if offset is None else offset.transpose(perm)
            if axis >= 0:
                axis = perm.index(axis)
        value_dtype = builder.float_dtype(p["dtype"])
        scale = np.ascontiguousarray(scale.astype(np.float32 if value_dtype == "float32" else scale.dtype))
        inputs = [code_initializer(builder, np.ascontiguousarray(codes), p["codes_dtype"], self.name + "_codes"),
                  builder.initializer(scale, self.name + "_scale")]
        if offset is not None:
            inputs.append(code_initializer(builder, np.ascontiguousarray(offset), p["codes_dtype"], self.name + "_offset"))
        attributes = {}
        if axis >= 0:
            attributes["axis"] = axis
        if block > 0:
            attributes["block_size"] = block
        out = builder.node("DequantizeLinear", inputs, hint=self.name + ("_t" if transpose else ""), **attributes)
        scale_dtype = {np.dtype(np.float16): "float16", np.dtype(np.float32): "float32"}[scale.dtype]
        if scale_dtype != value_dtype:
            out = builder.node("Cast", [out], to=builder.onnx_type(value_dtype))
        return out
