"""Concurrent requests: merged into one prediction for the conv model (flexible batch
dimension), side by side for the tiny one (fixed shape); every answer equals the request's own
in-process prediction, bit for bit."""

import concurrent.futures
import re

import numpy as np
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient

import coremlrt


def _batch_counts(metrics, model):
    count = float(re.search(rf'coremlrt_batch_size_count{{model="{model}"}} (\S+)', metrics).group(1))
    total = float(re.search(rf'coremlrt_batch_size_sum{{model="{model}"}} (\S+)', metrics).group(1))
    return count, total


def _infer(module, url, model, x):
    client = module.InferenceServerClient(url)
    item = module.InferInput("x", list(x.shape), "FP32")
    item.set_data_from_numpy(x)
    return client.infer(model, [item]).as_numpy("y")


def _concurrently(server, model, inputs):
    with concurrent.futures.ThreadPoolExecutor(len(inputs)) as pool:
        futures = [pool.submit(_infer, grpcclient if i % 2 else httpclient,
                               server.grpc_url if i % 2 else server.http_url, model, x)
                   for i, x in enumerate(inputs)]
        return [f.result() for f in futures]


def test_concurrent_requests_merge_and_equal_single_predictions(server, model_paths):
    rng = np.random.default_rng(3)
    # Requests of 1 and 2 rows: merging concatenates along the batch dimension and splits back.
    inputs = [rng.standard_normal((1 + i % 2, 3, 32, 32)).astype(np.float32) for i in range(16)]
    reference = coremlrt.MLModel(model_paths["conv"])
    expected = [reference.predict({"x": x})["y"] for x in inputs]
    before = _batch_counts(server.metrics(), "conv") if "coremlrt_batch_size_count{model=\"conv\"}" in \
        server.metrics() else (0.0, 0.0)
    answers = _concurrently(server, "conv", inputs)
    for got, want in zip(answers, expected):
        assert got.shape == want.shape
        np.testing.assert_array_equal(got, want)
    count, total = _batch_counts(server.metrics(), "conv")
    predictions, requests = count - before[0], total - before[1]
    assert requests == len(inputs)
    assert predictions < requests, "no two concurrent requests were merged"


def test_fixed_shape_model_runs_requests_side_by_side(server, model_paths):
    rng = np.random.default_rng(4)
    inputs = [rng.standard_normal((1, 8)).astype(np.float32) for _ in range(12)]
    reference = coremlrt.MLModel(model_paths["tiny"])
    answers = _concurrently(server, "tiny", inputs)
    for got, x in zip(answers, inputs):
        np.testing.assert_array_equal(got, reference.predict({"x": x})["y"])
    count, total = _batch_counts(server.metrics(), "tiny")
    assert count == total  # never merged: one request per prediction
