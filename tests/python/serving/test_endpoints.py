"""Health, readiness, metadata and metrics over plain HTTP and both tritonclient clients, and
single predictions equal to in-process ``predict``."""

import json
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import coremlrt


def _get(server, path):
    with urllib.request.urlopen(f"http://{server.http_url}{path}", timeout=10) as r:
        return r.status, json.loads(r.read() or b"null")


def test_health_and_readiness(server):
    assert _get(server, "/v2/health/live")[0] == 200
    assert _get(server, "/v2/health/ready")[0] == 200
    http, grpc = httpclient.InferenceServerClient(server.http_url), grpcclient.InferenceServerClient(server.grpc_url)
    for client in (http, grpc):
        assert client.is_server_live() and client.is_server_ready()
        assert client.is_model_ready("tiny") and client.is_model_ready("lm")
    # An unknown model is not ready, on both transports (Triton's answer), not an error.
    assert not http.is_model_ready("no_such_model")
    assert not grpc.is_model_ready("no_such_model")
    # The server names itself and lists exactly the extensions it implements.
    for client in (http, grpc):
        meta = client.get_server_metadata(**({"as_json": True} if client is grpc else {}))
        assert meta["name"] == "coremlrt"
        assert sorted(meta["extensions"]) == ["binary_tensor_data", "classification", "model_configuration",
                                              "parameters", "sequence", "statistics"]
    with pytest.raises(InferenceServerException, match="unknown model 'no_such_model'") as error:
        grpc.get_model_metadata("no_such_model")
    assert "NOT_FOUND" in str(error.value.status())


def test_metadata_comes_from_the_model_description(server, model_paths):
    status, meta = _get(server, "/v2/models/conv")
    assert status == 200 and meta["platform"] == "coremlrt"
    # The conv model's batch dimension is flexible (1..64): -1 in the metadata.
    assert meta["inputs"] == [{"name": "x", "datatype": "FP32", "shape": [-1, 3, 32, 32]}]
    assert meta["outputs"][0]["name"] == "y" and meta["outputs"][0]["datatype"] == "FP32"
    lm = grpcclient.InferenceServerClient(server.grpc_url).get_model_metadata("lm", as_json=True)
    assert [(i["name"], i["datatype"], i["shape"]) for i in lm["inputs"]] == [
        ("tokens", "INT32", ["1", "5"]), ("start", "INT32", ["1"])]  # the default function, prefill
    multi = httpclient.InferenceServerClient(server.http_url).get_model_metadata("multi")
    assert multi["parameters"]["functions"] == "adapter_a,adapter_b"
    assert multi["parameters"]["default_function"] == "adapter_a"


def test_predictions_equal_in_process_predict(server, model_paths):
    x = np.random.default_rng(1).standard_normal((1, 8)).astype(np.float32)
    expected = coremlrt.MLModel(model_paths["tiny"]).predict({"x": x})["y"]
    for module, url, binary in ((httpclient, server.http_url, True), (httpclient, server.http_url, False),
                                (grpcclient, server.grpc_url, None)):
        client = module.InferenceServerClient(url)
        item = module.InferInput("x", [1, 8], "FP32")
        item.set_data_from_numpy(x, **({} if binary is None else {"binary_data": binary}))
        np.testing.assert_array_equal(client.infer("tiny", [item]).as_numpy("y"), expected)
    # Plain HTTP with a JSON body.
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8], "data": x.ravel().tolist()}]})
    request = urllib.request.Request(f"http://{server.http_url}/v2/models/tiny/infer", data=body.encode(),
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=10) as r:
        answer = json.loads(r.read())
    got = np.array(answer["outputs"][0]["data"], np.float32).reshape(answer["outputs"][0]["shape"])
    np.testing.assert_array_equal(got, expected)


def test_function_per_request(server, model_paths):
    rng = np.random.default_rng(2)
    for function, rows in (("adapter_a", 1), ("adapter_b", 3)):
        x = rng.standard_normal((rows, 16)).astype(np.float32)
        expected = coremlrt.MLModel(model_paths["multi"], function_name=function).predict({"x": x})["y"]
        client = grpcclient.InferenceServerClient(server.grpc_url)
        item = grpcclient.InferInput("x", [rows, 16], "FP16")
        item.set_data_from_numpy(x.astype(np.float16))
        got = client.infer("multi", [item], parameters={"function": function}).as_numpy("y")
        np.testing.assert_array_equal(got, expected)


def test_metrics_endpoint(server):
    text = server.metrics()
    for name in ("coremlrt_batch_size_bucket", "coremlrt_requests_total", "coremlrt_request_seconds_bucket",
                 "process_resident_memory_bytes"):
        assert name in text, name
    assert "coremlrt_queue_depth" in text and "coremlrt_live_sequences" in text
