"""Export a Core ML model to ONNX (needs the ``onnx`` package: ``pip install coremlrt[onnx]``).

    import coremlrt
    coremlrt.export_onnx("model.mlpackage", "model.onnx")
    coremlrt.export_onnx_functions("lm.mlpackage", "lm_onnx")   # every function, one weight file
    coremlrt.onnx_export.unsupported_ops("model.mlpackage")   # what would stop an export

The exporter reads the program coremlrt runs (python/src/program_bindings.cc: every model type
read into one program, constants folded and compressed weights kept packed as the planner does)
and writes each op as ONNX operators (docs/design/onnx-export.md lists the forms and what is
not exported). Inputs and outputs keep their names, dtypes and shapes; a dim the model lets vary
(a range or enumerated shapes) becomes a symbolic dim named ``<input>_d<i>``, which admits any
size; the graph input's doc_string says the sizes Core ML allows. States become a graph input ``<state>`` and
a graph output ``<state>_out``: feed each call's ``<state>_out`` back as the next call's
``<state>``. fp16 programs keep fp16 types unless ``fp32=True``.
"""

import os
import tempfile

from .. import _core
from .._core import Error

DEFAULT_OPSET = 21
SHARED_DATA_FILE = "weights.data"


def _source_path(model):
    path = getattr(model, "package_path", model)
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("model must be a path or a coremlrt.MLModel, got %s" % type(model).__name__)
    return os.fspath(path)


def _function_names(program, function):
    functions = program["functions"]
    if not functions:
        problem = program["problem"] or program["network_problem"] or "the model has no program"
        raise Error("cannot export: %s" % problem)
    if function is None:
        function = program["description"]["default_function"] or next(iter(functions))
        if function not in functions:
            function = next(iter(functions))
    if function not in functions:
        raise Error("no function '%s' in the model; it has %s" % (function, ", ".join(sorted(functions))))
    return function


def _check_opset(opset):
    import onnx
    if not isinstance(opset, int) or isinstance(opset, bool) or not 18 <= opset <= onnx.defs.onnx_opset_version():
        raise ValueError("opset must be an int from 18 to %d, got %r" % (onnx.defs.onnx_opset_version(), opset))


def unsupported_ops(model, function=None, opset=DEFAULT_OPSET):
    """What stops `model`'s function from exporting: a list of (op type, output name, reason)."""
    from .exporter import build_model
    _check_opset(opset)
    program = _core.read_program(_source_path(model))
    name = _function_names(program, function)
    _, problems = build_model(program, name, opset, False)
    return [(p.op_type, p.output, p.reason) for p in problems]


def unsupported_ops_by_function(model, opset=DEFAULT_OPSET):
    """unsupported_ops for every function of `model`: {function: [(op type, output, reason)]},
    the functions that export fully left out."""
    from .exporter import build_model
    _check_opset(opset)
    program = _core.read_program(_source_path(model))
    names = list(program["functions"]) or [_function_names(program, None)]  # no functions: its error
    found = {name: build_model(program, name, opset, False)[1] for name in names}
    return {name: [(p.op_type, p.output, p.reason) for p in problems] for name, problems in found.items() if problems}


def export_onnx(model, path, function=None, opset=DEFAULT_OPSET, fp32=False, external_data=None):
    """Writes `model` (a path or a coremlrt.MLModel) as an ONNX model at `path`, checked with
    onnx.checker (full check). `function`: which function of a multifunction model (default:
    its default function). `external_data`: keep initializers in `<path>.data` (True), inline
    (False), or only when they pass 1 GiB (None). Raises coremlrt.Error listing every op that
    has no ONNX form. Returns `path`."""
    from .exporter import build_model, save_model
    _check_opset(opset)
    source = _source_path(model)
    program = _core.read_program(source)
    name = _function_names(program, function)
    onnx_model, problems = build_model(program, name, opset, bool(fp32), os.path.basename(source))
    if problems:
        raise Error("cannot export function '%s' of '%s' to ONNX; %d op(s) have no ONNX form:\n  %s"
                    % (name, source, len(problems), "\n  ".join(str(p) for p in problems)))
    return save_model(onnx_model, os.fspath(path), external_data)


