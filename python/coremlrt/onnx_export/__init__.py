"""Export a Core ML model to ONNX (needs the ``onnx`` package: ``pip install coremlrt[onnx]``).

    import coremlrt
    coremlrt.export_onnx("model.mlpackage", "model.onnx")
    coremlrt.onnx_export.unsupported_ops("model.mlpackage")   # what would stop an export

The exporter reads the program coremlrt runs (python/src/program_bindings.cc: every model type
read into one program, constants folded and compressed weights kept packed as the planner does)
and writes each op as ONNX operators (docs/design/onnx-export.md lists the forms and what is
not exported). Inputs and outputs keep their names, dtypes and shapes; a dim the model lets vary
(a range or enumerated shapes) becomes a symbolic dim named ``<input>_d<i>``, which admits any
size (narrower than the model's enumeration says). States become a graph input ``<state>`` and
a graph output ``<state>_out``: feed each call's ``<state>_out`` back as the next call's
``<state>``. fp16 programs keep fp16 types unless ``fp32=True``.
"""

import os

from .. import _core
from .._core import Error

DEFAULT_OPSET = 21


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


__all__ = ["DEFAULT_OPSET", "export_onnx", "unsupported_ops"]
