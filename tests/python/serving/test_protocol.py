"""The protocol as the clients nobody here wrote use it: Triton's perf_analyzer, tritonclient
http / grpc / asyncio / streaming and plain HTTP, against a served folder holding a detector
pipeline (ranged output dimensions, threshold inputs with defaults), a flexible-shape model
whose outputs hold NaN and +-Inf, a stateful LM, and a model that fails to load.

Every answer is compared with the same prediction in process."""

import asyncio
import json
import os
import queue
import re
import subprocess
import urllib.error
import urllib.request

import grpc
import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.grpc.aio as grpcaio
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import coremlrt
import lm_helpers as H
import serve_models as SM
import server_helpers as SH

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
TOKEN = "s3cret-token"
IMAGE = np.random.default_rng(1).standard_normal((1, 3, 32, 32)).astype(np.float32) * 20
# 2x overflows float16 past 65504 (Inf), and Inf - Inf is NaN: every special value comes out.
SPECIAL = np.array([[1, 1e5, 4e4, -4e4, np.nan, 3, 0.5, -2]], np.float32)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    paths = {name: SM.model_path(name) for name in ("detector", "scale", "tiny", "conv", "lm")}
    directory = SH.model_folder(str(tmp_path_factory.mktemp("folder")), paths)
    with open(os.path.join(directory, "broken.mlmodel"), "wb") as f:
        f.write(b"not a model")
    return directory, paths


@pytest.fixture(scope="module")
def served(folder):
    directory, _ = folder
    with SH.serve(directory, "--admin-token", TOKEN, "--workers", "2",
                  models=["detector", "scale", "tiny", "conv", "lm"]) as s:
        yield s


def _get(server, path):
    try:
        with urllib.request.urlopen(f"http://{server.http_url}{path}", timeout=30) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read() or b"null")


