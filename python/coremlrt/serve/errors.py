"""What a failed request is told, over REST and gRPC: one status per kind of failure.

Every failure a handler meets goes through :func:`classify`, which gives the HTTP status, the
message the client sees and whether the server logs a traceback:

* :class:`RequestError`: the server's own checks (a wrong shape, an unknown model, a full
  queue...), with the status it carries;
* ``coremlrt.Error`` from the engine: by its ``kind`` attribute (``bad_input`` when it has none,
  as every engine error had before the kinds existed): :data:`ENGINE_KIND_STATUS`;
* anything else is a bug of the server: 500, logged with its traceback.

:data:`GRPC_CODES` turns the HTTP status into the gRPC code, so that both transports answer one
failure alike. The message never shows the server's files: :func:`scrub` replaces the paths of
the served models with their served names and drops any other absolute path.
"""

import re

import grpc

from ..model import Error


class RequestError(Exception):
    """A request the server refuses: answered with ``status`` (400 unless said) and this message."""

    def __init__(self, message, status=400, headers=None):
        super().__init__(message)
        self.status = status
        self.headers = headers or {}


# coremlrt.Error.kind -> HTTP status. A bad input is the client's to fix (400); a model the
# engine cannot run is no fault of the request, and retrying will not help (422: the request
# was understood, the model cannot process it); a resource limit (the memory limit, a size past
# what the engine takes) is the server's capacity (507, gRPC RESOURCE_EXHAUSTED); an internal
# error is ours (500).
ENGINE_KIND_STATUS = {"bad_input": 400, "bad_model": 422, "unsupported": 422, "resource_limit": 507,
                      "internal": 500}

GRPC_CODES = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    403: grpc.StatusCode.PERMISSION_DENIED,
    404: grpc.StatusCode.NOT_FOUND,
    405: grpc.StatusCode.UNIMPLEMENTED,
    409: grpc.StatusCode.ALREADY_EXISTS,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    422: grpc.StatusCode.FAILED_PRECONDITION,
    500: grpc.StatusCode.INTERNAL,
    501: grpc.StatusCode.UNIMPLEMENTED,
    503: grpc.StatusCode.UNAVAILABLE,
    507: grpc.StatusCode.RESOURCE_EXHAUSTED,
}


def grpc_code(status):
    return GRPC_CODES.get(status, grpc.StatusCode.INTERNAL if status >= 500 else grpc.StatusCode.INVALID_ARGUMENT)


def classify(exc, paths=None):
    """(HTTP status, client-facing message, log the traceback?) for an exception a request raised.
    ``paths`` ({path: served name}) are replaced in the message."""
    if isinstance(exc, RequestError):
        return exc.status, scrub(str(exc), paths), False
    if isinstance(exc, Error):
        kind = getattr(exc, "kind", "bad_input")
        status = ENGINE_KIND_STATUS.get(kind, 500)
        return status, scrub(str(exc), paths), status >= 500
    if isinstance(exc, RecursionError):  # json nested past the interpreter's depth
        return 400, "the request is nested too deeply", False
    if isinstance(exc, MemoryError):
        return 507, "the server has no memory for this request", True
    return 500, f"internal error ({type(exc).__name__}); the server's log has the details", True


_ABSOLUTE_PATH = re.compile(r"(?<![\w.:/])/(?:[\w.@+-]+/)+[\w.@+-]*")


def scrub(message, paths=None):
    """The message without the server's file paths: a served model's path becomes its name,
    any other absolute path ``<path>``."""
    for path, name in sorted((paths or {}).items(), key=lambda item: -len(item[0])):
        message = message.replace(path, name)
    return _ABSOLUTE_PATH.sub("<path>", message)
