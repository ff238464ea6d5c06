"""Translates a parsed Core AI program (the ``coreai`` dialect) into a compiled-model folder:
``model.mil`` text, ``metadata.json`` and ``weights/weight.bin`` (docs/design/mil-text.md).

Constants are read with the bindings' ``copy_constant_value_to_array``; integer parameter
operands (permutations, strides, shapes) are folded into the MIL op's own parameters. The op
table is ``_UNARY``, ``_BINARY`` and the ``_op_*`` methods; anything else is refused by name.
docs/design/coreai.md lists the mapping.
"""

import json
import math
import os
import re
import struct

import numpy as np

from .._core import Error

# coreai element types -> (numpy dtype, MIL dtype, metadata dataType or None)
_ELEMENT_TYPES = {
    "f32": (np.float32, "fp32", "Float32"),
    "f16": (np.float16, "fp16", "Float16"),
    "si32": (np.int32, "int32", "Int32"),
    "i32": (np.int32, "int32", "Int32"),
    "ui32": (np.uint32, "uint32", None),
    "si64": (np.int64, "int64", None),
    "i64": (np.int64, "int64", None),
    "ui16": (np.uint16, "uint16", None),
    "si16": (np.int16, "int16", None),
    "si8": (np.int8, "int8", None),
    "ui8": (np.uint8, "uint8", None),
    "i1": (np.bool_, "bool", None),
}

# Blob storage dtype codes (docs/design/coreml-format.md, "Weight blobs").
_BLOB_CODES = {"fp16": 1, "fp32": 2, "uint8": 3, "int8": 4, "int16": 6, "uint16": 7, "int32": 14, "uint32": 15}

_UNARY = {
    "coreai.relu": "relu", "coreai.sigmoid": "sigmoid", "coreai.tanh": "tanh", "coreai.exp": "exp",
    "coreai.sqrt": "sqrt", "coreai.abs": "abs", "coreai.sin": "sin", "coreai.cos": "cos",
    "coreai.erf": "erf", "coreai.silu": "silu",
}

# Elementwise binary ops with numpy-style broadcasting, as MIL's are.
_BINARY = {
    "coreai.decomposable.broadcasting_add": ("add", np.add),
    "coreai.decomposable.broadcasting_sub": ("sub", np.subtract),
    "coreai.decomposable.broadcasting_mul": ("mul", np.multiply),
    "coreai.decomposable.broadcasting_divide": ("real_div", np.divide),
    "coreai.decomposable.broadcasting_maximum": ("maximum", np.maximum),
    "coreai.decomposable.broadcasting_minimum": ("minimum", np.minimum),
    "coreai.add": ("add", np.add), "coreai.sub": ("sub", np.subtract), "coreai.mul": ("mul", np.multiply),
    "coreai.divide": ("real_div", np.divide), "coreai.maximum": ("maximum", np.maximum),
    "coreai.minimum": ("minimum", np.minimum),
}

# Constants with more elements than this go to weight.bin; smaller ones are written inline.
_INLINE_LIMIT = 16


def _element_type(mlir_type, where):
    name = str(mlir_type.element_type)
    if name not in _ELEMENT_TYPES:
        raise Error(f"{where}: element type {name} is not supported")
    return _ELEMENT_TYPES[name]


def _shape(mlir_type, where):
    if not mlir_type.has_static_shape:
        raise Error(f"{where}: dynamic shape {mlir_type} is not supported yet (static shapes only)")
    return [int(d) for d in mlir_type.shape]


def _mil_type(dtype, shape):
    return f"tensor<{dtype}, [{', '.join(str(d) for d in shape)}]>"


def _scalar_text(value, dtype):
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


class _Var:
    """A value the MIL program computes: its MIL name, dtype and shape."""

    def __init__(self, name, dtype, shape):
        self.name, self.dtype, self.shape = name, dtype, shape


_TOKEN = object()  # the value of a !coreai.token: ordering only, nothing to compute


def _is_token(mlir_type):
    return str(mlir_type) == "!coreai.token"


def _handle_type(mlir_type, where):
    """(element type name, shape) of a ``!coreai.handle<tensor<...>>``, or None for another type."""
    text = str(mlir_type)
    if not text.startswith("!coreai.handle<"):
        return None
    match = re.fullmatch(r"!coreai\.handle<tensor<((?:[0-9?]+x)*)(\w+)>>", text)
    if match is None or "?" in match.group(1):
        raise Error(f"{where}: handle type {text} is not supported (a static tensor handle only)")
    dims = [int(d) for d in match.group(1).split("x") if d]
    return match.group(2), dims


