"""coremlrt: run Core ML models (.mlpackage ML programs) on Linux.

    import coremlrt
    model = coremlrt.MLModel("model.mlpackage")
    outputs = model.predict({"x": array})
"""

from ._core import Error, available_backends
from .model import ComputeUnit, MLModel, MLState

__all__ = ["ComputeUnit", "Error", "MLModel", "MLState", "available_backends"]
__version__ = "0.1.0"