def _post(server, path, body=b"", headers=None):
    request = urllib.request.Request(f"http://{server.http_url}{path}", data=body, method="POST",
                                     headers=headers or {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, r.read(), {k.lower(): v for k, v in r.headers.items()}
    except urllib.error.HTTPError as e:
        return e.code, e.read(), {k.lower(): v for k, v in e.headers.items()}


def _input(module, name, array, datatype=None, **kwargs):
    item = module.InferInput(name, list(array.shape), datatype or {np.float32: "FP32", np.float64: "FP64",
                                                                    np.int32: "INT32"}[array.dtype.type])
    item.set_data_from_numpy(array, **kwargs)
    return item


# A served folder --------------------------------------------------------------------------------

def test_a_broken_model_is_not_ready_and_the_others_serve(served):
    status, index = _post(served, "/v2/repository/index")[:2]
    entries = {e["name"]: e for e in json.loads(index)}
    assert set(entries) == {"broken", "conv", "detector", "lm", "scale", "tiny"}
    assert entries["broken"]["state"] == "UNAVAILABLE" and "is not a valid Core ML model" in entries["broken"]["reason"]
    assert all(e["state"] == "READY" for n, e in entries.items() if n != "broken")
    status, meta = _get(served, "/v2/models/broken")
    assert status == 200 and meta["parameters"]["state"] == "UNAVAILABLE"
    assert "is not a valid Core ML model" in meta["parameters"]["reason"]
    assert "/" not in meta["parameters"]["reason"], "no server path in what a client sees"
    http, grpc_ = httpclient.InferenceServerClient(served.http_url), grpcclient.InferenceServerClient(served.grpc_url)
    assert not http.is_model_ready("broken") and not grpc_.is_model_ready("broken")
    with pytest.raises(InferenceServerException, match="not ready"):
        http.infer("broken", [_input(httpclient, "x", np.zeros((1, 8), np.float32))])
    assert "failed to load" in served.log() and "broken" in served.log()
    ready = [e["name"] for e in grpc_.get_model_repository_index(as_json=True)["models"] if e.get("state") == "READY"]
    assert sorted(ready) == ["conv", "detector", "lm", "scale", "tiny"]


def test_the_detector_predicts_from_the_image_alone(served, folder):
    _, paths = folder
    expected = coremlrt.MLModel(paths["detector"]).predict({"image": IMAGE})
    assert len(expected["confidence"]) > 0
    # Metadata and configuration: ranged rows are -1, the thresholds optional with their defaults.
    status, meta = _get(served, "/v2/models/detector")
    outputs = {o["name"]: o["shape"] for o in meta["outputs"]}
    assert outputs == {"confidence": [-1, 3], "coordinates": [-1, 4]}
    inputs = {i["name"]: i for i in meta["inputs"]}
    assert inputs["iouThreshold"]["parameters"] == {"optional": True, "default_value": 0.45}
    assert "parameters" not in inputs["image"]
    config = grpcclient.InferenceServerClient(served.grpc_url).get_model_config("detector", as_json=True)["config"]
    optional = {i["name"]: i.get("optional", False) for i in config["input"]}
    assert optional == {"image": False, "iouThreshold": True, "confidenceThreshold": True}
    assert [o["dims"] for o in config["output"]] == [["-1", "3"], ["-1", "4"]]
    for module, url in ((httpclient, served.http_url), (grpcclient, served.grpc_url)):
        result = module.InferenceServerClient(url).infer("detector", [_input(module, "image", IMAGE)])
        for name in ("confidence", "coordinates"):
            np.testing.assert_array_equal(result.as_numpy(name), expected[name])
    # A threshold given still counts.
    strict = coremlrt.MLModel(paths["detector"]).predict({"image": IMAGE, "confidenceThreshold": 0.9})
    result = grpcclient.InferenceServerClient(served.grpc_url).infer(
        "detector", [_input(grpcclient, "image", IMAGE), _input(grpcclient, "confidenceThreshold", np.array([0.9]))])
    np.testing.assert_array_equal(result.as_numpy("confidence"), strict["confidence"])


def test_flexible_shapes_and_nan_inf_over_every_transport(served, folder):
    _, paths = folder
    expected = coremlrt.MLModel(paths["scale"]).predict({"x": SPECIAL})["y"]
    assert np.isnan(expected).any() and np.isposinf(expected).any() and np.isneginf(expected).any()
    status, meta = _get(served, "/v2/models/scale")
    assert meta["inputs"][0]["shape"] == [1, -1] and meta["outputs"][0]["shape"] == [-1]
    answers = {}
    for binary in (True, False):  # REST, binary and JSON (NaN, Infinity, -Infinity as Triton writes them)
        client = httpclient.InferenceServerClient(served.http_url)
        out = httpclient.InferRequestedOutput("y", binary_data=binary)
        answers[f"http binary={binary}"] = client.infer(
            "scale", [_input(httpclient, "x", SPECIAL, binary_data=binary)], outputs=[out]).as_numpy("y")
    answers["grpc"] = grpcclient.InferenceServerClient(served.grpc_url).infer(
        "scale", [_input(grpcclient, "x", SPECIAL)]).as_numpy("y")
    for name, got in answers.items():
        np.testing.assert_array_equal(got, expected, err_msg=name)  # NaN equals NaN here
    status, body, _ = _post(served, "/v2/models/scale/infer", json.dumps(
        {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8], "data": SPECIAL.ravel().tolist()}]}).encode())
    assert status == 200 and b"NaN" in body and b"-Infinity" in body
    # Another length: the flexible dimension.
    x = np.arange(1000, dtype=np.float32).reshape(1, 1000)
    got = grpcclient.InferenceServerClient(served.grpc_url).infer("scale", [_input(grpcclient, "x", x)]).as_numpy("y")
    np.testing.assert_array_equal(got, coremlrt.MLModel(paths["scale"]).predict({"x": x})["y"])


# Triton's extensions ----------------------------------------------------------------------------

def test_model_configuration(served):
    http, grpc_ = httpclient.InferenceServerClient(served.http_url), grpcclient.InferenceServerClient(served.grpc_url)
    conv = http.get_model_config("conv")
    # Requests merge on the flexible first dimension: Triton's batch dimension, out of dims.
    assert conv["max_batch_size"] == 64 and conv["input"] == [{"name": "x", "data_type": "TYPE_FP32",
                                                               "dims": [3, 32, 32]}]
    assert "dynamic_batching" in conv
    tiny = grpc_.get_model_config("tiny", as_json=True)["config"]
    assert tiny.get("max_batch_size", 0) == 0 and tiny["input"][0]["dims"] == ["1", "8"]
    lm = grpc_.get_model_config("lm", as_json=True)["config"]
    assert lm["sequence_batching"]["max_sequence_idle_microseconds"] == "1000000"
    with pytest.raises(InferenceServerException, match="unknown model"):
        grpc_.get_model_config("nosuch")


