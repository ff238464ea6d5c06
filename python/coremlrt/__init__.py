"""coremlrt: run Core ML models (.mlpackage, .mlmodel, compiled .mlmodelc) on Linux.

    import coremlrt
    model = coremlrt.MLModel("model.mlpackage")
    outputs = model.predict({"x": array})
    compiled = coremlrt.compile_model("model.mlpackage", "model.mlmodelc")
"""

from ._core import Error
from .compiled import compile_model
from .model import ComputeUnit, MLModel, MLState

__all__ = ["ComputeUnit", "Error", "MLModel", "MLState", "compile_model"]
__version__ = "0.1.0"
