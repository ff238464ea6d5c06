"""Triton's binary tensor extension for REST, which MLServer does not read (and JSON bodies
whatever their content type).

tritonclient's http client sends each tensor as raw bytes after the JSON header
(``Inference-Header-Content-Length`` says where the JSON ends; each input's
``parameters.binary_data_size`` says how many bytes are its). This ASGI middleware hands
MLServer the JSON header alone, each binary input's ``data`` empty and its parameters naming
a one-time token under which the bytes wait in :data:`PENDING` (features.py takes them from
there with ``np.frombuffer``: no list of Python floats on the way). The tokens of a request are
dropped when its answer is sent. Answers stay JSON, which tritonclient reads as well (it asks
for binary outputs, and falls back to an output's ``data`` when none came).
"""

import json
import secrets

import numpy as np

_DTYPES = {"FP32": "<f4", "FP16": "<f2", "FP64": "<f8", "INT8": "i1", "INT16": "<i2", "INT32": "<i4",
           "INT64": "<i8", "UINT8": "u1", "UINT16": "<u2", "UINT32": "<u4", "UINT64": "<u8", "BOOL": "?"}


# token -> raw bytes of one binary input, from the middleware to the runtime (one process).
PENDING: dict[str, bytes] = {}
TOKEN_PARAMETER = "coremlrt_binary_token"


class BadBinaryBody(ValueError):
    pass


def to_json_body(body, header_length, tokens):
    """The JSON header of a binary-extension body, each binary input's bytes left in
    :data:`PENDING` under a new token (appended to ``tokens``)."""
    if header_length < 0 or header_length > len(body):
        raise BadBinaryBody(f"Inference-Header-Content-Length {header_length} is outside the body "
                            f"of {len(body)} bytes")
    try:
        request = json.loads(body[:header_length])
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadBinaryBody(f"the JSON header is not valid JSON: {exc}") from None
    if not isinstance(request, dict):
        raise BadBinaryBody("the JSON header is not an object")
    offset = header_length
    for item in request.get("inputs") or []:
        parameters = item.get("parameters") if isinstance(item, dict) else None
        if not isinstance(parameters, dict) or "binary_data_size" not in parameters:
            continue
        size = parameters.pop("binary_data_size")
        if not isinstance(size, int) or size < 0 or offset + size > len(body):
            raise BadBinaryBody(f"input {item.get('name')!r}: binary_data_size {size!r} runs past the body")
        dtype = _DTYPES.get(item.get("datatype"))
        if dtype is None:
            raise BadBinaryBody(f"input {item.get('name')!r}: binary data of datatype {item.get('datatype')!r} "
                                f"is not supported")
        if size % np.dtype(dtype).itemsize:
            raise BadBinaryBody(f"input {item.get('name')!r}: {size} bytes is not a whole number of "
                                f"{item.get('datatype')} values")
        token = secrets.token_hex(16)
        PENDING[token] = body[offset:offset + size]
        tokens.append(token)
        parameters[TOKEN_PARAMETER] = token
        item["data"] = []
        offset += size
    if offset != len(body):
        raise BadBinaryBody(f"{len(body) - offset} bytes after the last binary input")
    # Answers come back as JSON; tritonclient reads an output's data from there.
    for item in request.get("outputs") or []:
        if isinstance(item, dict) and isinstance(item.get("parameters"), dict):
            item["parameters"].pop("binary_data", None)
    if isinstance(request.get("parameters"), dict):
        request["parameters"].pop("binary_data_output", None)
    return json.dumps(request).encode()


class TritonBinaryTensors:
    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        headers = [(k, v) for k, v in scope.get("headers") or []]
        marker = next((v for k, v in headers if k == b"inference-header-content-length"), None)
        if marker is None:
            if scope.get("method") == "POST":
                # The protocol's bodies are JSON whatever the client labels them (curl -d says
                # form data), and FastAPI would not parse another content type.
                headers = [(k, v) for k, v in headers if k != b"content-type"]
                headers.append((b"content-type", b"application/json"))
                scope = dict(scope, headers=headers)
            return await self.app(scope, receive, send)
        chunks = []
        while True:
            message = await receive()
            if message["type"] != "http.request":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        tokens = []
        try:
            body = to_json_body(b"".join(chunks), int(marker), tokens)
        except (BadBinaryBody, ValueError) as exc:
            for token in tokens:
                PENDING.pop(token, None)
            return await _reply(send, 400, f"binary tensor request: {exc}")
        dropped = (b"inference-header-content-length", b"content-length", b"content-type")
        headers = [(k, v) for k, v in headers if k not in dropped]
        headers += [(b"content-length", str(len(body)).encode()), (b"content-type", b"application/json")]
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        try:
            await self.app(dict(scope, headers=headers), replay, send)
        finally:
            for token in tokens:
                PENDING.pop(token, None)


async def _reply(send, status, message):
    body = json.dumps({"error": message}).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