def test_statistics(served):
    http, grpc_ = httpclient.InferenceServerClient(served.http_url), grpcclient.InferenceServerClient(served.grpc_url)
    before = http.get_inference_statistics("tiny")["model_stats"][0]
    for _ in range(3):
        grpc_.infer("tiny", [_input(grpcclient, "x", np.ones((1, 8), np.float32))])
    with pytest.raises(InferenceServerException):
        grpc_.infer("tiny", [_input(grpcclient, "x", np.ones((2, 8), np.float32))])
    after = grpc_.get_inference_statistics("tiny", as_json=True)["model_stats"][0]
    stats = after["inference_stats"]
    assert int(after["inference_count"]) - before["inference_count"] == 3
    assert int(stats["success"]["count"]) - before["inference_stats"]["success"]["count"] == 3
    assert int(stats["fail"]["count"]) - before["inference_stats"]["fail"]["count"] == 1
    assert int(stats["compute_infer"]["ns"]) > before["inference_stats"]["compute_infer"]["ns"]
    every = http.get_inference_statistics()["model_stats"]
    assert {s["name"] for s in every} == {"broken", "conv", "detector", "lm", "scale", "tiny"}


def test_binary_outputs_and_plain_json_outputs(served, folder):
    _, paths = folder
    x = np.random.default_rng(3).standard_normal((1, 8)).astype(np.float32)
    expected = coremlrt.MLModel(paths["tiny"]).predict({"x": x})["y"]
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8], "data": x.ravel().tolist()}],
                       "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}).encode()
    status, answer, headers = _post(served, "/v2/models/tiny/infer", body)
    length = int(headers["inference-header-content-length"])
    header = json.loads(answer[:length])
    assert header["outputs"] == [{"name": "y", "datatype": "FP32", "shape": [1, 8],
                                  "parameters": {"binary_data_size": 32}}]
    np.testing.assert_array_equal(np.frombuffer(answer[length:], np.float32).reshape(1, 8), expected)
    # Request-wide binary_data_output, then plain JSON: no per-output parameters at all (Triton's C++
    # client reads binary_data_size from any output that has parameters).
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8], "data": x.ravel().tolist()}],
                       "parameters": {"binary_data_output": True}}).encode()
    status, answer, headers = _post(served, "/v2/models/tiny/infer", body)
    assert "inference-header-content-length" in headers
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8], "data": x.ravel().tolist()}],
                       "id": "r1"}).encode()
    status, answer, headers = _post(served, "/v2/models/tiny/infer", body)
    answer = json.loads(answer)
    assert answer["id"] == "r1" and "parameters" not in answer["outputs"][0]
    assert "inference-header-content-length" not in headers


def test_classification(served, folder):
    _, paths = folder
    x = np.random.default_rng(4).standard_normal((1, 8)).astype(np.float32)
    y = coremlrt.MLModel(paths["tiny"]).predict({"x": x})["y"].ravel()
    top = np.argsort(-y.astype(np.float64), kind="stable")[:3]
    want = [f"{float(y[i]):g}:{i}".encode() for i in top]
    for module, url in ((httpclient, served.http_url), (grpcclient, served.grpc_url)):
        output = module.InferRequestedOutput("y", class_count=3)
        got = module.InferenceServerClient(url).infer("tiny", [_input(module, "x", x)], outputs=[output])
        assert list(got.as_numpy("y").ravel()) == want, module.__name__


