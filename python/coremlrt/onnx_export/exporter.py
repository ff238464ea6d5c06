"""One function of a model's program -> one ONNX model.

Walks the function's top-level ops in order. A value the planner knows at load (a constant, an
op computed from constants alone, a compressed weight kept packed) is not translated: it becomes
an initializer, or a DequantizeLinear of its codes (quantized.py), where something reads it.
Every other op goes to its translator (registry.py). States become a graph input ``<state>``
(the value before the call) and a graph output ``<state>_out`` (the value after it), listed in
the model's metadata under ``coremlrt.states``.
"""

import hashlib
import json
import os
import sys

import onnx
from onnx import helper
from onnx.external_data_helper import set_external_data

# Each ops_FAMILY module registers its translators as it is imported.
from . import (ops_classic, ops_control_flow, ops_detection, ops_elementwise, ops_misc, ops_nn,  # noqa: F401
               ops_recurrent, ops_reduction, ops_resize, ops_sampling, ops_shape)
from .graph import Constant, GraphBuilder, OpView, Unsupported
from .quantized import Deferred
from .registry import TRANSLATORS
from .untranslated import UNTRANSLATED

STATE_OUTPUT_SUFFIX = "_out"


class Problem:
    """An op that has no ONNX form here."""

    def __init__(self, op_type, output, reason):
        self.op_type, self.output, self.reason = op_type, output, reason

    def __str__(self):
        return "%s producing '%s': %s" % (self.op_type, self.output, self.reason)


def _value_info(builder, name, type_dict, symbol_prefix):
    if type_dict["kind"] != "tensor":
        raise Unsupported("a %s value cannot be a graph input or output" % type_dict["kind"])
    if type_dict["rank"] < 0:
        shape = None
    else:
        shape = [d if d >= 0 else "%s_d%d" % (symbol_prefix, i) for i, d in enumerate(type_dict["dims"])]
    return helper.make_tensor_value_info(name, builder.onnx_type(type_dict["dtype"]), shape)


def _all_program_names(block, out):
    for value in block["inputs"]:
        out.add(value["name"])
    for op in block["operations"]:
        for value in op["outputs"]:
            out.add(value["name"])
        for nested in op["blocks"]:
            _all_program_names(nested, out)
    return out


def _allowed_sizes(feature):
    """The sizes a flexible input takes in Core ML, in words, for its graph input's doc_string:
    ONNX's symbolic dims admit any size, so the ranges and enumerations are said there."""
    if feature.get("shape_range"):
        return "Core ML sizes: " + " x ".join(
            str(lo) if lo == hi else "%d..%s" % (lo, "inf" if hi < 0 else hi) for lo, hi in feature["shape_range"])
    if feature.get("enumerated_shapes"):
        return "Core ML sizes: one of " + ", ".join(
            "[" + ", ".join(str(d) for d in shape) + "]" for shape in feature["enumerated_shapes"])
    return ""


def _flexible_input_dims(description_inputs):
    """Input name -> dims with -1 where the description lets a dim vary (ranges, enumerations)."""
    flexible = {}
    for feature in description_inputs:
        dims = list(feature["shape"])
        if feature["shape_range"]:
            dims = [-1 if lo != hi else lo for lo, hi in feature["shape_range"]]
        elif feature["enumerated_shapes"]:
            shapes = feature["enumerated_shapes"]
            dims = [shapes[0][i] if all(s[i] == shapes[0][i] for s in shapes) else -1 for i in range(len(shapes[0]))]
        flexible[feature["name"]] = dims
    return flexible


