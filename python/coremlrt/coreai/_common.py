"""What the Core AI translator's modules share: element types, value kinds, MIL type text.

``_translate.py`` holds the translator; the ``_ops_*.py`` modules translate one family of ops
each. docs/design/coreai.md lists the mapping.
"""

import math

import numpy as np

from .._core import Error, UnsupportedError  # noqa: F401 - the modules' errors, re-exported

# coreai element type -> (MIL dtype, numpy dtype of an unpacked constant, bits of a packed one).
ELEMENT_TYPES = {
    "f32": ("fp32", np.float32, 0),
    "f16": ("fp16", np.float16, 0),
    "si32": ("int32", np.int32, 0),
    "i32": ("int32", np.int32, 0),
    "ui32": ("uint32", np.uint32, 0),
    "si64": ("int64", np.int64, 0),
    "i64": ("int64", np.int64, 0),
    "ui64": ("uint64", np.uint64, 0),
    "si16": ("int16", np.int16, 0),
    "ui16": ("uint16", np.uint16, 0),
    "si8": ("int8", np.int8, 0),
    "i8": ("int8", np.int8, 0),
    "ui8": ("uint8", np.uint8, 0),
    "i1": ("bool", np.bool_, 0),
    # Sub-byte integers: the bindings copy them packed, least significant bits first (the
    # packing of MIL's weight blobs, docs/design/coreml-format.md "Weight blobs").
    "si4": ("int4", np.int8, 4),
    "ui4": ("uint4", np.uint8, 4),
    "ui6": ("uint6", np.uint8, 6),
    "ui3": ("uint3", np.uint8, 3),
    "ui2": ("uint2", np.uint8, 2),
    "ui1": ("uint1", np.uint8, 1),
}

# The MIL dtype a computed value of each element type has. A ui32 value (an index: argmax,
# get_shape, argsort) is held as int32, which has the same bits and the same value below 2^31;
# the elementwise ops refuse ui32 operands, whose arithmetic would differ.
COMPUTED = {"f32": "fp32", "f16": "fp16", "si32": "int32", "i32": "int32", "ui32": "int32", "i1": "bool",
            "si8": "int8", "ui8": "uint8"}

# Core ML feature data types of inputs, outputs and states.
FEATURE_TYPES = {"fp32": "Float32", "fp16": "Float16", "int32": "Int32"}

# Blob storage dtype codes (docs/design/coreml-format.md, "Weight blobs").
BLOB_CODES = {"fp16": 1, "fp32": 2, "uint8": 3, "int8": 4, "int16": 6, "uint16": 7, "int4": 8, "uint1": 9,
              "uint2": 10, "uint4": 11, "uint3": 12, "uint6": 13, "int32": 14, "uint32": 15}
SUB_BYTE_BITS = {"int4": 4, "uint1": 1, "uint2": 2, "uint3": 3, "uint4": 4, "uint6": 6}

NUMPY_OF_MIL = {"fp32": np.float32, "fp16": np.float16, "int32": np.int32, "bool": np.bool_, "int8": np.int8,
                "uint8": np.uint8, "uint32": np.uint32, "int16": np.int16, "uint16": np.uint16}

# Element kinds the elementwise ops take (MIL's type sets, docs/design/coreml-format.md).
FLOAT = ("f32", "f16")
FLOAT_INT = ("f32", "f16", "si32", "i32")
BOOL = ("i1",)


class Var:
    """A value the MIL program computes: its MIL name, dtype and dims (None: dynamic)."""

    def __init__(self, name, dtype, dims, compressed=False):
        self.name, self.dtype, self.dims = name, dtype, list(dims)
        # The output of a constexpr_* op: a weight the engine can keep packed.
        self.compressed = compressed
        # Names the untransposed [N, K] weight of a [K, N] value, read by matmul's transpose_x or
        # transpose_y (_ops_shape.py _transpose).
        self.transposed = False
        # A zero (-inf) pad folded into the convolutions (max pools) that read it: ``name``
        # is the unpadded input and this the MIL ``pad`` (before, after per spatial dim) they
        # take as pad_type = custom (_ops_shape.py _pad).
        self.spatial_pad = None
        # A maximum(name, 0) not yet written, whose one reader is a minimum: with a minimum
        # of 6 the two are relu6, one clip (_ops_elementwise.py _binary).
        self.floored = False
        # A tile not yet written, (source Var, reps), whose readers are wheres: one selecting a
        # box of it is a slice_update of the source (_ops_elementwise.py _where).
        self.tiled = None


