"""The one error mapping (serve/errors.py): engine errors by their ``kind`` (the typed errors'
attribute; an error without one is a bad input), the server's own refusals by their status,
anything else a 500; and what a client is told never names the server's files."""

import grpc
import pytest

import coremlrt
from coremlrt.serve.errors import RequestError, classify, grpc_code, scrub


def _engine_error(kind=None):
    error = coremlrt.Error("model 'm': input 'x' is NaN")
    if kind is not None:
        error.kind = kind  # as the typed subclasses carry it
    return error


@pytest.mark.parametrize("kind, status, code", [
    (None, 400, grpc.StatusCode.INVALID_ARGUMENT),
    ("bad_input", 400, grpc.StatusCode.INVALID_ARGUMENT),
    ("bad_model", 422, grpc.StatusCode.FAILED_PRECONDITION),
    ("unsupported", 422, grpc.StatusCode.FAILED_PRECONDITION),
    ("resource_limit", 507, grpc.StatusCode.RESOURCE_EXHAUSTED),
    ("internal", 500, grpc.StatusCode.INTERNAL),
])
def test_engine_errors_map_by_kind(kind, status, code):
    got, message, traceback = classify(_engine_error(kind))
    assert (got, grpc_code(got)) == (status, code)
    assert message == "model 'm': input 'x' is NaN"
    assert traceback == (status >= 500)


def test_a_subclass_with_a_class_attribute_kind():
    class ResourceLimit(coremlrt.Error):
        kind = "resource_limit"

    assert classify(ResourceLimit("over the memory limit"))[0] == 507


def test_requests_errors_and_bugs():
    assert classify(RequestError("full", 503))[:2] == (503, "full")
    assert grpc_code(503) == grpc.StatusCode.UNAVAILABLE and grpc_code(413) == grpc.StatusCode.RESOURCE_EXHAUSTED
    assert grpc_code(404) == grpc.StatusCode.NOT_FOUND
    status, message, traceback = classify(KeyError("/srv/secret/file.py"))
    assert status == 500 and traceback and "secret" not in message
    assert classify(RecursionError())[:2] == (400, "the request is nested too deeply")


def test_scrub_names_models_and_hides_paths():
    paths = {"/srv/models/tiny.mlpackage": "tiny"}
    assert scrub("/srv/models/tiny.mlpackage: input 'x' is bad", paths) == "tiny: input 'x' is bad"
    assert scrub("failed in /usr/lib/python3/site-packages/x.py line 3") == "failed in <path> line 3"
    assert scrub("shape [1, 8], ratio 1/2, http://host/a") == "shape [1, 8], ratio 1/2, http://host/a"
