"""The OpenAI-compatible endpoints over LanguageModels, independent of the HTTP server:
``OpenAIService.handle(method, path, body)`` returns a :class:`Reply`, whose body is JSON or an
iterator of server-sent events (bytes) that computes as it is read.

* ``GET /v1/models``, ``POST /v1/completions`` (``logprobs``, ``echo``, ``stop``, ``n``,
  ``stream``, prompts as text or token ids), ``POST /v1/chat/completions`` (the chat template of
  the model's tokenizer_config.json, ``logprobs`` / ``top_logprobs``, ``stream``).
* Each request runs its own sequences (a fresh KV-cache state each, dropped at its end).
* At most ``max_sequences`` requests run at once; one more gets 503 with ``Retry-After``.

``handle`` runs on the caller's thread and, for a non-streaming request, computes the whole
answer there: an HTTP layer calls it (and reads a streaming body) off its event loop.
"""

import json
import threading

import numpy as np

from .._core import Error
from . import openai_protocol as P
from .generation import _generate_tokens, _prepare
from .sampling import log_softmax

ROUTES = ("/v1/models", "/v1/completions", "/v1/chat/completions")


class Reply:
    def __init__(self, status=200, body=None, stream=None, headers=()):
        self.status, self.stream, self.headers = status, stream, list(headers)
        self.body = None if body is None else json.dumps(body, ensure_ascii=False).encode()
        content_type = "text/event-stream" if stream is not None else "application/json"
        self.headers.append(("content-type", content_type))
        if stream is not None:
            self.headers.append(("cache-control", "no-cache"))


