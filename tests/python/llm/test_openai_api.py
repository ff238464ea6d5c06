"""The OpenAI-compatible API: coremlrt.llm.openai_service in process (requests and answers as
lm-evaluation-harness's local-completions and the openai client use them, the bound on
concurrent sequences), then through ``coremlrt serve`` over HTTP with server-sent events."""

import importlib.util
import json
import os
import sys
import urllib.error
import urllib.request

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("torch")

from coremlrt.llm import LanguageModel  # noqa: E402
from coremlrt.llm.openai_service import OpenAIService  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "serving"))
import llm_models as M  # noqa: E402
from llama_helpers import reference_logits  # noqa: E402
from coremlrt.llm.sampling import log_softmax  # noqa: E402

PROMPT = [1, 45, 120, 7, 88, 200, 31, 64, 9, 150, 77, 3]


@pytest.fixture(scope="module")
def lm():
    return LanguageModel(M.package("mask_fp16"), tokenizer=M.path("tokenizer"))


@pytest.fixture(scope="module")
def service(lm):
    return OpenAIService({"tiny": lm}, max_sequences=1, retry_after_s=3)


def post(service, path, request):
    reply = service.handle("POST", path, json.dumps(request).encode())
    if reply.stream is not None:
        return reply.status, b"".join(reply.stream)
    return reply.status, json.loads(reply.body)


def events(raw):
    lines = [line[len(b"data: "):] for line in raw.split(b"\n\n") if line.startswith(b"data: ")]
    assert lines[-1] == b"[DONE]"
    return [json.loads(line) for line in lines[:-1]]


def test_echo_logprobs_as_local_completions_reads_them(service, lm):
    """lm-evaluation-harness's loglikelihood request: token ids, echo, logprobs 1, max_tokens 1;
    it sums token_logprobs[ctxlen:-1] and calls a continuation greedy when each equals the top one."""
    module = M.torch_model()
    status, answer = post(service, "/v1/completions", {"model": "tiny", "prompt": [PROMPT], "max_tokens": 1,
                                                       "temperature": 0, "logprobs": 1, "echo": True, "seed": 1234})
    assert status == 200
    lp = answer["choices"][0]["logprobs"]
    assert len(lp["token_logprobs"]) == len(PROMPT) + 1 and lp["token_logprobs"][0] is None
    expected = log_softmax(reference_logits(module, PROMPT))
    np.testing.assert_allclose(lp["token_logprobs"][1:-1], expected[np.arange(len(PROMPT) - 1), PROMPT[1:]],
                               atol=0.03, rtol=0)
    for t, (value, top) in enumerate(zip(lp["token_logprobs"][1:-1], lp["top_logprobs"][1:-1]), start=1):
        assert len(top) == 1
        assert (value == max(top.values())) == (int(np.argmax(expected[t - 1])) == PROMPT[t]) or \
            abs(np.sort(expected[t - 1])[-1] - np.sort(expected[t - 1])[-2]) < 0.03
    generated = lm.generate(PROMPT, max_new_tokens=1, ignore_eos=True)
    assert lp["tokens"][-1] == lm.tokenizer.token_text(generated.token_ids[0])
    assert answer["usage"] == {"prompt_tokens": len(PROMPT), "completion_tokens": 1, "total_tokens": len(PROMPT) + 1}


def test_greedy_completion_text_and_max_tokens_zero(service, lm):
    status, answer = post(service, "/v1/completions", {"prompt": "The quick brown", "max_tokens": 12,
                                                       "temperature": 0, "ignore_eos": True})
    assert status == 200
    assert answer["choices"][0]["text"] == lm.generate("The quick brown", max_new_tokens=12, ignore_eos=True).text
    status, answer = post(service, "/v1/completions", {"prompt": "The quick", "max_tokens": 0, "echo": True,
                                                       "logprobs": 0})
    assert status == 200 and answer["choices"][0]["text"] == "The quick"
    scores = lm.token_logprobs("The quick")
    assert answer["choices"][0]["logprobs"]["token_logprobs"][1:] == pytest.approx(list(scores.logprobs[1:]), abs=1e-9)