def test_grpc_streaming_in_order_with_errors_and_sequences(served, folder):
    _, paths = folder
    client = grpcclient.InferenceServerClient(served.grpc_url)
    answers = queue.Queue()
    client.start_stream(callback=lambda result, error: answers.put((result, error)))
    try:
        rng = np.random.default_rng(5)
        xs = [rng.standard_normal((1, 8)).astype(np.float32) for _ in range(6)]
        for i, x in enumerate(xs):
            shape_ok = i != 3
            item = _input(grpcclient, "x", x if shape_ok else np.zeros((2, 8), np.float32))
            client.async_stream_infer("tiny", [item], request_id=str(i))
        # A sequence over the same stream: prefill then decode steps, in order.
        prompt = np.arange(H.PROMPT, dtype=np.int32) % H.VOCAB
        local = coremlrt.MLModel(paths["lm"], function_name="prefill")
        decode = coremlrt.MLModel(paths["lm"], function_name="decode")
        state = local.make_state()
        expected_lm = [local.predict(H.lm_inputs(prompt, 0), state=state)["logits"]]
        steps = [("prefill", prompt, 0)]
        for i, token in enumerate([3, 1, 4]):
            expected_lm.append(decode.predict(H.lm_inputs([token], H.PROMPT + i), state=state)["logits"])
            steps.append(("decode", [token], H.PROMPT + i))
        for i, (function, tokens, start) in enumerate(steps):
            items = [_input(grpcclient, n, v) for n, v in H.lm_inputs(tokens, start).items()]
            client.async_stream_infer("lm", items, request_id=f"lm{i}", sequence_id=31337, sequence_start=i == 0,
                                      sequence_end=i == len(steps) - 1, parameters={"function": function})
        reference = coremlrt.MLModel(paths["tiny"])
        for i, x in enumerate(xs):
            result, error = answers.get(timeout=60)
            if i == 3:
                assert result is None and "shape [2, 8]" in str(error)
            else:
                assert error is None and result.get_response().id == str(i)
                np.testing.assert_array_equal(result.as_numpy("y"), reference.predict({"x": x})["y"])
        for i, want in enumerate(expected_lm):
            result, error = answers.get(timeout=60)
            assert error is None, error
            assert result.get_response().id == f"lm{i}"
            np.testing.assert_array_equal(result.as_numpy("logits"), want)
    finally:
        client.stop_stream()


def test_asyncio_client(served, folder):
    _, paths = folder
    x = np.random.default_rng(6).standard_normal((1, 8)).astype(np.float32)

    import tritonclient.http.aio as httpaio

    async def run(module, url):
        client = module.InferenceServerClient(url)
        try:
            results = await asyncio.gather(*[client.infer("tiny", [_input(module, "x", x)]) for _ in range(8)])
            return [r.as_numpy("y") for r in results], await client.is_model_ready("nosuch")
        finally:
            await client.close()

    expected = coremlrt.MLModel(paths["tiny"]).predict({"x": x})["y"]
    for module, url in ((grpcaio, served.grpc_url), (httpaio, served.http_url)):
        answers, ready = asyncio.run(run(module, url))
        for got in answers:
            np.testing.assert_array_equal(got, expected)
        assert ready is False


# Protocol details -------------------------------------------------------------------------------

def _raw_infer(server, request_bytes, method="ModelInfer"):
    with grpc.insecure_channel(server.grpc_url) as channel:
        call = channel.unary_unary(f"/inference.GRPCInferenceService/{method}", request_serializer=lambda b: b,
                                   response_deserializer=lambda b: b)
        return call(request_bytes, timeout=60)


def _lm_request(sequence_id, start, end, function, tokens, position):
    """A ModelInferRequest built with our own messages (the protocol's field numbers)."""
    from coremlrt.serve.protocol import grpc_inference_pb2 as pb

    request = pb.ModelInferRequest(model_name="lm")
    for name, value in H.lm_inputs(tokens, position).items():
        request.inputs.add(name=name, datatype="INT32", shape=list(value.shape))
        request.raw_input_contents.append(value.tobytes())
    if isinstance(sequence_id, str):
        request.parameters["sequence_id"].string_param = sequence_id
    else:
        request.parameters["sequence_id"].uint64_param = sequence_id
    request.parameters["sequence_start"].bool_param = start
    request.parameters["sequence_end"].bool_param = end
    request.parameters["function"].string_param = function
    return request.SerializeToString()


def test_sequence_ids_uint64_and_string(served, folder):
    """A uint64 sequence_id (as Triton's C++ clients send it) is honoured, and 31337 and "31337"
    name one sequence (the documented rule: an id is its decimal text)."""
    from coremlrt.serve.protocol import grpc_inference_pb2 as pb

    _, paths = folder
    prefill, decode = (coremlrt.MLModel(paths["lm"], function_name=f) for f in ("prefill", "decode"))
    state = prefill.make_state()
    prompt = np.arange(H.PROMPT, dtype=np.int32) % H.VOCAB
    prefill.predict(H.lm_inputs(prompt, 0), state=state)
    want = decode.predict(H.lm_inputs([7], H.PROMPT), state=state)["logits"]
    big = (1 << 64) - 2  # past int64: only a uint64 parameter carries it
    for first, second in ((big, big), (31337, "31337")):
        _raw_infer(served, _lm_request(first, True, False, "prefill", prompt, 0))
        answer = pb.ModelInferResponse.FromString(
            _raw_infer(served, _lm_request(second, False, True, "decode", [7], H.PROMPT)))
        got = np.frombuffer(answer.raw_output_contents[0], np.float32).reshape(want.shape)
        np.testing.assert_array_equal(got, want)
    # "031337" is another id: not live.
    _raw_infer(served, _lm_request(31337, True, False, "prefill", prompt, 0))
    with pytest.raises(grpc.RpcError) as error:
        _raw_infer(served, _lm_request("031337", False, True, "decode", [7], H.PROMPT))
    assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT and "not live" in error.value.details()
    _raw_infer(served, _lm_request(31337, False, True, "decode", [7], H.PROMPT))