class OpenAIService:
    def __init__(self, models, max_sequences=4, retry_after_s=1):
        """`models`: {served name: LanguageModel}."""
        if max_sequences < 1:
            raise Error(f"max_sequences must be at least 1, got {max_sequences}")
        self.models = dict(models)
        self.max_sequences = max_sequences
        self.retry_after_s = retry_after_s
        self._slots = threading.BoundedSemaphore(max_sequences)

    def handles(self, path):
        return path in ROUTES or path.startswith("/v1/models/")

    def handle(self, method, path, body=b""):
        try:
            if path == "/v1/models" or path.startswith("/v1/models/"):
                if method != "GET":
                    raise P.APIError(405, f"{path} takes GET")
                return self._models(path)
            if path not in ROUTES:
                raise P.APIError(404, f"no route {path}")
            if method != "POST":
                raise P.APIError(405, f"{path} takes POST")
            request = P.parse_body(body)
            if path == "/v1/completions":
                return self._completions(request)
            return self._chat(request)
        except Exception as exc:  # noqa: BLE001 - every failure becomes an OpenAI error object
            error = P.as_api_error(exc)
            headers = [("retry-after", str(self.retry_after_s))] if error.status == 503 else []
            return Reply(error.status, error.body(), headers=headers)

    # -- helpers -------------------------------------------------------------------------------
    def _models(self, path):
        entries = [{"id": name, "object": "model", "created": 0, "owned_by": "coremlrt",
                    "max_model_len": lm.cache_length} for name, lm in self.models.items()]
        if path == "/v1/models":
            return Reply(body={"object": "list", "data": entries})
        wanted = path[len("/v1/models/"):]
        for entry in entries:
            if entry["id"] == wanted:
                return Reply(body=entry)
        raise P.APIError(404, f"no model '{wanted}'", param="model", code="model_not_found")

    def _model(self, request):
        name = request.get("model")
        if name is None and len(self.models) == 1:
            name = next(iter(self.models))
        if name not in self.models:
            raise P.APIError(404, f"no model '{name}'; served: {sorted(self.models)}", param="model",
                             code="model_not_found")
        return name, self.models[name]

    def _acquire(self):
        if not self._slots.acquire(blocking=False):
            raise P.APIError(503, f"all {self.max_sequences} sequences are busy (--max-sequences); retry later",
                             type_="server_overloaded")

    def _run(self, events, stream, finish):
        """Runs `events` (a generator of SSE payloads) holding a slot: streamed as it is read,
        or collected and folded by `finish` into one JSON answer."""
        if not stream:
            try:
                return Reply(body=finish(list(events)))
            finally:
                self._slots.release()

        return Reply(stream=_EventStream(events, self._slots.release))

    # -- /v1/completions -----------------------------------------------------------------------
    def _completions(self, request):
        name, lm = self._model(request)
        prompts = P.prompts(request)
        n = P.choices_count(request)
        options = P.sampling_options(request)
        top_n = P.completion_logprobs(request)
        echo = bool(request.get("echo", False))
        new_tokens, _ = P.max_tokens(request, 16)
        stream = bool(request.get("stream", False))
        encoded = []
        for prompt in prompts:
            try:
                ids = lm.encode(prompt)
            except Error as exc:
                raise P.APIError(400, str(exc), param="prompt") from None
            if not ids:
                raise P.APIError(400, "a prompt has no tokens", param="prompt")
            if len(ids) + max(new_tokens, 1) - 1 > lm.cache_length:
                raise P.context_error(f"this model's context holds {lm.cache_length} tokens; the prompt has "
                                      f"{len(ids)} and max_tokens asks {new_tokens} more")
            if any(not 0 <= t < (lm.vocab_size or 1 << 31) for t in ids):
                raise P.APIError(400, "a prompt token id lies outside the vocabulary", param="prompt")
            encoded.append((prompt, ids))
        self._acquire()
        created, rid = P.now(), P.new_id("cmpl")
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))

        def events():
            prompt_total, completion_total = 0, 0
            for p_index, (prompt, ids) in enumerate(encoded):
                prompt_total += len(ids)
                for j in range(n):
                    seed = None if options["seed"] is None else options["seed"] + j
                    index = p_index * n + j
                    for text, logprobs, finish, generated in self._completion_choice(
                            lm, prompt, ids, dict(options, seed=seed), new_tokens, top_n, echo):
                        completion_total += generated
                        yield {"id": rid, "object": "text_completion", "created": created, "model": name,
                               "choices": [{"index": index, "text": text, "logprobs": logprobs,
                                            "finish_reason": finish}]}
            if include_usage or not stream:
                yield {"id": rid, "object": "text_completion", "created": created, "model": name, "choices": [],
                       "usage": P.usage(prompt_total, completion_total)}

        def finish(payloads):
            choices = {}
            for payload in payloads:
                for c in payload["choices"]:
                    entry = choices.setdefault(c["index"], {"index": c["index"], "text": "", "logprobs": None,
                                                            "finish_reason": None})
                    entry["text"] += c["text"]
                    if c["logprobs"] is not None:
                        merged = entry["logprobs"] or {k: [] for k in c["logprobs"]}
                        for k, v in c["logprobs"].items():
                            merged[k] = merged[k] + v
                        entry["logprobs"] = merged
                    entry["finish_reason"] = c["finish_reason"] or entry["finish_reason"]
            return {"id": rid, "object": "text_completion", "created": created, "model": name,
                    "choices": [choices[i] for i in sorted(choices)], "usage": payloads[-1]["usage"]}

        return self._run(events(), stream, finish)

    def _completion_choice(self, lm, prompt, ids, options, new_tokens, top_n, echo):
        """Yields (text, logprobs dict or None, finish_reason or None, generated token count)."""
        token_text = lm.tokenizer.token_text if lm.tokenizer is not None else str
        logprobs = P.CompletionLogprobs(token_text)
        emitted = 0
        prompt_rows = None
        if echo and top_n is not None:
            prompt_rows = _PromptScores(ids, top_n)
        if new_tokens == 0:
            sequence = lm.new_sequence()
            lm.feed(sequence, ids, on_rows=prompt_rows)
            generated = iter(())
        else:
            sequence, _, o = _prepare(lm, ids, dict(options, max_new_tokens=new_tokens, logprobs=top_n))
            generated = _generate_tokens(lm, sequence, ids, o, on_prompt_rows=prompt_rows)
        first = next(generated, None)
        if echo:
            text = prompt if isinstance(prompt, str) else (lm.tokenizer.decode(ids) if lm.tokenizer else "")
            if prompt_rows is not None:
                # Offsets into the echoed text: where the text of the tokens before each one ends.
                ends = _prefix_lengths(lm, ids) if isinstance(prompt, list) or lm.tokenizer is None else \
                    _prefix_lengths(lm, ids, text)
                for i, t in enumerate(ids):
                    logprobs.add(t, *prompt_rows.entry(i), 0)
                    logprobs.text_offset[-1] = ends[i]
            yield text, logprobs.as_dict() if top_n is not None else None, \
                "length" if first is None else None, 0
            emitted = len(logprobs.tokens)
            logprobs.offset = len(text)
        chunks = generated if first is None else _chain(first, generated)
        for chunk in chunks:
            if top_n is not None and not chunk.stop_token:
                top = chunk.top if top_n else None
                logprobs.add(chunk.token_id, chunk.logprob, top, len(chunk.text))
            yield chunk.text, logprobs.as_dict(emitted) if top_n is not None else None, chunk.finish_reason, \
                0 if chunk.stop_token else 1
            emitted = len(logprobs.tokens)
        if first is None and not echo:
            yield "", None, "length", 0

    # -- /v1/chat/completions ------------------------------------------------------------------
    def _chat(self, request):
        name, lm = self._model(request)
        if lm.tokenizer is None:
            raise P.APIError(400, f"model '{name}' has no tokenizer: chat needs one (--tokenizer)")
        messages = P.messages(request)
        try:
            text = lm.tokenizer.apply_chat_template(messages, add_generation_prompt=True)
        except Error as exc:
            raise P.APIError(400, str(exc), param="messages") from None
        ids = lm.tokenizer.encode(text, add_special_tokens=False)
        n = P.choices_count(request)
        options = P.sampling_options(request)
        top_n = P.chat_logprobs(request)
        room = lm.cache_length - len(ids) + 1
        new_tokens, param = P.max_tokens(request, room, ("max_completion_tokens", "max_tokens"))
        if room < 1 or new_tokens > room or new_tokens < 1:
            raise P.context_error(f"this model's context holds {lm.cache_length} tokens; the messages take "
                                  f"{len(ids)} and {param} asks {new_tokens} more (at least 1)")
        stream = bool(request.get("stream", False))
        include_usage = bool((request.get("stream_options") or {}).get("include_usage"))
        self._acquire()
        created, rid = P.now(), P.new_id("chatcmpl")
        token_text = lm.tokenizer.token_text

        def chunk(index, delta, logprobs=None, finish=None):
            return {"id": rid, "object": "chat.completion.chunk", "created": created, "model": name,
                    "choices": [{"index": index, "delta": delta, "logprobs": logprobs, "finish_reason": finish}]}

        def events():
            completion_total = 0
            for index in range(n):
                seed = None if options["seed"] is None else options["seed"] + index
                sequence, _, o = _prepare(lm, ids, dict(options, seed=seed, max_new_tokens=new_tokens,
                                                          logprobs=top_n))
                yield chunk(index, {"role": "assistant", "content": ""})
                for c in _generate_tokens(lm, sequence, ids, o):
                    entries = None
                    if top_n is not None and not c.stop_token:
                        entries = {"content": [P.chat_logprob_entry(token_text, c.token_id, c.logprob, c.top)]}
                    completion_total += 0 if c.stop_token else 1
                    delta = {"content": c.text} if c.text or not c.finish_reason else {}
                    yield chunk(index, delta, entries, c.finish_reason)
            if include_usage or not stream:
                yield {"id": rid, "object": "chat.completion.chunk", "created": created, "model": name,
                       "choices": [], "usage": P.usage(len(ids) * n, completion_total)}

        def finish(payloads):
            choices = {}
            for payload in payloads:
                for c in payload["choices"]:
                    entry = choices.setdefault(c["index"], {"index": c["index"], "message": {"role": "assistant",
                                                                                           "content": ""},
                                                            "logprobs": None, "finish_reason": None})
                    entry["message"]["content"] += c["delta"].get("content", "")
                    if c["logprobs"] is not None:
                        entry["logprobs"] = {"content": (entry["logprobs"] or {"content": []})["content"] +
                                             c["logprobs"]["content"]}
                    entry["finish_reason"] = c["finish_reason"] or entry["finish_reason"]
            return {"id": rid, "object": "chat.completion", "created": created, "model": name,
                    "choices": [choices[i] for i in sorted(choices)], "usage": payloads[-1]["usage"]}

        return self._run(events(), stream, finish)


