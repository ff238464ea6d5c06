"""Each kind of bad request gets a 4xx (or the gRPC code for it) naming what was wrong, a full
queue gets 503 with Retry-After, and none of it disturbs good requests or the process."""

import concurrent.futures
import http.client
import json
import subprocess
import sys
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import coremlrt
import server_helpers as SH


def _post(server, path, body, headers=None):
    """(status, JSON answer, headers) of a plain HTTP POST."""
    request = urllib.request.Request(f"http://{server.http_url}{path}", data=body, method="POST",
                                     headers=headers or {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, json.loads(r.read()), dict(r.headers)
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null"), dict(e.headers)


def _tiny_body(name="x", datatype="FP32", shape=(1, 8), data=None, **extra):
    data = list(range(int(np.prod(shape)))) if data is None else data
    return json.dumps({"inputs": [{"name": name, "datatype": datatype, "shape": list(shape), "data": data}],
                       **extra}).encode()


@pytest.mark.parametrize("body, status, message", [
    (_tiny_body(datatype="FP64"), 400, "input 'x': datatype FP64, the model takes FP32"),
    (_tiny_body(datatype="INT32"), 400, "datatype INT32"),
    (_tiny_body(shape=(2, 8)), 400, "input 'x': shape [2, 8], the model takes [1, 8]"),
    (_tiny_body(shape=(1, 8), data=[1, 2, 3]), 400, "3 values for shape [1, 8]"),
    (_tiny_body(data=["a"] * 8), 400, "data is not FP32 values"),
    (_tiny_body(name="z"), 400, "unknown input 'z'"),
    (json.dumps({"inputs": []}).encode(), 400, "missing input(s) ['x']"),
    (_tiny_body(shape=(1, -8)), 400, "negative"),
    (_tiny_body(parameters={"function": "nope"}), 404, "has no function 'nope'; its functions are ['main']"),
    (_tiny_body(parameters={"sequence_id": 5, "sequence_start": True}), 400, "keeps no state"),
    (b'{"inputs": [{"name": "x",', 400, "the body is not valid JSON"),
    (b"\x00\xff garbage", 400, "the body is not valid JSON"),
    (b'[1, 2]', 400, "the request body must be a JSON object"),
    (b'{"inputs": {}}', 400, '"inputs", a list of tensors'),
    # JSON nested past any sensible depth: a 400, not the interpreter's RecursionError as a 500.
    (b'{"inputs": [], "parameters": {"p": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}", 400, "nested too deeply"),
    (b'{"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8], "data": ' + b"[" * 100_000 + b"1"
     + b"]" * 100_000 + b"}]}", 400, "1 values for shape [1, 8]"),
    # A tensor whose data is said to follow in binary, in a body that has no binary part.
    (json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8],
                             "parameters": {"binary_data_size": 32}}]}).encode(), 400, "has no binary part"),
    (json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8]}]}).encode(), 400, "has no data"),
    (_tiny_body(outputs=[{"name": "y"}, {"name": "y"}]), 400, "output 'y' is requested twice"),
    (_tiny_body(outputs=[{"name": "nope"}]), 400, "unknown output(s) ['nope']"),
])
def test_rest_bad_request(server, body, status, message):
    got, answer, _ = _post(server, "/v2/models/tiny/infer", body)
    assert got == status
    assert set(answer) == {"error"}, answer  # every error body is {"error": "..."}
    assert message in answer["error"], answer


def test_rest_unknown_model(server):
    got, answer, _ = _post(server, "/v2/models/no_such_model/infer", _tiny_body())
    assert got == 404 and "no_such_model" in answer["error"]