def test_grpc_doubled_or_misplaced_contents_are_refused(served):
    from coremlrt.serve.protocol import grpc_inference_pb2 as pb

    def request(raw=(), fp32=None, int32=None, inputs=1):
        message = pb.ModelInferRequest(model_name="tiny")
        for _ in range(inputs):
            item = message.inputs.add(name="x", datatype="FP32", shape=[1, 8])
            if fp32 is not None:
                item.contents.fp32_contents.extend(fp32)
            if int32 is not None:
                item.contents.int_contents.extend(int32)
        message.raw_input_contents.extend(raw)
        return message.SerializeToString()

    ones = np.ones(8, np.float32)
    answer = pb.ModelInferResponse.FromString(_raw_infer(served, request(fp32=ones.tolist())))
    assert len(answer.raw_output_contents) == 1
    for message, text in ((request(raw=[ones.tobytes()], fp32=ones.tolist()), "both raw_input_contents and contents"),
                          (request(fp32=ones.tolist(), int32=[1] * 8), "they belong in fp32_contents"),
                          (request(raw=[ones.tobytes(), ones.tobytes()]), "2 raw_input_contents for 1 inputs"),
                          (request(raw=[ones.tobytes()] * 2, inputs=2), "given twice"),
                          (request(raw=[ones.tobytes() + b"\0\0\0\0"]), "36 bytes for shape [1, 8]")):
        with pytest.raises(grpc.RpcError) as error:
            _raw_infer(served, message)
        assert error.value.code() == grpc.StatusCode.INVALID_ARGUMENT, text
        assert text in error.value.details()


def test_client_errors_are_one_line_and_name_no_server_path(served, folder):
    _, paths = folder
    client = grpcclient.InferenceServerClient(served.grpc_url)
    # A value the engine itself refuses (law 5: it names the model and the input), not a check of ours.
    with pytest.raises(InferenceServerException) as error:
        client.infer("detector", [_input(grpcclient, "image", IMAGE),
                                  _input(grpcclient, "iouThreshold", np.array([np.nan]))])
    assert "INVALID_ARGUMENT" in str(error.value.status()) and "NaN" in error.value.message()
    assert os.path.dirname(paths["detector"]) not in error.value.message()
    assert not re.search(r"(^|[\s'\"(])/\w", error.value.message()), error.value.message()
    log = served.log()
    assert "Traceback" not in log, log[-3000:]
    refused = [line for line in log.splitlines() if "the IoU threshold is NaN" in line]
    assert refused and all(" INFO " in line for line in refused), refused


# Model control ----------------------------------------------------------------------------------

def test_model_control_needs_the_token_and_an_unloaded_model_loads_back(served, server):
    http = httpclient.InferenceServerClient(served.http_url)
    status, body, _ = _post(server, "/v2/repository/models/tiny/unload")  # a server started without a token
    assert status == 403 and "model control is off" in json.loads(body)["error"]
    assert "model_repository" not in httpclient.InferenceServerClient(server.http_url).get_server_metadata()[
        "extensions"]
    status, body, _ = _post(served, "/v2/repository/models/tiny/unload")
    assert status == 401 and set(json.loads(body)) == {"error"}
    with pytest.raises(InferenceServerException):
        grpcclient.InferenceServerClient(served.grpc_url).unload_model("tiny", headers={"authorization": "Bearer no"})
    auth = {"Authorization": f"Bearer {TOKEN}"}
    http.unload_model("tiny", headers=auth)
    assert not http.is_model_ready("tiny")
    with pytest.raises(InferenceServerException, match="not ready"):
        http.infer("tiny", [_input(httpclient, "x", np.ones((1, 8), np.float32))])
    grpcclient.InferenceServerClient(served.grpc_url).load_model("tiny", headers={"authorization": f"Bearer {TOKEN}"})
    assert http.is_model_ready("tiny")
    http.infer("tiny", [_input(httpclient, "x", np.ones((1, 8), np.float32))])
    assert "model_repository" in http.get_server_metadata()["extensions"]


