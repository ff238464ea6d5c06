"""``coremlrt.ray.predictor`` (Ray Data) and ``coremlrt.ray.serve_deployment`` (Ray Serve).

The code lives with the rest of batch prediction, in coremlrt.batch.ray; this module keeps the
name users import (``import coremlrt.ray``, docs/guide/batch.md and docs/guide/serving.md).
Needs the ``ray`` extra.
"""

from .batch.ray import predictor, serve_deployment

__all__ = ["predictor", "serve_deployment"]