def test_binary_extension_errors_are_400(server):
    header = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8],
                                     "parameters": {"binary_data_size": 32}}]}).encode()
    headers = {"Inference-Header-Content-Length": str(len(header)), "Content-Type": "application/octet-stream"}
    got, answer, _ = _post(server, "/v2/models/tiny/infer", header + b"\x00" * 8, headers)  # 8 of 32 bytes
    assert got == 400 and "run past the body" in answer["error"]
    # More binary bytes than the inputs declare: extra contents are refused, not ignored.
    got, answer, _ = _post(server, "/v2/models/tiny/infer", header + b"\x00" * 36, headers)
    assert got == 400 and "4 bytes after the last binary input" in answer["error"]
    # Binary data and JSON data for one input.
    doubled = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8], "data": [0] * 8,
                                      "parameters": {"binary_data_size": 32}}]}).encode()
    got, answer, _ = _post(server, "/v2/models/tiny/infer", doubled + b"\x00" * 32,
                           dict(headers, **{"Inference-Header-Content-Length": str(len(doubled))}))
    assert got == 400 and "both data and binary_data_size" in answer["error"]
    headers["Inference-Header-Content-Length"] = "999999"
    got, answer, _ = _post(server, "/v2/models/tiny/infer", header + b"\x00" * 32, headers)
    assert got == 400 and "outside the body" in answer["error"]


def _grpc_infer(server, model, x, datatype="FP32", shape=None, **kwargs):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    item = grpcclient.InferInput("x", list(shape or x.shape), datatype)
    item.set_data_from_numpy(x)
    return client.infer(model, [item], **kwargs)


def test_grpc_bad_requests(server):
    x = np.zeros((1, 8), np.float32)
    cases = [
        (dict(model="tiny", x=x.astype(np.float64), datatype="FP64"), "INVALID_ARGUMENT", "datatype FP64"),
        (dict(model="tiny", x=np.zeros((2, 8), np.float32)), "INVALID_ARGUMENT", "shape [2, 8]"),
        (dict(model="no_such_model", x=x), "NOT_FOUND", "no_such_model"),
        (dict(model="tiny", x=x, parameters={"function": "nope"}), "NOT_FOUND", "has no function 'nope'"),
    ]
    for kwargs, code, message in cases:
        with pytest.raises(InferenceServerException) as error:
            _grpc_infer(server, **kwargs)
        assert code in str(error.value.status()) and message in error.value.message(), str(error.value)


def test_malformed_protobuf(server):
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                   request_serializer=lambda b: b, response_deserializer=lambda b: b)
        with pytest.raises(grpc.RpcError) as error:
            call(b"\x0a\xff\xff\xff\xff\x0f garbage", timeout=30)
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "malformed request message: DecodeError" in error.value.details()


@pytest.fixture(scope="module")
def limited(model_paths):
    """A server with small limits: 500 kB requests, one queued request, no merging."""
    with SH.serve(model_paths["conv"], "--max-request-bytes", "500000", "--max-queue", "1", "--no-merge",
                  "--workers", "1", models=["conv"]) as s:
        yield s


def test_oversized_requests(limited):
    x = np.zeros((64, 3, 32, 32), np.float32)  # 786 kB of data
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": list(x.shape),
                                   "data": x.ravel().tolist()}]}).encode()
    got, answer, _ = _post(limited, "/v2/models/conv/infer", body)
    assert got == 413 and "over the limit of 500000" in answer["error"]
    with pytest.raises(InferenceServerException) as error:
        _grpc_infer(limited, "conv", x)
    assert "RESOURCE_EXHAUSTED" in str(error.value.status())
    # A chunked body (no Content-Length) is counted as it arrives. This one passes the limit only
    # with its last chunk, which goes out in one write with the body's end: the server answers
    # once the client has nothing left to send, so the client reads the answer instead of
    # meeting a closed connection in the middle of its body.
    over = body[:500_000 + 1000]
    last = len(over) - 1000

    def framed(piece):
        return b"%x\r\n" % len(piece) + piece + b"\r\n"

    host, port = limited.http_url.rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.putrequest("POST", "/v2/models/conv/infer")
        connection.putheader("Content-Type", "application/json")
        connection.putheader("Transfer-Encoding", "chunked")
        connection.endheaders()
        for start in range(0, last, 65536):
            connection.send(framed(over[start:min(start + 65536, last)]))
        connection.send(framed(over[last:]) + b"0\r\n\r\n")
        answer = connection.getresponse()
        assert answer.status == 413, answer.read()[:200]
    finally:
        connection.close()