class FunctionExport:
    def __init__(self, function, description, opset, fp32):
        self.function = function
        self.description = description
        self.builder = GraphBuilder(opset, fp32)
        self.builder.ios_version = function["ios_version"]
        self.builder.deferred = {}
        self.builder.reserved = _all_program_names(function["block"], set(v["name"] for v in function["inputs"]))
        self.builder.list_families = ops_control_flow.ListFamilies(function["block"], function["inputs"])
        self.problems = []
        self.states = {}  # state name -> ONNX name of its current value
        self.graph_inputs = []
        self.builder.graph_input_infos = self.graph_inputs

    # ------------------------------------------------------------------------------------------

    def run(self):
        b = self.builder
        flexible = _flexible_input_dims(self.description["inputs"]) if self.description else {}
        features = {f["name"]: f for f in (self.description or {}).get("inputs", [])}
        kinds = {name: f["kind"] for name, f in features.items()}
        for value in self.function["inputs"]:
            type_dict = value["type"]
            if type_dict["kind"] == "state":
                element = type_dict["element"]
                name = b.define(value["name"], element, value["name"])
                self.states[value["name"]] = name
                self.graph_inputs.append(_value_info(b, name, element, value["name"]))
                continue
            if value["name"] in flexible and type_dict["kind"] == "tensor" and \
                    len(flexible[value["name"]]) == len(type_dict["dims"]):
                type_dict = dict(type_dict, dims=[d if f != -1 else -1
                                                  for d, f in zip(type_dict["dims"], flexible[value["name"]])])
            if kinds.get(value["name"]) == "dictionary":
                self._dictionary_input(value)
                continue
            if kinds.get(value["name"]) == "string":
                self._string_input(value)
                continue
            name = b.define(value["name"], type_dict, value["name"])
            info = _value_info(b, name, type_dict, value["name"])
            info.doc_string = _allowed_sizes(features.get(value["name"], {}))
            self.graph_inputs.append(info)
        known = self.function.get("known") or {}
        for op in self.function["block"]["operations"]:
            self._op(op, known)
        return self

    def _dictionary_input(self, value):
        """A dictionary feature reaches the program as fp64 values laid out over the vocabulary
        of the dictVectorizer that reads it (src/ops/feature_engineering.cc; keys it does not
        list dropped, an absent key 0). Exported as a graph input of ONNX's map type (int64 keys
        where the vocabulary's are, as the engine takes them, else strings) and ai.onnx.ml's
        DictVectorizer over that vocabulary, which lays the map out the same way; the
        dict_vectorizer op then passes it on. The map's values are float: ONNX Runtime's Python
        API makes no other maps, so a value fp32 does not hold is rounded to fp32 where Core ML
        keeps the double."""
        b = self.builder
        b.define(value["name"], value["type"], b.fresh(value["name"] + "_vector"))
        b.used_names.add(value["name"])
        readers = [op for op in self.function["block"]["operations"] if
                   any(binding["name"] == value["name"] for bindings in op["inputs"].values() for binding in bindings)]
        integer = False
        try:
            if len(readers) != 1 or readers[0]["type"] != "dict_vectorizer":
                raise Unsupported("a dictionary input read by ops other than one dict_vectorizer (%s)"
                                  % ", ".join(op["type"] for op in readers))
            view = OpView(b, readers[0])
            keys = list(view.constant("vocabulary", required=True).strings)
            integer = bool(view.scalar("integer_keys", 0))
            vocabulary = {"int64_vocabulary": [int(k) for k in keys]} if integer else {"string_vocabulary": keys}
            vector = b.node("DictVectorizer", [value["name"]], domain="ai.onnx.ml", **vocabulary)
            vector = b.node("Cast", [vector], to=onnx.TensorProto.DOUBLE)
            b.node("Reshape", [vector, b.const_int64([-1], "flat")], [b.onnx_names[value["name"]]])
        except Unsupported as exc:
            self.problems.append(Problem("dictionary input", value["name"], str(exc)))
        key_type = onnx.TensorProto.INT64 if integer else onnx.TensorProto.STRING
        self.graph_inputs.append(helper.make_value_info(value["name"], helper.make_map_type_proto(
            key_type, helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, None))))

    def _readers(self, name):
        return [op for op in self.function["block"]["operations"] if
                any(binding["name"] == name for bindings in op["inputs"].values() for binding in bindings)]

    def _string_input(self, value):
        """A string feature reaches the program as its code: its index in the vocabulary of the
        one op that reads it (categoricalMapping from strings, oneHotEncoder over strings), -1
        for a string the model does not list (Model::input_vocabulary). Exported as a graph input
        of ONNX strings and ai.onnx.ml's CategoryMapper onto those same codes (default -1); the
        op's translator then reads the code as the kernel does."""
        b = self.builder
        b.define(value["name"], value["type"], b.fresh(value["name"] + "_code"))
        b.used_names.add(value["name"])
        readers = self._readers(value["name"])
        try:
            if len(readers) != 1 or readers[0]["type"] not in ("string_to_int64", "string_one_hot_encoder"):
                raise Unsupported("a string input read by ops other than one categorical mapping or one-hot "
                                  "encoder (%s)" % ", ".join(op["type"] for op in readers))
            view = OpView(b, readers[0])
            keys = list(view.constant("vocabulary", required=True).strings)
            code = b.node("CategoryMapper", [value["name"]], domain="ai.onnx.ml", cats_strings=keys,
                          cats_int64s=list(range(len(keys))), default_int64=-1)
            b.node("Reshape", [code, b.const_int64(list(value["type"]["dims"]), "code_shape")],
                   [b.onnx_names[value["name"]]])
        except Unsupported as exc:
            self.problems.append(Problem("string input", value["name"], str(exc)))
        dims = value["type"]["dims"] if value["type"]["rank"] >= 0 else None
        self.graph_inputs.append(helper.make_tensor_value_info(value["name"], onnx.TensorProto.STRING, dims))

    def _op(self, op, known):
        b = self.builder
        outputs = op["outputs"]
        if op["type"] == "const":
            b.constants[outputs[0]["name"]] = Constant(op["attributes"]["val"])
            b.types[outputs[0]["name"]] = outputs[0]["type"]
            return
        if outputs and all(out["name"] in known for out in outputs) and op["type"] not in ("read_state",):
            for out in outputs:
                entry = known[out["name"]]
                b.types[out["name"]] = out["type"]
                if "packed" in entry:
                    b.deferred[out["name"]] = Deferred(out["name"], entry["packed"])
                else:
                    b.constants[out["name"]] = Constant({"type": out["type"], "array": entry["array"]})
            return
        view = OpView(b, op)
        try:
            if op["type"] in OWN_TRANSLATIONS:
                OWN_TRANSLATIONS[op["type"]](self, view, known)
            else:
                translator = TRANSLATORS.get(op["type"])
                if op["blocks"]:
                    raise Unsupported("nested blocks of this op type are not exported")
                if translator is None:
                    raise Unsupported(UNTRANSLATED.get(op["type"], "no ONNX translation for this op type yet"))
                translator(view)
        except Unsupported as exc:
            self.problems.append(Problem(op["type"], outputs[0]["name"] if outputs else "", str(exc)))
            for out in outputs:  # later ops still translate, so every problem is listed
                if out["name"] not in b.onnx_names:
                    b.define(out["name"], out["type"])

    # Control flow ---------------------------------------------------------------------------
    #
    # A nested block's values are visible only inside it: each block is translated with the
    # builder's name tables saved and restored around it, so a block translated twice (a
    # while_loop's condition: once before the loop, once at the end of each iteration) gets
    # fresh ONNX names each time. Inside a subgraph, values of the enclosing graph are read by
    # name, as ONNX allows.

    def _inline_block(self, block, input_names, known):
        """Translates `block` into the current node list with its inputs bound to `input_names`;
        returns the ONNX names of its outputs."""
        b = self.builder
        saved = dict(b.onnx_names), dict(b.types), dict(b.constants)
        try:
            for value, name in zip(block["inputs"], input_names):
                b.onnx_names[value["name"]] = name
                b.types[value["name"]] = value["type"]
            for op in block["operations"]:
                self._op(op, known)
            return [self._block_output(name) for name in block["outputs"]]
        finally:
            b.onnx_names, b.types, b.constants = saved

    def _block_output(self, name):
        b = self.builder
        if name in b.onnx_names:
            return b.onnx_names[name]
        if name in b.constants or name in b.deferred:
            return _materialize(b, name)
        raise Unsupported("block output '%s' is not computed" % name)

    def _scalar_bool(self, name, type_dict):
        b = self.builder
        if type_dict["dtype"] != "bool":
            name = b.node("Cast", [name], to=onnx.TensorProto.BOOL)
        return b.node("Reshape", [name, b.const_int64([], "scalar")])

    def _while_loop(self, view, known):
        """MIL checks the condition before every iteration: it is computed once before the Loop
        and again at the end of each iteration, from the new loop variables."""
        b = self.builder
        cond_block, body_block = view.op["blocks"]
        count = len(view.bindings("loop_vars"))
        initial = view.inputs("loop_vars")
        types = [view.type_of("loop_vars", i) for i in range(count)]
        if any(t["kind"] not in ("tensor", "list") for t in types):
            raise Unsupported("loop variables that are neither tensors nor lists")
        # A list variable is its dense tensor [length, *element] (ops_control_flow.py), whose length
        # may change between iterations.
        types = [t if t["kind"] == "tensor" else _list_tensor_type(b, binding["name"], t)
                 for t, binding in zip(types, view.bindings("loop_vars"))]
        elems = [b.onnx_type(t["dtype"]) for t in types]
        first = self._inline_block(cond_block, initial, known)[0]
        cond_type = b.types.get(cond_block["outputs"][0], {"dtype": "bool"})
        start = self._scalar_bool(first, cond_type)
        carried = [b.fresh("loop_var") for _ in range(count)]
        iteration, cond_in = b.fresh("iteration"), b.fresh("cond_in")

        def body():
            updated = self._inline_block(body_block, carried, known)
            again = self._scalar_bool(self._inline_block(cond_block, updated, known)[0], cond_type)
            return [(again, onnx.TensorProto.BOOL)] + list(zip(updated, elems))

        # ONNX Runtime wants the shapes of a Loop body's inputs: scalars, and each variable's
        # (a dim that may change between iterations is left symbolic).
        shapes = [None if t["rank"] < 0 else ["%s_d%d" % (name, i) if d < 0 else d for i, d in enumerate(t["dims"])]
                  for name, t in zip(carried, types)]
        graph = self.builder.subgraph("loop_body", [(iteration, onnx.TensorProto.INT64, []), (cond_in, onnx.TensorProto.BOOL, [])]
                               + list(zip(carried, elems, shapes)), body)
        b.node("Loop", ["", start] + initial, [view.output(i) for i in range(len(view.outputs))], body=graph)

    def _cond(self, view, known):
        b = self.builder
        pred = self._scalar_bool(view.input("pred"), view.type_of("pred"))
        elems = [b.onnx_type(out["type"]["dtype"]) for out in view.outputs]
        branches = {}
        for label, block in zip(("then_branch", "else_branch"), view.op["blocks"]):
            branches[label] = self.builder.subgraph(label, [], lambda block=block: list(zip(
                self._inline_block(block, [], known), elems)))
        b.node("If", [pred], [view.output(i) for i in range(len(view.outputs))], **branches)

    def _state_name(self, view):
        name = view.bindings("input")[0]["name"]
        if name not in self.states:
            raise Unsupported("'%s' is not a state of this function" % name)
        return name

    def _read_state(self, view):
        state = self._state_name(view)
        out = view.outputs[0]
        self.builder.onnx_names[out["name"]] = self.states[state]
        self.builder.types[out["name"]] = out["type"]

    def _write_state(self, view):
        state = self._state_name(view)
        self.states[state] = view.input("data")
        for out in view.outputs:  # write_state has no outputs in MIL; tolerate any
            self.builder.onnx_names[out["name"]] = self.states[state]

    # ------------------------------------------------------------------------------------------

    def graph(self, graph_name):
        b = self.builder
        outputs = []
        taken = set(info.name for info in self.graph_inputs)
        for name in self.function["block"]["outputs"]:
            type_dict = b.types.get(name)
            if name not in b.onnx_names:
                if name in b.constants or name in b.deferred:
                    source = _materialize(b, name)
                else:
                    raise Unsupported("output '%s' is not computed" % name)
            else:
                source = b.onnx_names[name]
            if source != name or name in taken:
                b.nodes.append(helper.make_node("Identity", [source], [name], name=b.fresh("n_out_" + name)))
            taken.add(name)
            if name in b.output_types:
                outputs.append(helper.make_value_info(name, b.output_types[name]))
                continue
            if type_dict is None:
                raise Unsupported("output '%s' has no type" % name)
            outputs.append(_value_info(b, name, type_dict, name))
        for state, current in self.states.items():
            out_name = state + STATE_OUTPUT_SUFFIX
            b.nodes.append(helper.make_node("Identity", [current], [out_name], name=b.fresh("n_out_" + out_name)))
            element = next(v["type"]["element"] for v in self.function["inputs"] if v["name"] == state)
            outputs.append(_value_info(b, out_name, element, state))
        return helper.make_graph(b.nodes, graph_name, self.graph_inputs, outputs, b.initializers)


