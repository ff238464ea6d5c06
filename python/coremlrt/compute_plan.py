"""The compute plan of a model: for each op, where it runs and what it costs.

``compute_plan(path)`` returns, per function of an ML program, one :class:`PlannedOp` per
operation (nested blocks included, in program order). It is what coremltools'
``MLComputePlan`` reports through ``coremlrt.coremltools_backend`` and what
``coremlrt info --plan`` prints.

Device: coremlrt computes on the CPU, so every op's device is ``"CPU"``
(``MLCPUComputeDevice``). Backend: :func:`op_backend` is the one place that says which
engine runs an op, from the runtime's own placements (``MLModel.placements()``,
docs/design/architecture.md, "Backends"): ``"openvino"``, ``"reference"`` (coremlrt's own kernels;
ops inside nested blocks always run there), ``"folded"`` (computed once at load), ``"packed"``
(a compressed weight the kernels reading it decode as they run; ``reason`` names its stored form:
docs/design/compressed-weights.md), or ``"none"`` when this build has no kernel for it. ``reason`` says why an op is not on the
backend that was asked for.

Estimated cost: a relative weight in [0, 1], the op's share of the function's estimated
floating-point operations (FLOPs), computed from the types the program declares:

* ``linear``, ``matmul``: 2 x (output elements) x K, K the last dimension of ``x``;
* ``conv``: 2 x (output elements) x (weight elements / output channels);
  ``conv_transpose``: 2 x (elements of ``x``) x (weight elements / input channels);
* ``scaled_dot_product_attention``: 4 x (elements of ``query``) x (key length);
* ``lstm``, ``gru``, ``rnn``: 2 x (sequence x batch) x (elements of the input and recurrent
  weights);
* ``const`` and ``constexpr_*``: 0 (evaluated once, when the model loads);
* every other op (elementwise, activations, reductions, normalization, layout): one
  operation per element of its largest input or output.

Dimensions unknown until prediction count as 1. Estimates of data-movement ops are coarse;
the weights order ops by arithmetic, they are not timings.
"""

import dataclasses
import math
from typing import Any, Dict, List, Optional

from . import _core

CPU = "CPU"
REFERENCE_KERNELS = "reference"  # coremlrt's own kernels (src/ops)
NO_KERNEL = "none"               # this build has no kernel for the op: the model does not load


@dataclasses.dataclass(frozen=True)
class PlannedOp:
    function: str
    path: tuple        # indices from the function's block down to the op (nested blocks included)
    op_type: str
    name: str
    outputs: tuple     # output value names
    device: str
    backend: str
    flops: int
    weight: float      # flops / the function's total flops (0 when that total is 0)
    region: int = -1   # the backend region the op belongs to; -1 on coremlrt's own kernels
    reason: str = ""   # why the op is not on the backend that was asked for


def op_backend(op_type, op_name, first_output, unsupported, placements=None):
    """(backend, region, reason) of an op: from the runtime's placements of the function
    (keyed by the op's first output), our kernels for ops it does not list (ops in nested
    blocks), "none" where this build has no kernel."""
    if (op_type, first_output) in unsupported:
        return NO_KERNEL, -1, "this build has no kernel for it"
    placement = (placements or {}).get(first_output)
    if placement is None:
        return REFERENCE_KERNELS, -1, ""
    return placement["backend"], placement["region"], placement["reason"]


def _placements(path, function, backend):
    from .model import MLModel

    model = MLModel(path, function_name=function, backend=backend, cache_dir=None)
    return {p["output"]: p for p in model.placements() if p["output"]}


def _numel(type_):
    if not type_ or not type_["is_tensor"] or type_["rank"] < 0:
        return 1
    return math.prod(max(d, 1) for d in type_["dims"])


def _dims(type_):
    if not type_ or not type_["is_tensor"] or type_["rank"] < 0:
        return []
    return [max(d, 1) for d in type_["dims"]]