# perf_analyzer ----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def perf_analyzer():
    done = subprocess.run(["bash", os.path.join(ROOT, "scripts", "install_perf_analyzer.sh")], capture_output=True,
                          text=True, timeout=600)
    if done.returncode != 0:
        if os.environ.get("CI"):
            pytest.fail(f"perf_analyzer could not be installed: {done.stderr[-2000:]}")
        pytest.skip(f"perf_analyzer could not be installed here: {done.stderr[-500:]}")
    return done.stdout.strip().splitlines()[-1]


def _perf(perf_analyzer, server, protocol, model, *args):
    url = server.grpc_url if protocol == "grpc" else server.http_url
    command = [perf_analyzer, "-m", model, "-u", url, "-i", protocol, "--concurrency-range", "2",
               "--measurement-mode", "count_windows", "--measurement-request-count", "40", "-s", "500",
               "--max-trials", "10", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert re.search(r"Throughput: [\d.]+ infer/sec", done.stdout), done.stdout
    count = re.search(r"Server:\s+Inference count: (\d+)", done.stdout)
    assert count and int(count.group(1)) > 0, done.stdout  # the server's statistics were read
    return done.stdout


@pytest.mark.parametrize("protocol", ["grpc", "http"])
def test_perf_analyzer_drives_the_server(perf_analyzer, served, protocol):
    _perf(perf_analyzer, served, protocol, "tiny")
    if protocol == "http":  # JSON both ways: answers with no per-output parameters for its C++ client to trip on
        _perf(perf_analyzer, served, protocol, "tiny", "--input-tensor-format=json", "--output-tensor-format=json")
    else:
        _perf(perf_analyzer, served, protocol, "tiny", "--streaming")
    _perf(perf_analyzer, served, protocol, "conv", "-b", "2")  # Triton's batch dimension
    _perf(perf_analyzer, served, protocol, "detector")  # optional inputs left out
    _perf(perf_analyzer, served, protocol, "lm", "--sequence-length", "4", "--shape", "tokens:1,5",
          "--shape", "start:1", "--input-data", "zero")


def test_generated_messages_match_the_proto(tmp_path):
    """protocol/grpc_inference_pb2.py is what scripts/gen_serving_proto.sh makes of the .proto."""
    folder = os.path.join(ROOT, "python", "coremlrt", "serve", "protocol")
    if subprocess.run(["which", "protoc"], capture_output=True).returncode != 0:
        pytest.skip("protoc is not installed (scripts/setup.sh installs it)")
    subprocess.run(["protoc", f"--proto_path={folder}", f"--python_out={tmp_path}", "grpc_inference.proto"],
                   check=True)
    with open(os.path.join(folder, "grpc_inference_pb2.py")) as committed, \
            open(tmp_path / "grpc_inference_pb2.py") as fresh:
        assert committed.read() == fresh.read(), "run scripts/gen_serving_proto.sh"


def _status_bytes(pid, key):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1]) * 1024
    return 0


def test_a_large_json_request_costs_at_most_twice_its_body(served, folder):
    """JSON numbers are parsed into an array, not a Python object each: the server's peak memory
    grows by at most ~2x the body (1.2-1.3 GB for a 60 MiB body before)."""
    _, paths = folder
    n = 1_200_000
    x = np.random.default_rng(7).random(n).astype(np.float32)
    body = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, n], "data": x.tolist()}],
                       "outputs": [{"name": "y", "parameters": {"binary_data": True}}]}).encode()
    pid = served.process.pid
    _post(served, "/v2/models/scale/infer", json.dumps(
        {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8], "data": [1] * 8}]}).encode())
    before = _status_bytes(pid, "VmRSS:")
    with open(f"/proc/{pid}/clear_refs", "w") as f:
        f.write("5")  # the peak (VmHWM) starts again from the current RSS
    status, answer, headers = _post(served, "/v2/models/scale/infer", body)
    peak = _status_bytes(pid, "VmHWM:")
    assert status == 200
    length = int(headers["inference-header-content-length"])
    got = np.frombuffer(answer[length:], np.float32)
    np.testing.assert_array_equal(got, coremlrt.MLModel(paths["scale"]).predict({"x": x.reshape(1, n)})["y"].ravel())
    assert peak - before <= 2.2 * len(body), f"{(peak - before) / len(body):.2f}x the body of {len(body)} bytes"
