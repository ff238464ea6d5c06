"""Settings of ``coremlrt serve``: limits, batching and sequences, and which models to serve."""

import dataclasses
import os
from typing import Optional

from ..model import Error

MODEL_SUFFIXES = (".mlpackage", ".mlmodelc", ".mlmodel")


@dataclasses.dataclass
class ServeConfig:
    """What one server process does; every field has a ``coremlrt serve`` option."""

    host: str = "127.0.0.1"
    http_port: int = 8080
    grpc_port: int = 8081
    metrics_port: int = 8082
    # Predictions of one model that run at once (threads, each with its own execution context).
    workers: int = 1
    # Requests merged into one prediction at most, and how long the first waits for others.
    max_batch: int = 16
    max_wait_ms: float = 0.0
    # Requests of one model waiting for a worker; past it a request gets 503.
    max_queue: int = 256
    # Largest REST body or gRPC message accepted (413 / RESOURCE_EXHAUSTED past it).
    max_request_bytes: int = 64 * 1024 * 1024
    # Live stateful sequences per model, and the idle time after which one is dropped
    # (docs/design/serving.md, "Sequences": why 1 s).
    max_sequences: int = 64
    sequence_timeout_s: float = 1.0
    # Merge requests of a model with a flexible batch dimension (else run them side by side).
    merge: bool = True
    backend: Optional[str] = None
    threads: Optional[int] = None
    log_format: str = "json"
    # Seconds a client is told to wait after a 503.
    retry_after_s: int = 1
    # Model control (repository load/unload) is off unless a token is given; requests carry it
    # as "Authorization: Bearer TOKEN".
    admin_token: Optional[str] = None
    # Language models (coremlrt.llm) are also served under the OpenAI API; their tokenizer
    # folder (default: the folder beside each model, when it holds tokenizer.json).
    tokenizer: Optional[str] = None

    def runtime_options(self):
        """The fields each served model reads (served_model.py), as plain values."""
        keys = ("workers", "max_batch", "max_wait_ms", "max_queue", "max_sequences", "sequence_timeout_s", "merge",
                "backend", "threads", "retry_after_s")
        return {key: getattr(self, key) for key in keys}

    def check(self):
        for key in ("workers", "max_batch", "max_queue", "max_request_bytes", "max_sequences"):
            if getattr(self, key) < 1:
                raise Error(f"--{key.replace('_', '-')} must be at least 1, got {getattr(self, key)}")
        if self.max_wait_ms < 0 or self.sequence_timeout_s <= 0:
            raise Error("--max-wait-ms must be >= 0 and --sequence-timeout must be > 0")
        if self.log_format not in ("json", "text"):
            raise Error(f"--log-format is json or text, not {self.log_format!r}")


def discover_models(path):
    """{served name: model path} for one model (named after its file) or a folder of models
    (each .mlpackage, .mlmodelc or .mlmodel directly inside it)."""
    path = os.path.abspath(os.path.expanduser(path))
    if not os.path.exists(path):
        raise Error(f"no model or folder at {path}")
    if path.endswith(MODEL_SUFFIXES):
        return {_name(path): path}
    if not os.path.isdir(path):
        raise Error(f"{path} is neither a model ({', '.join(MODEL_SUFFIXES)}) nor a folder of models")
    models = {}
    for entry in sorted(os.listdir(path)):
        if entry.endswith(MODEL_SUFFIXES):
            name = _name(entry)
            if name in models:
                raise Error(f"two models in {path} would both be served as '{name}'")
            models[name] = os.path.join(path, entry)
    if not models:
        raise Error(f"folder {path} holds no model ({', '.join(MODEL_SUFFIXES)})")
    return models


def _name(path):
    base = os.path.basename(path.rstrip(os.sep))
    for suffix in MODEL_SUFFIXES:
        if base.endswith(suffix):
            return base[: -len(suffix)]
    return base
