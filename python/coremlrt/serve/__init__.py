"""``coremlrt serve``: Core ML models over the Open Inference Protocol (KServe V2), REST and gRPC.

Built on MLServer (docs/design/serving.md says why): MLServer runs the HTTP and gRPC servers,
health and metadata endpoints, Prometheus metrics and logs; :class:`runtime.CoreMLRuntime`
runs the predictions, with dynamic batching (batching.py) and stateful sequences
(sequences.py). Needs the ``serve`` extra (``pip install coremlrt[serve]``).

    coremlrt serve model.mlpackage --port 8080 --grpc-port 8081
"""

from .config import ServeConfig, discover_models

__all__ = ["ServeConfig", "discover_models"]