def test_full_queue_gets_503_and_good_requests_stay_right(limited, model_paths):
    """One worker, one queued request: of 16 concurrent requests some are refused (UNAVAILABLE,
    gRPC's 503) and every one that is answered is right. (REST's 503 and its Retry-After
    header: tests/python/serving/test_sequences.py, where the sequence limit gives one surely.)"""
    rng = np.random.default_rng(9)
    inputs = [rng.standard_normal((32, 3, 32, 32)).astype(np.float32) for _ in range(16)]
    reference = coremlrt.MLModel(model_paths["conv"])

    def one(x):
        try:
            return _grpc_infer(limited, "conv", x).as_numpy("y")
        except InferenceServerException as exc:
            return exc

    with concurrent.futures.ThreadPoolExecutor(len(inputs)) as pool:
        answers = list(pool.map(one, inputs))
    refused = [a for a in answers if isinstance(a, InferenceServerException)]
    assert refused and len(refused) < len(answers), [str(a) for a in refused]
    for x, answer in zip(inputs, answers):
        if isinstance(answer, InferenceServerException):
            assert "UNAVAILABLE" in str(answer.status()), str(answer)
            assert "requests are queued (the limit); retry after 1 s" in answer.message()
        else:
            np.testing.assert_array_equal(answer, reference.predict({"x": x})["y"])
    assert 'coremlrt_rejected_total{model="conv",reason="queue_full"}' in limited.metrics()


def test_bad_requests_never_fail_good_ones(server, model_paths):
    """Good and bad requests at once, on both protocols: every good one gets its right answer."""
    rng = np.random.default_rng(10)
    good = [rng.standard_normal((1, 8)).astype(np.float32) for _ in range(16)]
    reference = coremlrt.MLModel(model_paths["tiny"])
    bad_bodies = [_tiny_body(datatype="FP64"), b"{", _tiny_body(shape=(3, 8)), _tiny_body(name="q")]

    def run(i):
        if i % 2:
            return "bad", _post(server, "/v2/models/tiny/infer", bad_bodies[i // 2 % len(bad_bodies)])[0]
        x = good[i // 2]
        if i % 4:
            return "good", (x, _grpc_infer(server, "tiny", x).as_numpy("y"))
        client = httpclient.InferenceServerClient(server.http_url)
        item = httpclient.InferInput("x", [1, 8], "FP32")
        item.set_data_from_numpy(x)
        return "good", (x, client.infer("tiny", [item]).as_numpy("y"))

    with concurrent.futures.ThreadPoolExecutor(8) as pool:
        results = list(pool.map(run, range(32)))
    for kind, value in results:
        if kind == "bad":
            assert 400 <= value < 500
        else:
            x, y = value
            np.testing.assert_array_equal(y, reference.predict({"x": x})["y"])
    assert server.process.poll() is None


def test_a_lone_model_that_does_not_load_ends_the_server_with_status_1(tmp_path):
    """With nothing to serve (and no model control to load it later) the server exits 1 and
    says why; in a folder, a broken model is only not ready (test_protocol.py)."""
    bad = tmp_path / "broken.mlmodel"
    bad.write_bytes(b"not a model")
    http, grpc_port, metrics = SH.free_ports(3)
    done = subprocess.run([sys.executable, "-m", "coremlrt", "serve", str(bad), "--port", str(http), "--grpc-port",
                           str(grpc_port), "--metrics-port", str(metrics), "--log-format", "text"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1
    assert "no model could be loaded" in done.stderr
    assert "is not a valid Core ML model" in done.stderr
