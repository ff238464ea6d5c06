"""Generation: the prompt through the prefill windows, then one decode step per new token,
each chosen by the sampler (sampling.py), until a stop token, a stop string or
``max_new_tokens``."""

import dataclasses
from typing import List, Optional, Tuple

import numpy as np

from .._core import Error
from .sampling import Sampler, SamplingParams, log_softmax
from .tokenizer import IncrementalText


@dataclasses.dataclass
class Chunk:
    """One generated token: its id, the text it adds (empty while a character or a possible
    stop string is incomplete), its log-probability under the model (``logprobs`` asked) and
    the ``top`` most likely tokens with theirs; ``finish_reason`` on the last chunk only."""

    token_id: int
    text: str
    logprob: Optional[float] = None
    top: Optional[List[Tuple[int, float]]] = None
    finish_reason: Optional[str] = None
    stop_token: bool = False  # the token is a stop token: it ends the text and is not part of it


@dataclasses.dataclass
class Generation:
    text: str
    token_ids: List[int]
    finish_reason: str
    prompt_tokens: int
    logprobs: Optional[List[float]] = None
    top: Optional[list] = None


class StopStrings:
    """Cuts generated text at the first stop string, holding back text that may be the start
    of one until the next token tells."""

    def __init__(self, stops):
        if isinstance(stops, str):
            stops = [stops]
        self.stops = [s for s in (stops or []) if s]
        if not all(isinstance(s, str) for s in self.stops):
            raise Error("stop must be a string or a list of strings")
        self.pending = ""

    def feed(self, delta):
        """(text to emit now, whether a stop string was hit)."""
        if not self.stops:
            return delta, False
        self.pending += delta
        hits = [i for i in (self.pending.find(s) for s in self.stops) if i >= 0]
        if hits:
            emit, self.pending = self.pending[:min(hits)], ""
            return emit, True
        keep = 0
        for s in self.stops:
            for k in range(min(len(s) - 1, len(self.pending)), keep, -1):
                if self.pending.endswith(s[:k]):
                    keep = k
                    break
        cut = len(self.pending) - keep
        emit, self.pending = self.pending[:cut], self.pending[cut:]
        return emit, False

    def flush(self):
        text, self.pending = self.pending, ""
        return text


def _options(lm, max_new_tokens=64, temperature=0.0, top_k=0, top_p=1.0, repetition_penalty=1.0, seed=None,
             stop=None, stop_token_ids=None, ignore_eos=False, logprobs=None, add_special_tokens=True,
             sequence=None):
    if not isinstance(max_new_tokens, (int, np.integer)) or max_new_tokens < 1:
        raise Error(f"max_new_tokens must be a positive integer, got {max_new_tokens!r}")
    params = SamplingParams(temperature=float(temperature), top_k=int(top_k), top_p=float(top_p),
                            repetition_penalty=float(repetition_penalty), seed=seed)
    stops = set(int(t) for t in (stop_token_ids or ()))
    if not ignore_eos and stop_token_ids is None and lm.tokenizer is not None:
        stops.update(lm.tokenizer.eos_ids)
    if stop and lm.tokenizer is None:
        raise Error("stop strings need a tokenizer (the model was loaded without one); give stop_token_ids")
    if logprobs is not None and (not isinstance(logprobs, (int, np.integer)) or logprobs < 0):
        raise Error(f"logprobs must be None or an integer >= 0, got {logprobs!r}")
    return dict(max_new_tokens=int(max_new_tokens), params=params, stop_ids=frozenset(stops), stop=stop,
                logprobs=logprobs, add_special_tokens=add_special_tokens, sequence=sequence)


def stream(lm, prompt, **options):
    """The checks run now (a bad option or a prompt past the cache raises here); the tokens
    come as the iterator is read."""
    sequence, ids, o = _prepare(lm, prompt, options)
    return _generate_tokens(lm, sequence, ids, o)


def _prepare(lm, prompt, options):
    o = _options(lm, **options)
    ids = lm.encode(prompt, add_special_tokens=o["add_special_tokens"])
    if not ids:
        raise Error("the prompt is empty (no tokens); give at least one token, such as the BOS token")
    sequence = o["sequence"] or lm.new_sequence()
    # The prompt and every new token but the last go into the cache.
    lm.check_room(sequence, len(ids) + o["max_new_tokens"] - 1,
                  f"a prompt of {len(ids)} tokens and {o['max_new_tokens']} new tokens")
    return sequence, ids, o


def _generate_tokens(lm, sequence, ids, o, on_prompt_rows=None):
    """`on_prompt_rows(offset, rows)`: the prompt's logits rows as lm.feed gives them (the
    server's echo of prompt log-probabilities)."""
    stop_ids, top_n = o["stop_ids"], o["logprobs"]
    sampler = Sampler(o["params"])
    penalize = o["params"].repetition_penalty != 1.0
    text = IncrementalText(lm.tokenizer) if lm.tokenizer is not None else None
    stops = StopStrings(o["stop"])
    history = list(ids)
    logits = lm.feed(sequence, ids, on_rows=on_prompt_rows)
    for step in range(o["max_new_tokens"]):
        token = sampler.choose(logits, history if penalize else ())
        history.append(token)
        logprob, top = None, None
        if top_n is not None:
            row = log_softmax(logits)
            logprob = float(row[token])
            if top_n:
                best = np.argsort(-row, kind="stable")[:top_n]
                top = [(int(t), float(row[t])) for t in best]
        if token in stop_ids:
            yield Chunk(token, _rest(text, stops), logprob, top, "stop", stop_token=True)
            return
        delta, hit = stops.feed(text.add(token)) if text is not None else ("", False)
        if hit:
            yield Chunk(token, delta, logprob, top, "stop")
            return
        if step == o["max_new_tokens"] - 1:
            yield Chunk(token, delta + _rest(text, stops), logprob, top, "length")
            return
        yield Chunk(token, delta, logprob, top)
        logits = lm.feed(sequence, [token])


def _rest(text, stops):
    """At the end: the text held back (a partial character, a possible stop string's start),
    still cut at a stop string that the partial character's replacement completes."""
    if text is None:
        return stops.flush()
    emit, hit = stops.feed(text.rest())
    return emit if hit else emit + stops.flush()


def generate(lm, prompt, **options):
    sequence, ids, o = _prepare(lm, prompt, options)
    chunks = list(_generate_tokens(lm, sequence, ids, o))
    kept = [c for c in chunks if not c.stop_token]
    want_logprobs = o["logprobs"] is not None
    return Generation(text="".join(c.text for c in chunks), token_ids=[c.token_id for c in kept],
                      finish_reason=chunks[-1].finish_reason, prompt_tokens=len(ids),
                      logprobs=[c.logprob for c in kept] if want_logprobs else None,
                      top=[c.top for c in kept] if want_logprobs and o["logprobs"] else None)
