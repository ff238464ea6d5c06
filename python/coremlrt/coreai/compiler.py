"""The translation of an ``.aimodel`` folder into a compiled-model folder, and its cache
(``compile_aimodel``): what ``coremlrt.MLModel`` runs for a Core AI model. It imports nothing
that loads models (coremlrt.model imports it), so the two never import each other;
``coremlrt.coreai`` (__init__.py) describes the whole.
"""

import hashlib
import json
import os
import shutil
import tempfile

from .._core import BadModelError, UnsupportedError
from ._bytecode import dialect_versions, resource_blobs

# The Core AI dialect as coreai-core 1.0.0b3 writes it: MLIR bytecode 6, dialect "aicode" at
# dialect version 20260409, which the bytecode records as the version bytes b"\x05".
DIALECT = "aicode"
DIALECT_VERSION = 20260409
_DIALECT_VERSION_BYTES = b"\x05"
_BYTECODE_VERSION = 6
# Bumped whenever the translation changes, so cached folders from an older one are rewritten.
TRANSLATOR_VERSION = 7


def _read_asset(path):
    if not os.path.isdir(path):
        raise BadModelError(f"'{path}' is not a folder; a Core AI model (.aimodel) is a folder holding main.mlirb")
    files = {}
    for name in ("main.mlirb", "main.hash", "metadata.json"):
        full = os.path.join(path, name)
        if not os.path.isfile(full):
            raise BadModelError(f"'{path}' has no {name}; a Core AI model holds main.mlirb, main.hash and "
                                "metadata.json")
        with open(full, "rb") as f:
            files[name] = f.read()
    digest = hashlib.sha256(files["main.mlirb"]).digest()
    if files["main.hash"] != digest:
        raise BadModelError(f"'{path}': main.hash does not match the SHA-256 of main.mlirb (the model is damaged "
                    f"or was edited)")
    try:
        metadata = json.loads(files["metadata.json"])
    except ValueError as exc:
        raise BadModelError(f"'{path}': metadata.json is not JSON: {exc}") from exc
    return files["main.mlirb"], digest, metadata


def _check_version(bytecode, where):
    version, producer, dialects = dialect_versions(bytecode, where)
    if version != _BYTECODE_VERSION:
        raise UnsupportedError(f"{where}: MLIR bytecode version {version}; coremlrt reads version {_BYTECODE_VERSION}")
    if DIALECT not in dialects:
        raise BadModelError(f"{where}: no '{DIALECT}' dialect in the program (dialects: {', '.join(sorted(dialects))})")
    blob = dialects[DIALECT]
    if blob != _DIALECT_VERSION_BYTES:
        raise UnsupportedError(f"{where}: '{DIALECT}' dialect version bytes {blob!r}; coremlrt reads only "
                               f"dialect version {DIALECT_VERSION} (bytes {_DIALECT_VERSION_BYTES!r}), as "
                               "coreai-core 1.0.0b3 writes it")
    return producer


def _import_coreai():
    try:
        import coreai.authoring  # noqa: F401 - loads the dialect modules in an order that imports cleanly
        from coreai._compiler.context import Context
        from coreai._compiler._mlir_libs._coreaiIR._bindings.compiler import (
            copy_constant_value_to_array, load_module_from_bytecode)
    except ImportError as exc:
        raise UnsupportedError("reading a Core AI model (.aimodel) needs coreai-core: pip install coremlrt[coreai] "
                    f"({exc})") from exc
    return Context, load_module_from_bytecode, copy_constant_value_to_array


def _names(attributes, key, count, prefix):
    names = []
    if key in attributes:
        for i, entry in enumerate(attributes[key]):
            text = str(entry)
            marker = 'coreai.name = "'
            at = text.find(marker)
            names.append(text[at + len(marker):text.index('"', at + len(marker))] if at >= 0 else f"{prefix}{i}")
    names += [f"{prefix}{i}" for i in range(len(names), count)]
    return names


def _symbol(graph):
    return str(graph.attributes["sym_name"]).strip('"')


def _visibility(graph):
    # The bindings hold `coreai.graph private` as the unit attribute `priv`.
    return "private" if "priv" in {a.name for a in graph.attributes} else "public"


