"""Translates a parsed Core AI program (the ``coreai`` dialect) into a compiled-model folder:
``model.mil`` text, ``metadata.json`` and ``weights/weight.bin`` (docs/design/mil-text.md).

This module holds the translator itself: values, constants, MIL text, nested blocks, inputs,
outputs and states. Each ``_ops_*.py`` module translates one family of ops into it, registering
its translators with ``@translates`` (``_registry.py``); ``REFUSED`` names the ops refused by
name, and why; an op form MIL lacks is refused by the op's translation. docs/design/coreai.md
lists the mapping.
"""

import contextlib
import json
import os
import re
import shutil
import struct

import numpy as np

from ._common import (BLOB_CODES, COMPUTED, ELEMENT_TYPES, FEATURE_TYPES, NUMPY_OF_MIL, SUB_BYTE_BITS, TOKEN,
                      Complex, Sparse, UnsupportedError, Var, computed_dtype, dims_of, element_kind, element_type,
                      mil_type, pack_bits, scalar_text, static_shape, unpack_bits)
# Each _ops_FAMILY module registers its translators as it is imported (_ops_recurrent's reads
# whole LSTM layers, through find_layers and translate_layer).
from . import _ops_constexpr, _ops_control_flow, _ops_elementwise, _ops_nn, _ops_reduction, _ops_shape  # noqa: F401
from . import _ops_recurrent
from ._registry import TRANSLATORS

# Ops of the dialect refused by name, with the reason given when refusing them.
REFUSED = {
    "coreai.image_to_tensor": "images (!coreai.image) are not supported",
    "coreai.tensor_to_image": "images (!coreai.image) are not supported",
    "coreai.delegate": "a delegate's resource is a compiled blob only its delegate runs",
    "coreai.metal4_kernel": "a Metal kernel's source runs only on Metal",
}
# A bare reduce or reduce_index (the region forms; reduce_max, argmax and the like are their
# own ops) is written to bytecode but not read back: coreai-core 1.0.0b3's loader fails to
# legalize aicode.primitive.reduce_v1 / reduce_index_v1 and aborts the process (its runtime's
# as well), so no model holding one reaches the translation.
REFUSED.update({name: "coreai-core cannot read it back from bytecode" for name in
                ("coreai.reduce", "coreai.reduce_index")})

# The only readers of a complex value and of a bitmask-sparse one.
_COMPLEX_READERS = ("coreai.real_part", "coreai.imaginary_part")
_SPARSE_READERS = ("coreai.sparse_with_bitmask_to_dense", "coreai.lut_to_sparse_with_bitmask")
# Terminators, read by the op whose region they end.
_TERMINATORS = ("coreai.output", "coreai.yield", "coreai.condition")
# Ops whose regions are translated as MIL code (the others' regions are read as parameters).
_REGION_OPS = ("coreai.if", "coreai.while", "coreai.isolated_group")

# Constants with more elements than this go to weight.bin; smaller ones are written inline.
_INLINE_LIMIT = 16


def _handle_type(mlir_type, where):
    """(element type name, shape) of a ``!coreai.handle<tensor<...>>``, or None for another type."""
    text = str(mlir_type)
    if not text.startswith("!coreai.handle<"):
        return None
    match = re.fullmatch(r"!coreai\.handle<tensor<((?:[0-9?]+x)*)(\w+)>>", text)
    if match is None or "?" in match.group(1):
        raise UnsupportedError(f"{where}: handle type {text} is not supported (a static tensor handle only)")
    dims = [int(d) for d in match.group(1).split("x") if d]
    return match.group(2), dims


def feature_names(names, taken):
    """MIL identifiers for a function's input, state or output names: the engine binds a
    feature to the function argument or result of the same name (metadata.json has no other
    mapping, src/format/compiled_metadata.cc), and MIL text identifiers are
    [A-Za-z_][A-Za-z0-9_@]* (src/format/mil_text_reader.cc), so each other character becomes
    '_' (a module's state "gpt.k_cache" is the feature "gpt_k_cache") and a leading digit gets
    a '_' before it. A name already taken gets _2, _3, ... after it; equal names stay equal.
    ``taken``: the names given so far (original -> MIL), extended here."""
    out = []
    for name in names:
        if name not in taken:
            base = re.sub(r"[^A-Za-z0-9_]", "_", name)
            base = base if re.match(r"[A-Za-z_]", base) else "_" + base
            candidate, index = base, 1
            while candidate in taken.values():
                index += 1
                candidate = f"{base}_{index}"
            taken[name] = candidate
        out.append(taken[name])
    return out