# Op types FunctionExport writes itself rather than through a translator of registry.py: they
# read or write a state of the function, or hold nested blocks, which a translator (it sees one
# op and no blocks) cannot reach.
OWN_TRANSLATIONS = {
    "read_state": lambda export, view, known: export._read_state(view),
    "write_state": lambda export, view, known: export._write_state(view),
    "while_loop": lambda export, view, known: export._while_loop(view, known),
    "cond": lambda export, view, known: export._cond(view, known),
}


def _list_tensor_type(builder, name, type_dict):
    dims = ops_control_flow.element_dims(builder, name)
    if dims is None:
        return dict(type_dict, kind="tensor", rank=-1, dims=[])
    return dict(type_dict, kind="tensor", rank=len(dims) + 1, dims=[-1] + list(dims))


def _materialize(builder, name):
    if name in builder.deferred:
        return builder.deferred[name].emit(builder)
    from .graph import constant_name
    return constant_name(builder, builder.constants[name], name)


def build_model(program, function_name, opset, fp32, source_name=""):
    """(onnx.ModelProto or None, problems) for one function of `program` (read_program's dict)."""
    function = program["functions"][function_name]
    description = next((f for f in program["description"]["functions"] if f["name"] == function_name), None)
    export = FunctionExport(function, description, opset, fp32).run()
    if export.problems:
        return None, export.problems
    try:
        graph = export.graph(function_name)
    except Unsupported as exc:
        return None, [Problem("output", "", str(exc))]
    imports = [helper.make_opsetid("", opset)]
    if export.builder.uses_ml_domain:
        imports.append(helper.make_opsetid("ai.onnx.ml", 3))
    model = helper.make_model(graph, opset_imports=imports, producer_name="coremlrt",
                              ir_version=helper.find_min_ir_version_for(imports))
    metadata = {
        "coremlrt.source": source_name,
        "coremlrt.function": function_name,
        "coremlrt.states": json.dumps({s: s + STATE_OUTPUT_SUFFIX for s in export.states}),
    }
    helper.set_model_props(model, metadata)
    return model, []