def estimate_flops(op, types):
    """Estimated floating-point operations of one op (see the module docstring)."""
    kind = op["type"]
    if kind == "const" or kind.startswith("constexpr_"):
        return 0

    def input_type(param):
        bindings = op["inputs"].get(param) or []
        if not bindings:
            return None
        b = bindings[0]
        return b["constant_type"] if b["name"] is None else types.get(b["name"])

    out = op["outputs"][0]["type"] if op["outputs"] else None
    if kind in ("linear", "matmul"):
        x = _dims(input_type("x"))
        return 2 * _numel(out) * (x[-1] if x else 1)
    if kind == "conv":
        weight = _dims(input_type("weight"))
        return 2 * _numel(out) * (math.prod(weight[1:]) if weight else 1)
    if kind == "conv_transpose":
        weight = _dims(input_type("weight"))
        return 2 * _numel(input_type("x")) * (math.prod(weight[1:]) if weight else 1)
    if kind == "scaled_dot_product_attention":
        key = _dims(input_type("key"))
        return 4 * _numel(input_type("query")) * (key[-2] if len(key) >= 2 else 1)
    if kind in ("lstm", "gru", "rnn"):
        x = _dims(input_type("x"))
        steps = math.prod(x[:2]) if len(x) >= 2 else 1
        return 2 * steps * (_numel(input_type("weight_ih")) + _numel(input_type("weight_hh")))
    sizes = [_numel(o["type"]) for o in op["outputs"]]
    for bindings in op["inputs"].values():
        for b in bindings:
            sizes.append(_numel(b["constant_type"] if b["name"] is None else types.get(b["name"])))
    return max(sizes, default=0)


def _walk(block, path, types, out):
    for value in block["inputs"]:
        types[value["name"]] = value["type"]
    for index, op in enumerate(block["operations"]):
        for output in op["outputs"]:
            types[output["name"]] = output["type"]
        out.append((path + (index,), op))
        for b, nested in enumerate(op["blocks"]):
            _walk(nested, path + (index, b), types, out)


def compute_plan(path: str, structure: Optional[Dict[str, Any]] = None,
                 backend: Optional[str] = None) -> Dict[str, List[PlannedOp]]:
    """{function name: [PlannedOp, ...]} for the ML program at ``path`` (any model file or
    folder coremlrt reads). ``structure`` may pass ``_core.model_structure(path)`` already read.
    Each function is loaded with ``backend`` (default: ``COREMLRT_BACKEND`` or "auto") to learn
    where its ops run. Raises coremlrt.Error for models that are not ML programs."""
    structure = structure or _core.model_structure(path)
    if structure["model_family"] != "mlProgram":
        raise _core.Error(f"model '{path}' is a {structure['model_type']} model; compute plans cover ML "
                          f"programs (a neuralNetwork's layers all run on the CPU)")
    report = _core.inspect(path)
    unsupported = {f["name"]: {(u["op_type"], u["output"]) for u in f["unsupported"]} for f in report["functions"]}
    plans = {}
    for function in structure["functions"]:
        types = {value["name"]: value["type"] for value in function["inputs"]}
        ops: List[Any] = []
        _walk(function["block"], (), types, ops)
        flops = [estimate_flops(op, types) for _, op in ops]
        total = sum(flops)
        missing = unsupported.get(function["name"], set())
        placed = _placements(path, function["name"], backend) if not missing else {}
        planned = []
        for (path_, op), f in zip(ops, flops):
            first = op["outputs"][0]["name"] if op["outputs"] else ""
            # Nested ops run inside their parent (cond, while_loop), on our kernels.
            where, region, reason = op_backend(op["type"], op["name"], first, missing,
                                               placed if len(path_) == 1 else None)
            planned.append(PlannedOp(
                function=function["name"], path=path_, op_type=op["type"], name=op["name"],
                outputs=tuple(o["name"] for o in op["outputs"]), device=CPU, backend=where,
                flops=f, weight=(f / total) if total else 0.0, region=region, reason=reason))
        plans[function["name"]] = planned
    return plans


__all__ = ["CPU", "PlannedOp", "compute_plan", "estimate_flops", "op_backend"]