def untranslatable(operations, callees):
    """The names of ops (of these, their translated regions and every callee) that are not
    translated: (unknown names, {refused name: reason})."""
    names = set()

    def walk(ops):
        for op in ops:
            names.add(op.name)
            if op.name in _REGION_OPS:
                for region in op.regions:
                    for block in region.blocks:
                        walk([o.operation for o in block.operations])

    walk(operations)
    for graph in callees.values():
        walk([o.operation for o in graph.regions[0].blocks[0].operations])
    unknown = sorted(n for n in names if n not in TRANSLATORS and n not in _TERMINATORS and n not in REFUSED)
    return unknown, {n: REFUSED[n] for n in sorted(names) if n in REFUSED}


# The translation's name for the Core AI model's own main.mlirb (a hard link where the cache and
# the model share a file system, else a copy), whose weights RAWDATA values read in place.
SOURCE_FILE = "main.mlirb"
# Its size and modification time when the translation was written: a cached translation whose
# linked file changed since (rewritten in place) is stale (coremlrt.coreai.compile_aimodel).
SOURCE_STAMP = "main.mlirb.stamp"


def source_stamp(path):
    st = os.stat(path)
    return f"{st.st_size} {st.st_mtime_ns}\n"


class Program:
    """What the functions of one MIL program share: the weight files, op names, the histogram.

    ``source``: the Core AI model's main.mlirb and its resource blobs ({key: (file offset,
    size)}, _bytecode.resource_blobs). A constant written with the bytes main.mlirb holds is a
    view of that file (RAWDATA) rather than a copy in weight.bin.
    """

    def __init__(self, source=None, source_blobs=None):
        self.counter = 0
        self.blobs = bytearray(64)
        self.blob_count = 0
        self.histogram = {}
        self.functions = []  # Translators, in order
        self.source = source
        self.source_blobs = source_blobs or {}
        self._sources = {}  # id(buffer) -> (buffer, file offset): constants read from main.mlirb
        self.reads_source = False

    def note_source(self, op, buffer, size):
        """Records that ``buffer`` holds the ``size`` bytes of ``op``'s resource, as main.mlirb does."""
        text = str(op.attributes["value"]) if "value" in op.attributes else ""
        if not text.startswith("dense_resource<"):
            return
        blob = self.source_blobs.get(text[len("dense_resource<"):text.find(">")])
        if blob is None or blob[1] != size:
            return
        buffer.flags.writeable = False  # the bytes must stay the file's (a view of it replaces them)
        self._sources[id(buffer)] = (buffer, blob[0])

    def source_offset(self, array, dtype):
        """main.mlirb's offset of ``array``'s bytes, when it holds them as they would be written
        and element-aligned; else None."""
        if dtype in SUB_BYTE_BITS or NUMPY_OF_MIL.get(dtype) is None or array.dtype != np.dtype(NUMPY_OF_MIL[dtype]):
            return None
        if not array.flags.c_contiguous or array.nbytes == 0:
            return None
        root = array
        while isinstance(root.base, np.ndarray):
            root = root.base
        entry = self._sources.get(id(root))
        if entry is None or entry[0] is not root:
            return None
        delta = array.__array_interface__["data"][0] - root.__array_interface__["data"][0]
        offset = entry[1] + delta
        if delta < 0 or delta + array.nbytes > root.nbytes or offset % array.itemsize:
            return None
        self.reads_source = True
        return offset

    def write(self, folder, default_name):
        body = "\n".join(t.function_text() for t in self.functions)
        os.makedirs(os.path.join(folder, "weights"), exist_ok=True)
        with open(os.path.join(folder, "model.mil"), "w", encoding="utf-8") as f:
            f.write(f"program(1.3)\n{{\n{body}\n}}\n")
        blobs = bytearray(self.blobs)
        blobs[0:8] = struct.pack("<II", self.blob_count, 2)
        with open(os.path.join(folder, "weights", "weight.bin"), "wb") as f:
            f.write(blobs)
        if self.reads_source:
            target = os.path.join(folder, "weights", SOURCE_FILE)
            try:
                os.link(self.source, target)  # the model's own file: its pages serve both
            except OSError:
                shutil.copyfile(self.source, target)  # another file system, or linking not allowed
            with open(os.path.join(folder, "weights", SOURCE_STAMP), "w", encoding="utf-8") as f:
                f.write(source_stamp(target))
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


