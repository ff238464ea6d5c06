"""``coremlrt serve``: Core ML models over the Open Inference Protocol (KServe V2, with Triton's
extensions), REST and gRPC.

The protocol layer is our own (docs/design/serving.md says why): http_app.py (an ASGI
application on uvicorn) with rest_routes.py, grpc_server.py (grpc.aio, messages from
protocol/grpc_inference.proto); served_model.py runs the predictions, with dynamic batching
(batching.py) and stateful sequences (sequences.py); repository.py holds the served models.
Needs the ``serve`` extra (``pip install coremlrt[serve]``).

    coremlrt serve model.mlpackage --port 8080 --grpc-port 8081
"""

from .config import ServeConfig, discover_models

__all__ = ["ServeConfig", "discover_models"]