class Sparse:
    """A bitmask-encoded sparse constant (build_sparse_with_bitmask): the MIL names of its
    nonzero values and of its uint1 mask, as constexpr_sparse_to_dense takes them."""

    def __init__(self, values, mask, dims, count):
        self.values, self.mask, self.dims, self.count = values, mask, list(dims), count


class Complex:
    """A complex value (create_complex): its real and imaginary parts, which real_part and
    imaginary_part read back. MIL has no complex element type; nothing else may read it."""

    def __init__(self, real, imaginary):
        self.real, self.imaginary = real, imaginary


TOKEN = object()  # the value of a !coreai.token: ordering only, nothing to compute


def element_kind(mlir_type):
    return str(mlir_type.element_type)


def element_type(mlir_type, where):
    """(MIL dtype, numpy dtype, packed bits) of a tensor type's element type."""
    name = element_kind(mlir_type)
    if name not in ELEMENT_TYPES:
        raise UnsupportedError(f"{where}: element type {name} is not supported")
    return ELEMENT_TYPES[name]


def computed_dtype(mlir_type, where):
    name = element_kind(mlir_type)
    if name not in COMPUTED:
        raise UnsupportedError(f"{where}: a computed value of element type {name} is not supported (coremlrt computes "
                    f"f32, f16, si32, ui32 (as int32), i1, si8 and ui8 values)")
    return COMPUTED[name]


def dims_of(mlir_type):
    """The dims of a ranked tensor type, None for a dynamic one."""
    return [None if mlir_type.is_dynamic_dim(i) else int(mlir_type.shape[i]) for i in range(mlir_type.rank)]


def static_shape(mlir_type, where, what="shape"):
    dims = dims_of(mlir_type)
    if None in dims:
        raise UnsupportedError(f"{where}: {what} {mlir_type} has dynamic dimensions where coremlrt needs them known")
    return dims


def dims_text(dims):
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"


def mil_type(dtype, dims):
    """MIL type text: a rank-0 value is written as its dtype (program 1.3's scalar form)."""
    return dtype if len(dims) == 0 else f"tensor<{dtype}, {dims_text(dims)}>"


def scalar_text(value, dtype):
    if dtype == "bool":
        return "true" if value else "false"
    if dtype in ("fp32", "fp16"):
        value = float(value)
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return value.hex()
    return str(int(value))


def pack_bits(values, bits):
    """Sub-byte values packed least significant bits first, as MIL's weight blobs hold them."""
    flat = np.asarray(values).reshape(-1).astype(np.int64) & ((1 << bits) - 1)
    positions = np.arange(flat.size, dtype=np.int64) * bits
    out = np.zeros((flat.size * bits + 7) // 8 + 1, np.int64)
    np.add.at(out, positions // 8, (flat << (positions % 8)) & 0xFF)
    np.add.at(out, positions // 8 + 1, flat >> (8 - positions % 8))
    return out[:(flat.size * bits + 7) // 8].astype(np.uint8)


def unpack_bits(packed, count, bits, signed):
    positions = np.arange(count, dtype=np.int64) * bits
    data = np.concatenate([np.asarray(packed, np.uint8), np.zeros(1, np.uint8)]).astype(np.int64)
    words = data[positions // 8] | (data[positions // 8 + 1] << 8)
    values = (words >> (positions % 8)) & ((1 << bits) - 1)
    if signed:
        values = np.where(values >= 1 << (bits - 1), values - (1 << bits), values)
    return values.astype(np.int8 if signed else np.uint8)