class _Scope:
    """The lines of one MIL block and the constants named in it (visible to nested blocks)."""

    def __init__(self):
        self.lines = []
        self.consts = {}     # (id of array, MIL dtype) -> MIL name
        self.defined = set()  # names computed in this block


class Translator:
    def __init__(self, graph, copy_constant, where, callees=None, program=None, name="main"):
        self._graph = graph
        self.callees = dict(callees or {})  # sym_name -> coreai.graph that invoke may call
        self.inlining = []
        self._copy_constant = copy_constant
        self.where = where
        self.values = {}      # MLIR Value -> Var, np.ndarray (a constant), Sparse or TOKEN
        self._scopes = [_Scope()]
        self._program = program or Program()
        self._program.functions.append(self)
        self.name = name
        self._kept = []       # the arrays named in the scopes' consts: their ids must stay theirs
        self.output_names = {}
        self._written = {}    # MIL name -> (block lines, line, MIL op) of the op computing it (retract)
        # State name -> the MLIR value the translated state holds (_ops_control_flow.py write_through).
        self.state_contents = {}
        self.handle_positions = {}  # state name -> [(position, handle op)] (_ops_control_flow.py)
        self.position = None        # of the op being translated in the function's own block

    # -- errors and operands -----------------------------------------------------------
    def fail(self, message):
        raise UnsupportedError(f"{self.where}: {message}")

    def kind(self, value):
        """The Core AI element type of a value, as text (f32, si32, i1, ...)."""
        return element_kind(value.type)

    def dims(self, value):
        """A value's dims (None: dynamic), as far as the translation knows them."""
        held = self.values.get(value)
        if isinstance(held, (Var, Sparse)):
            return list(held.dims)
        if isinstance(held, np.ndarray):
            return list(held.shape)
        return dims_of(value.type)

    def static(self, value, what="shape"):
        dims = self.dims(value)
        if None in dims:
            self.fail(f"{what} {value.type} has dynamic dimensions where coremlrt needs them known")
        return dims

    def constant(self, value):
        held = self.values.get(value)
        return held if isinstance(held, np.ndarray) else None

    def const_of(self, value, what, op):
        held = self.constant(value)
        if held is None:
            self.fail(f"{op.name}: {what} must be a constant")
        return held

    def ints(self, op, index, what):
        return [int(v) for v in self.const_of(op.operands[index], what, op).reshape(-1)]

    def axis(self, op, index, rank, what="axis"):
        axis = int(self.const_of(op.operands[index], what, op).reshape(-1)[0])
        if not -rank <= axis < rank:
            self.fail(f"{op.name}: {what} {axis} is out of range for rank {rank}")
        return axis % rank

    def fold(self, op, array, index=0):
        """Sets a result to a constant computed at translation."""
        numpy_dtype = element_type(op.results[index].type, self.where)[1]
        self.values[op.results[index]] = np.ascontiguousarray(np.asarray(array).astype(numpy_dtype))

    def all_constant(self, values):
        return all(self.constant(v) is not None for v in values)

    # -- names and text ------------------------------------------------------------------
    @property
    def lines(self):
        return self._scopes[-1].lines

    def fresh(self, base):
        self._program.counter += 1
        return f"{base}_{self._program.counter}"

    def count(self, mil_op):
        key = f"Ios18.{mil_op}"
        self._program.histogram[key] = self._program.histogram.get(key, 0) + 1

    def _blob(self, array, dtype):
        program = self._program
        bits = SUB_BYTE_BITS.get(dtype)
        data = (pack_bits(array, bits) if bits else np.ascontiguousarray(array)).tobytes()
        padding = len(data) * 8 - array.size * bits if bits else 0
        offset = len(program.blobs)
        program.blobs += struct.pack("<IIQQQ", 0xDEADBEEF, BLOB_CODES[dtype], len(data), offset + 64, padding)
        program.blobs += bytes(64 - 32)
        program.blobs += data
        program.blobs += bytes((-len(program.blobs)) % 64)
        program.blob_count += 1
        return offset

    def _const_text(self, array, dtype):
        # Sub-byte values exist only in blobs (docs/design/mil-text.md: no immediate form).
        if (array.size > _INLINE_LIMIT or dtype in SUB_BYTE_BITS) and dtype in BLOB_CODES:
            offset = self._program.source_offset(array, dtype)
            if offset is not None:
                return (f"{mil_type(dtype, array.shape)}(RAWDATA(path = string(\"@model_path/weights/{SOURCE_FILE}\"), "
                        f"offset = uint64({offset})))")
            offset = self._blob(array, dtype)
            return (f"{mil_type(dtype, array.shape)}(BLOBFILE(path = string(\"@model_path/weights/weight.bin\"), "
                    f"offset = uint64({offset})))")
        flat = [scalar_text(v, dtype) for v in array.reshape(-1).tolist()]
        if array.ndim == 0:
            return f"{dtype}({flat[0]})"
        return f"{mil_type(dtype, array.shape)}([{', '.join(flat)}])"

    def const(self, array, dtype, base="const"):
        name = self.fresh(base)
        self._scopes[-1].defined.add(name)
        self.lines.append(f"{mil_type(dtype, array.shape)} {name} = const()[name = string(\"{name}\"), "
                          f"val = {self._const_text(array, dtype)}];")
        return name

    def param(self, value, dtype):
        """An op parameter given as a Python/numpy value: emitted as a const, its name returned."""
        if dtype == "string":
            name = self.fresh("str")
            self.lines.append(f"string {name} = const()[name = string(\"{name}\"), val = string(\"{value}\")];")
            return name
        return self.const(np.asarray(value).astype(NUMPY_OF_MIL[dtype]), dtype, "param")

    def const_name(self, array, dtype):
        """The MIL name of a constant array as ``dtype``, emitted once per block that sees it."""
        key = (id(array), dtype)
        for scope in reversed(self._scopes):
            if key in scope.consts:
                return scope.consts[key]
        converted = array if dtype in SUB_BYTE_BITS or array.dtype == NUMPY_OF_MIL[dtype] else \
            array.astype(NUMPY_OF_MIL[dtype])
        name = self.const(converted, dtype)
        self._scopes[-1].consts[key] = name
        self._kept.append(array)
        return name

    def const_dtype(self, value):
        """The MIL dtype a constant operand is written in: that of a computed value of its element
        type; integers of other widths (and ui32) as int32, when their values fit."""
        kind = element_kind(value.type)
        dtype = COMPUTED.get(kind)
        if dtype is not None and kind != "ui32":
            return dtype
        held = self.values[value]
        if not np.issubdtype(held.dtype, np.integer):
            self.fail(f"a constant of element type {kind} is not supported here")
        if held.size and (int(held.min()) < -2 ** 31 or int(held.max()) >= 2 ** 31):
            self.fail(f"a constant of element type {kind} does not fit int32")
        return "int32"

    def operand(self, value, dtype=None):
        """The MIL name of an operand, emitting a constant for a folded one (as ``dtype``, or
        as ``const_dtype`` says)."""
        held = self.values[value]
        if isinstance(held, Var):
            return held.name
        if not isinstance(held, np.ndarray):
            self.fail(f"{value.type} is used where a tensor is expected")
        return self.const_name(held, dtype or self.const_dtype(value))

    def _op_text(self, type_texts, names, mil_op, arguments, blocks=()):
        """Writes one MIL op (its outputs typed and named; nested blocks as (inputs, lines,
        outputs)) in the current block."""
        args = ", ".join(f"{k} = {v}" for k, v in sorted(arguments.items()))
        bindings = ", ".join(f"{t} {n}" for t, n in zip(type_texts, names))
        text = f"{bindings} = {mil_op}({args})[name = string(\"{names[0]}\")]"
        for inputs, lines, outputs in blocks:
            text += " "
            if inputs:
                text += "(" + ", ".join(f"{mil_type(v.dtype, v.dims)} {v.name}" for v in inputs) + ") "
            body = "\n".join("    " + physical for line in lines for physical in line.split("\n"))
            text += "{\n" + body + ("\n" if body else "") + f"}} -> ({', '.join(outputs)})"
        self.lines.append(text + ";")
        self._scopes[-1].defined.update(names)
        self._written[names[0]] = (self.lines, text + ";", mil_op)
        self.count(mil_op)

    def retractable(self, name):
        """Whether ``name`` is computed by an op of the current block (retract can take it back)."""
        lines, text, _ = self._written.get(name, (None, None, None))
        return lines is self.lines and text in lines

    def retract(self, name):
        """Takes back the op that computes ``name`` (its line in the current block, which must be
        retractable), when a later op computes the same more directly and nothing else reads
        it (_ops_shape.py window_scatter)."""
        lines, text, mil_op = self._written[name]
        lines.remove(text)
        self._scopes[-1].defined.discard(name)
        self._program.histogram[f"Ios18.{mil_op}"] -= 1

    def emit(self, op, mil_op, arguments, dims=None, blocks=(), compressed=False):
        """Writes one MIL op computing all of ``op``'s results (in order); returns their Vars.
        ``dims``: per result, dims the translation knows where the result type leaves them
        dynamic (None keeps the type's)."""
        results = []
        for index, result in enumerate(op.results):
            dtype = computed_dtype(result.type, self.where)
            known = dims[index] if dims is not None and dims[index] is not None else dims_of(result.type)
            results.append(Var(self.output_name(result) or self.fresh(mil_op), dtype, known, compressed))
        self._op_text([mil_type(v.dtype, v.dims) for v in results], [v.name for v in results], mil_op, arguments,
                      blocks)
        for result, var in zip(op.results, results):
            self.values[result] = var
        return results

    def output_name(self, result):
        """The model output's name for a value of the function's block that the graph returns."""
        return self.output_names.get(result) if len(self._scopes) == 1 else None

    def aux(self, mil_op, arguments, dtype, dims, base=None, blocks=(), name=None):
        """One MIL op of the translation's own (not a Core AI op's result): its Var."""
        var = Var(name or self.fresh(base or mil_op), dtype, dims)
        self._op_text([mil_type(dtype, dims)], [var.name], mil_op, arguments, blocks)
        return var

    def aux_many(self, mil_op, arguments, types, blocks=(), names=None):
        """A MIL op of several outputs of the translation's own: their Vars (``names``: per
        output, a name to give it, or None for a fresh one)."""
        names = names or [None] * len(types)
        vars_ = [Var(name or self.fresh(mil_op), dtype, dims) for name, (dtype, dims) in zip(names, types)]
        self._op_text([mil_type(v.dtype, v.dims) for v in vars_], [v.name for v in vars_], mil_op, arguments,
                      blocks)
        return vars_

    def as_var(self, value, dtype=None):
        """The operand as a Var (a constant is emitted)."""
        held = self.values[value]
        if isinstance(held, Var):
            return held
        dtype = dtype or self.const_dtype(value)
        return Var(self.operand(value, dtype), dtype, list(held.shape))

    # -- nested blocks -------------------------------------------------------------------
    @contextlib.contextmanager
    def block(self):
        """Translates into a nested MIL block (cond, while_loop): yields the block's lines."""
        scope = _Scope()
        self._scopes.append(scope)
        try:
            yield scope.lines
        finally:
            self._scopes.pop()

    def local_names(self, values):
        """Block outputs: the MIL names of values, each computed in the current block (an
        input, outer value or constant is copied with identity, so that the block computes it)."""
        names = []
        for value in values:
            name = self.operand(value)
            if name not in self._scopes[-1].defined or name in names:
                var = self.as_var(value)
                name = self.aux("identity", {"x": name}, var.dtype, var.dims).name
            names.append(name)
        return names

    # -- constants -----------------------------------------------------------------------
    def read_constant(self, op):
        """A coreai.constant's value as a numpy array (sub-byte values unpacked)."""
        result = op.results[0]
        _, numpy_dtype, bits = element_type(result.type, self.where)
        shape = static_shape(result.type, self.where)
        count = int(np.prod(shape)) if shape else 1
        if bits:
            # The values are packed, least significant bits first (as coreai-torch writes them
            # and coreai's runtime reads them). The bindings copy a resource's whole blob, and
            # coreai's authoring constant() writes one byte per element there: the buffer has
            # room for that, and its first bytes are read packed, as the runtime reads them.
            buffer = np.zeros(max(count, (count * bits + 7) // 8, 1), np.uint8)
            self._copy_constant(constant_op=op, destination=buffer)
            return unpack_bits(buffer, count, bits, element_kind(result.type).startswith("si")).reshape(shape)
        buffer = np.zeros(max(count * np.dtype(numpy_dtype).itemsize, 1), np.uint8)
        self._copy_constant(constant_op=op, destination=buffer)
        self._program.note_source(op, buffer, count * np.dtype(numpy_dtype).itemsize)
        return buffer[:count * np.dtype(numpy_dtype).itemsize].view(numpy_dtype).reshape(shape)

    # -- driver --------------------------------------------------------------------------
    def run(self, operations, top=False):
        """Translates a block's ops in order; returns its terminator (output, yield, condition).
        ``top``: the function's own block (self.position follows its ops; unrolled LSTM layers
        in it become lstm ops, _ops_recurrent.py)."""
        layers = _ops_recurrent.find_layers(operations) if top else {}
        position_of = {op: i for i, op in enumerate(operations)} if layers else {}
        for position, op in enumerate(operations):
            layer = layers.get(op)
            if layer is not None:
                # The layer's ops are skipped up to its last one, where the lstm op is written;
                # where its constants rule that out, they are translated one by one there.
                if op != layer.anchor or _ops_recurrent.translate_layer(self, layer):
                    continue
                for absorbed in layer.ops:
                    self.position = position_of[absorbed]
                    self._translate_op(absorbed)
                self.position = position
                continue
            if top:
                self.position = position
            if op.name in _TERMINATORS:
                return op
            self._translate_op(op)
        return None

    def _translate_op(self, op):
        handler = TRANSLATORS.get(op.name)
        if handler is None:
            self.fail(f"coremlrt cannot translate {op.name}: {REFUSED.get(op.name, 'not a known op')}")
        for value in op.operands:
            held = self.values.get(value)
            if isinstance(held, Complex) and op.name not in _COMPLEX_READERS:
                self.fail(f"{op.name} reads a complex value: MIL has no complex element type (coremlrt "
                          f"translates create_complex only as read back by real_part and imaginary_part)")
            if isinstance(held, Sparse) and op.name not in _SPARSE_READERS:
                self.fail(f"{op.name} reads a bitmask-sparse value (only sparse_with_bitmask_to_dense and "
                          f"lut_to_sparse_with_bitmask take one)")
        handler(self, op)

    def translate(self, input_names, output_names):
        block = self._graph.regions[0].blocks[0]
        operations = [o.operation for o in block.operations]
        terminator = operations[-1]
        if terminator.name != "coreai.output":
            self.fail("the graph does not end in coreai.output")
        unknown, refused = untranslatable(operations, self.callees)
        if unknown or refused:
            listed = [f"{n} ({reason})" for n, reason in refused.items()] + unknown
            self.fail(f"coremlrt cannot translate these Core AI ops: {', '.join(listed)}")
        # Results named as the model's outputs when a translated op computes them directly.
        for value, name in zip(terminator.operands, output_names):
            if value not in self.output_names and not any(value == a for a in block.arguments):
                self.output_names[value] = name
        self.inputs, self.states, self._arguments = [], [], []  # _arguments: (MIL type text, name)
        for argument, name in zip(block.arguments, input_names):
            handle = _handle_type(argument.type, self.where)
            if handle is not None:  # a state: caller-owned, read and written with read/write_handle
                element, shape = handle
                dtype = ELEMENT_TYPES.get(element, (None,))[0]
                if dtype not in FEATURE_TYPES:
                    self.fail(f"state '{name}' has element type {element}, which coremlrt states cannot take")
                self.values[argument] = Var(name, f"state<{dtype}>", shape)
                self.states.append((name, FEATURE_TYPES[dtype], shape))
                self._arguments.append((f"state<{mil_type(dtype, shape)}>", name))
                continue
            dtype = element_type(argument.type, self.where)[0]
            if dtype not in FEATURE_TYPES:
                self.fail(f"input '{name}' has element type {self.kind(argument)}, which Core ML inputs cannot take")
            dims = dims_of(argument.type)
            if not dims:
                # Core ML's multi-arrays have rank 1 or more: a scalar input is fed as [1] and
                # reshaped to the scalar the program reads.
                self.inputs.append((name, FEATURE_TYPES[dtype], [1]))
                self._arguments.append((mil_type(dtype, [1]), name))
                self.values[argument] = self.aux("reshape", {"x": name, "shape": self.param(np.zeros(0), "int32")},
                                                 dtype, [])
                continue
            self.values[argument] = Var(name, dtype, dims)
            self.inputs.append((name, FEATURE_TYPES[dtype], dims))
            self._arguments.append((mil_type(dtype, dims), name))
        self.handle_positions = _ops_control_flow.handle_positions(block, operations, self.values)
        self.run(operations, top=True)
        self._finish(list(terminator.operands), output_names)

    def _finish(self, results, output_names):
        self.outputs, self._result_names = [], []
        for value, name in zip(results, output_names):
            held = self.values[value]
            if held is TOKEN:  # a state's token: the state itself is the caller's
                continue
            dtype = element_type(value.type, self.where)[0]
            if dtype not in FEATURE_TYPES:
                self.fail(f"output '{name}' has element type {self.kind(value)}, which Core ML outputs cannot take")
            if not (isinstance(held, Var) and held.name == name):
                # An input, a constant or a value returned twice: copy it under the output's name.
                source = self.as_var(value)
                self.lines.append(f"{mil_type(source.dtype, source.dims)} {name} = identity(x = {source.name})"
                                  f"[name = string(\"{name}\")];")
                self.count("identity")
            self.outputs.append((name, FEATURE_TYPES[dtype], self.dims(value)))
            self._result_names.append(name)

    def function_text(self):
        arguments = ", ".join(f"{type_text} {name}" for type_text, name in self._arguments)
        body = "\n".join("        " + physical for line in self.lines for physical in line.split("\n"))
        return (f"    func {self.name}<ios18>({arguments}) {{\n{body}\n"
                f"    }} -> ({', '.join(self._result_names)});")

    def schemas(self):
        def feature(name, data_type, dims, kind="MultiArray", flexible=False):
            out = {"name": name, "type": kind, "isOptional": "0", "shortDescription": "", "dataType": data_type}
            if None not in dims:
                out.update(shape="[" + ", ".join(str(d) for d in dims) + "]", hasShapeFlexibility="0")
            elif flexible:
                # A dynamic dim takes any size from 1 (Core AI records no bounds); the default
                # shape puts 1 there.
                out["shape"] = "[" + ", ".join(str(1 if d is None else d) for d in dims) + "]"
                out["hasShapeFlexibility"] = "1"
                out["shapeRange"] = "[" + ", ".join("[1, -1]" if d is None else f"[{d}, {d}]" for d in dims) + "]"
            else:  # an output of dims known only at prediction
                out.update(shape="[]", hasShapeFlexibility="0")
            return out

        schemas = {"inputSchema": [feature(n, t, s, flexible=True) for n, t, s in self.inputs],
                   "outputSchema": [feature(n, t, s) for n, t, s in self.outputs]}
        if self.states:
            schemas["stateSchema"] = [feature(n, t, s, "State") for n, t, s in self.states]
        return schemas

    def write(self, folder):
        """Writes a program of this one function."""
        self._program.write(folder, self.name)
