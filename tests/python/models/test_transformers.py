"""transformers' BERT, GPT-2 and T5 with tiny random configs, converted here with coremltools
in fp32 and fp16 and run with coremlrt; the expected outputs come from torch.

Every model takes a padding mask as an input (batch of two, the second row padded at the
end). transformers builds its own masks with vmap, `new_ones` and `diff`, which coremltools
9.0 cannot convert, so the wrappers pass a ready 4-D additive mask (documented transformers
usage): 0 where a query may attend to a key, -1e4 elsewhere (finite in fp16, and far below
any attention score here). The base-size configs are marked slow.
"""

import os

import pytest

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")
nn = torch.nn

from torch_convert import (  # noqa: E402
    FP32_TOLERANCE,
    assert_close,
    assert_top_classes_agree,
    convert,
    coremlrt_outputs,
    torch_outputs,
)

VOCAB = 100
MASKED = -1e4


def additive_mask(padding_mask, causal=None):
    """[batch, length] 1/0 padding mask -> [batch, 1, length or 1, length] additive mask."""
    keep = padding_mask[:, None, None, :].float()
    if causal is not None:
        keep = keep * causal
    return (1.0 - keep) * MASKED


class EncoderWithPadding(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, padding_mask):
        return self.model(input_ids=input_ids, attention_mask=additive_mask(padding_mask), return_dict=False)[0]


class DecoderWithPadding(nn.Module):
    def __init__(self, model, length):
        super().__init__()
        self.model = model
        # A constant of the traced length: reading the length from the input would become an
        # `aten::Int` of a shape, which coremltools cannot convert.
        self.register_buffer("causal", torch.ones(length, length).tril())

    def forward(self, input_ids, padding_mask):
        mask = additive_mask(padding_mask, self.causal)
        return self.model(input_ids=input_ids, attention_mask=mask, return_dict=False)[0]


class EncoderDecoderWithPadding(nn.Module):
    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, input_ids, padding_mask, decoder_input_ids):
        return self.model(input_ids=input_ids, attention_mask=additive_mask(padding_mask),
                          decoder_input_ids=decoder_input_ids, return_dict=False)[0]


def token_inputs(length, padded):
    input_ids = torch.randint(0, VOCAB, (2, length))
    padding_mask = torch.ones(2, length, dtype=torch.int64)
    padding_mask[1, length - padded:] = 0
    return [input_ids, padding_mask]


def bert(hidden, layers, heads, length):
    def build():
        config = transformers.BertConfig(vocab_size=VOCAB, hidden_size=hidden, num_hidden_layers=layers,
                                         num_attention_heads=heads, intermediate_size=4 * hidden,
                                         # more positions than tokens: slicing the whole position
                                         # table exports as an alias, which coremltools rejects
                                         max_position_embeddings=4 * length)
        model = EncoderWithPadding(transformers.BertModel(config, add_pooling_layer=False)).eval()
        return model, token_inputs(length, padded=4), ["input_ids", "padding_mask"]

    return build


def gpt2(hidden, layers, heads, length):
    def build():
        config = transformers.GPT2Config(vocab_size=VOCAB, n_embd=hidden, n_layer=layers, n_head=heads,
                                         n_positions=4 * length, use_cache=False)
        model = DecoderWithPadding(transformers.GPT2LMHeadModel(config), length).eval()
        return model, token_inputs(length, padded=3), ["input_ids", "padding_mask"]

    return build


def t5(hidden, layers, heads, length, decoder_length):
    def build():
        config = transformers.T5Config(vocab_size=VOCAB, d_model=hidden, d_kv=hidden // heads, d_ff=2 * hidden,
                                       num_layers=layers, num_heads=heads, use_cache=False)
        model = EncoderDecoderWithPadding(transformers.T5ForConditionalGeneration(config)).eval()
        inputs = [*token_inputs(length, padded=4), torch.randint(0, VOCAB, (2, decoder_length))]
        return model, inputs, ["input_ids", "padding_mask", "decoder_input_ids"]

    return build