class Program:
    """What the functions of one MIL program share: the weight file, op names, the histogram."""

    def __init__(self):
        self.counter = 0
        self.blobs = bytearray(64)
        self.blob_count = 0
        self.histogram = {}
        self.functions = []  # Translators, in order

    def write(self, folder, default_name):
        body = "\n".join(t.function_text() for t in self.functions)
        os.makedirs(os.path.join(folder, "weights"), exist_ok=True)
        with open(os.path.join(folder, "model.mil"), "w", encoding="utf-8") as f:
            f.write(f"program(1.3)\n{{\n{body}\n}}\n")
        blobs = bytearray(self.blobs)
        blobs[0:8] = struct.pack("<II", self.blob_count, 2)
        with open(os.path.join(folder, "weights", "weight.bin"), "wb") as f:
            f.write(blobs)
        default = next(t for t in self.functions if t.name == default_name)
        metadata = [{
            "metadataOutputVersion": "3.0", "specificationVersion": 9,
            "modelType": {"name": "MLModelType_mlProgram"},
            "shortDescription": "", "author": "", "license": "", "version": "",
            "userDefinedMetadata": {"com.github.coremlrt.source": "coreai"},
            "mlProgramOperationTypeHistogram": dict(sorted(self.histogram.items())),
            **default.schemas(),
            "isUpdatable": "0", "method": "predict",
        }]
        if len(self.functions) > 1:
            metadata[0]["functions"] = [{"name": t.name, **t.schemas()} for t in self.functions]
            metadata[0]["defaultFunctionName"] = default_name
        with open(os.path.join(folder, "metadata.json"), "w", encoding="utf-8") as f:
            json.dump(metadata, f, indent=2)


