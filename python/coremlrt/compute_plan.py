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
floating-point operations (FLOPs), computed from the types the program declares with the costs
that the ops' registry entries declare (src/ops/op_cost.h; the OpenVINO backend's cost rule reads
the same ones, through ``_core.model_structure``'s ``macs``, ``elements`` and
``evaluated_at_load``):

* ops with matrix work (matrix products, convolutions, attention, recurrent layers): twice their
  multiply-adds;
* ``const`` and ``constexpr_*``: 0 (evaluated once, when the model loads);
* every other op (elementwise, activations, reductions, normalization, layout): one
  operation per element of its largest input or output.

Dimensions unknown until prediction count as 16, as in the backends' cost rule. Estimates of
data-movement ops are coarse; the weights order ops by arithmetic, they are not timings.
"""

import dataclasses
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


def estimate_flops(op):
    """Estimated floating-point operations of one op of ``_core.model_structure`` (see the module
    docstring)."""
    if op["evaluated_at_load"]:
        return 0
    if op["macs"]:
        return int(2 * op["macs"])
    return int(op["elements"])


def _walk(block, path, out):
    for index, op in enumerate(block["operations"]):
        out.append((path + (index,), op))
        for b, nested in enumerate(op["blocks"]):
            _walk(nested, path + (index, b), out)


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
        ops: List[Any] = []
        _walk(function["block"], (), ops)
        flops = [estimate_flops(op) for _, op in ops]
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
