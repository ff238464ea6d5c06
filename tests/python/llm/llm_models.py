"""The language models of the tests in this folder, made once from tests/python/llama_helpers.py and
cached under build/test-fixtures/llm-v<GENERATOR_VERSION>/ (COREMLRT_FIXTURES overrides the root):

* ``tokenizer``: a byte-level BPE (tokenizer.json, tokenizer_config.json with a chat template);
* ``hf``: the torch model's weights as a transformers LlamaForCausalLM folder (with the tokenizer);
* ``mask_fp16``: the ``mask`` layout (inputIds, causalMask, keyCache, valueCache), fp16;
* ``pd_fp16``: the ``prefill_decode`` layout (prefill window 16, decode), fp16;
* ``mask_int4``: the ``mask`` layout, int4 per block of 32 (coremltools.optimize).

Each is built into a temporary folder and renamed into place, so test processes running side by
side never see half a model.
"""

import os
import shutil
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # llama_helpers, fixtures

import fixtures  # noqa: E402
import llama_helpers as L  # noqa: E402

GENERATOR_VERSION = 1
ROOT = os.path.join(fixtures.FIXTURES_DIR, f"llm-v{GENERATOR_VERSION}")
SEED = 0
LOGIT_SCALE = 4.0  # logits whose best choices stand apart by more than fp16 rounding


def config():
    """The tests' model: the sizes of LlamaConfig's defaults, with the tokenizer's vocabulary."""
    from tokenizers import Tokenizer

    vocab = Tokenizer.from_file(os.path.join(path("tokenizer"), "tokenizer.json")).get_vocab_size()
    return L.LlamaConfig(vocab=vocab)


def torch_model():
    return L.make_llama(config(), seed=SEED, logit_scale=LOGIT_SCALE)


def _int4(model):
    import coremltools.optimize.coreml as cto

    op = cto.OpLinearQuantizerConfig(mode="linear", dtype="int4", granularity="per_block", block_size=32,
                                      weight_threshold=0)
    return cto.linear_quantize_weights(model, cto.OptimizationConfig(global_config=op))


def _build(name, out):
    if name == "tokenizer":
        L.make_tokenizer(out, vocab_size=320)
        return
    if name == "hf":
        L.save_hf_folder(torch_model(), out, dtype="float32")
        for file in ("tokenizer.json", "tokenizer_config.json"):
            shutil.copy(os.path.join(path("tokenizer"), file), out)
        return
    layout, compress = {"mask_fp16": ("mask", None), "pd_fp16": ("prefill_decode", None),
                        "mask_int4": ("mask", _int4)}[name]
    L.convert(torch_model(), out, "model", layout=layout, compute_precision="fp16", compress=compress)


def path(name):
    """The folder of `name`, built when missing (a model's package is FOLDER/model.mlpackage)."""
    final = os.path.join(ROOT, name)
    if os.path.isdir(final):
        return final
    os.makedirs(ROOT, exist_ok=True)
    staging = tempfile.mkdtemp(prefix=f".{name}-", dir=ROOT)
    try:
        _build(name, staging)
        try:
            os.rename(staging, final)
        except OSError:  # another process finished it first
            pass
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def package(name):
    return os.path.join(path(name), "model.mlpackage")
