"""The server's request readers under mutated input, in process: REST bodies (rest_json.py, JSON
and the binary extension) and gRPC messages (grpc_server.to_infer_request) either give tensors
or refuse with a RequestError (a 4xx); nothing else escapes (a 500). Seeded random mutations of
valid requests: byte flips, truncations, insertions, repeated structure."""

import json

import numpy as np

from coremlrt.serve import features as F
from coremlrt.serve.errors import RequestError
from coremlrt.serve.grpc_server import to_infer_request
from coremlrt.serve.protocol import grpc_inference_pb2 as pb
from coremlrt.serve.rest_json import parse_request

TINY = {"x": {"name": "x", "kind": "multiArray", "dtype": "float32", "shape": [1, 8], "shape_range": [],
              "enumerated_shapes": [], "optional": False}}


def _seeds():
    x = np.linspace(-1, 1, 8, dtype=np.float32).reshape(1, 8)
    plain = json.dumps({"id": "a", "parameters": {"sequence_id": 7, "sequence_start": True},
                        "inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8], "data": x.tolist()}],
                        "outputs": [{"name": "y", "parameters": {"binary_data": True, "classification": 2}}]}).encode()
    header = json.dumps({"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8],
                                     "parameters": {"binary_data_size": 32}}]}).encode()
    return [(plain, None), (header + x.tobytes(), str(len(header)))]


def _mutate(rng, data):
    data = bytearray(data)
    for _ in range(int(rng.integers(1, 4))):
        op = int(rng.integers(5))
        at = int(rng.integers(len(data) + 1))
        if op == 0 and data:
            data[min(at, len(data) - 1)] = int(rng.integers(256))
        elif op == 1:
            del data[at:]
        elif op == 2:
            data[at:at] = bytes(rng.choice(list(b'[]{}",:0123456789.eE-+ntfaNI'), int(rng.integers(1, 8))))
        elif op == 3:
            piece = data[at:at + int(rng.integers(1, 32))]
            data[at:at] = piece * int(rng.integers(1, 50))
        else:
            data[at:at] = b"[" * int(rng.integers(1, 3000))
    return bytes(data)


def _read_rest(body, header_length):
    try:
        tensors = parse_request(body, header_length)[0]
        F.decode_inputs(tensors, TINY)
    except RequestError as exc:
        assert 400 <= exc.status < 500, exc


def test_mutated_rest_bodies_are_refused_cleanly():
    rng = np.random.default_rng(46)
    for body, header_length in _seeds():
        _read_rest(body, header_length)
        for _ in range(1500):
            _read_rest(_mutate(rng, body), header_length)
        for length in ("-1", "x", str(len(body) + 1), "0"):
            _read_rest(body, length)


def test_mutated_grpc_messages_are_refused_cleanly():
    rng = np.random.default_rng(47)
    request = pb.ModelInferRequest(model_name="tiny", id="a")
    request.inputs.add(name="x", datatype="FP32", shape=[1, 8])
    request.raw_input_contents.append(np.ones(8, np.float32).tobytes())
    request.parameters["sequence_id"].uint64_param = 5
    request.outputs.add(name="y").parameters["classification"].int64_param = 2
    seed = request.SerializeToString()
    parsed = 0
    for _ in range(3000):
        try:
            message = pb.ModelInferRequest.FromString(_mutate(rng, seed))
        except Exception:  # noqa: BLE001 - grpc_server answers INVALID_ARGUMENT for what does not parse
            continue
        parsed += 1
        try:
            F.decode_inputs(to_infer_request(message, 0.0).inputs, TINY)
        except RequestError as exc:
            assert 400 <= exc.status < 500, exc
    assert parsed > 100
