"""The HTTP side of ``coremlrt serve``: a small ASGI application (run by uvicorn) with a route
table, request-size limits, and one way to answer errors.

Routes are added in one place, :class:`Router` (server.py builds it: rest_routes.py adds the
Open Inference Protocol's routes, and any other API adds its own the same way)::

    router.add("POST", "/v1/completions", handler)            # handler(request) -> Response
    router.add("GET", "/v2/models/{model}/stats", handler)    # request.params["model"]

A handler is ``async def handler(request: Request) -> Response``; a :class:`StreamingResponse`
sends its body from an async iterator of bytes as it is produced (server-sent events:
``StreamingResponse(events(), content_type="text/event-stream")``), and the handler learns that
the client went away from ``await request.disconnected()``. Whatever a handler raises is
answered by :func:`error_response`: a status from errors.classify and ``{"error": message}``.
A 4xx is logged as one line at INFO, a 5xx at ERROR with its traceback.

The body of a request is read whole before its handler runs, up to ``max_body_bytes``: past it
(by Content-Length, or counted for a chunked body) the answer is 413 without reading more
than a bounded amount.
"""

import json
import logging
import re
import time

from .errors import RequestError, classify

logger = logging.getLogger("coremlrt.serve")

_JSON = [(b"content-type", b"application/json")]
# Oversized bodies up to this many times the limit are read (and dropped) before the 413.
_DRAIN_FACTOR = 64


class Request:
    __slots__ = ("method", "path", "params", "headers", "query", "body", "_receive", "arrived")

    def __init__(self, method, path, params, headers, query, body, receive, arrived):
        self.method, self.path, self.params, self.headers = method, path, params, headers
        self.query, self.body, self._receive, self.arrived = query, body, receive, arrived

    def header(self, name, default=None):
        """A request header as text (names are case-insensitive), or ``default``."""
        value = self.headers.get(name.lower().encode())
        return value.decode("latin-1") if value is not None else default

    async def disconnected(self):
        """Waits until the client closes the connection (for streaming handlers)."""
        while True:
            message = await self._receive()
            if message["type"] == "http.disconnect":
                return


class Response:
    __slots__ = ("status", "headers", "body")

    def __init__(self, body=b"", status=200, headers=None, content_type=None):
        self.status, self.body = status, body
        self.headers = list(headers or [])
        if content_type:
            self.headers.append((b"content-type", content_type.encode()))

    @classmethod
    def json(cls, value, status=200, headers=None):
        return cls(json.dumps(value, separators=(",", ":")).encode(), status, list(headers or []) + _JSON)


class StreamingResponse(Response):
    """A body sent as ``chunks`` (an async iterator of bytes) yields it, chunked."""

    __slots__ = ("chunks",)

    def __init__(self, chunks, status=200, headers=None, content_type="text/event-stream"):
        super().__init__(b"", status, headers, content_type)
        self.chunks = chunks