def _problems_error(source, problems_by_function):
    lines = []
    for name, problems in problems_by_function.items():
        lines.append("function '%s': %d op(s) have no ONNX form:" % (name, len(problems)))
        lines.extend("  " + str(p) for p in problems)
    return Error("cannot export '%s' to ONNX; nothing written\n  %s" % (source, "\n  ".join(lines)))


def _file_name(function):
    # The function's name is the model's file name: one that is not a plain name (a path
    # separator, "." or "..") would put it somewhere else.
    if not function or function in (".", "..") or os.path.basename(function) != function or \
            (os.altsep and os.altsep in function):
        raise Error("function '%s' cannot be a file name; export it alone with export_onnx" % function)
    return function + ".onnx"


def export_onnx_functions(model, directory, functions=None, opset=DEFAULT_OPSET, fp32=False):
    """Writes each function of a multifunction `model` (a path or a coremlrt.MLModel) as
    `<directory>/<function>.onnx`, every one checked with onnx.checker (full check), and their
    initializers of 1 KiB or more in one file, `<directory>/weights.data` (SHARED_DATA_FILE),
    that holds each distinct one once: the weights the functions share are stored once and each
    model points at the same bytes. `functions`: the names to write (default: every function);
    the directory is made when missing. Nothing is written when a function has ops without an
    ONNX form: the coremlrt.Error lists them for every function. Returns {function: path}."""
    from .exporter import SharedWeights, build_model
    _check_opset(opset)
    source = _source_path(model)
    program = _core.read_program(source)
    if functions is None:
        names = list(program["functions"]) or [_function_names(program, None)]  # no functions: its error
    else:
        names = [functions] if isinstance(functions, str) else list(functions)
        names = [_function_names(program, name) for name in dict.fromkeys(names)]
        if not names:
            raise ValueError("functions is empty; pass None to export every function")
    files = {name: _file_name(name) for name in names}
    directory = os.fspath(directory)
    if os.path.exists(directory) and not os.path.isdir(directory):
        raise Error("cannot export to '%s': it is not a directory" % directory)
    created = not os.path.exists(directory)
    try:
        os.makedirs(directory, exist_ok=True)
    except OSError as exc:
        raise Error("cannot make the directory '%s': %s" % (directory, exc)) from exc
    data_path = os.path.join(directory, SHARED_DATA_FILE)
    # The weights go to a temporary file renamed at the end, so a failed export leaves a
    # weights.data of an earlier export whole.
    fd, partial = tempfile.mkstemp(prefix="." + SHARED_DATA_FILE + ".", dir=directory)
    models, problems = {}, {}
    try:
        with os.fdopen(fd, "wb") as data:
            shared = SharedWeights(data, SHARED_DATA_FILE)
            for name in names:
                onnx_model, found = build_model(program, name, opset, bool(fp32), os.path.basename(source))
                if found:
                    problems[name] = found
                elif not problems:
                    # Moved out as each function is built: one function's weights in memory at a time.
                    shared.offload(onnx_model)
                    models[name] = onnx_model
        if problems:
            raise _problems_error(source, problems)
        os.replace(partial, data_path)
    except BaseException:
        if os.path.exists(partial):
            os.remove(partial)
        if created:
            try:
                os.rmdir(directory)
            except OSError:
                pass
        raise
    import onnx
    paths = {}
    for name in names:
        path = os.path.join(directory, files[name])
        onnx.save_model(models[name], path)
        onnx.checker.check_model(path, full_check=True)  # with the path, so the external data resolves
        paths[name] = path
    return paths


__all__ = ["DEFAULT_OPSET", "SHARED_DATA_FILE", "export_onnx", "export_onnx_functions", "unsupported_ops",
           "unsupported_ops_by_function"]
