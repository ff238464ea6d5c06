"""Stateful sequences: the KV-cache LM's prefill + decode loop over the server equals the same
loop in process with an MLState (and the torch reference, within the LM's tolerance);
two sequences interleaved; end, eviction and the sequence limit."""

import json
import threading
import time
import urllib.error
import urllib.request

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

import coremlrt
import lm_helpers as H
import server_helpers as SH


def _step(client, module, sequence_id, function, tokens, start, **flags):
    items = []
    for name, value in H.lm_inputs(tokens, start).items():
        item = module.InferInput(name, list(value.shape), "INT32")
        item.set_data_from_numpy(value)
        items.append(item)
    result = client.infer("lm", items, sequence_id=sequence_id, parameters={"function": function}, **flags)
    return result.as_numpy("logits")


class InProcess:
    """The same decode loop with MLModel and an MLState: what the server must answer."""

    def __init__(self, path):
        self.prefill = coremlrt.MLModel(path, function_name="prefill")
        self.decode = coremlrt.MLModel(path, function_name="decode")
        self.state = self.prefill.make_state()

    def step(self, function, tokens, start):
        return getattr(self, function).predict(H.lm_inputs(tokens, start), state=self.state)["logits"]


def _script(seed, steps=6):
    rng = np.random.default_rng(seed)
    prompt = rng.integers(0, H.VOCAB, H.PROMPT).astype(np.int32)
    return prompt, [int(t) for t in rng.integers(0, H.VOCAB, steps)]


@pytest.mark.parametrize("module", [grpcclient, httpclient], ids=["grpc", "http"])
def test_two_interleaved_sequences_match_in_process_decode(server, model_paths, module):
    client = module.InferenceServerClient(server.grpc_url if module is grpcclient else server.http_url)
    torch_lm = H.TorchLM(H.make_torch_lm(0))
    runs = {}
    for sequence_id, seed in ((101, 1), ("beam-b", 2)):
        prompt, tokens = _script(seed)
        runs[sequence_id] = (prompt, tokens, InProcess(model_paths["lm"]))
    # Prefill both, then alternate decode steps between them: each keeps its own state.
    for sequence_id, (prompt, _, local) in runs.items():
        got = _step(client, module, sequence_id, "prefill", prompt, 0, sequence_start=True)
        np.testing.assert_array_equal(got, local.step("prefill", prompt, 0))
    for i in range(len(runs[101][1])):
        for sequence_id, (_, tokens, local) in runs.items():
            last = i == len(tokens) - 1
            got = _step(client, module, sequence_id, "decode", [tokens[i]], H.PROMPT + i, sequence_end=last)
            np.testing.assert_array_equal(got, local.step("decode", [tokens[i]], H.PROMPT + i))
    # And the in-process loop is the torch model's (so the server's answers are right, not just equal).
    prompt, tokens, _ = runs[101]
    expected = [torch_lm.step(prompt, 0)] + [torch_lm.step([t], H.PROMPT + i) for i, t in enumerate(tokens)]
    local = InProcess(model_paths["lm"])
    got = [local.step("prefill", prompt, 0)] + [local.step("decode", [t], H.PROMPT + i) for i, t in enumerate(tokens)]
    for g, e in zip(got, expected):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-4)
    # Ended sequences are gone.
    with pytest.raises(InferenceServerException, match="not live"):
        _step(client, module, 101, "decode", [1], H.PROMPT + 6)


def test_restart_gives_a_fresh_state(server, model_paths):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    prompt, tokens = _script(5)
    first = _step(client, grpcclient, 7, "prefill", prompt, 0, sequence_start=True)
    _step(client, grpcclient, 7, "decode", [tokens[0]], H.PROMPT)
    again = _step(client, grpcclient, 7, "prefill", prompt, 0, sequence_start=True)
    np.testing.assert_array_equal(again, first)
    local = InProcess(model_paths["lm"])
    local.step("prefill", prompt, 0)
    got = _step(client, grpcclient, 7, "decode", [tokens[1]], H.PROMPT, sequence_end=True)
    np.testing.assert_array_equal(got, local.step("decode", [tokens[1]], H.PROMPT))


def test_stateful_model_needs_a_sequence_id(server):
    client = grpcclient.InferenceServerClient(server.grpc_url)
    prompt, _ = _script(6)
    with pytest.raises(InferenceServerException, match="stateful.*sequence_id"):
        _step(client, grpcclient, 0, "prefill", prompt, 0)
    with pytest.raises(InferenceServerException, match="never started"):
        _step(client, grpcclient, 999, "prefill", prompt, 0)


def test_idle_sequences_are_evicted_and_the_limit_holds(model_paths):
    with SH.serve(model_paths["lm"], "--sequence-timeout", "1", "--max-sequences", "2", models=["lm"]) as s:
        client = httpclient.InferenceServerClient(s.http_url)
        prompt, _ = _script(8)
        _step(client, httpclient, 1, "prefill", prompt, 0, sequence_start=True)
        _step(client, httpclient, 2, "prefill", prompt, 0, sequence_start=True)
        # Both slots taken by sequences in use: a start waits one timeout for a slot, then gets 503.
        stop = threading.Event()

        def keep_busy():
            keeper = httpclient.InferenceServerClient(s.http_url)
            step = 0
            while not stop.is_set():
                for sequence_id in (1, 2):
                    _step(keeper, httpclient, sequence_id, "decode", [3], H.PROMPT + step % 8)
                step += 1
                time.sleep(0.2)

        busy = threading.Thread(target=keep_busy)
        busy.start()
        try:
            began = time.monotonic()
            with pytest.raises(InferenceServerException, match="2 sequences are live") as full:
                _step(client, httpclient, 3, "prefill", prompt, 0, sequence_start=True)
            assert full.value.status() == "503" and time.monotonic() - began >= 0.9
            # Plain HTTP: the 503 carries Retry-After.
            body = json.dumps({"parameters": {"sequence_id": 4, "sequence_start": True, "function": "prefill"},
                               "inputs": [{"name": n, "datatype": "INT32", "shape": list(v.shape),
                                           "data": v.ravel().tolist()} for n, v in H.lm_inputs(prompt, 0).items()]})
            request = urllib.request.Request(f"http://{s.http_url}/v2/models/lm/infer", data=body.encode(),
                                             headers={"Content-Type": "application/json"})
            with pytest.raises(urllib.error.HTTPError) as error:
                urllib.request.urlopen(request, timeout=30)
            assert error.value.code == 503 and error.value.headers["Retry-After"] == "1"
            assert "retry after 1 s" in json.loads(error.value.read())["error"]
        finally:
            stop.set()
            busy.join()
        # The two sequences go idle: a start waits until one has been idle for the timeout, takes
        # its slot (no refusal for an abandoned sequence), and the dropped sequence is gone.
        began = time.monotonic()
        _step(client, httpclient, 3, "prefill", prompt, 0, sequence_start=True)
        assert time.monotonic() - began < 3
        time.sleep(2.5)  # past the 1 s idle timeout: the rest are dropped by the reaper
        with pytest.raises(InferenceServerException, match="not live"):
            _step(client, httpclient, 1, "decode", [3], H.PROMPT)
        assert 'coremlrt_live_sequences{model="lm"} 0.0' in s.metrics()
