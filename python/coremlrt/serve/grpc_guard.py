"""A malformed gRPC message gets INVALID_ARGUMENT naming the parse error.

gRPC parses a request before any handler runs, and grpcio answers a message that does not
parse with UNKNOWN. MLServer registers its servicer through one function
(``add_GRPCInferenceServiceServicer_to_server``); :func:`install` wraps it so that every
unary method's deserializer hands a parse failure to the method, which aborts with
INVALID_ARGUMENT. MLServer also maps only 400/404/422/500 to gRPC codes; 413 and 503 are
added (RESOURCE_EXHAUSTED, UNAVAILABLE).

Raw tensors (``raw_input_contents``, tritonclient's gRPC default) are handed to the runtime
as the bytes they are (features.py reads them with ``np.frombuffer``): MLServer would unpack
each value into a Python list with ``struct`` first.
"""

import grpc


class _Malformed:
    def __init__(self, message):
        self.message = message


def _guarded(handler):
    if handler is None or handler.request_streaming or handler.response_streaming:
        return handler
    parse, behavior = handler.request_deserializer, handler.unary_unary

    def deserialize(data):
        try:
            return parse(data)
        except Exception as exc:  # noqa: BLE001 - any parse failure is the client's message
            return _Malformed(f"{type(exc).__name__}: {exc}")

    async def guarded_behavior(request, context):
        if isinstance(request, _Malformed):
            await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed request message: {request.message}")
        return await behavior(request, context)

    return handler._replace(request_deserializer=deserialize, unary_unary=guarded_behavior)


class _GuardedGeneric(grpc.GenericRpcHandler):
    def __init__(self, inner):
        self.inner = inner

    def service(self, handler_call_details):
        return _guarded(self.inner.service(handler_call_details))


class _GuardedServer:
    """What add_GRPCInferenceServiceServicer_to_server sees as the server."""

    def __init__(self, server):
        self.server = server

    def add_generic_rpc_handlers(self, handlers):
        self.server.add_generic_rpc_handlers(tuple(_GuardedGeneric(h) for h in handlers))

    def add_registered_method_handlers(self, service, handlers):
        self.server.add_registered_method_handlers(service, {k: _guarded(v) for k, v in handlers.items()})


def _inject_raw_bytes(elems, raw_contents):
    """mlserver.raw.inject_raw, keeping numeric tensors as bytes (BYTES ones as MLServer does)."""
    from mlserver.raw import unpack
    from mlserver.types import TensorData

    index = 0
    for elem in elems:
        if not elem.data:
            if index >= len(raw_contents):
                break  # fewer raw entries than inputs: the runtime reports the empty input
            raw = raw_contents[index]
            elem.data = TensorData(unpack(elem, raw) if elem.datatype == "BYTES" else bytes(raw))
            index += 1
    return elems


def install():
    from mlserver.grpc import converters
    from mlserver.grpc import server as grpc_server
    from mlserver.grpc import utils

    converters.inject_raw = _inject_raw_bytes

    utils.STATUS_CODE_MAPPING.setdefault(413, grpc.StatusCode.RESOURCE_EXHAUSTED)
    utils.STATUS_CODE_MAPPING.setdefault(503, grpc.StatusCode.UNAVAILABLE)
    original = grpc_server.add_GRPCInferenceServiceServicer_to_server
    if getattr(original, "coremlrt_guarded", False):
        return

    def add(servicer, server):
        original(servicer, _GuardedServer(server))

    add.coremlrt_guarded = True
    grpc_server.add_GRPCInferenceServiceServicer_to_server = add
