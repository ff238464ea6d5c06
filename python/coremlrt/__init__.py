"""coremlrt: run Core ML models (.mlpackage ML programs) on Linux.

    import coremlrt
    model = coremlrt.MLModel("model.mlpackage")
    outputs = model.predict({"x": array})
"""

from ._core import Error, available_backends
from .batch import BatchResult, predict_dataset
from .model import ComputeUnit, MLModel, MLState

# coremlrt.dask and coremlrt.ray are imported on demand: they need the optional extras.
__all__ = ["BatchResult", "ComputeUnit", "Error", "MLModel", "MLState", "available_backends", "predict_dataset"]
__version__ = "0.1.0"
