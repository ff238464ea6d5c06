"""coremlrt: run Core ML models (.mlpackage, .mlmodel, compiled .mlmodelc) on Linux.

    import coremlrt
    model = coremlrt.MLModel("model.mlpackage")
    outputs = model.predict({"x": array})

Our own kernels split large ops over one process-wide thread pool shared by every model:
set_num_threads(n) sets its size (1: every op on the calling thread; 0: the default, the
COREMLRT_NUM_THREADS environment variable or else the machine's cores), num_threads() reads
it. MLModel(..., threads=n) caps what one prediction of that model takes from it.

    compiled = coremlrt.compile_model("model.mlpackage", "model.mlmodelc")
"""

from typing import Any

try:
    from . import _core  # noqa: F401
except ImportError as _error:
    # openvino installed in another folder of sys.path than coremlrt: _openvino_libs.py.
    from ._openvino_libs import preload

    if not preload(_error):
        raise
    del preload
# Error is the base class of every engine error; its subclasses say what kind it is (their `kind`:
# "bad_model", "unsupported", "bad_input", "resource_limit", "internal"; docs/guide/limits-and-errors.md).
from ._core import (BadInputError, BadModelError, Error, InternalError, ResourceLimitError, UnsupportedError,
                    available_backends, num_threads, set_num_threads, state_traffic)
from .batch import BatchResult, predict_dataset
from .compiled import compile_model
from .model import ComputeUnit, MLModel, MLState

# coremlrt.dask, coremlrt.ray, coremlrt.serve, coremlrt.onnx_export and coremlrt.llm are imported
# on demand: they need the optional extras. export_onnx, export_onnx_functions and generate
# (coremlrt.llm.generate) are reached from here, imported when first used.
__all__ = ["BadInputError", "BadModelError", "BatchResult", "ComputeUnit", "Error", "InternalError", "MLModel",
           "MLState", "ResourceLimitError", "UnsupportedError", "available_backends", "compile_model",
           "export_onnx", "export_onnx_functions", "generate", "num_threads", "predict_dataset", "set_num_threads",
           "state_traffic"]
__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in ("export_onnx", "export_onnx_functions"):
        from . import onnx_export

        return getattr(onnx_export, name)
    if name == "generate":
        from .llm import generate

        return generate
    raise AttributeError(f"module 'coremlrt' has no attribute '{name}'")
