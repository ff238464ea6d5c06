"""Starts MLServer with a :class:`~.runtime.CoreMLRuntime` per model, and adds what MLServer
leaves open: a request-size limit and a ``Retry-After`` header on 503 for REST, gRPC status
codes for 413 and 503, and Triton's binary tensor extension for REST (tritonclient's http
client sends tensors that way by default; rest_binary.py)."""

import asyncio
import json
import logging

from .config import ServeConfig, discover_models

logger = logging.getLogger("mlserver.coremlrt")


def build_settings(config: ServeConfig, models):
    from mlserver.settings import ModelParameters, ModelSettings, Settings

    from .runtime import CoreMLRuntime

    settings = Settings(
        host=config.host, http_port=config.http_port, grpc_port=config.grpc_port,
        metrics_port=config.metrics_port, debug=False,
        # Inference stays in this process: MLServer's worker processes would give each its own
        # copy of a sequence's state, and requests of one sequence could land on different ones.
        parallel_workers=0,
        load_models_at_startup=False, use_structured_logging=config.log_format == "json",
        grpc_max_message_length=config.max_request_bytes,
    )
    model_settings = [
        ModelSettings(name=name, implementation=CoreMLRuntime, max_batch_size=0, max_batch_time=0,
                      parameters=ModelParameters(uri=path, extra=config.runtime_options()))
        for name, path in models.items()]
    return settings, model_settings


class _TooLarge(Exception):
    pass


class RequestLimits:
    """ASGI middleware: refuses a body over ``max_bytes`` with 413 (by Content-Length, or while
    a chunked body streams in) and adds ``Retry-After`` to 503 answers."""

    def __init__(self, app, max_bytes, retry_after_s):
        self.app, self.max_bytes, self.retry_after = app, max_bytes, str(retry_after_s).encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        try:
            declared = int(headers.get(b"content-length", b"0"))
        except ValueError:
            return await _send_error(send, 400, "Content-Length is not a number")
        if declared > self.max_bytes:
            return await _send_error(send, 413, self._message(declared))
        received = 0
        started = False

        async def limited_receive():
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.max_bytes:
                    raise _TooLarge()
            return message

        async def marked_send(message):
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
                if message["status"] == 503:
                    message = dict(message, headers=list(message.get("headers", [])) +
                                   [(b"retry-after", self.retry_after)])
            await send(message)

        try:
            await self.app(scope, limited_receive, marked_send)
        except _TooLarge:
            if not started:
                await _send_error(send, 413, self._message(received))

    def _message(self, size):
        return f"request body of {size}+ bytes is over the limit of {self.max_bytes} (--max-request-bytes)"


async def _send_error(send, status, message):
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


def _map_grpc_status_codes():
    """MLServer maps only 400/404/422/500 to gRPC codes (the rest become UNKNOWN)."""
    import grpc
    from mlserver.grpc import utils

    utils.STATUS_CODE_MAPPING.setdefault(413, grpc.StatusCode.RESOURCE_EXHAUSTED)
    utils.STATUS_CODE_MAPPING.setdefault(503, grpc.StatusCode.UNAVAILABLE)


async def serve(config: ServeConfig, models=None, ready=None):
    """Serves until SIGINT/SIGTERM. ``ready`` (an asyncio.Event) is set once every model is loaded."""
    from mlserver import MLServer

    from .rest_binary import TritonBinaryTensors

    models = models or {}
    settings, model_settings = build_settings(config, models)
    _map_grpc_status_codes()
    server = MLServer(settings)
    app = server._rest_server._app  # MLServer has no public hook for ASGI middleware
    app.add_middleware(TritonBinaryTensors)
    app.add_middleware(RequestLimits, max_bytes=config.max_request_bytes, retry_after_s=config.retry_after_s)
    logger.info("serving %s on http://%s:%d (REST), %s:%d (gRPC), metrics on :%d", sorted(models), config.host,
                config.http_port, config.host, config.grpc_port, config.metrics_port)
    await server.start(model_settings)


def main(path, config: ServeConfig):
    config.check()
    models = discover_models(path)
    try:
        import mlserver  # noqa: F401
    except ImportError as exc:
        raise ImportError(f"coremlrt serve needs MLServer: pip install 'coremlrt[serve]' ({exc})") from None
    from mlserver.utils import install_uvloop_event_loop

    install_uvloop_event_loop()
    asyncio.run(serve(config, models))
    return 0
