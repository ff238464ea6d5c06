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


class Translator:
    def __init__(self, graph, copy_constant, where):
        self._graph = graph
        self._copy_constant = copy_constant
        self._where = where
        self._values = {}      # MLIR Value -> _Var or np.ndarray (a constant)
        self._lines = []
        self._counter = 0
        self._blobs = bytearray(64)
        self._blob_count = 0
        self._emitted_consts = {}  # id of array -> MIL name
        self.histogram = {}

    # -- names and text ------------------------------------------------------------------
    def _fresh(self, base):
        self._counter += 1
        return f"{base}_{self._counter}"

    def _blob(self, array, dtype):
        data = np.ascontiguousarray(array).tobytes()
        offset = len(self._blobs)
        self._blobs += struct.pack("<IIQQQ", 0xDEADBEEF, _BLOB_CODES[dtype], len(data), offset + 64, 0)
        self._blobs += bytes(64 - 32)
        self._blobs += data
        self._blobs += bytes((-len(self._blobs)) % 64)
        self._blob_count += 1
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
        return self._emitted_consts[key]

    def _emit(self, op, mil_op, arguments, result_name=None):
        result = op.results[0]
        numpy_dtype, dtype, _ = _element_type(result.type, self._where)
        shape = _shape(result.type, self._where)
        name = result_name or self._output_names.get(result) or self._fresh(mil_op)
        args = ", ".join(f"{k} = {v}" for k, v in sorted(arguments.items()))
        type_text = dtype if not shape else _mil_type(dtype, shape)
        self._lines.append(f"{type_text} {name} = {mil_op}({args})[name = string(\"{name}\")];")
        self._values[result] = _Var(name, dtype, shape)
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
        # MIL pads the last len(pad)/2 dimensions; drop leading all-zero pairs it need not see.
        while len(padding) > 2 and padding[0] == 0 and padding[1] == 0 and mil_mode != "constant":
            padding = padding[2:]
        self._emit(op, "pad", {"x": self._operand(op.operands[0]), "pad": self._param(padding, "int32"),
                               "mode": self._param(mil_mode, "string"),
                               "constant_val": self._param(value, "fp32")})

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
        for argument, name in zip(block.arguments, input_names):
            numpy_dtype, dtype, data_type = _element_type(argument.type, self._where)
            if data_type is None:
                raise Error(f"{self._where}: input '{name}' has element type {argument.type.element_type}, "
                            f"which Core ML inputs cannot take")
            shape = _shape(argument.type, self._where)
            self._values[argument] = _Var(name, dtype, shape)
            self.inputs.append((name, dtype, data_type, shape))
        unsupported = sorted({o.name for o in operations
                              if o.name not in _UNARY and o.name not in _BINARY
                              and not hasattr(self, "_op_" + o.name.rsplit(".", 1)[-1])})
        if unsupported:
            raise Error(f"{self._where}: coremlrt cannot translate these Core AI ops yet: {', '.join(unsupported)}")
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
        self.outputs = []
        result_names = []
        for value, name in zip(self._results, output_names):
            held = self._values[value]
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

    def write(self, folder):
        arguments = ", ".join(f"{_mil_type(dtype, shape)} {name}" for name, dtype, _, shape in self.inputs)
        body = "\n".join("        " + line for line in self._lines)
        text = (f"program(1.3)\n{{\n    func main<ios18>({arguments}) {{\n{body}\n"
                f"    }} -> ({', '.join(self._result_names)});\n}}\n")
        os.makedirs(os.path.join(folder, "weights"), exist_ok=True)
        with open(os.path.join(folder, "model.mil"), "w", encoding="utf-8") as f:
            f.write(text)
        blobs = bytearray(self._blobs)
        blobs[0:8] = struct.pack("<II", self._blob_count, 2)
        with open(os.path.join(folder, "weights", "weight.bin"), "wb") as f:
            f.write(blobs)

        def feature(name, data_type, shape):
            return {"name": name, "type": "MultiArray", "isOptional": "0", "shortDescription": "",
                    "dataType": data_type, "shape": "[" + ", ".join(str(d) for d in shape) + "]",
                    "hasShapeFlexibility": "0"}

        metadata = [{
            "metadataOutputVersion": "3.0", "specificationVersion": 9,
            "modelType": {"name": "MLModelType_mlProgram"},
            "shortDescription": "", "author": "", "license": "", "version": "",
            "userDefinedMetadata": {"com.github.coremlrt.source": "coreai"},
            "mlProgramOperationTypeHistogram": dict(sorted(self.histogram.items())),
            "inputSchema": [feature(n, t, s) for n, _, t, s in self.inputs],
            "outputSchema": [feature(n, t, s) for n, _, t, s in self.outputs],
            "isUpdatable": "0", "method": "predict",
        }]
        with open(os.path.join(folder, "metadata.json"), "w", encoding="utf-8") as f:
            json.dump(metadata, f, indent=2)