# name -> (builder, conversion route, deployment target, fp16 tolerance).
#
# Routes: tracing BERT's embeddings turns the sequence length into a Python int that
# coremltools cannot convert, so BERT goes through torch.export; torch.export of GPT-2 and T5
# leaves ops coremltools 9.0 does not know (alias, where.ScalarOther), so those are traced.
# Targets differ so that the three opset generations are exercised. (transformers passes an
# explicit scale to scaled_dot_product_attention, so coremltools decomposes it into matmul +
# softmax even for iOS18.)
#
# fp16 tolerances: weights and activations are rounded to fp16 (relative error 2^-11 ~ 4.9e-4
# per value), and layer norms, softmax and GELU over a few layers accumulate a few times that
# (measured with these seeds: 5e-4..1.4e-3 for the tiny configs, 5e-4..2.5e-3 for the
# 6-12 layer base-size ones). A wrong kernel is off by the output's own scale.
NETWORKS = {
    "bert_tiny": (bert(hidden=64, layers=2, heads=4, length=16), "export", ct.target.iOS17, 1e-2),
    "gpt2_tiny": (gpt2(hidden=64, layers=2, heads=4, length=16), "trace", ct.target.iOS18, 1e-2),
    "t5_tiny": (t5(hidden=64, layers=2, heads=4, length=16, decoder_length=6), "trace", ct.target.iOS16, 1e-2),
    "bert_base": (bert(hidden=768, layers=12, heads=12, length=128), "export", ct.target.iOS17, 1e-2),
    "gpt2_base": (gpt2(hidden=768, layers=12, heads=12, length=128), "trace", ct.target.iOS18, 1e-2),
    "t5_small": (t5(hidden=512, layers=6, heads=8, length=64, decoder_length=16), "trace", ct.target.iOS16, 1e-2),
}
SLOW = {"bert_base", "gpt2_base", "t5_small"}
# A list, not a set: test ids must come in the same order in every process (pytest -n 2 compares
# the collections of its workers, and set order changes with the hash seed).
LANGUAGE_MODELS = ["gpt2_tiny", "t5_tiny", "gpt2_base", "t5_small"]  # outputs are logits over VOCAB


def cases(names):
    return [
        pytest.param(name, precision, id=f"{name}-{precision}", marks=[pytest.mark.slow] if name in SLOW else [])
        for name in names
        for precision in ("fp32", "fp16")
    ]


@pytest.fixture(scope="module")
def run_network(tmp_path_factory):
    """(expected output, coremlrt output) for a network and precision, converted once."""
    references, converted, results = {}, {}, {}

    def run(name, precision):
        build, route, target, _ = NETWORKS[name]
        if name not in references:
            torch.manual_seed(0)
            model, inputs, input_names = build()
            references[name] = (model, inputs, input_names, torch_outputs(model, inputs)[0])
        model, inputs, input_names, expected = references[name]
        if (name, precision) not in converted:
            converted[(name, precision)] = convert(
                model, inputs, tmp_path_factory.mktemp(name), precision, name,
                input_names=input_names, output_names=["output"], target=target, via=route)
        key = (name, precision, os.environ.get("COREMLRT_BACKEND"))  # conftest.py runs each backend
        if key not in results:
            results[key] = coremlrt_outputs(*converted[(name, precision)], inputs)[0]
        return expected, results[key]

    return run


def tolerance(name, precision):
    return FP32_TOLERANCE if precision == "fp32" else NETWORKS[name][3]


@pytest.mark.parametrize("name, precision", cases(NETWORKS))
def test_output_matches_torch(run_network, name, precision):
    expected, actual = run_network(name, precision)
    assert_close(actual, expected, tolerance(name, precision), f"{name} {precision}")


@pytest.mark.parametrize("name, precision", cases(LANGUAGE_MODELS))
def test_predicted_tokens_agree(run_network, name, precision):
    expected, actual = run_network(name, precision)
    checked = assert_top_classes_agree(actual, expected, tolerance(name, precision), k_values=(1,))
    # Most positions have a clear winner among 100 random logits even at the fp16 tolerance.
    assert checked >= expected.shape[0] * expected.shape[1] // 4
