"""The ONNX graph under construction for one function of a model's program.

The program comes from ``coremlrt._core.read_program`` (python/src/program_bindings.cc): every op
with its inputs bound to value names or inline constants, its attributes and typed outputs.
``GraphBuilder`` keeps what a translator needs: the ONNX name of each program value, the value
of every compile-time constant (so parameters such as ``axes`` are read here, not emitted), the
program types of values, and the nodes and initializers written so far.
"""

import numpy as np
from onnx import TensorProto, helper, numpy_helper

from .._core import Error

# Program dtype names (include/coremlrt/dtype.h, dtype_name) -> ONNX element types.
ONNX_TYPES = {
    "float32": TensorProto.FLOAT, "float16": TensorProto.FLOAT16, "float64": TensorProto.DOUBLE,
    "int8": TensorProto.INT8, "uint8": TensorProto.UINT8, "int16": TensorProto.INT16,
    "uint16": TensorProto.UINT16, "int32": TensorProto.INT32, "uint32": TensorProto.UINT32,
    "int64": TensorProto.INT64, "uint64": TensorProto.UINT64, "bool": TensorProto.BOOL,
    "int4": TensorProto.INT4, "uint4": TensorProto.UINT4, "string": TensorProto.STRING,
}

# The dtype strings MIL's cast and fill ops take, as program dtype names.
MIL_DTYPE_NAMES = {
    "fp16": "float16", "fp32": "float32", "fp64": "float64", "int8": "int8", "uint8": "uint8",
    "int16": "int16", "uint16": "uint16", "int32": "int32", "uint32": "uint32", "int64": "int64",
    "uint64": "uint64", "bool": "bool",
}


class Unsupported(Exception):
    """An op, or a use of it, that has no ONNX form here; the message says why."""


class Constant:
    """A compile-time value of the program: a numpy array, a list of strings, or a list of items."""

    def __init__(self, value):
        self.type = value["type"]
        self.array = value.get("array")
        self.strings = value.get("strings")
        self.items = [Constant(item) for item in value.get("items", [])]

    @property
    def dtype(self):
        return self.type["dtype"]

    def scalar(self):
        if self.strings is not None:
            if len(self.strings) != 1:
                raise Unsupported("expected one string, got %d" % len(self.strings))
            return self.strings[0]
        if self.array is None or self.array.size != 1:
            raise Unsupported("expected a scalar constant")
        return self.array.reshape(()).item()

    def ints(self):
        if self.array is None:
            raise Unsupported("expected an integer tensor constant")
        return [int(v) for v in self.array.reshape(-1)]


class GraphBuilder:
    def __init__(self, opset, fp32=False):
        self.opset = opset
        self.fp32 = fp32  # export fp16 programs with fp32 types
        self.nodes = []
        self.main_nodes = self.nodes  # the main graph's, while a subgraph is being built
        self.initializers = []
        self.value_infos = []
        self.onnx_names = {}  # program value name -> ONNX value name
        self.constants = {}   # program value name -> Constant (const ops' results)
        self.types = {}       # program value name -> program type dict
        self.used_names = set()
        self.reserved = set()  # every value name of the program: fresh names avoid them
        self.deferred = {}     # program value name -> quantized.Deferred (a packed weight)
        self.ios_version = 0
        self.output_types = {}  # program value name -> onnx TypeProto, for non-tensor outputs (maps)
        self.uses_ml_domain = False

    # Names -----------------------------------------------------------------------------------

    def fresh(self, hint):
        base = hint or "v"
        name, i = base, 0
        while name in self.used_names or name in self.reserved:
            i += 1
            name = "%s_%d" % (base, i)
        self.used_names.add(name)
        return name

    def define(self, program_name, type_dict, onnx_name=None):
        """Gives the program value `program_name` an ONNX name (its own where free)."""
        if onnx_name is None:
            onnx_name = program_name if program_name not in self.used_names else self.fresh(program_name)
        name = onnx_name
        self.used_names.add(name)
        self.onnx_names[program_name] = name
        self.types[program_name] = type_dict
        return name

    # Constants -------------------------------------------------------------------------------

    def float_dtype(self, dtype):
        return "float32" if (self.fp32 and dtype == "float16") else dtype

    def onnx_type(self, dtype):
        dtype = self.float_dtype(dtype)
        if dtype not in ONNX_TYPES:
            raise Unsupported("dtype %s has no ONNX type here" % dtype)
        return ONNX_TYPES[dtype]

    def initializer(self, array, hint):
        """A new initializer holding `array` (numpy); returns its name."""
        array = np.asarray(array)
        if self.fp32 and array.dtype == np.float16:
            array = array.astype(np.float32)
        name = self.fresh(hint)
        # np.ascontiguousarray would turn a scalar into shape [1]; ONNX wants scalars (a Loop's
        # trip count, Range's bounds) as shape [].
        if not array.flags.c_contiguous:
            array = np.ascontiguousarray(array)
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    def packed_initializer(self, array, dtype, hint):
        """An initializer of ONNX's 4-bit types from one byte per element (int4 sign-extended)."""
        name = self.fresh(hint)
        flat = np.asarray(array).reshape(-1).astype(np.int8 if dtype == "int4" else np.uint8)
        self.initializers.append(helper.make_tensor(name, ONNX_TYPES[dtype], list(np.shape(array)),
                                                    flat.tolist()))
        return name

    def const_int64(self, values, hint="const"):
        return self.initializer(np.asarray(values, dtype=np.int64), hint)

    def const_like(self, value, program_dtype, hint="const"):
        """A scalar of the program dtype (widened when exporting fp32)."""
        np_dtype = {"float16": np.float16, "float32": np.float32, "float64": np.float64, "int32": np.int32,
                    "int64": np.int64, "bool": np.bool_, "int8": np.int8, "uint8": np.uint8}.get(program_dtype)
        if np_dtype is None:
            raise Unsupported("a constant of dtype %s" % program_dtype)
        return self.initializer(np.asarray(value, dtype=np_dtype), hint)

    # Nodes -----------------------------------------------------------------------------------

    def node(self, op_type, inputs, outputs=None, hint=None, domain="", **attributes):
        """Adds a node; `outputs` is a count or a list of names. Returns the output name(s)."""
        if outputs is None or isinstance(outputs, int):
            count = 1 if outputs is None else outputs
            outputs = [self.fresh((hint or op_type.lower()) + ("" if count == 1 else "_%d" % i)) for i in range(count)]
        if domain == "ai.onnx.ml":
            self.uses_ml_domain = True
        self.nodes.append(helper.make_node(op_type, list(inputs), list(outputs),
                                           name=self.fresh("n_" + outputs[0] if outputs else op_type),
                                           domain=domain, **attributes))
        return outputs[0] if len(outputs) == 1 else outputs


    def subgraph(self, graph_name, inputs, build):
        """An ONNX subgraph (a Loop body, an If branch): `inputs` are (name, ONNX elem type, shape
        or None) triples; `build()` adds nodes and returns [(source name, ONNX elem type)] for the
        outputs, each copied to a fresh name. Initializers go to the main graph, whose values a
        subgraph reads by name."""
        saved_nodes = self.nodes
        self.nodes = []
        try:
            outputs = []
            for source, elem_type in build():
                name = self.fresh(graph_name + "_out")
                self.nodes.append(helper.make_node("Identity", [source], [name], name=self.fresh("n_" + name)))
                outputs.append(helper.make_tensor_value_info(name, elem_type, None))
            return helper.make_graph(self.nodes, self.fresh(graph_name),
                                     [helper.make_tensor_value_info(n, t, shape) for n, t, shape in inputs], outputs)
        finally:
            self.nodes = saved_nodes


