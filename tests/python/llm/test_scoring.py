"""Scoring with coremlrt.llm against the torch model: per-token log-probabilities, the
log-likelihood of a continuation and sliding-window perplexity, within fp16 tolerance (the
Core ML models compute in fp16, the torch model in fp32 with the same weights)."""

import math
import os
import sys

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("torch")

from coremlrt.llm import LanguageModel  # noqa: E402
from coremlrt.llm.sampling import log_softmax  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llm_models as M  # noqa: E402
from llama_helpers import SAMPLE_TEXT, reference_logits  # noqa: E402

# fp16 activations: log-probabilities of a few units differ from fp32 by a few 1e-3.
ATOL = 0.03


@pytest.fixture(scope="module")
def torch_model():
    return M.torch_model()


@pytest.fixture(scope="module", params=["mask_fp16", "pd_fp16"])
def lm(request):
    return LanguageModel(M.package(request.param), tokenizer=M.path("tokenizer"))


def torch_logprobs(module, ids):
    """log p(ids[t] | ids[:t]) for t >= 1, from one pass of the torch model."""
    lp = log_softmax(reference_logits(module, ids))
    return lp[np.arange(len(ids) - 1), ids[1:]]


def test_token_logprobs_equal_torch(lm, torch_model):
    ids = lm.tokenizer.encode(SAMPLE_TEXT)[:80]
    scores = lm.token_logprobs(ids, top=3)
    assert math.isnan(scores.logprobs[0]) and scores.top[0] is None
    np.testing.assert_allclose(scores.logprobs[1:], torch_logprobs(torch_model, ids), atol=ATOL, rtol=0)
    reference = log_softmax(reference_logits(torch_model, ids))
    for t in range(1, len(ids)):
        best = [token for token, _ in scores.top[t]]
        # The three best, unless fp16 rounding swaps two within the tolerance.
        assert np.all(reference[t - 1, best] >= np.sort(reference[t - 1])[-3] - ATOL)
        assert scores.greedy[t] == (ids[t] == best[0])


def test_loglikelihood_equals_torch(lm, torch_model):
    context, continuation = "The quick brown fox", " jumps over the lazy dog."
    whole = lm.tokenizer.encode(context + continuation)
    n_context = len(lm.tokenizer.encode(context))
    value, greedy = lm.loglikelihood(context, continuation)
    expected = torch_logprobs(torch_model, whole)[n_context - 1:]
    assert abs(value - expected.sum()) < ATOL * len(expected)
    reference = reference_logits(torch_model, whole)
    assert greedy == all(np.argmax(reference[t - 1]) == whole[t] for t in range(n_context, len(whole)))
    # Token ids give the same; an empty context scores from BOS.
    assert lm.loglikelihood(whole[:n_context], whole[n_context:])[0] == pytest.approx(value, abs=1e-9)
    bos_value, _ = lm.loglikelihood("", "The quick")
    ids = lm.tokenizer.encode("The quick")
    assert abs(bos_value - torch_logprobs(torch_model, ids).sum()) < ATOL * len(ids)


def test_perplexity_of_a_text_file_equals_torch(lm, torch_model, tmp_path):
    """Longer than the cache (96): windows of 64 every 24 tokens, each token scored once with the
    context the window gives it, computed by the torch model window by window."""
    text = SAMPLE_TEXT * 2
    ids = lm.tokenizer.encode(text)
    assert len(ids) > 2 * lm.cache_length
    window, stride = 64, 24
    result = lm.perplexity(text, window=window, stride=stride)
    nll, scored, end = 0.0, 1, 0
    windows = 0
    while scored < len(ids):
        end = min(window if windows == 0 else scored + stride, len(ids))
        begin = max(0, end - window)
        lp = torch_logprobs(torch_model, ids[begin:end])  # lp[k]: token begin + k + 1
        nll -= lp[scored - begin - 1:].sum()
        scored, windows = end, windows + 1
    assert result.tokens == len(ids) - 1 and result.windows == windows
    assert abs(result.nll - nll) < ATOL * result.tokens ** 0.5 * 3
    assert result.perplexity == pytest.approx(math.exp(nll / result.tokens), rel=0.01)

    path = tmp_path / "text.txt"
    path.write_text(text, encoding="utf-8")
    from coremlrt import cli

    import json

    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert cli.main(["score", M.package("mask_fp16"), str(path), "--tokenizer", M.path("tokenizer"),
                         "--window", "64", "--stride", "24", "--json"]) == 0
    assert json.loads(out.getvalue())["perplexity"] == pytest.approx(math.exp(nll / result.tokens), rel=0.01)