def _write_compiled(path, bytecode_path, bytecode, folder):
    from ._translate import Program, Translator, feature_names

    Context, load_module_from_bytecode, copy_constant = _import_coreai()
    where = bytecode_path
    context = Context()
    with context._mlir_context:  # noqa: SLF001 - the bindings' MLIR context
        module = load_module_from_bytecode(context=context._mlir_context, path=bytecode_path)  # noqa: SLF001
        # A coreai.target_spec only says which hardware to compile for: nothing to translate.
        graphs = [op.operation for op in module.body.operations if op.operation.name != "coreai.target_spec"]
        others = sorted({g.name for g in graphs if g.name != "coreai.graph"})
        if others:
            raise UnsupportedError(f"{where}: top-level ops other than coreai.graph are not supported yet: "
                                   f"{', '.join(others)}")
        # Private graphs are composites (layer_norm, avg_pool2d, ...) that coreai.invoke calls; they
        # are inlined. Each public graph is a function (a multifunction model has several; "main"
        # is the default one when there is one).
        public = [g for g in graphs if _visibility(g) != "private"]
        if not public:
            raise BadModelError(f"{where}: the program has no public coreai.graph")
        callees = {_symbol(g): g for g in graphs if _visibility(g) == "private"}
        for name, graph in list(callees.items()) + [(_symbol(g), g) for g in public]:
            graph_attributes = {a.name: a.attr for a in graph.attributes}
            if str(graph_attributes.get("param_decls", "#param.decl.array<[]>")) != "#param.decl.array<[]>":
                raise UnsupportedError(f"{where}: graph '{name}' has parameters (param_decls), which are not "
                                       "supported yet")
        # `bytecode` is main.mlirb's content as hashed (compile_aimodel): not read a second time.
        program = Program(bytecode_path, resource_blobs(bytecode, where))
        for graph in public:
            attributes = {a.name: a.attr for a in graph.attributes}
            block = graph.regions[0].blocks[0]
            terminator = list(block.operations)[-1].operation
            # Feature names are the MIL names, so they are made identifiers (feature_names).
            taken = {}
            input_names = feature_names(_names(attributes, "arg_attrs", len(block.arguments), "input_"), taken)
            output_names = feature_names(_names(attributes, "res_attrs", len(terminator.operands), "output_"), taken)
            translator = Translator(graph, copy_constant, f"{where} ({_symbol(graph)})", callees, program,
                                    _symbol(graph))
            translator.translate(input_names, output_names)
        names = [_symbol(g) for g in public]
        program.write(folder, "main" if "main" in names else names[0])


def _cache_root(cache_dir):
    if cache_dir is None:
        cache_dir = os.environ.get("COREMLRT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "coremlrt")
    return os.path.join(os.fspath(cache_dir), "coreai")


def compile_aimodel(path, cache_dir=None):
    """Translates the ``.aimodel`` folder at ``path`` and returns the compiled-model folder.

    The folder lies under ``<cache_dir>/coreai/`` (``cache_dir`` defaults as
    :class:`coremlrt.MLModel`'s does), named by ``main.hash``; a folder already there from the
    same translator version is reused without importing coreai-core.
    """
    path = os.path.abspath(os.path.expanduser(os.fspath(path))).rstrip(os.sep)
    bytecode, digest, _ = _read_asset(path)
    _check_version(bytecode, os.path.join(path, "main.mlirb"))
    root = _cache_root(cache_dir)
    folder = os.path.join(root, f"{digest.hex()}-t{TRANSLATOR_VERSION}.mlmodelc")
    if os.path.isfile(os.path.join(folder, "model.mil")):
        if _source_unchanged(folder):
            return folder
        _remove_stale(root, folder)
    os.makedirs(root, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=".staging-", dir=root)
    try:
        target = os.path.join(staging, "model.mlmodelc")
        _write_compiled(path, os.path.join(path, "main.mlirb"), bytecode, target)
        try:
            os.rename(target, folder)
        except OSError:
            if not os.path.isfile(os.path.join(folder, "model.mil")):  # not another process's copy
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def _source_unchanged(folder):
    """Whether a translation's own main.mlirb (weights/, read in place) is as it was written:
    a hard link shares the model file's inode, so rewriting that file in place changes it."""
    from ._translate import SOURCE_FILE, SOURCE_STAMP, source_stamp

    source = os.path.join(folder, "weights", SOURCE_FILE)
    if not os.path.exists(source):
        return True  # every weight is in weight.bin
    try:
        with open(os.path.join(folder, "weights", SOURCE_STAMP), encoding="utf-8") as f:
            return f.read() == source_stamp(source)
    except OSError:
        return False


def _remove_stale(root, folder):
    # Moved aside first, so that no reader finds a half-removed folder; processes that map its
    # files keep them until they unmap.
    aside = tempfile.mkdtemp(prefix=".stale-", dir=root)
    try:
        os.rename(folder, os.path.join(aside, "model.mlmodelc"))
    except OSError:
        pass  # another process moved it already
    shutil.rmtree(aside, ignore_errors=True)
