"""Choosing the next token from a row of logits: greedy, or sampled with temperature, top-k and
top-p (nucleus), after a repetition penalty; seeded for repeatable runs.

The order is transformers' (``generate``'s logits processors): repetition penalty, then
temperature, top-k, top-p, then a draw from the softmax. The penalty divides a positive logit
of a token already in the sequence by ``repetition_penalty`` and multiplies a negative one
(the CTRL paper's form, as transformers applies it).
"""

import dataclasses
from typing import Optional

import numpy as np

from .._core import Error


@dataclasses.dataclass
class SamplingParams:
    """``temperature`` 0 (the default) is greedy: the highest logit, after the penalty."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0
    repetition_penalty: float = 1.0
    seed: Optional[int] = None

    def __post_init__(self):
        if not (self.temperature >= 0 and np.isfinite(self.temperature)):
            raise Error(f"temperature must be a finite number >= 0, got {self.temperature}")
        if not isinstance(self.top_k, (int, np.integer)) or self.top_k < 0:
            raise Error(f"top_k must be an integer >= 0 (0: off), got {self.top_k!r}")
        if not 0 < self.top_p <= 1:
            raise Error(f"top_p must lie in (0, 1], got {self.top_p}")
        if not self.repetition_penalty > 0:
            raise Error(f"repetition_penalty must be > 0, got {self.repetition_penalty}")

    @property
    def greedy(self):
        return self.temperature == 0 or self.top_k == 1


class Sampler:
    """Picks tokens for one sequence (its random generator lives here)."""

    def __init__(self, params):
        self.params = params
        self.rng = np.random.default_rng(params.seed)

    def penalize(self, logits, previous):
        """`logits` with the repetition penalty applied for the ids in `previous` (a copy)."""
        penalty = self.params.repetition_penalty
        if penalty == 1.0 or not len(previous):
            return logits
        ids = np.unique(np.asarray(previous, dtype=np.int64))
        ids = ids[(ids >= 0) & (ids < logits.shape[-1])]
        logits = np.array(logits, dtype=np.float32)
        chosen = logits[ids]
        logits[ids] = np.where(chosen > 0, chosen / penalty, chosen * penalty)
        return logits

    def choose(self, logits, previous=()):
        """The next token id from a row of logits [vocab]."""
        p = self.params
        logits = self.penalize(logits, previous)
        if p.greedy:
            return int(np.argmax(logits))
        scaled = logits.astype(np.float64) / p.temperature
        vocab = scaled.shape[-1]
        if p.top_k and p.top_k < vocab:
            candidates = np.argpartition(-scaled, p.top_k - 1)[:p.top_k]
        else:
            candidates = np.arange(vocab)
        values = scaled[candidates]
        order = np.argsort(-values, kind="stable")
        candidates, values = candidates[order], values[order]
        probs = np.exp(values - values[0])
        probs /= probs.sum()
        if p.top_p < 1.0:
            # Keep the smallest prefix whose mass reaches top_p (always at least one token).
            keep = int(np.searchsorted(np.cumsum(probs), p.top_p) + 1)
            candidates, probs = candidates[:keep], probs[:keep]
            probs = probs / probs.sum()
        return int(candidates[self.rng.choice(len(candidates), p=probs)])


def log_softmax(logits):
    """log-probabilities of a row (or rows) of logits, in float64."""
    x = np.asarray(logits, dtype=np.float64)
    m = x.max(axis=-1, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis=-1, keepdims=True))
