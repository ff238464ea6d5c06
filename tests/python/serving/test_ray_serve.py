"""coremlrt.ray.serve_deployment on a local Ray: concurrent calls through a handle are merged
by @serve.batch (conv model) and each answer equals in-process predict; HTTP works; a bad
request fails alone; stateful models are refused."""

import concurrent.futures
import json
import urllib.error
import urllib.request

import numpy as np
import pytest

import coremlrt
import server_helpers as SH

ray = pytest.importorskip("ray")
serve = pytest.importorskip("ray.serve")
import coremlrt.ray  # noqa: E402


@pytest.fixture(scope="module")
def ray_serve():
    port = SH.free_ports(1)[0]
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    try:
        yield port
    finally:
        serve.shutdown()
        ray.shutdown()


def test_conv_deployment_merges_and_matches(ray_serve, model_paths):
    app = coremlrt.ray.serve_deployment(model_paths["conv"], max_batch_size=8, batch_wait_timeout_s=0.05,
                                        name="conv")
    handle = serve.run(app, name="conv", route_prefix="/conv")
    rng = np.random.default_rng(11)
    inputs = [rng.standard_normal((1 + i % 2, 3, 32, 32)).astype(np.float32) for i in range(12)]
    reference = coremlrt.MLModel(model_paths["conv"])
    with concurrent.futures.ThreadPoolExecutor(12) as pool:
        answers = list(pool.map(lambda x: handle.predict.remote({"x": x}).result(), inputs))
    for x, got in zip(inputs, answers):
        np.testing.assert_array_equal(got["y"], reference.predict({"x": x})["y"])
    stats = handle.stats.remote().result()
    assert stats["merge"] and stats["requests"] == 12 and stats["predictions"] < 12, stats
    # A bad request in a batch fails alone.
    with concurrent.futures.ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(lambda v: handle.predict.remote({"x": v}).result(), v)
                   for v in (inputs[0], np.zeros((1, 3, 7, 7), np.float32), inputs[2], "text")]
        outcomes = []
        for f in futures:
            try:
                outcomes.append(f.result())
            except Exception as exc:  # noqa: BLE001 - Ray wraps the model's coremlrt.Error
                outcomes.append(exc)
    np.testing.assert_array_equal(outcomes[0]["y"], reference.predict({"x": inputs[0]})["y"])
    np.testing.assert_array_equal(outcomes[2]["y"], reference.predict({"x": inputs[2]})["y"])
    assert isinstance(outcomes[1], Exception) and "shape" in str(outcomes[1])
    assert isinstance(outcomes[3], Exception)
    # Over HTTP.
    x = inputs[0]
    body = json.dumps({"inputs": {"x": x.tolist()}}).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{ray_serve}/conv", data=body,
                                     headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=60) as r:
        got = np.asarray(json.loads(r.read())["outputs"]["y"], np.float32)
    np.testing.assert_array_equal(got, reference.predict({"x": x})["y"])
    bad = urllib.request.Request(f"http://127.0.0.1:{ray_serve}/conv", data=b'{"nope": 1}',
                                 headers={"Content-Type": "application/json"})
    with pytest.raises(urllib.error.HTTPError) as error:
        urllib.request.urlopen(bad, timeout=60)
    assert error.value.code == 400


def test_stateful_model_is_refused(model_paths):
    with pytest.raises(coremlrt.Error, match="stateful"):
        coremlrt.ray.serve_deployment(model_paths["lm"])