class OpView:
    """One program op as a translator reads it: its inputs by parameter, constants, output names."""

    def __init__(self, builder, op):
        self.builder = builder
        self.op = op
        self.type = op["type"]
        self.outputs = op["outputs"]

    def describe(self):
        name = self.op["name"]
        out = self.outputs[0]["name"] if self.outputs else "?"
        return "op '%s' (%s) producing '%s'" % (name or out, self.type, out)

    def has(self, param):
        return param in self.op["inputs"] and len(self.op["inputs"][param]) > 0

    def bindings(self, param):
        return self.op["inputs"].get(param, [])

    def constant(self, param, default=None, required=False):
        """The compile-time value bound to `param` (a Constant), or `default` when absent."""
        bindings = self.bindings(param)
        if not bindings:
            if required:
                raise Unsupported("parameter '%s' is missing" % param)
            return default
        if len(bindings) != 1:
            raise Unsupported("parameter '%s' is a tuple" % param)
        return self._binding_constant(bindings[0], param)

    def _binding_constant(self, binding, param):
        if binding["value"] is not None:
            return Constant(binding["value"])
        constant = self.builder.constants.get(binding["name"])
        if constant is None:
            raise Unsupported("parameter '%s' is known only at run time ('%s')" % (param, binding["name"]))
        return constant

    def is_constant(self, param):
        bindings = self.bindings(param)
        return len(bindings) == 1 and (bindings[0]["value"] is not None or bindings[0]["name"] in self.builder.constants)

    def scalar(self, param, default=None):
        c = self.constant(param)
        return default if c is None else c.scalar()

    def ints(self, param, default=None):
        c = self.constant(param)
        return default if c is None else c.ints()

    def type_of(self, param, index=0):
        binding = self.bindings(param)[index]
        if binding["value"] is not None:
            return binding["value"]["type"]
        return self.builder.types[binding["name"]]

    def dtype(self, param="x"):
        return self.type_of(param)["dtype"]

    def rank(self, param="x"):
        return self.type_of(param)["rank"]

    def input(self, param, index=0):
        """The ONNX name of the value bound to `param` (constants become initializers)."""
        binding = self.bindings(param)[index]
        builder = self.builder
        if binding["value"] is not None:
            return constant_name(builder, Constant(binding["value"]), self.outputs[0]["name"] + "_" + param)
        name = binding["name"]
        if name not in builder.onnx_names and name in builder.deferred:
            return builder.deferred[name].emit(builder)
        if name not in builder.onnx_names:
            constant = builder.constants.get(name)
            if constant is None:
                raise Error("value '%s' is used before it is defined" % name)
            builder.define(name, constant.type, constant_name(builder, constant, name))
        return builder.onnx_names[name]

    def inputs(self, param):
        return [self.input(param, i) for i in range(len(self.bindings(param)))]

    def output(self, index=0):
        """Names the op's output `index` in ONNX (the program's name where free)."""
        out = self.outputs[index]
        return self.builder.define(out["name"], out["type"])

    def output_dtype(self, index=0):
        return self.outputs[index]["type"]["dtype"]

    def output_rank(self, index=0):
        return self.outputs[index]["type"]["rank"]


def constant_name(builder, constant, hint):
    if constant.array is None:
        if constant.strings is not None:
            return builder.initializer(np.array(constant.strings, dtype=object), hint)
        raise Unsupported("a list or tuple constant cannot be a tensor input")
    if constant.dtype in ("int4", "uint4"):
        return builder.packed_initializer(constant.array, constant.dtype, hint)
    if constant.dtype in ("uint1", "uint2", "uint3", "uint6"):
        return builder.initializer(constant.array.astype(np.uint8), hint)
    return builder.initializer(constant.array, hint)
