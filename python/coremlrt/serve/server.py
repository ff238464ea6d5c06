"""Starts MLServer with a :class:`~.runtime.CoreMLRuntime` per model, and adds what MLServer
leaves open: a request-size limit and a ``Retry-After`` header on 503 for REST, gRPC status
codes for 413 and 503 and for malformed messages (grpc_guard.py), and Triton's binary tensor
extension for REST (tritonclient's http client sends tensors that way by default;
rest_binary.py)."""

import asyncio
import json
import logging

from ..model import Error
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


# Oversized bodies up to this many times the limit are read (and dropped) before the 413.
_DRAIN_FACTOR = 64


class RequestLimits:
    """ASGI middleware: refuses a body over ``max_bytes`` with 413 (by Content-Length, or by
    reading a chunked body, which has none, up to the limit first) and adds ``Retry-After``
    to 503 answers."""

    def __init__(self, app, max_bytes, retry_after_s):
        self.app, self.max_bytes, self.retry_after = app, max_bytes, str(retry_after_s).encode()

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = dict(scope.get("headers") or [])
        if b"content-length" in headers:
            try:
                declared = int(headers[b"content-length"])
            except ValueError:
                return await _send_error(send, 400, "Content-Length is not a number")
            if declared > self.max_bytes:
                if declared <= _DRAIN_FACTOR * self.max_bytes:
                    # Read and drop the body first: a client still sending when the connection
                    # closes sees a broken pipe instead of the 413.
                    while (await receive()).get("more_body"):
                        pass
                return await _send_error(send, 413, self._message(declared))
        elif scope.get("method") in ("POST", "PUT"):
            # The server checks a declared length; a chunked body is counted here, before the
            # application sees it (an error raised while FastAPI reads would become a 400).
            chunks, size = [], 0
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return
                chunks.append(message.get("body", b""))
                size += len(chunks[-1])
                if size > self.max_bytes:
                    return await _send_error(send, 413, self._message(size))
                if not message.get("more_body"):
                    break
            receive = _replay(b"".join(chunks), receive)

        async def marked_send(message):
            if message["type"] == "http.response.start" and message["status"] == 503 and not any(
                    k.lower() == b"retry-after" for k, _ in message.get("headers", [])):
                message = dict(message, headers=list(message.get("headers", [])) + [(b"retry-after", self.retry_after)])
            await send(message)

        await self.app(scope, receive, marked_send)

    def _message(self, size):
        return f"request body of {size}+ bytes is over the limit of {self.max_bytes} (--max-request-bytes)"


def _replay(body, receive):
    sent = False

    async def replay():
        nonlocal sent
        if sent:
            return await receive()  # waits for the client's disconnect, as Starlette expects
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def _send_error(send, status, message):
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})


async def serve(config: ServeConfig, models):
    """Serves ``models`` ({name: path}) until SIGINT/SIGTERM."""
    from mlserver import MLServer

    from . import grpc_guard
    from .rest_binary import TritonBinaryTensors

    from ..llm.openai_service import OpenAIService
    from .openai_routes import OpenAIRoutes, language_models

    settings, model_settings = build_settings(config, models)
    grpc_guard.install()
    server = MLServer(settings)
    app = server._rest_server._app  # MLServer has no public hook for ASGI middleware
    app.add_middleware(TritonBinaryTensors)
    llms = language_models(models, config.tokenizer, backend=config.backend, threads=config.threads)
    if llms:
        app.add_middleware(OpenAIRoutes, service=OpenAIService(llms, config.max_sequences, config.retry_after_s))
    app.add_middleware(RequestLimits, max_bytes=config.max_request_bytes, retry_after_s=config.retry_after_s)
    logger.info("serving %s on http://%s:%d (REST), %s:%d (gRPC), metrics on :%d", sorted(models), config.host,
                config.http_port, config.host, config.grpc_port, config.metrics_port)
    await server.start(model_settings)
    # MLServer logs a model that fails to load and stops; say so in the exit status too.
    from .runtime import LOADED

    failed = sorted(set(models) - LOADED)
    if failed:
        raise Error(f"model(s) {failed} failed to load (the log above says why)")


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