def test_streamed_chat_equals_the_whole_answer(service, lm):
    request = {"model": "tiny", "messages": [{"role": "system", "content": "Be brief."},
                                             {"role": "user", "content": "Say something."}],
               "max_tokens": 10, "temperature": 0.8, "seed": 3, "logprobs": True, "top_logprobs": 2}
    status, whole = post(service, "/v1/chat/completions", request)
    assert status == 200
    status, raw = post(service, "/v1/chat/completions", dict(request, stream=True,
                                                              stream_options={"include_usage": True}))
    chunks = events(raw)
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
    assert text == whole["choices"][0]["message"]["content"]
    assert chunks[-1]["usage"] == whole["usage"] and chunks[-2]["choices"][0]["finish_reason"] == "length"
    prompt = lm.tokenizer.apply_chat_template(request["messages"])
    assert prompt.startswith("<s><|system|>\nBe brief.</s>\n") and prompt.endswith("<|assistant|>\n")
    expected = lm.generate(lm.tokenizer.encode(prompt, add_special_tokens=False), max_new_tokens=10,
                           temperature=0.8, seed=3)
    assert text == expected.text
    assert len(whole["choices"][0]["logprobs"]["content"]) == whole["usage"]["completion_tokens"]


def test_errors_and_the_bound_on_sequences(service):
    status, answer = post(service, "/v1/completions", {"prompt": "x", "max_tokens": 500})
    assert status == 400 and answer["error"]["code"] == "context_length_exceeded"
    assert post(service, "/v1/completions", {"prompt": "x", "model": "other"})[0] == 404
    assert post(service, "/v1/completions", {"prompt": {"a": 1}})[0] == 400
    assert post(service, "/v1/completions", {"prompt": "x", "temperature": 3})[0] == 400
    held = service.handle("POST", "/v1/completions", json.dumps({"prompt": "x", "stream": True}).encode())
    assert held.status == 200
    busy = service.handle("POST", "/v1/completions", json.dumps({"prompt": "x"}).encode())
    assert busy.status == 503 and ("retry-after", "3") in busy.headers
    assert json.loads(busy.body)["error"]["type"] == "server_overloaded"
    held.stream.close()  # a client that went away gives its slot back
    assert post(service, "/v1/completions", {"prompt": "x", "max_tokens": 2})[0] == 200


@pytest.mark.skipif(importlib.util.find_spec("uvicorn") is None or importlib.util.find_spec("grpc") is None,
                    reason="coremlrt serve needs the serve extra")
def test_coremlrt_serve_answers_the_openai_api(lm, tmp_path):
    import server_helpers as SH

    with SH.serve(M.package("mask_fp16"), "--tokenizer", M.path("tokenizer"), "--max-sequences", "2",
                  models=["model"]) as server:
        base = f"http://{server.http_url}/v1"
        with urllib.request.urlopen(base + "/models", timeout=30) as r:
            assert json.load(r)["data"][0]["id"] == "model"
        request = urllib.request.Request(base + "/chat/completions", data=json.dumps(
            {"model": "model", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 8,
             "temperature": 0, "stream": True}).encode(), headers={"content-type": "application/json"})
        with urllib.request.urlopen(request, timeout=30) as r:
            assert r.headers["content-type"].startswith("text/event-stream")
            chunks = events(r.read())
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        prompt = lm.tokenizer.encode(lm.tokenizer.apply_chat_template([{"role": "user", "content": "Hello"}]),
                                     add_special_tokens=False)
        assert text == lm.generate(prompt, max_new_tokens=8).text
        bad = urllib.request.Request(base + "/completions", data=b"{not json", headers={})
        with pytest.raises(urllib.error.HTTPError) as error:
            urllib.request.urlopen(bad, timeout=30)
        assert error.value.code == 400
        if importlib.util.find_spec("openai") is not None:
            import openai

            client = openai.OpenAI(base_url=base, api_key="unused")
            stream = client.chat.completions.create(model="model", messages=[{"role": "user", "content": "Hello"}],
                                                    max_tokens=8, temperature=0, stream=True)
            assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == text
