"""Scoring text: each token's log-probability given the ones before it, the log-likelihood of a
continuation given a context (what evaluation harnesses ask for multiple-choice tasks), and the
perplexity of a long text with a sliding window."""

import dataclasses
import math
from typing import List, Optional

import numpy as np

from .._core import Error
from .sampling import log_softmax


@dataclasses.dataclass
class TokenScores:
    """Per token of the scored ids: ``logprobs[i]`` = log p(ids[i] | ids[:i]) (NaN for i = 0,
    which has no context), ``greedy[i]`` whether ids[i] was the most likely token there, and
    ``top[i]`` the ``top`` most likely tokens with their log-probabilities (None for i = 0)."""

    ids: List[int]
    logprobs: np.ndarray
    greedy: np.ndarray
    top: Optional[list] = None


@dataclasses.dataclass
class Perplexity:
    perplexity: float
    nll: float          # summed negative log-likelihood of the scored tokens (natural log)
    tokens: int         # tokens scored (every token of the text but the first)
    windows: int


def _score_rows(ids, begin, rows_offset, rows, logprobs, greedy, top, top_n, first):
    """Fills the entries of tokens predicted by `rows` (logits after ids[begin + rows_offset + k])."""
    lp = log_softmax(rows)
    for k in range(lp.shape[0]):
        target = begin + rows_offset + k + 1
        if target < first or target >= len(ids):
            continue
        row = lp[k]
        token = ids[target]
        logprobs[target] = row[token]
        greedy[target] = row[token] >= row.max()
        if top is not None:
            best = np.argsort(-row, kind="stable")[:top_n]
            top[target] = [(int(t), float(row[t])) for t in best]


def token_logprobs(lm, tokens, top=0):
    """Scores `tokens` (text or ids, at most the cache length) in one sequence."""
    ids = lm.encode(tokens)
    if not ids:
        raise Error("nothing to score: no tokens")
    if len(ids) > lm.cache_length:
        raise Error(f"{len(ids)} tokens pass the model's cache of {lm.cache_length} positions; perplexity() "
                    f"scores longer texts with a sliding window")
    logprobs = np.full(len(ids), np.nan)
    greedy = np.ones(len(ids), bool)
    tops = [None] * len(ids) if top else None
    sequence = lm.new_sequence()
    lm.feed(sequence, ids[:-1] if len(ids) > 1 else ids,
            on_rows=lambda offset, rows: _score_rows(ids, 0, offset, rows, logprobs, greedy, tops, top, 1))
    return TokenScores(ids, logprobs, greedy, tops)


def loglikelihood(lm, context, continuation):
    """(sum of log p(continuation | context), whether greedy decoding would produce the
    continuation). Strings are split as evaluation harnesses split them: the tokens of
    context + continuation, less as many as the context alone has; an empty context is the
    BOS token. A pair longer than the cache keeps its last tokens (the continuation whole)."""
    if isinstance(context, str) != isinstance(continuation, str):
        raise Error("context and continuation must both be text or both be token ids")
    if isinstance(context, str):
        if lm.tokenizer is None:
            raise Error("text needs a tokenizer; give token ids or load the model with tokenizer=PATH")
        whole = lm.tokenizer.encode(context + continuation)
        context_ids = lm.tokenizer.encode(context) if context else []
        if not context:
            # No text before: score from BOS (encode already put it first when the tokenizer adds it).
            bos = lm.tokenizer.bos_id
            context_ids = whole[:1] if bos is not None and whole and whole[0] == bos else []
        continuation_ids = whole[len(context_ids):]
        context_ids = whole[:len(context_ids)]
    else:
        context_ids, continuation_ids = lm.encode(context), lm.encode(continuation)
    if not continuation_ids:
        raise Error("the continuation has no tokens")
    if not context_ids:
        bos = lm.tokenizer.bos_id if lm.tokenizer is not None else None
        if bos is None:
            raise Error("an empty context needs a BOS token to condition on; give context token ids")
        context_ids = [bos]
    if len(continuation_ids) >= lm.cache_length:
        raise Error(f"a continuation of {len(continuation_ids)} tokens does not fit the model's cache of "
                    f"{lm.cache_length} positions with any context")
    ids = (context_ids + continuation_ids)[-lm.cache_length:]
    scores = token_logprobs(lm, ids)
    n = len(continuation_ids)
    return float(np.sum(scores.logprobs[-n:])), bool(np.all(scores.greedy[-n:]))


def perplexity(lm, text, window=None, stride=None):
    """exp(mean negative log-likelihood) of the tokens of `text` (a string, or token ids), each
    scored once, in windows of at most `window` tokens (default: the cache length), each run in a
    fresh sequence: the first scores its tokens, each later one the next `stride` tokens
    (default: half a window) after the context of the window - stride tokens before them."""
    ids = lm.encode(text)
    window = window or lm.cache_length
    if not 2 <= window <= lm.cache_length:
        raise Error(f"window must lie in [2, {lm.cache_length}] (the cache length), got {window}")
    stride = stride or max(1, window // 2)
    if not 1 <= stride <= window:
        raise Error(f"stride must lie in [1, window = {window}], got {stride}")
    if len(ids) < 2:
        raise Error("perplexity needs at least two tokens")
    logprobs = np.full(len(ids), np.nan)
    greedy = np.ones(len(ids), bool)
    scored_until, windows = 1, 0
    while scored_until < len(ids):
        end = min(window if windows == 0 else scored_until + stride, len(ids))
        begin = max(0, end - window)
        first = scored_until
        sequence = lm.new_sequence()
        # Tokens before `first` are context only (the model still computes their rows).
        lm.feed(sequence, ids[begin:end - 1],
                on_rows=lambda offset, rows: _score_rows(ids, begin, offset, rows, logprobs, greedy, None, 0, first))
        windows += 1
        scored_until = end
    nll = -float(np.sum(logprobs[1:]))
    count = len(ids) - 1
    return Perplexity(perplexity=math.exp(nll / count), nll=nll, tokens=count, windows=windows)