class Translator:
    def __init__(self, graph, copy_constant, where, callees=None, program=None, name="main"):
        self._graph = graph
        self._callees = dict(callees or {})  # sym_name -> coreai.graph that invoke may call
        self._inlining = []
        self._copy_constant = copy_constant
        self._where = where
        self._values = {}      # MLIR Value -> _Var or np.ndarray (a constant)
        self._lines = []
        self._program = program or Program()
        self._program.functions.append(self)
        self.name = name
        self._emitted_consts = {}  # id of array -> MIL name
        self._kept = []            # the arrays named in _emitted_consts
        self.histogram = self._program.histogram

    # -- names and text ------------------------------------------------------------------
    def _fresh(self, base):
        self._program.counter += 1
        return f"{base}_{self._program.counter}"

    def _blob(self, array, dtype):
        program = self._program
        data = np.ascontiguousarray(array).tobytes()
        offset = len(program.blobs)
        program.blobs += struct.pack("<IIQQQ", 0xDEADBEEF, _BLOB_CODES[dtype], len(data), offset + 64, 0)
        program.blobs += bytes(64 - 32)
        program.blobs += data
        program.blobs += bytes((-len(program.blobs)) % 64)
        program.blob_count += 1
        return offset

    def _const_text(self, array, dtype):
        if array.size > _INLINE_LIMIT and dtype in _BLOB_CODES:
            offset = self._blob(array, dtype)
            return (f"{_mil_type(dtype, array.shape)}(BLOBFILE(path = string(\"@model_path/weights/weight.bin\"), "
                    f"offset = uint64({offset})))")
        flat = [_scalar_text(v, dtype) for v in array.reshape(-1).tolist()]
        if array.ndim == 0:
            return f"{dtype}({flat[0]})"
        return f"{_mil_type(dtype, array.shape)}([{', '.join(flat)}])"

    def _const(self, array, dtype, base="const"):
        name = self._fresh(base)
        type_text = dtype if array.ndim == 0 else _mil_type(dtype, array.shape)
        self._lines.append(f"{type_text} {name} = const()[name = string(\"{name}\"), "
                           f"val = {self._const_text(array, dtype)}];")
        return name

    def _param(self, value, dtype):
        """An op parameter given as a Python/numpy value: emitted as a const, its name returned."""
        array = np.asarray(value)
        numpy_dtype = {"int32": np.int32, "fp32": np.float32, "bool": np.bool_, "string": None}[dtype]
        if dtype == "string":
            name = self._fresh("str")
            self._lines.append(f"string {name} = const()[name = string(\"{name}\"), val = string(\"{value}\")];")
            return name
        return self._const(array.astype(numpy_dtype), dtype, "param")

    def _operand(self, value, like_dtype=None):
        """The MIL name of an operand, emitting a constant for a folded one."""
        held = self._values[value]
        if isinstance(held, _Var):
            return held.name
        key = id(held)
        if key not in self._emitted_consts:
            dtype = _ELEMENT_TYPES[str(value.type.element_type)][1]
            if held.dtype == np.uint32 or dtype == "uint32":
                held = held.astype(np.int32)
                dtype = "int32"
            self._emitted_consts[key] = self._const(held, dtype)
            self._kept.append(self._values[value])  # its id must stay this array's
        return self._emitted_consts[key]

    def _emit(self, op, mil_op, arguments, result_name=None, shape=None):
        """Writes one MIL op computing all of ``op``'s results (in order). ``shape``: the first
        result's shape where its type leaves dimensions dynamic but the translation knows them."""
        bindings = []
        for index, result in enumerate(op.results):
            numpy_dtype, dtype, _ = _element_type(result.type, self._where)
            if index == 0 and shape is not None:
                shape = list(shape)
            else:
                shape = _shape(result.type, self._where)
            name = ((result_name if index == 0 else None) or self._output_names.get(result)
                    or self._fresh(mil_op))
            type_text = dtype if not shape else _mil_type(dtype, shape)
            bindings.append(f"{type_text} {name}")
            self._values[result] = _Var(name, dtype, shape)
        args = ", ".join(f"{k} = {v}" for k, v in sorted(arguments.items()))
        first = self._values[op.results[0]].name
        self._lines.append(f"{', '.join(bindings)} = {mil_op}({args})[name = string(\"{first}\")];")
        key = f"Ios18.{mil_op}"
        self.histogram[key] = self.histogram.get(key, 0) + 1

    def _constant_of(self, value, what, op):
        held = self._values.get(value)
        if not isinstance(held, np.ndarray):
            raise Error(f"{self._where}: {op.name}: {what} must be a constant")
        return held

    # -- ops -----------------------------------------------------------------------------
    def _op_constant(self, op):
        result = op.results[0]
        if isinstance(self._values.get(result), np.ndarray):  # a graph inlined again: same array
            return
        numpy_dtype, _, _ = _element_type(result.type, self._where)
        shape = _shape(result.type, self._where)
        count = int(np.prod(shape)) if shape else 1
        buffer = np.zeros(count * np.dtype(numpy_dtype).itemsize, np.uint8)
        self._copy_constant(constant_op=op, destination=buffer)
        self._values[result] = buffer.view(numpy_dtype).reshape(shape)

    def _op_transpose(self, op):
        perm = [int(p) for p in self._constant_of(op.operands[1], "permutation", op).reshape(-1)]
        source = self._values[op.operands[0]]
        if isinstance(source, np.ndarray):
            self._values[op.results[0]] = np.ascontiguousarray(source.transpose(perm))
            return
        self._emit(op, "transpose", {"x": source.name, "perm": self._param(perm, "int32")})

    def _op_reshape(self, op):
        shape = _shape(op.results[0].type, self._where)
        source = self._values[op.operands[0]]
        if isinstance(source, np.ndarray):
            self._values[op.results[0]] = source.reshape(shape)
            return
        self._emit(op, "reshape", {"x": source.name, "shape": self._param(shape, "int32")})

    def _op_broadcasting_batch_matmul(self, op):
        a, b = (self._values[v] for v in op.operands)
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
            self._values[op.results[0]] = np.matmul(a, b)
            return
        self._emit(op, "matmul", {"x": self._operand(op.operands[0]), "y": self._operand(op.operands[1]),
                                  "transpose_x": self._param(False, "bool"),
                                  "transpose_y": self._param(False, "bool")})

    _op_batch_matmul = _op_broadcasting_batch_matmul

    def _op_softmax(self, op):
        axis = int(self._constant_of(op.operands[1], "axis", op).reshape(()))
        self._emit(op, "softmax", {"x": self._operand(op.operands[0]), "axis": self._param(axis, "int32")})

    def _op_pad(self, op):
        mode = str(op.attributes["padding_mode"])
        mode = mode[mode.find("<") + 1:mode.rfind(">")]
        mil_mode = {"constant": "constant", "reflect": "reflect", "replicate": "replicate"}.get(mode)
        if mil_mode is None:
            raise Error(f"{self._where}: coreai.pad: padding mode '{mode}' has no MIL counterpart")
        padding = [int(p) for p in self._constant_of(op.operands[1], "padding", op).reshape(-1)]
        value = float(self._constant_of(op.operands[2], "padding value", op).reshape(()))
        if not any(padding):  # nothing to pad (a composite's pad with padding 0)
            self._values[op.results[0]] = self._values[op.operands[0]]
            return
        # The padded shape (a composite's pad may leave it dynamic in the result type); pairs
        # (before, after) apply to the last len(padding) / 2 dimensions.
        padded = list(self._values[op.operands[0]].shape if isinstance(self._values[op.operands[0]], _Var)
                      else self._values[op.operands[0]].shape)
        first = len(padded) - len(padding) // 2
        for d in range(len(padding) // 2):
            padded[first + d] += padding[2 * d] + padding[2 * d + 1]
        # MIL pads the last len(pad)/2 dimensions; drop leading all-zero pairs it need not see.
        while len(padding) > 2 and padding[0] == 0 and padding[1] == 0 and mil_mode != "constant":
            padding = padding[2:]
        self._emit(op, "pad", {"x": self._operand(op.operands[0]), "pad": self._param(padding, "int32"),
                               "mode": self._param(mil_mode, "string"),
                               "constant_val": self._param(value, "fp32")}, shape=padded)

    def _ints(self, op, index, what):
        return [int(v) for v in self._constant_of(op.operands[index], what, op).reshape(-1)]

    def _op_conv2d(self, op):
        strides = self._ints(op, 2, "stride")
        dilations = self._ints(op, 3, "dilation")
        groups = self._ints(op, 4, "groups")[0]
        self._emit(op, "conv", {"x": self._operand(op.operands[0]), "weight": self._operand(op.operands[1]),
                                "strides": self._param(strides, "int32"),
                                "dilations": self._param(dilations, "int32"),
                                "groups": self._param(groups, "int32"),
                                "pad_type": self._param("valid", "string"),
                                "pad": self._param([0, 0, 0, 0], "int32")})

    def _pool_arguments(self, op, kernel, strides, dilations, ceil_mode):
        if any(d != 1 for d in dilations):
            raise Error(f"{self._where}: {op.name}: dilation {dilations} is not supported (MIL pooling has none)")
        return {"x": self._operand(op.operands[0]), "kernel_sizes": self._param(kernel, "int32"),
                "strides": self._param(strides, "int32"), "pad_type": self._param("valid", "string"),
                "pad": self._param([0, 0, 0, 0], "int32"), "ceil_mode": self._param(ceil_mode, "bool")}

    def _op_max_pool_2d(self, op):
        ceil_mode = bool(self._constant_of(op.operands[4], "ceil_mode", op).reshape(()))
        self._emit(op, "max_pool", self._pool_arguments(op, self._ints(op, 1, "kernel_size"),
                                                        self._ints(op, 2, "stride"),
                                                        self._ints(op, 3, "dilation"), ceil_mode))

    def _op_sum_pool_2d(self, op):
        kernel, strides = self._ints(op, 1, "kernel_size"), self._ints(op, 2, "stride")
        arguments = self._pool_arguments(op, kernel, strides, self._ints(op, 3, "dilation"), False)
        if kernel == [1, 1] and strides == [1, 1]:
            self._emit(op, "identity", {"x": arguments["x"]})
            return
        # A window sum is the window average (no padding) times the window size.
        arguments["exclude_padding_from_average"] = self._param(True, "bool")
        final_name = self._output_names.get(op.results[0])
        self._emit(op, "avg_pool", arguments, result_name=self._fresh("avg_pool"))
        average = self._values[op.results[0]].name
        size = self._param(float(kernel[0] * kernel[1]), "fp32")
        self._emit(op, "mul", {"x": average, "y": size}, result_name=final_name)

    def _op_reduce_mean(self, op):
        axes = self._ints(op, 1, "axes")
        self._emit(op, "reduce_mean", {"x": self._operand(op.operands[0]), "axes": self._param(axes, "int32"),
                                       "keep_dims": self._param(True, "bool")})

    def _op_reduce_sum(self, op):
        axes = self._ints(op, 1, "axes")
        self._emit(op, "reduce_sum", {"x": self._operand(op.operands[0]), "axes": self._param(axes, "int32"),
                                      "keep_dims": self._param(True, "bool")})

    def _op_rsqrt(self, op):
        # MIL's rsqrt is 1 / sqrt(x + epsilon); Core AI's has no epsilon.
        self._emit(op, "rsqrt", {"x": self._operand(op.operands[0]), "epsilon": self._param(0.0, "fp32")})

    def _op_gelu(self, op):
        mode = "none"
        if "approximate" in op.attributes:
            text = str(op.attributes["approximate"])
            mode = text[text.find("<") + 1:text.rfind(">")] if "<" in text else text.strip('"')
        mil_mode = {"none": "EXACT", "tanh": "TANH_APPROXIMATION", "sigmoid": "SIGMOID_APPROXIMATION"}.get(mode)
        if mil_mode is None:
            raise Error(f"{self._where}: coreai.gelu: approximation '{mode}' has no MIL counterpart")
        self._emit(op, "gelu", {"x": self._operand(op.operands[0]), "mode": self._param(mil_mode, "string")})

    def _axis(self, op, index, rank, what="dim"):
        axis = int(self._constant_of(op.operands[index], what, op).reshape(()))
        if not -rank <= axis < rank:
            raise Error(f"{self._where}: {op.name}: {what} {axis} is out of range for rank {rank}")
        return axis % rank

    def _op_split(self, op):
        shape = _shape(op.operands[0].type, self._where)
        axis = self._axis(op, 2, len(shape))
        sizes = self._constant_of(op.operands[1], "split_size_or_sections", op)
        if sizes.ndim == 0:  # chunks of that size, the last one the remainder
            size = int(sizes)
            sizes = [min(size, shape[axis] - start) for start in range(0, shape[axis], size)]
        else:
            sizes = [int(v) for v in sizes.reshape(-1)]
        got = [_shape(r.type, self._where)[axis] for r in op.results]
        if sizes != got or sum(sizes) != shape[axis]:
            raise Error(f"{self._where}: coreai.split: sections {sizes} do not give the result sizes {got}")
        if len(sizes) == 1:
            self._emit(op, "identity", {"x": self._operand(op.operands[0])})
            return
        self._emit(op, "split", {"x": self._operand(op.operands[0]), "split_sizes": self._param(sizes, "int32"),
                                 "axis": self._param(axis, "int32")})

    def _op_slice(self, op):
        shape = _shape(op.operands[0].type, self._where)
        starts, ends, strides = (self._ints(op, i, w) for i, w in ((1, "start_indices"), (2, "end_indices"),
                                                                  (3, "strides")))
        begin, end, end_mask, sizes = [], [], [], []
        for n, start, stop, step in zip(shape, starts, ends, strides):
            if step == 0:
                raise Error(f"{self._where}: coreai.slice: stride 0")
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
            end_mask.append(stop == -1)  # a reverse slice down to index 0 inclusive
        if sizes != _shape(op.results[0].type, self._where):
            raise Error(f"{self._where}: coreai.slice: resolved sizes {sizes} differ from the result type "
                        f"{op.results[0].type}")
        source = self._values[op.operands[0]]
        if isinstance(source, np.ndarray):
            index = tuple(slice(b, None if m else e, st) for b, e, m, st in zip(begin, end, end_mask, strides))
            self._values[op.results[0]] = np.ascontiguousarray(source[index])
            return
        self._emit(op, "slice_by_index", {"x": source.name, "begin": self._param(begin, "int32"),
                                          "end": self._param(end, "int32"),
                                          "stride": self._param(strides, "int32"),
                                          "end_mask": self._param(end_mask, "bool")})

    def _op_cast(self, op):
        numpy_dtype, dtype, _ = _element_type(op.results[0].type, self._where)
        source = self._values[op.operands[0]]
        if isinstance(source, np.ndarray):
            if numpy_dtype == np.bool_:
                folded = source != 0
            elif np.issubdtype(source.dtype, np.floating) and not np.issubdtype(numpy_dtype, np.floating):
                folded = np.trunc(source).astype(numpy_dtype)  # toward zero
            else:
                folded = source.astype(numpy_dtype)
            self._values[op.results[0]] = folded
            return
        from_float = source.dtype in ("fp32", "fp16")
        if dtype not in ("fp32", "fp16", "int32", "bool") or (from_float and dtype == "int32"):
            raise Error(f"{self._where}: coreai.cast from {source.dtype} to {dtype} of a computed value is not "
                        f"supported yet")
        self._emit(op, "cast", {"x": source.name, "dtype": self._param(dtype, "string")},
                   shape=source.shape)

    def _op_concat(self, op):
        rank = len(_shape(op.operands[1].type, self._where))
        axis = self._axis(op, 0, rank, "dimension")
        pieces = [self._values[v] for v in list(op.operands)[1:]]
        if all(isinstance(p, np.ndarray) for p in pieces):
            numpy_dtype = _element_type(op.results[0].type, self._where)[0]
            self._values[op.results[0]] = np.concatenate(pieces, axis).astype(numpy_dtype)
            return
        values = [self._operand(v) for v in list(op.operands)[1:]]
        self._emit(op, "concat", {"values": f"({', '.join(values)})", "axis": self._param(axis, "int32"),
                                  "interleave": self._param(False, "bool")})

    def _op_gather_nd(self, op):
        # Negative indices wrap once; MIL's gather_nd without validate_indices wraps them too,
        # and coremlrt fails a prediction on an index outside [-size, size).
        self._emit(op, "gather_nd", {"x": self._operand(op.operands[0]), "indices": self._operand(op.operands[1]),
                                     "batch_dims": self._param(0, "int32")})

    def _op_scatter_nd(self, op):
        # Only the replace update function (the region yields its second argument) is MIL's
        # scatter_nd mode "update"; other update functions are refused.
        block = op.regions[0].blocks[0]
        body = [o.operation for o in block.operations]
        if not (len(body) == 1 and body[0].name == "coreai.yield" and len(block.arguments) == 2
                and body[0].operands[0] == block.arguments[1]):
            raise Error(f"{self._where}: coreai.scatter_nd with an update function other than replace "
                        f"({', '.join(o.name for o in body)}) is not supported")
        shape = _shape(op.operands[0].type, self._where)
        # Operands (input, indices, updates), whatever order the printed form shows them in.
        indices = self._values[op.operands[1]]
        depth = int(indices.shape[-1])
        dims = np.array(shape[:depth], np.int32)
        # Core AI wraps a negative index once; MIL's iOS17+ scatter_nd takes [0, size) only.
        if isinstance(indices, np.ndarray):
            wrapped = self._operand_of(np.where(indices < 0, indices + dims, indices).astype(np.int32), "int32")
        else:
            zero = self._param(0, "int32")
            negative = self._line(f"tensor<bool, {list(indices.shape)}>", "less",
                                  {"x": indices.name, "y": zero})
            shifted = self._line(_mil_type("int32", indices.shape), "add",
                                 {"x": indices.name, "y": self._const(dims, "int32")})
            wrapped = self._line(_mil_type("int32", indices.shape), "select",
                                 {"cond": negative, "a": shifted, "b": indices.name})
        self._emit(op, "scatter_nd", {"data": self._operand(op.operands[0]), "indices": wrapped,
                                      "updates": self._operand(op.operands[2]),
                                      "mode": self._param("update", "string")})

    def _operand_of(self, array, dtype):
        return self._const(array, dtype)

    def _line(self, type_text, mil_op, arguments):
        """One MIL op of the translation's own (no Core AI result): its name."""
        name = self._fresh(mil_op)
        args = ", ".join(f"{k} = {v}" for k, v in sorted(arguments.items()))
        self._lines.append(f"{type_text} {name} = {mil_op}({args})[name = string(\"{name}\")];")
        key = f"Ios18.{mil_op}"
        self.histogram[key] = self.histogram.get(key, 0) + 1
        return name

    def _op_broadcast_in_dims(self, op):
        shape = _shape(op.operands[0].type, self._where)
        sizes = self._ints(op, 1, "dim_sizes")
        axes = [a % len(shape) if -len(shape) <= a < len(shape) else None for a in self._ints(op, 2, "axes")]
        if None in axes or len(axes) != len(sizes) or any(shape[a] != 1 for a in axes):
            raise Error(f"{self._where}: coreai.broadcast_in_dims: axes {self._ints(op, 2, 'axes')} do not name "
                        f"size-1 dimensions of {shape}")
        reps = [1] * len(shape)
        for a, size in zip(axes, sizes):
            reps[a] = size
        source = self._values[op.operands[0]]
        if isinstance(source, np.ndarray):
            self._values[op.results[0]] = np.ascontiguousarray(np.tile(source, reps))
            return
        self._emit(op, "tile", {"x": source.name, "reps": self._param(reps, "int32")})

    def _op_broadcasting_where(self, op):
        condition, a, b = (self._values[v] for v in op.operands)
        if all(isinstance(v, np.ndarray) for v in (condition, a, b)):
            numpy_dtype = _element_type(op.results[0].type, self._where)[0]
            self._values[op.results[0]] = np.where(condition, a, b).astype(numpy_dtype)
            return
        self._emit(op, "select", {"cond": self._operand(op.operands[0]), "a": self._operand(op.operands[1]),
                                  "b": self._operand(op.operands[2])})

    def _op_invoke(self, op):
        """A call of another graph of the module (a composite such as layer_norm): inlined."""
        # Printed as `#param.constant<@name> : !param.symbol` (or a plain `@name`).
        symbols = re.findall(r'@"?([\w.$-]+)', str(op.attributes["callee"]))
        callee = symbols[-1] if symbols else str(op.attributes["callee"])
        graph = self._callees.get(callee)
        if graph is None:
            raise Error(f"{self._where}: coreai.invoke of '{callee}', which is not a graph of this module")
        if callee in self._inlining:
            raise Error(f"{self._where}: coreai.invoke: '{callee}' calls itself")
        block = graph.regions[0].blocks[0]
        for argument, operand in zip(block.arguments, op.operands):
            self._values[argument] = self._values[operand]
        self._inlining.append(callee)
        results = self._run([o.operation for o in block.operations])
        self._inlining.pop()
        for result, value in zip(op.results, results):
            self._values[result] = self._values[value]

    # States. The tokens only order the handle ops; MIL runs its ops in program order, and the
    # bytecode's order already follows each token chain, so tokens translate to nothing. A
    # write_handle is always written (Core AI may drop one whose token is unused).
    def _op_create_token(self, op):
        self._values[op.results[0]] = _TOKEN

    def _op_join_token(self, op):
        self._values[op.results[0]] = _TOKEN

    def _state_of(self, op):
        held = self._values[op.operands[0]]
        if not (isinstance(held, _Var) and held.dtype.startswith("state<")):
            raise Error(f"{self._where}: {op.name} of a handle that is not a state input of the function")
        return held

    def _op_read_handle(self, op):
        state = self._state_of(op)
        numpy_dtype, dtype, _ = _element_type(op.results[0].type, self._where)
        name = self._output_names.get(op.results[0]) or self._fresh("read_state")
        self._lines.append(f"{_mil_type(dtype, state.shape)} {name} = read_state(input = {state.name})"
                           f"[name = string(\"{name}\")];")
        self._values[op.results[0]] = _Var(name, dtype, state.shape)
        self._values[op.results[1]] = _TOKEN
        self.histogram["Ios18.read_state"] = self.histogram.get("Ios18.read_state", 0) + 1

    def _op_write_handle(self, op):
        state = self._state_of(op)
        name = self._fresh("write_state")
        self._lines.append(f"write_state(data = {self._operand(op.operands[1])}, input = {state.name})"
                           f"[name = string(\"{name}\")];")
        self._values[op.results[0]] = _TOKEN
        self.histogram["Ios18.write_state"] = self.histogram.get("Ios18.write_state", 0) + 1

    def _op_output(self, op):
        self._results = list(op.operands)

    # -- driver --------------------------------------------------------------------------
    def translate(self, input_names, output_names):
        block = self._graph.regions[0].blocks[0]
        operations = [o.operation for o in block.operations]
        terminator = operations[-1]
        if terminator.name != "coreai.output":
            raise Error(f"{self._where}: the graph does not end in coreai.output")
        # Results named as the model's outputs when a translated op computes them directly.
        self._output_names = {}
        for value, name in zip(terminator.operands, output_names):
            if value not in self._output_names and not any(value == a for a in block.arguments):
                self._output_names[value] = name
        self.inputs = []
        self.states = []
        self._arguments = []  # (MIL type text, name), in the graph's order
        for argument, name in zip(block.arguments, input_names):
            handle = _handle_type(argument.type, self._where)
            if handle is not None:  # a state: caller-owned, read and written with read/write_handle
                element, shape = handle
                if element not in _ELEMENT_TYPES or _ELEMENT_TYPES[element][2] not in ("Float32", "Float16", "Int32"):
                    raise Error(f"{self._where}: state '{name}' has element type {element}, which coremlrt "
                                f"states cannot take")
                _, dtype, data_type = _ELEMENT_TYPES[element]
                self._values[argument] = _Var(name, f"state<{dtype}>", shape)
                self.states.append((name, dtype, data_type, shape))
                self._arguments.append((f"state<{_mil_type(dtype, shape)}>", name))
                continue
            numpy_dtype, dtype, data_type = _element_type(argument.type, self._where)
            if data_type is None:
                raise Error(f"{self._where}: input '{name}' has element type {argument.type.element_type}, "
                            f"which Core ML inputs cannot take")
            shape = _shape(argument.type, self._where)
            self._values[argument] = _Var(name, dtype, shape)
            self.inputs.append((name, dtype, data_type, shape))
            self._arguments.append((_mil_type(dtype, shape), name))
        names = {o.name for o in operations}
        for graph in self._callees.values():
            names |= {o.operation.name for o in graph.regions[0].blocks[0].operations}
        unsupported = sorted(n for n in names if n not in _UNARY and n not in _BINARY
                             and not hasattr(self, "_op_" + n.rsplit(".", 1)[-1]))
        if unsupported:
            raise Error(f"{self._where}: coremlrt cannot translate these Core AI ops yet: {', '.join(unsupported)}")
        self._run(operations)
        self._finish(output_names)

    def _run(self, operations):
        """Translates a block's ops in order; returns the values its coreai.output returns."""
        for op in operations:
            if op.name in _UNARY:
                self._emit(op, _UNARY[op.name], {"x": self._operand(op.operands[0])})
            elif op.name in _BINARY:
                mil_op, fold = _BINARY[op.name]
                a, b = (self._values[v] for v in op.operands)
                if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
                    numpy_dtype = _element_type(op.results[0].type, self._where)[0]
                    self._values[op.results[0]] = fold(a, b).astype(numpy_dtype)
                else:
                    self._emit(op, mil_op, {"x": self._operand(op.operands[0]), "y": self._operand(op.operands[1])})
            else:
                getattr(self, "_op_" + op.name.rsplit(".", 1)[-1])(op)
        return self._results

    def _finish(self, output_names):
        self.outputs = []
        result_names = []
        for value, name in zip(self._results, output_names):
            held = self._values[value]
            if held is _TOKEN:  # a state's token: the state itself is the caller's
                continue
            if not (isinstance(held, _Var) and held.name == name):
                # An input, a constant or a value returned twice: copy it under the output's name.
                source = self._operand(value)
                numpy_dtype, dtype, _ = _element_type(value.type, self._where)
                shape = _shape(value.type, self._where)
                type_text = dtype if not shape else _mil_type(dtype, shape)
                self._lines.append(f"{type_text} {name} = identity(x = {source})[name = string(\"{name}\")];")
            _, dtype, data_type = _element_type(value.type, self._where)
            if data_type is None:
                raise Error(f"{self._where}: output '{name}' has element type {value.type.element_type}, "
                            f"which Core ML outputs cannot take")
            self.outputs.append((name, dtype, data_type, _shape(value.type, self._where)))
            result_names.append(name)
        self._result_names = result_names

    def function_text(self):
        arguments = ", ".join(f"{type_text} {name}" for type_text, name in self._arguments)
        body = "\n".join("        " + line for line in self._lines)
        return (f"    func {self.name}<ios18>({arguments}) {{\n{body}\n"
                f"    }} -> ({', '.join(self._result_names)});")

    def schemas(self):
        def feature(name, data_type, shape, kind="MultiArray"):
            return {"name": name, "type": kind, "isOptional": "0", "shortDescription": "",
                    "dataType": data_type, "shape": "[" + ", ".join(str(d) for d in shape) + "]",
                    "hasShapeFlexibility": "0"}

        schemas = {"inputSchema": [feature(n, t, s) for n, _, t, s in self.inputs],
                   "outputSchema": [feature(n, t, s) for n, _, t, s in self.outputs]}
        if self.states:
            schemas["stateSchema"] = [feature(n, t, s, "State") for n, _, t, s in self.states]
        return schemas

    def write(self, folder):
        """Writes a program of this one function."""
        self._program.write(folder, self.name)