class Router:
    """Method + path pattern -> handler; ``{name}`` in a pattern matches one path segment."""

    def __init__(self):
        self._exact = {}
        self._patterns = []

    def add(self, method, pattern, handler):
        if "{" not in pattern:
            self._exact[(method, pattern)] = handler
            return
        regex = re.compile("^" + re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", pattern) + "$")
        self._patterns.append((method, regex, handler))

    def match(self, method, path):
        """(handler, params), or raises 404 / 405."""
        handler = self._exact.get((method, path))
        if handler is not None:
            return handler, {}
        allowed = False
        for route_method, regex, handler in self._patterns:
            found = regex.match(path)
            if found:
                if route_method == method:
                    return handler, found.groupdict()
                allowed = True
        if allowed or any(p == path for _, p in self._exact):
            raise RequestError(f"{method} is not allowed on {path}", 405)
        raise RequestError(f"no such endpoint: {method} {path}", 404)


def error_response(exc, paths=None):
    status, message, traceback = classify(exc, paths)
    headers = list(getattr(exc, "headers", {}).items())
    if status == 503 and not any(k.lower() == "retry-after" for k, _ in headers):
        headers.append(("Retry-After", "1"))
    if traceback:
        logger.error("request failed: %s", message, exc_info=exc)
    else:
        logger.info("request refused (%d): %s", status, message)
    return Response.json({"error": message}, status, [(k.lower().encode(), str(v).encode()) for k, v in headers])


class App:
    """The ASGI application: reads the body (within the limit), routes, answers."""

    def __init__(self, router, max_body_bytes, paths=None):
        self.router, self.max_body_bytes, self.paths = router, max_body_bytes, paths or {}

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        arrived = time.perf_counter()
        try:
            handler, params = self.router.match(scope["method"], scope["path"])
            headers = dict(scope["headers"])
            body = await self._read_body(headers, receive)
            request = Request(scope["method"], scope["path"], params, headers, scope.get("query_string", b""), body,
                              receive, arrived)
            response = await handler(request)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an answer
            response = error_response(exc, self.paths)
        await self._send(response, send)

    async def _read_body(self, headers, receive):
        declared = headers.get(b"content-length")
        if declared is not None:
            try:
                size = int(declared)
            except ValueError:
                raise RequestError("Content-Length is not a number") from None
            if size > self.max_body_bytes:
                if size <= _DRAIN_FACTOR * self.max_body_bytes:
                    # Read and drop the body first: a client still sending when the connection
                    # closes sees a broken pipe instead of the 413.
                    while (await receive()).get("more_body"):
                        pass
                raise RequestError(self._over(size), 413)
        chunks, size = [], 0
        # A body of declared length is copied into one buffer as it arrives, each piece let go
        # at once: the request holds one copy of its body, never the pieces and their join.
        buffer = bytearray(int(declared)) if declared is not None else None
        while True:
            message = await receive()
            if message["type"] != "http.request":
                raise RequestError("the client went away", 499)
            chunk = message.get("body", b"")
            if chunk:
                if size + len(chunk) > self.max_body_bytes:
                    raise RequestError(self._over(size + len(chunk)), 413)
                if buffer is not None and size + len(chunk) <= len(buffer):
                    buffer[size:size + len(chunk)] = chunk
                else:
                    if buffer is not None:  # more than declared: the server refuses that earlier
                        raise RequestError("the body is longer than its Content-Length")
                    chunks.append(chunk)
                size += len(chunk)
            if not message.get("more_body"):
                break
        if buffer is not None:
            if size != len(buffer):
                raise RequestError(f"the body ended after {size} of its {len(buffer)} bytes")
            return buffer if size > 65536 else bytes(buffer)  # small bodies: bytes, read faster
        return chunks[0] if len(chunks) == 1 else b"".join(chunks)

    def _over(self, size):
        return f"request body of {size}+ bytes is over the limit of {self.max_body_bytes} (--max-request-bytes)"

    @staticmethod
    async def _send(response, send):
        if isinstance(response, StreamingResponse):
            await send({"type": "http.response.start", "status": response.status, "headers": response.headers})
            try:
                async for chunk in response.chunks:
                    await send({"type": "http.response.body", "body": chunk, "more_body": True})
                await send({"type": "http.response.body", "body": b""})
            except OSError:  # the client went away mid-stream: stop producing (uvicorn's ClientDisconnected)
                pass
            finally:
                close = getattr(response.chunks, "aclose", None)
                if close is not None:
                    await close()
            return
        body = response.body
        if isinstance(body, list):  # pieces sent as one body (a binary answer's header and tensors)
            length = sum(len(piece) for piece in body)
            headers = response.headers + [(b"content-length", str(length).encode())]
            await send({"type": "http.response.start", "status": response.status, "headers": headers})
            for piece in body[:-1]:
                await send({"type": "http.response.body", "body": piece, "more_body": True})
            await send({"type": "http.response.body", "body": body[-1] if body else b""})
            return
        headers = response.headers + [(b"content-length", str(len(body)).encode())]
        await send({"type": "http.response.start", "status": response.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})
