"""The OpenAI-compatible API's messages, apart from any HTTP framework: requests checked and
turned into generation options, responses and server-sent-event chunks built as OpenAI's API
writes them (the fields lm-evaluation-harness's ``local-completions`` and the ``openai`` client
read included).

Extensions beyond OpenAI's fields, as other OpenAI-compatible servers take them: ``top_k``,
``repetition_penalty``, ``ignore_eos``, and token-id prompts (a list of ints, or a list of such
lists) on /v1/completions.
"""

import json
import time
import uuid

from .._core import Error

MAX_LOGPROBS = 20


class APIError(Exception):
    """An error answer: HTTP status and OpenAI's error object."""

    def __init__(self, status, message, type_="invalid_request_error", param=None, code=None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type_, param, code

    def body(self):
        return {"error": {"message": self.message, "type": self.type, "param": self.param, "code": self.code}}


def parse_body(body):
    try:
        request = json.loads(body or b"{}")
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise APIError(400, f"the request body is not JSON: {exc}") from None
    if not isinstance(request, dict):
        raise APIError(400, "the request body must be a JSON object")
    return request


def _number(request, name, default, kind=float, low=None, high=None):
    value = request.get(name, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and not float(value).is_integer()):
        raise APIError(400, f"'{name}' must be {'an integer' if kind is int else 'a number'}, got {value!r}", param=name)
    value = kind(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise APIError(400, f"'{name}' must lie in [{low}, {high}], got {value}", param=name)
    return value


def _stop(request):
    stop = request.get("stop")
    if stop is None:
        return None
    if isinstance(stop, str):
        stop = [stop]
    if not isinstance(stop, list) or not all(isinstance(s, str) for s in stop) or len(stop) > 16:
        raise APIError(400, "'stop' must be a string or a list of at most 16 strings", param="stop")
    return stop


def _unsupported(request):
    for name in ("presence_penalty", "frequency_penalty"):
        if request.get(name) not in (None, 0, 0.0):
            raise APIError(400, f"'{name}' is not supported; 'repetition_penalty' is", param=name)
    if request.get("logit_bias"):
        raise APIError(400, "'logit_bias' is not supported", param="logit_bias")
    if request.get("suffix"):
        raise APIError(400, "'suffix' is not supported", param="suffix")
    if request.get("best_of") not in (None, 1):
        raise APIError(400, "'best_of' must be 1", param="best_of")
    if request.get("tools") or request.get("functions"):
        raise APIError(400, "tools and functions are not supported", param="tools")


def sampling_options(request):
    """The options of LanguageModel.stream that a request sets (OpenAI's defaults:
    temperature 1, top_p 1)."""
    _unsupported(request)
    seed = request.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise APIError(400, f"'seed' must be an integer, got {seed!r}", param="seed")
    options = dict(temperature=_number(request, "temperature", 1.0, low=0, high=2),
                   top_p=_number(request, "top_p", 1.0, low=0, high=1),
                   top_k=_number(request, "top_k", 0, int, low=-1),
                   repetition_penalty=_number(request, "repetition_penalty", 1.0, low=0.01, high=10),
                   seed=seed, stop=_stop(request), ignore_eos=bool(request.get("ignore_eos", False)))
    if options["top_k"] < 0:
        options["top_k"] = 0
    if options["top_p"] == 0:
        options["top_p"] = 1e-9  # the most likely token only
    return options


def prompts(request):
    """/v1/completions' prompts: a list of str or of token-id lists."""
    prompt = request.get("prompt")
    if isinstance(prompt, str):
        return [prompt]
    if isinstance(prompt, list) and prompt:
        if all(isinstance(p, int) and not isinstance(p, bool) for p in prompt):
            return [prompt]
        if all(isinstance(p, str) for p in prompt):
            return prompt
        if all(isinstance(p, list) and p and all(isinstance(t, int) and not isinstance(t, bool) for t in p)
               for p in prompt):
            return prompt
    raise APIError(400, "'prompt' must be a string, a list of strings, a list of token ids or a list of such lists",
                   param="prompt")


def choices_count(request):
    n = _number(request, "n", 1, int, low=1, high=16)
    return n


def completion_logprobs(request):
    value = request.get("logprobs")
    if value is None or value is False:
        return None
    if value is True:
        return 0
    return _number(request, "logprobs", None, int, low=0, high=MAX_LOGPROBS)


def chat_logprobs(request):
    if not request.get("logprobs"):
        return None
    return _number(request, "top_logprobs", 0, int, low=0, high=MAX_LOGPROBS)


def messages(request):
    value = request.get("messages")
    if not isinstance(value, list) or not value:
        raise APIError(400, "'messages' must be a non-empty list", param="messages")
    out = []
    for m in value:
        if not isinstance(m, dict) or not isinstance(m.get("role"), str):
            raise APIError(400, "each message must be an object with a 'role'", param="messages")
        content = m.get("content")
        if isinstance(content, list):  # content parts: the text ones joined
            if not all(isinstance(p, dict) and p.get("type") == "text" for p in content):
                raise APIError(400, "only text content parts are supported", param="messages")
            content = "".join(p.get("text", "") for p in content)
        if content is not None and not isinstance(content, str):
            raise APIError(400, "a message's content must be a string or a list of text parts", param="messages")
        out.append(dict(m, content=content or ""))
    return out


def max_tokens(request, default, names=("max_tokens",)):
    for name in names:
        if request.get(name) is not None:
            return _number(request, name, None, int, low=0), name
    return default, names[0]


def new_id(prefix):
    return f"{prefix}-{uuid.uuid4().hex[:24]}"


def now():
    return int(time.time())


def usage(prompt_tokens, completion_tokens):
    return {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens}


def sse(payload):
    """One server-sent event carrying `payload` (a dict, or the final "[DONE]")."""
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
    return f"data: {data}\n\n".encode()


class CompletionLogprobs:
    """/v1/completions' ``logprobs`` object, built token by token: tokens, their log-probs, the
    top alternatives ({token text: log-prob}) and each token's offset into the choice's text."""

    def __init__(self, token_text, offset=0):
        self.token_text, self.offset = token_text, offset
        self.tokens, self.token_logprobs, self.top_logprobs, self.text_offset = [], [], [], []

    def add(self, token_id, logprob, top, text_length):
        self.tokens.append(self.token_text(token_id))
        self.token_logprobs.append(None if logprob is None else float(logprob))
        self.top_logprobs.append(None if top is None else {self.token_text(t): float(lp) for t, lp in top})
        self.text_offset.append(self.offset)
        self.offset += text_length

    def as_dict(self, start=0):
        return {"tokens": self.tokens[start:], "token_logprobs": self.token_logprobs[start:],
                "top_logprobs": self.top_logprobs[start:], "text_offset": self.text_offset[start:]}


def chat_logprob_entry(token_text, token_id, logprob, top):
    text = token_text(token_id)
    return {"token": text, "logprob": float(logprob), "bytes": list(text.encode("utf-8")),
            "top_logprobs": [{"token": token_text(t), "logprob": float(lp), "bytes": list(token_text(t).encode())}
                             for t, lp in (top or [])]}


def context_error(exc):
    return APIError(400, str(exc), param="max_tokens", code="context_length_exceeded")


def as_api_error(exc):
    if isinstance(exc, APIError):
        return exc
    if isinstance(exc, Error):
        return APIError(400, str(exc))
    return APIError(500, f"{type(exc).__name__}: {exc}", type_="server_error")
