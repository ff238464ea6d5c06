"""The HTTP layer other APIs build on (serve/http_app.py), driven in process as uvicorn drives
it: routes with parameters, streaming answers (server-sent events), error bodies, body limits."""

import asyncio
import json

from coremlrt.serve.errors import RequestError
from coremlrt.serve.http_app import App, Response, Router, StreamingResponse


def _call(app, method, path, body=b"", headers=()):
    sent = []
    pieces = [body[i:i + 7] for i in range(0, len(body), 7)] or [b""]

    async def receive():
        if pieces:
            piece = pieces.pop(0)
            return {"type": "http.request", "body": piece, "more_body": bool(pieces)}
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "query_string": b"",
             "headers": [(b"content-length", str(len(body)).encode()), *headers]}
    asyncio.run(app(scope, receive, send))
    status = sent[0]["status"]
    return status, dict(sent[0]["headers"]), b"".join(m.get("body", b"") for m in sent[1:]), sent


def _app():
    router = Router()

    async def echo(request):
        return Response.json({"model": request.params["model"], "body": json.loads(request.body)})

    async def events(request):
        async def chunks():
            for i in range(3):
                yield f"data: {i}\n\n".encode()
            yield b"data: [DONE]\n\n"
        return StreamingResponse(chunks())

    async def refuse(request):
        raise RequestError("no such thing here", 404)

    router.add("POST", "/v2/models/{model}/echo", echo)
    router.add("POST", "/v1/completions", events)
    router.add("GET", "/refuse", refuse)
    return App(router, max_body_bytes=64)


def test_routes_streaming_and_errors():
    app = _app()
    status, headers, body, _ = _call(app, "POST", "/v2/models/tiny/echo", b'{"a": [1, 2]}')
    assert status == 200 and json.loads(body) == {"model": "tiny", "body": {"a": [1, 2]}}
    status, headers, body, sent = _call(app, "POST", "/v1/completions", b"{}")
    assert status == 200 and headers[b"content-type"] == b"text/event-stream"
    assert body == b"data: 0\n\ndata: 1\n\ndata: 2\n\ndata: [DONE]\n\n"
    assert len(sent) == 6  # the head, four events as they came, the end
    for method, path, want in (("GET", "/refuse", 404), ("GET", "/nowhere", 404),
                               ("GET", "/v2/models/tiny/echo", 405)):
        status, headers, body, _ = _call(app, method, path)
        assert status == want and set(json.loads(body)) == {"error"}
    status, headers, body, _ = _call(app, "POST", "/v1/completions", b"x" * 65)
    assert status == 413 and "over the limit of 64" in json.loads(body)["error"]