def _prefix_lengths(lm, ids, text=None):
    """len(decode(ids[:i])) for each i (0 without a tokenizer), capped at the echoed text's length."""
    if lm.tokenizer is None:
        return [0] * len(ids)
    lengths = [len(lm.tokenizer.decode(ids[:i])) for i in range(len(ids))]
    return lengths if text is None else [min(n, len(text)) for n in lengths]


class _EventStream:
    """The server-sent events of a streamed answer, then ``[DONE]``; an error met on the way is
    sent as an event (the status went out with the first one). Gives its slot back once, at the
    end or when closed, even if never read."""

    def __init__(self, events, release):
        self._events, self._release, self._done = events, release, False

    def __iter__(self):
        return self

    def __next__(self):
        if self._done:
            raise StopIteration
        try:
            return P.sse(next(self._events))
        except StopIteration:
            self.close()
            return P.sse("[DONE]")
        except Exception as exc:  # noqa: BLE001
            self.close()
            return P.sse(P.as_api_error(exc).body())

    def close(self):
        if not self._done:
            self._done = True
            try:
                self._events.close()
            finally:
                self._release()


def _chain(first, rest):
    yield first
    yield from rest


class _PromptScores:
    """Collects, while the prompt runs, each prompt token's log-probability and the `top_n`
    most likely tokens at its place (None for the first token)."""

    def __init__(self, ids, top_n):
        self.ids, self.top_n = ids, top_n
        self.logprobs = [None] * len(ids)
        self.tops = [None] * len(ids)

    def __call__(self, offset, rows):
        lp = log_softmax(rows)
        for k in range(lp.shape[0]):
            target = offset + k + 1
            if target >= len(self.ids):
                continue
            self.logprobs[target] = float(lp[k, self.ids[target]])
            if self.top_n:
                best = np.argsort(-lp[k], kind="stable")[:self.top_n]
                self.tops[target] = [(int(t), float(lp[k, t])) for t in best]

    def entry(self, i):
        return self.logprobs[i], self.tops[i]
