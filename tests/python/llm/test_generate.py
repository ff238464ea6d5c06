"""coremlrt.llm generation on small LLaMA-shaped models made in the tests (llm_models.py): greedy
tokens against the torch model, the int4 model against coremlrt's own folded int4 path, sampling
options against transformers' logits processors, stopping, streaming and errors."""

import os
import subprocess
import sys

import numpy as np
import pytest

pytest.importorskip("tokenizers")
pytest.importorskip("torch")

import coremlrt  # noqa: E402
from coremlrt.llm import LanguageModel, Layout, SamplingParams  # noqa: E402
from coremlrt.llm.generation import StopStrings  # noqa: E402
from coremlrt.llm.sampling import Sampler  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import llm_models as M  # noqa: E402
from llama_helpers import reference_greedy  # noqa: E402

PROMPT = [1, 45, 120, 7, 88, 200, 31, 64, 9, 150, 77, 3]


@pytest.fixture(scope="module")
def torch_model():
    return M.torch_model()


@pytest.fixture(scope="module")
def tokenizer_dir():
    return M.path("tokenizer")


@pytest.fixture(scope="module", params=["mask_fp16", "pd_fp16"])
def lm(request, tokenizer_dir):
    return LanguageModel(M.package(request.param), tokenizer=tokenizer_dir)


def test_layouts_are_recognised(lm):
    if lm.layout.kind == "mask":
        assert (lm.layout.ids, lm.layout.mask, lm.plan.prefill.name) == ("inputIds", "causalMask", "main")
        assert lm.plan.prefill.fixed is None
    else:
        assert (lm.layout.ids, lm.layout.position) == ("tokens", "start")
        assert (lm.plan.prefill.name, lm.plan.prefill.fixed, lm.plan.decode.name) == ("prefill", 16, "decode")
    assert lm.cache_length == M.config().max_len


def test_greedy_tokens_equal_torch(lm, torch_model):
    """The fp16 model's first 32 greedy tokens are the fp32 torch model's (its weights hold fp16 values)."""
    expected = reference_greedy(torch_model, PROMPT, 32)
    result = lm.generate(PROMPT, max_new_tokens=32, ignore_eos=True)
    assert result.token_ids == expected
    assert result.finish_reason == "length" and result.prompt_tokens == len(PROMPT)


def test_a_prompt_longer_than_the_prefill_window_is_run_in_pieces(lm, torch_model):
    prompt = (PROMPT * 4)[:41]  # 2 windows of 16 and a padded or stepped rest for the prefill function
    lm.prefill_chunk = 8 if lm.plan.prefill.fixed is None else None  # flexible: windows of 8
    try:
        assert lm.generate(prompt, max_new_tokens=8, ignore_eos=True).token_ids == reference_greedy(torch_model, prompt, 8)
    finally:
        lm.prefill_chunk = None


def test_int4_greedy_tokens_equal_the_folded_int4_path(tokenizer_dir):
    packed = LanguageModel(M.package("mask_int4"))
    folded = LanguageModel(M.package("mask_int4"), packed_weights=False)
    assert packed.generate(PROMPT, max_new_tokens=32).token_ids == folded.generate(PROMPT, max_new_tokens=32).token_ids


def test_stream_gives_the_tokens_and_text_of_generate(lm):
    options = dict(max_new_tokens=20, temperature=0.9, top_p=0.95, seed=7, ignore_eos=True)
    chunks = list(lm.stream("The quick brown fox", **options))
    whole = lm.generate("The quick brown fox", **options)
    assert [c.token_id for c in chunks] == whole.token_ids
    assert "".join(c.text for c in chunks) == whole.text == lm.tokenizer.decode(whole.token_ids)
    assert [c.finish_reason for c in chunks] == [None] * 19 + ["length"]


def test_seeded_sampling_repeats_and_seeds_differ(lm):
    options = dict(max_new_tokens=16, temperature=1.5, ignore_eos=True)
    a = lm.generate(PROMPT, seed=1, **options).token_ids
    assert a == lm.generate(PROMPT, seed=1, **options).token_ids
    assert any(lm.generate(PROMPT, seed=s, **options).token_ids != a for s in (2, 3, 4))
    assert lm.generate(PROMPT, max_new_tokens=8, top_k=1, temperature=1.0, seed=5).token_ids == \
        lm.generate(PROMPT, max_new_tokens=8).token_ids


