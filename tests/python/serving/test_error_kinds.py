"""Engine errors through the server: each kind of coremlrt error answers with its status
(docs/guide/limits-and-errors.md, "Error kinds"), the engine's own message in the body.

A served model is loaded when the server starts, so a request meets only the errors of a
prediction: a bad input (400) and a resource limit (507) here, from a real engine error each;
the kinds a prediction cannot raise (bad model, unsupported, internal) are checked on the
mapping with the engine's own classes."""

import json
import urllib.error
import urllib.request

import numpy as np
import pytest

import coremltools as ct
from coremltools.converters.mil import Builder as mb
from coremltools.converters.mil.mil import types

import coremlrt
import server_helpers as SH
from mil_helpers import save_program


@pytest.fixture(scope="module")
def fill_server(tmp_path_factory):
    """Serves y = fill(shape=dims, value=1.5): the request's dims decide what the op allocates."""

    @mb.program(input_specs=[mb.TensorSpec(shape=(3,), dtype=types.int32)], opset_version=ct.target.iOS18)
    def prog(dims):
        return mb.fill(shape=dims, value=1.5, name="y")

    path = save_program(prog, tmp_path_factory.mktemp("fill"), name="fill")
    folder = SH.model_folder(str(tmp_path_factory.mktemp("served")), {"fill": path})
    with SH.serve(folder, models=("fill",)) as server:
        yield server


def _infer(server, dims, shape=(3,)):
    body = json.dumps({"inputs": [{"name": "dims", "datatype": "INT32", "shape": list(shape),
                                   "data": list(dims)}]}).encode()
    request = urllib.request.Request(f"http://{server.http_url}/v2/models/fill/infer", data=body, method="POST",
                                     headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def _message(answer):
    return json.dumps(answer)


def test_a_prediction_past_the_memory_limit_is_507(fill_server):
    # 1e12 float32 values: past the default limit (the machine's memory), refused before allocating.
    status, answer = _infer(fill_server, (100000, 100000, 100))
    assert status == 507, answer
    assert "memory limit" in _message(answer) and "fill" in _message(answer)
    status, answer = _infer(fill_server, (2, 3, 1))  # the model goes on serving
    assert status == 200, answer
    assert np.asarray(answer["outputs"][0]["data"], np.float32).tolist() == [1.5] * 6


def test_a_bad_input_is_400(fill_server):
    status, answer = _infer(fill_server, (2, 3), shape=(2,))
    assert status == 400, answer
    assert "dims" in _message(answer)


def test_every_kind_has_its_status():
    """The server's one error mapping (coremlrt/serve/errors.py) on the engine's own classes, and
    their gRPC codes; an error of the Python layer (no kind) is a bad input."""
    import grpc

    from coremlrt.serve.errors import classify, grpc_code

    expected = {coremlrt.BadInputError: (400, grpc.StatusCode.INVALID_ARGUMENT),
                coremlrt.BadModelError: (422, grpc.StatusCode.FAILED_PRECONDITION),
                coremlrt.UnsupportedError: (422, grpc.StatusCode.FAILED_PRECONDITION),
                coremlrt.ResourceLimitError: (507, grpc.StatusCode.RESOURCE_EXHAUSTED),
                coremlrt.InternalError: (500, grpc.StatusCode.INTERNAL),
                coremlrt.Error: (400, grpc.StatusCode.INVALID_ARGUMENT)}
    for cls, (status, code) in expected.items():
        got, message, _ = classify(cls("model 'm': what went wrong"))
        assert (got, grpc_code(got)) == (status, code), cls
        assert message == "model 'm': what went wrong"
