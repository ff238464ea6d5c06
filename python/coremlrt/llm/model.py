"""LanguageModel: a stateful Core ML language model driven token by token.

A :class:`Sequence` is one text's key/value cache (an ``MLState``) and the position it has
reached. ``LanguageModel.feed`` runs tokens through it: windows of the prefill function for a
prompt (a prompt longer than the window is cut into windows; a last, shorter piece is padded to
a fixed window when that costs less than running it token by token), the decode function for
single tokens. Generation (generation.py) and scoring (scoring.py) are built on ``feed``.
"""

import os
import time

import numpy as np

from .._core import Error
from ..model import MLModel
from .layout import plan as make_plan
from .tokenizer import Tokenizer

_MASKED = {"float16": np.float16(-np.inf), "float32": np.float32(-np.inf)}


class Sequence:
    """One sequence's cache and position. Made by :meth:`LanguageModel.new_sequence`; a sequence
    runs one call at a time."""

    def __init__(self, state, cache_length):
        self.state = state
        self.position = 0
        self.cache_length = cache_length
        self.tokens = []

    @property
    def room(self):
        return self.cache_length - self.position


class LanguageModel:
    """``LanguageModel(path, tokenizer=None, layout=None, **load_options)``

    ``path``: an .mlpackage (or .mlmodelc) whose layout :mod:`coremlrt.llm.layout` recognises,
    or that ``layout`` (a :class:`coremlrt.llm.Layout`) describes. ``tokenizer``: a
    :class:`Tokenizer`, or the path of a folder holding tokenizer.json (or of the file); without
    one, prompts are lists of token ids. ``prefill_chunk`` caps the tokens of one prefill call
    of a function with a flexible token count (default: its largest). ``load_options`` go to
    :class:`coremlrt.MLModel` (``backend``, ``threads``, ``packed_weights``, ...).
    """

    def __init__(self, path, tokenizer=None, layout=None, *, prefill_chunk=None, **load_options):
        self.path = os.fspath(path)
        self.plan = make_plan(self.path, layout)
        self.layout = self.plan.layout
        self.cache_length = self.plan.cache_length
        self._prefill = MLModel(self.path, function_name=self.plan.prefill.name, **load_options)
        self._decode = (self._prefill if self.plan.decode.name == self.plan.prefill.name else
                        MLModel(self.path, function_name=self.plan.decode.name, **load_options))
        if isinstance(tokenizer, (str, os.PathLike)):
            tokenizer = Tokenizer(tokenizer)
        self.tokenizer = tokenizer
        if prefill_chunk is not None and prefill_chunk < 1:
            raise Error(f"prefill_chunk must be at least 1, got {prefill_chunk}")
        self.prefill_chunk = prefill_chunk
        self.vocab_size = None
        # Seconds per call, measured as calls run: whether padding a short piece of a prompt to
        # the prefill window costs less than running its tokens one by one.
        self._seconds = {"prefill": None, "decode": None}
        # Seconds spent inside predict, summed (bench_llm.py: what generation adds around it).
        self.predict_seconds = 0.0

    def __repr__(self):
        return (f"coremlrt.llm.LanguageModel({self.path!r}, layout={self.layout.kind}, prefill="
                f"'{self.plan.prefill.name}', decode='{self.plan.decode.name}', cache_length={self.cache_length})")

    # -- sequences ---------------------------------------------------------------------------
    def new_sequence(self):
        return Sequence(self._prefill.make_state(), self.cache_length)

    def encode(self, prompt, add_special_tokens=True):
        """Token ids of a prompt: a string (needs the tokenizer) or a sequence of token ids."""
        if isinstance(prompt, str):
            if self.tokenizer is None:
                raise Error("this LanguageModel has no tokenizer: give the prompt as token ids, or load it with "
                            "tokenizer=PATH (a folder holding tokenizer.json)")
            return self.tokenizer.encode(prompt, add_special_tokens=add_special_tokens)
        try:
            ids = [int(t) for t in prompt]
        except (TypeError, ValueError):
            raise Error(f"a prompt is a string or a list of token ids, not {type(prompt).__name__}") from None
        return ids

    def check_room(self, sequence, count, what="the tokens"):
        if count > sequence.room:
            raise Error(f"{what} need {count} more cache positions, but the model's cache holds "
                        f"{self.cache_length} and {sequence.position} are taken (model '{self.path}')")

    # -- running tokens ----------------------------------------------------------------------
    def feed(self, sequence, tokens, on_rows=None):
        """Runs `tokens` through `sequence` from its position on; returns the logits row
        [vocab] (float32) after the last one. `on_rows(offset, rows)` receives every token's
        logits rows as they come ([n, vocab], offset into `tokens`)."""
        tokens = [int(t) for t in tokens]
        if not tokens:
            raise Error("feed needs at least one token")
        self.check_room(sequence, len(tokens))
        done, last = 0, None
        while done < len(tokens):
            function, count, window = self._next_call(sequence.position, len(tokens) - done)
            rows = self._call(function, sequence, tokens[done:done + count], window)
            if on_rows is not None:
                on_rows(done, rows)
            last = rows[-1]
            done += count
        sequence.tokens.extend(tokens)
        return last

    def _next_call(self, position, remaining):
        """(function shape, tokens taken, window) of the next call."""
        prefill, decode = self.plan.prefill, self.plan.decode
        room = self.cache_length - position
        if remaining > 1:
            if prefill.fixed is None:
                count = min(remaining, prefill.max_tokens, self.prefill_chunk or prefill.max_tokens)
                return prefill, count, count
            if prefill.fixed > 1:
                if remaining >= prefill.fixed:
                    return prefill, prefill.fixed, prefill.fixed
                if prefill.fixed <= room and (decode.fixed not in (None, 1) or self._padding_pays(remaining)):
                    return prefill, remaining, prefill.fixed
        if decode.fixed in (None, 1):
            return decode, 1, 1
        if decode.fixed <= room:
            return decode, min(remaining, decode.fixed), decode.fixed
        raise Error(f"model '{self.path}' runs windows of {decode.fixed} tokens only, and the cache has room for "
                    f"{room} more; the last {remaining} token(s) cannot be run")

    def _padding_pays(self, count):
        prefill, decode = self._seconds["prefill"], self._seconds["decode"]
        if prefill is None or decode is None:
            return count * 4 >= self.plan.prefill.fixed
        return count * decode >= prefill

    def _call(self, function, sequence, tokens, window):
        layout = self.layout
        ids = np.zeros((1, window), np.int32)
        ids[0, :len(tokens)] = tokens
        if len(tokens) < window:
            ids[0, len(tokens):] = tokens[-1]  # padding: its cache slots are written again before they are read
        inputs = {layout.ids: ids}
        p = sequence.position
        if layout.position:
            inputs[layout.position] = np.array([p], np.int32)
        else:
            end = p + window
            keys = np.arange(end)[None, :]
            rows = p + np.arange(window)[:, None]
            masked = _MASKED[function.mask_dtype]
            inputs[layout.mask] = np.where(keys <= rows, 0, masked).astype(type(masked))[None, None]
        model = self._prefill if function.name == self.plan.prefill.name else self._decode
        kind = "decode" if window == 1 else "prefill"
        started = time.perf_counter()
        out = model.predict(inputs, state=sequence.state)
        elapsed = time.perf_counter() - started
        self.predict_seconds += elapsed
        previous = self._seconds[kind]
        self._seconds[kind] = elapsed if previous is None else 0.8 * previous + 0.2 * elapsed
        try:
            logits = out[layout.logits]
        except KeyError:
            raise Error(f"model '{self.path}' returned no output '{layout.logits}'") from None
        if logits.ndim < 2 or logits.size % window:
            raise Error(f"output '{layout.logits}' of shape {list(logits.shape)} does not hold a row of logits per "
                        f"token of a window of {window}")
        logits = logits.reshape(window, -1)
        self.vocab_size = logits.shape[1]
        sequence.position += len(tokens)
        return logits[:len(tokens)]

    # -- generation and scoring (generation.py, scoring.py) -----------------------------------
    def stream(self, prompt, **options):
        """An iterator of :class:`coremlrt.llm.Chunk`: one per generated token (its id, the text it
        adds, its log-probability), the last with ``finish_reason`` ("stop" or "length").
        Options as :meth:`generate`."""
        from .generation import stream

        return stream(self, prompt, **options)

    def generate(self, prompt, **options):
        """Generates a continuation of `prompt` (text or token ids) and returns a
        :class:`coremlrt.llm.Generation`.

        ``max_new_tokens`` (default 64); sampling: ``temperature`` (0, the default: greedy),
        ``top_k``, ``top_p``, ``repetition_penalty``, ``seed``; stopping: ``stop`` (strings),
        ``stop_token_ids`` (default: the tokenizer's end-of-sequence ids), ``ignore_eos``;
        ``logprobs`` (the number of most likely alternatives to report per token, 0 for the
        chosen token's alone, None for none). Raises :class:`coremlrt.Error` when the prompt and
        ``max_new_tokens`` pass the model's cache."""
        from .generation import generate

        return generate(self, prompt, **options)

    def token_logprobs(self, tokens, top=0):
        from .scoring import token_logprobs

        return token_logprobs(self, tokens, top)

    def loglikelihood(self, context, continuation):
        from .scoring import loglikelihood

        return loglikelihood(self, context, continuation)

    def perplexity(self, text, window=None, stride=None):
        from .scoring import perplexity

        return perplexity(self, text, window, stride)