def test_processors_match_transformers():
    """Repetition penalty, temperature, top-k and top-p keep the tokens transformers' logits
    processors keep, with the same probabilities."""
    import torch
    from transformers.generation.logits_process import (RepetitionPenaltyLogitsProcessor, TemperatureLogitsWarper,
                                                        TopKLogitsWarper, TopPLogitsWarper)

    rng = np.random.default_rng(3)
    logits = rng.standard_normal(50).astype(np.float32) * 3
    previous = [3, 7, 7, 19]
    params = SamplingParams(temperature=0.7, top_k=20, top_p=0.8, repetition_penalty=1.3, seed=0)
    ids = torch.tensor([previous])
    scores = torch.tensor(logits)[None]
    for processor in (RepetitionPenaltyLogitsProcessor(1.3), TemperatureLogitsWarper(0.7), TopKLogitsWarper(20),
                      TopPLogitsWarper(0.8)):
        scores = processor(ids, scores)
    expected = torch.softmax(scores, dim=-1)[0].double().numpy()
    sampler = Sampler(params)
    draws = np.bincount([sampler.choose(logits, previous) for _ in range(4000)], minlength=50) / 4000
    assert set(np.nonzero(draws)[0]) <= set(np.nonzero(expected)[0])
    assert np.abs(draws - expected).max() < 0.04  # 4000 draws: a few standard deviations
    np.testing.assert_allclose(Sampler(params).penalize(logits, previous)[previous],
                               RepetitionPenaltyLogitsProcessor(1.3)(ids, torch.tensor(logits)[None])[0, previous].numpy(),
                               rtol=1e-6)


def test_stop_token_and_stop_strings(lm):
    free = lm.generate(PROMPT, max_new_tokens=24, ignore_eos=True)
    stop_at = free.token_ids[5]
    first = free.token_ids.index(stop_at)
    stopped = lm.generate(PROMPT, max_new_tokens=24, stop_token_ids=[stop_at])
    assert stopped.token_ids == free.token_ids[:first] and stopped.finish_reason == "stop"
    text = free.text
    needle = text[len(text) // 2:len(text) // 2 + 2]
    if needle.strip():
        cut = lm.generate(PROMPT, max_new_tokens=24, ignore_eos=True, stop=[needle, "never-there"])
        assert cut.text == text[:text.index(needle)] and cut.finish_reason == "stop"


def test_stop_strings_hold_back_a_possible_start():
    s = StopStrings(["STOP"])
    assert s.feed("abc ST") == ("abc ", False)
    assert s.feed("O") == ("", False)
    assert s.feed("x") == ("STOx", False)
    assert s.feed("--STOP--") == ("--", True)


def test_past_the_cache_is_a_clear_error(lm):
    with pytest.raises(coremlrt.Error, match=r"cache holds 96"):
        lm.generate(PROMPT, max_new_tokens=96 - len(PROMPT) + 2)
    assert len(lm.generate(PROMPT, max_new_tokens=96 - len(PROMPT) + 1, ignore_eos=True).token_ids) == 96 - len(PROMPT) + 1
    with pytest.raises(coremlrt.Error, match="prompt is empty"):
        lm.generate([], max_new_tokens=1)
    with pytest.raises(coremlrt.Error, match="top_p"):
        lm.generate(PROMPT, top_p=0)


def test_explicit_layout_and_an_unrecognised_model(tmp_path):
    lm = LanguageModel(M.package("pd_fp16"), layout=Layout(ids="tokens", position="start", logits="logits",
                                                           prefill="decode", decode="decode"))
    assert lm.plan.prefill.name == "decode"
    auto = LanguageModel(M.package("pd_fp16"))
    assert lm.generate(PROMPT, max_new_tokens=4).token_ids == auto.generate(PROMPT, max_new_tokens=4).token_ids
    with pytest.raises(coremlrt.Error, match="has no input 'ids'"):
        LanguageModel(M.package("pd_fp16"), layout=Layout(ids="ids", position="start", logits="logits"))
    import fixtures

    with pytest.raises(coremlrt.Error, match="not a language model"):
        LanguageModel(os.path.join(fixtures.case_dir("fixture_add"), "model.mlpackage"))


def test_top_level_generate_and_the_command(tokenizer_dir, capsys):
    result = coremlrt.generate(M.package("mask_fp16"), "The quick", tokenizer=tokenizer_dir, max_new_tokens=6,
                               ignore_eos=True)
    command = [sys.executable, "-m", "coremlrt", "generate", M.package("mask_fp16"), "--prompt", "The quick",
               "--tokenizer", tokenizer_dir, "--max-new-tokens", "6", "--ignore-eos"]
    run = subprocess.run(command, capture_output=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout == (result.text + "\n").encode() and b"[length]" in run.stderr
    from coremlrt import cli

    assert cli.main(["generate", M.package("mask_fp16"), "--prompt-ids", ",".join(map(str, PROMPT)),
                     "--max-new-tokens", "5"]) == 0
    expected = LanguageModel(M.package("mask_fp16")).generate(PROMPT, max_new_tokens=5).token_ids
    assert capsys.readouterr().out.split() == [str(t) for t in expected]