# Initializers of at least this size go to external data: the threshold onnx.save_model takes,
# compared as it compares it (sys.getsizeof of the raw bytes), so save_model and SharedWeights
# (export_onnx_functions in __init__.py) leave the same small tensors inline.
EXTERNAL_THRESHOLD = 1024


def save_model(model, path, external_data):
    """Writes `model` to `path`; external_data: True, False or None (only when over 1 GiB)."""
    total = sum(len(t.raw_data) for t in model.graph.initializer)
    if external_data is None:
        external_data = total > (1 << 30)
    if external_data:
        location = os.path.basename(path) + ".data"
        onnx.save_model(model, path, save_as_external_data=True, all_tensors_to_one_file=True, location=location,
                        size_threshold=EXTERNAL_THRESHOLD)
    else:
        onnx.save_model(model, path)
    onnx.checker.check_model(path, full_check=True)
    return path


def _initializers(graph):
    """Every initializer of `graph` and of its subgraphs (Loop bodies, If branches)."""
    yield from graph.initializer
    for node in graph.node:
        for attribute in node.attribute:
            if attribute.type == onnx.AttributeProto.GRAPH:
                yield from _initializers(attribute.g)
            elif attribute.type == onnx.AttributeProto.GRAPHS:
                for sub in attribute.graphs:
                    yield from _initializers(sub)


