"""MIL's list ops (src/ops/control_flow.cc) as a dense tensor.

A list is exported as one tensor [length, *element shape] of the list's dtype: make_list gives
``init_length`` rows of zeros (1 when absent), so an element never written reads as zeros, as
the kernel's does; list_read and list_gather are Gather on axis 0, list_length the first dim of
its Shape; list_write and list_scatter are ScatterND. A list made with ``dynamic_length`` (the
default) grows on write: the tensor is padded with zero rows up to the highest index written
plus one first, as the kernel resizes its items. list_scatter writes its rows in order, so of
repeated indices the last row wins; ONNX leaves the order of repeated ScatterND indices open,
so every row of a repeated index is first replaced by its last row, and all of them write the
same value.

The element shape must be known when the export is written: the list type's element dims, and
where one is not known there (an elem_shape computed at run time), the shape of every value
written into the list (through while_loop and cond, see ``ListFamilies``), which must be known
and one shape. A list whose elements take their shape only at run time is refused.

What the kernels refuse and ONNX Runtime does not: a negative index (ScatterND and Gather count
it from the end), and a write of a differently shaped element where the export knew no shape.
"""

import numpy as np
from onnx import TensorProto, numpy_helper

from .graph import Unsupported
from .registry import translates


class ListFamilies:
    """The program's list values joined into families: a make_list, the lists written from it
    (list_write, list_scatter) and the same list through loop variables and branch outputs. A
    family holds one ONNX tensor's worth of element shape; the written element shapes come from
    the values written, where the list type does not know them."""

    def __init__(self, block, inputs=()):
        self.parent = {}
        self.written = {}  # root -> [dims of each value written, None where its rank is unknown]
        self.info = {}     # root -> (element dims, dynamic), set by make_list's translator
        self.types = _collect_types(block, {v["name"]: v["type"] for v in inputs})
        self._walk(block)

    def find(self, name):
        while self.parent.get(name, name) != name:
            name = self.parent[name]
        return name

    def union(self, a, b):
        a, b = self.find(a), self.find(b)
        if a != b:
            self.parent[b] = a
            self.written.setdefault(a, []).extend(self.written.pop(b, []))

    def _walk(self, block):
        for op in block["operations"]:
            outputs = op["outputs"]
            bound = {param: [binding["name"] for binding in bindings] for param, bindings in op["inputs"].items()}
            kind = op["type"]
            if kind in ("list_write", "list_scatter") and bound.get("ls"):
                self.union(bound["ls"][0], outputs[0]["name"])
                value = op["inputs"].get("value", [])
                dims = None
                if value:
                    t = value[0]["value"]["type"] if value[0]["value"] is not None else self._type_of(block, value[0]["name"])
                    if t is not None and t.get("rank", -1) >= 0:
                        dims = list(t["dims"]) if kind == "list_write" else list(t["dims"][1:])
                self.written.setdefault(self.find(outputs[0]["name"]), []).append(dims)
            elif kind == "while_loop":
                cond_block, body_block = op["blocks"]
                for i, name in enumerate(bound.get("loop_vars", [])):
                    if i < len(outputs) and outputs[i]["type"]["kind"] == "list":
                        self.union(name, outputs[i]["name"])
                        self.union(name, cond_block["inputs"][i]["name"])
                        self.union(name, body_block["inputs"][i]["name"])
                        self.union(name, body_block["outputs"][i])
            elif kind == "cond":
                for i, out in enumerate(outputs):
                    if out["type"]["kind"] == "list":
                        for nested in op["blocks"]:
                            self.union(out["name"], nested["outputs"][i])
            for nested in op["blocks"]:
                self._walk(nested)

    def _type_of(self, block, name):
        return self.types.get(name)


def _collect_types(block, types):
    for value in block["inputs"]:
        types[value["name"]] = value["type"]
    for op in block["operations"]:
        for value in op["outputs"]:
            types[value["name"]] = value["type"]
        for nested in op["blocks"]:
            _collect_types(nested, types)
    return types


def _family(v, name):
    families = getattr(v.builder, "list_families", None)
    if families is None:
        raise Unsupported("no list analysis for this graph")
    root = families.find(name)
    if root not in families.info:
        raise Unsupported("list '%s': its make_list is not exported (see that op's reason)" % name)
    return families.info[root]


def element_dims(builder, name):
    """The element dims of the list value `name` (for a Loop body input's shape), or None."""
    families = getattr(builder, "list_families", None)
    info = families and families.info.get(families.find(name))
    return None if info is None else info[0]


def _scalar_int64(b, name):
    return b.node("Reshape", [b.node("Cast", [name], to=TensorProto.INT64), b.const_int64([], "scalar")])


def _zero(b, dtype):
    np_dtype = {"float16": np.float16, "float32": np.float32, "float64": np.float64, "int8": np.int8,
                "uint8": np.uint8, "int16": np.int16, "uint16": np.uint16, "int32": np.int32,
                "uint32": np.uint32, "int64": np.int64, "uint64": np.uint64, "bool": np.bool_}.get(b.float_dtype(dtype))
    if np_dtype is None:
        raise Unsupported("a list of %s" % dtype)
    return numpy_helper.from_array(np.zeros([1], np_dtype))