class SharedWeights:
    """One external-data file for several models: each distinct initializer (same type, dims and
    bytes) is written once, and every tensor holding it points at that one offset and length.
    Functions of a multifunction package share their weights (coremltools' save_multifunction
    keeps one copy of identical consts), and their exports give the same initializer bytes, so
    the file holds one copy where separate exports would hold one per function."""

    def __init__(self, file, location):
        self.file, self.location = file, location
        self.offsets = {}  # (data_type, dims, sha256 of the bytes) -> (offset, length)
        self.size = 0

    def offload(self, model):
        """Moves `model`'s initializers of EXTERNAL_THRESHOLD or more into the file."""
        for tensor in _initializers(model.graph):
            if not tensor.HasField("raw_data") or sys.getsizeof(tensor.raw_data) < EXTERNAL_THRESHOLD:
                continue
            key = (tensor.data_type, tuple(tensor.dims), hashlib.sha256(tensor.raw_data).digest())
            if key not in self.offsets:
                self.file.write(tensor.raw_data)
                self.offsets[key] = (self.size, len(tensor.raw_data))
                self.size += len(tensor.raw_data)
            offset, length = self.offsets[key]
            set_external_data(tensor, self.location, offset, length)
            tensor.ClearField("raw_data")


__all__ = ["build_model", "save_model", "EXTERNAL_THRESHOLD", "Problem", "SharedWeights"]