@translates("make_list")
def make_list(v):
    b = v.builder
    out = v.outputs[0]
    element = out["type"].get("element")
    if out["type"]["kind"] != "list" or element is None or element["rank"] < 0:
        raise Unsupported("a list whose element rank is not known")
    families = getattr(b, "list_families", None)
    root = families.find(out["name"])
    dims = list(element["dims"])
    if any(d < 0 for d in dims):
        written = families.written.get(root, [])
        shapes = set(tuple(w) for w in written if w is not None)
        if not written:
            raise Unsupported("element shape %s is not known and nothing is written into the list" % dims)
        if None in written or any(d < 0 for s in shapes for d in s):
            raise Unsupported("element shape %s is known only at run time: a value written into the list "
                              "has a shape known only at run time" % dims)
        shapes = set(s for s in shapes if all(k < 0 or k == d for k, d in zip(dims, s)) and len(s) == len(dims))
        if len(shapes) != 1:
            raise Unsupported("element shape %s: the values written into the list have different shapes (%s)"
                              % (dims, ", ".join(str(list(s)) for s in sorted(set(tuple(w) for w in written)))))
        dims = list(shapes.pop())
    dynamic = bool(v.scalar("dynamic_length", True))
    if root in families.info and families.info[root] != (dims, dynamic):
        raise Unsupported("lists of different element shapes or growth meet in one value")
    families.info[root] = (dims, dynamic)
    if v.has("init_length"):
        length = b.node("Reshape", [b.node("Cast", [v.input("init_length")], to=TensorProto.INT64),
                                    b.const_int64([1], "one_dim")])
    else:
        length = b.const_int64([1], "init_length")
    shape = b.node("Concat", [length, b.const_int64(dims, "elem_shape")], axis=0)
    b.node("ConstantOfShape", [shape], [v.output()], value=_zero(b, element["dtype"]))


def _grown(v, data, highest, rank):
    """`data` padded with zero rows so that index `highest` (an int64 scalar) is in it."""
    b = v.builder
    length = b.node("Shape", [data], start=0, end=1)
    need = b.node("Max", [b.node("Sub", [b.node("Add", [b.node("Reshape", [highest, b.const_int64([1], "one_dim")]),
                                                          b.const_int64([1], "one")]), length]),
                          b.const_int64([0], "zero")])
    pads = b.node("Concat", [b.const_int64([0] * (rank + 1), "pads_before"), need,
                             b.const_int64([0] * rank, "pads_after")], axis=0)
    return b.node("Pad", [data, pads])


@translates("list_write")
def list_write(v):
    b = v.builder
    dims, dynamic = _family(v, v.bindings("ls")[0]["name"])
    value_type = v.type_of("value")
    if value_type["rank"] >= 0 and (len(value_type["dims"]) != len(dims) or
                                    any(d >= 0 and d != e for d, e in zip(value_type["dims"], dims))):
        raise Unsupported("writes an element of shape %s into a list of %s" % (value_type["dims"], dims))
    data = v.input("ls")
    index = _scalar_int64(b, v.input("index"))
    if dynamic:
        data = _grown(v, data, index, len(dims))
    b.node("ScatterND", [data, b.node("Reshape", [index, b.const_int64([1, 1], "index_shape")]),
                         b.node("Unsqueeze", [v.input("value"), b.const_int64([0], "axis0")])], [v.output()])


@translates("list_scatter")
def list_scatter(v):
    b = v.builder
    dims, dynamic = _family(v, v.bindings("ls")[0]["name"])
    value_type = v.type_of("value")
    if value_type["rank"] >= 0 and (len(value_type["dims"]) != len(dims) + 1 or
                                    any(d >= 0 and d != e for d, e in zip(value_type["dims"][1:], dims))):
        raise Unsupported("scatters rows of shape %s into a list of %s" % (value_type["dims"][1:], dims))
    data = v.input("ls")
    indices = b.node("Reshape", [b.node("Cast", [v.input("indices")], to=TensorProto.INT64), b.const_int64([-1], "flat")])
    values = v.input("value")
    if dynamic:
        highest = b.node("ReduceMax", [b.node("Concat", [indices, b.const_int64([-1], "none")], axis=0),
                                       b.const_int64([0], "axes")], keepdims=0)
        data = _grown(v, data, highest, len(dims))
    # Row k of a repeated index takes the last row with that index.
    count = b.node("Shape", [indices])
    positions = b.node("Range", [b.const_int64(0, "start"), b.node("Reshape", [count, b.const_int64([], "scalar")]),
                                 b.const_int64(1, "step")])
    same = b.node("Equal", [b.node("Unsqueeze", [indices, b.const_int64([1], "axis1")]),
                            b.node("Unsqueeze", [indices, b.const_int64([0], "axis0")])])
    later = b.node("Mul", [b.node("Cast", [same], to=TensorProto.INT64),
                           b.node("Add", [positions, b.const_int64(1, "one")])])
    last = b.node("Sub", [b.node("ReduceMax", [later, b.const_int64([1], "axes")], keepdims=0), b.const_int64(1, "one")])
    values = b.node("Gather", [values, last], axis=0)
    b.node("ScatterND", [data, b.node("Unsqueeze", [indices, b.const_int64([1], "axis1")]), values], [v.output()])


@translates("list_read")
def list_read(v):
    b = v.builder
    _family(v, v.bindings("ls")[0]["name"])
    b.node("Gather", [v.input("ls"), _scalar_int64(b, v.input("index"))], [v.output()], axis=0)


@translates("list_gather")
def list_gather(v):
    b = v.builder
    _family(v, v.bindings("ls")[0]["name"])
    indices = b.node("Reshape", [b.node("Cast", [v.input("indices")], to=TensorProto.INT64), b.const_int64([-1], "flat")])
    b.node("Gather", [v.input("ls"), indices], [v.output()], axis=0)


@translates("list_length")
def list_length(v):
    b = v.builder
    _family(v, v.bindings("ls")[0]["name"])
    length = b.node("Reshape", [b.node("Shape", [v.input("ls")], start=0, end=1), b.const_int64([], "scalar")])
    b.node("Cast", [length], [v.output()], to=TensorProto.INT32)
