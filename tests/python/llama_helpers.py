"""LLaMA-shaped language models for the language-model tests (tests/python/llm/) and
benchmarks/bench_llm.py, made from a seeded torch module that needs no download.

* :func:`make_llama`: a decoder with LLaMA's architecture (RMSNorm, rotary positions in the
  rotate-half form, grouped-query attention, SwiGLU) whose parameters carry the names of
  transformers' ``LlamaForCausalLM``, so that :func:`save_hf_folder` writes a folder that
  transformers (``lm_eval --model hf``) and llama.cpp's converter read as that model.
* :func:`convert` turns it into a stateful Core ML package with coremltools, in one of the two
  layouts coremlrt.llm recognises:

  - ``"mask"``: one function, ``inputIds`` int32 [1, q] and ``causalMask`` fp16 [1, 1, q, end]
    (q and end flexible), states ``keyCache`` / ``valueCache`` [layers, 1, kv heads, cache
    length, head dim]: the form of coremltools' "Stateful Models" guide and Apple's converted
    LLaMA/Mistral examples; the position of the first query is end - q;
  - ``"prefill_decode"``: two functions joined into one package, ``prefill`` (a window of
    ``config.prompt`` tokens) and ``decode`` (one token), each with ``tokens`` int32 [1, T] and
    ``start`` int32 [1], sharing the two cache states, as tests/python/lm_helpers.py and
    benchmarks/compressed_models.py make them.

* :func:`reference_logits`: the torch module over a whole sequence at once (no cache): the
  reference for generation and scoring.
* :func:`make_tokenizer`: a byte-level BPE trained with the ``tokenizers`` library on a few
  sentences, saved as tokenizer.json and tokenizer_config.json (with a chat template).

The caches are fp16 (coremltools takes only fp16 states); the torch module rounds k and v to
fp16 when it writes them, as the Core ML program does.
"""

import contextlib
import json
import logging
import os
import warnings

import numpy as np

os.environ.setdefault("TQDM_DISABLE", "1")  # coremltools' progress bars


class LlamaConfig:
    def __init__(self, vocab=256, hidden=64, layers=2, heads=4, kv_heads=2, intermediate=160, max_len=96,
                 prompt=16, rope_theta=10000.0, eps=1e-5):
        self.vocab, self.hidden, self.layers, self.heads, self.kv_heads = vocab, hidden, layers, heads, kv_heads
        self.intermediate, self.max_len, self.prompt, self.rope_theta, self.eps = (intermediate, max_len, prompt,
                                                                                rope_theta, eps)
        self.head_dim = hidden // heads
        self.cache_shape = (layers, 1, kv_heads, max_len, self.head_dim)

    def params(self):
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)
        block = attention + 3 * self.hidden * self.intermediate + 2 * self.hidden
        return 2 * self.vocab * self.hidden + self.layers * block + self.hidden

    def as_dict(self):
        return {k: getattr(self, k) for k in ("vocab", "hidden", "layers", "heads", "kv_heads", "intermediate",
                                              "max_len", "prompt", "rope_theta", "eps")}


# TinyLlama-1.1B's shape (benchmarks/bench_llm.py).
LLAMA_1B = LlamaConfig(vocab=32000, hidden=2048, layers=22, heads=32, kv_heads=4, intermediate=5632, max_len=256,
                       prompt=128)


@contextlib.contextmanager
def quiet():
    """Silences the converters' warnings and coremltools' log."""
    loggers = [logging.getLogger(), logging.getLogger("coremltools")]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def _classes(config):
    import torch

    H, NH, NKV, HD, L = config.hidden, config.heads, config.kv_heads, config.head_dim, config.max_len
    G = NH // NKV

    class RMSNorm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = torch.nn.Parameter(torch.ones(H))

        def forward(self, x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + config.eps) * self.weight

    class Attention(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.q_proj = torch.nn.Linear(H, NH * HD, bias=False)
            self.k_proj = torch.nn.Linear(H, NKV * HD, bias=False)
            self.v_proj = torch.nn.Linear(H, NKV * HD, bias=False)
            self.o_proj = torch.nn.Linear(NH * HD, H, bias=False)

    class MLP(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gate_proj = torch.nn.Linear(H, config.intermediate, bias=False)
            self.up_proj = torch.nn.Linear(H, config.intermediate, bias=False)
            self.down_proj = torch.nn.Linear(config.intermediate, H, bias=False)

        def forward(self, x):
            return self.down_proj(torch.nn.functional.silu(self.gate_proj(x)) * self.up_proj(x))

    class Layer(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn, self.mlp = Attention(), MLP()
            self.input_layernorm, self.post_attention_layernorm = RMSNorm(), RMSNorm()

    class Inner(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed_tokens = torch.nn.Embedding(config.vocab, H)
            self.layers = torch.nn.ModuleList([Layer() for _ in range(config.layers)])
            self.norm = RMSNorm()

    def rotate_half(x):
        half = HD // 2  # a constant: a traced x.shape[-1] // 2 does not convert
        return torch.cat([-x[..., half:], x[..., :half]], dim=-1)

    class Llama(torch.nn.Module):
        """forward(tokens [1, T], start [1]) -> logits [1, T, vocab]: the ``prefill_decode``
        layout. ``forward_masked`` is the ``mask`` layout (``MaskedLlama`` traces it)."""

        def __init__(self):
            super().__init__()
            self.config = config
            self.seq_len = None  # fixed for tracing: coremltools cannot convert a traced tokens.shape[1]
            self.model = Inner()
            self.lm_head = torch.nn.Linear(H, config.vocab, bias=False)
            inv_freq = 1.0 / (config.rope_theta ** (torch.arange(0, HD, 2, dtype=torch.float32) / HD))
            angles = torch.arange(L, dtype=torch.float32)[:, None] * inv_freq[None, :]
            angles = torch.cat([angles, angles], dim=-1)
            self.register_buffer("rope_cos", angles.cos(), persistent=False)
            self.register_buffer("rope_sin", angles.sin(), persistent=False)
            self.register_buffer("keyCache", torch.zeros(config.cache_shape, dtype=torch.float16))
            self.register_buffer("valueCache", torch.zeros(config.cache_shape, dtype=torch.float16))

        def blocks(self, x, positions, p0, T, end, bias, key_cache, value_cache):
            """x [T, H] at `positions` (cache slots p0 .. p0+T-1); attends to cache slots < end
            with `bias` [T, end] added to the scores. The caches are the traced module's own
            buffers (coremltools makes states of the top module's buffers)."""
            cos, sin = self.rope_cos[positions], self.rope_sin[positions]  # [T, HD]
            for i, layer in enumerate(self.model.layers):
                a = layer.self_attn
                h = layer.input_layernorm(x)
                q = a.q_proj(h).reshape(T, NH, HD).transpose(0, 1)
                k = a.k_proj(h).reshape(T, NKV, HD).transpose(0, 1)
                v = a.v_proj(h).reshape(T, NKV, HD).transpose(0, 1)
                q = q * cos + rotate_half(q) * sin
                k = k * cos + rotate_half(k) * sin
                key_cache[i, 0, :, p0:p0 + T] = k.to(torch.float16)
                value_cache[i, 0, :, p0:p0 + T] = v.to(torch.float16)
                keys = key_cache[i, 0, :, :end].to(torch.float32).unsqueeze(1)  # [NKV, 1, end, HD]
                values = value_cache[i, 0, :, :end].to(torch.float32).unsqueeze(1)
                scores = q.reshape(NKV, G, T, HD) @ keys.transpose(-1, -2) / HD ** 0.5 + bias
                attended = (torch.softmax(scores, dim=-1) @ values).reshape(NH, T, HD)
                x = x + a.o_proj(attended.transpose(0, 1).reshape(T, NH * HD))
                x = x + layer.mlp(layer.post_attention_layernorm(x))
            return self.lm_head(self.model.norm(x))[None]

        def forward(self, tokens, start):
            T = self.seq_len or tokens.shape[1]
            p0 = start[0]
            positions = torch.arange(T, dtype=torch.int32) + p0
            keys = torch.arange(L, dtype=torch.int32)
            bias = torch.where(keys[None, :] <= positions[:, None], 0.0, -1e4)
            return self.blocks(self.model.embed_tokens(tokens[0]), positions, p0, T, L, bias, self.keyCache,
                               self.valueCache)

    class MaskedLlama(torch.nn.Module):
        """The ``mask`` layout: forward(inputIds [1, q], causalMask [1, 1, q, end])."""

        def __init__(self, llama):
            super().__init__()
            self.llama = llama
            self.register_buffer("keyCache", torch.zeros(config.cache_shape, dtype=torch.float16))
            self.register_buffer("valueCache", torch.zeros(config.cache_shape, dtype=torch.float16))

        def forward(self, input_ids, causal_mask):
            q_len, end = input_ids.shape[-1], causal_mask.shape[-1]
            past = end - q_len
            positions = torch.arange(q_len, dtype=torch.int32) + past
            bias = causal_mask[0, 0].to(torch.float32)
            return self.llama.blocks(self.llama.model.embed_tokens(input_ids[0]), positions, past, q_len, end, bias,
                                     self.keyCache, self.valueCache)

    return Llama, MaskedLlama


def make_llama(config, seed=0, logit_scale=1.0):
    """The seeded module (eval mode, fp32 parameters rounded to fp16 values, so that the Core ML
    model's fp16 weights hold the same numbers). `logit_scale` multiplies lm_head's weights: the
    tests' models give logits whose top choices stand apart by more than fp16 rounding."""
    import torch

    torch.manual_seed(seed)
    Llama, _ = _classes(config)
    module = Llama().eval()
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("layernorm.weight") or name.endswith("norm.weight"):
                p.copy_(1.0 + 0.1 * torch.randn_like(p))
            elif p.dim() == 2 and "embed" not in name:
                p.copy_(torch.randn_like(p) / p.shape[1] ** 0.5)
        module.lm_head.weight.mul_(logit_scale)
        for p in module.parameters():
            p.copy_(p.to(torch.float16).to(torch.float32))
    return module


def reference_logits(module, tokens):
    """Logits [len, vocab] (float64) of the torch module over `tokens` at positions 0... The
    module's cache buffers are overwritten from position 0 on; slots past the tokens are masked."""
    import torch

    m = module
    m.seq_len = None
    with torch.no_grad():
        logits = m(torch.as_tensor(np.asarray(tokens, np.int64).reshape(1, -1)), torch.zeros(1, dtype=torch.int32))
    return logits[0].double().numpy()


def reference_greedy(module, prompt, steps):
    tokens = list(prompt)
    for _ in range(steps):
        tokens.append(int(np.argmax(reference_logits(module, tokens)[-1])))
    return tokens[len(prompt):]


def _convert_traced(traced, inputs, config, path, compute_precision, compress, state_names=("keyCache", "valueCache")):
    import coremltools as ct

    model = ct.convert(
        traced, inputs=inputs, outputs=[ct.TensorType(name="logits", dtype=np.float16
                                                      if compute_precision == "fp16" else np.float32)],
        states=[ct.StateType(wrapped_type=ct.TensorType(shape=config.cache_shape, dtype=np.float16), name=n)
                for n in state_names],
        minimum_deployment_target=ct.target.iOS18, convert_to="mlprogram",
        compute_precision=ct.precision.FLOAT16 if compute_precision == "fp16" else ct.precision.FLOAT32,
        skip_model_load=True)
    if compress:
        model = compress(model)
    model.save(path)
    del model
    return path


def convert(module, directory, name, layout="prefill_decode", compute_precision="fp16", compress=None):
    """Writes DIRECTORY/NAME.mlpackage in `layout` and returns its path. `compress` turns each
    converted function (a ct.models.MLModel) into another before it is saved."""
    import coremltools as ct
    import torch

    config = module.config
    directory = str(directory)
    os.makedirs(directory, exist_ok=True)
    path = os.path.join(directory, name + ".mlpackage")
    with quiet(), torch.no_grad():
        if layout == "mask":
            _, MaskedLlama = _classes(config)
            wrapper = MaskedLlama(module).eval()
            q, end = 2, 3
            traced = torch.jit.trace(wrapper, (torch.zeros(1, q, dtype=torch.int32),
                                               torch.zeros(1, 1, q, end, dtype=torch.float16)), check_trace=False)
            q_dim = ct.RangeDim(1, config.max_len, default=1)
            end_dim = ct.RangeDim(1, config.max_len, default=1)
            inputs = [ct.TensorType(name="inputIds", shape=(1, q_dim), dtype=np.int32),
                      ct.TensorType(name="causalMask", shape=(1, 1, q_dim, end_dim), dtype=np.float16)]
            return _convert_traced(traced, inputs, config, path, compute_precision, compress)
        if layout != "prefill_decode":
            raise ValueError(f"unknown layout {layout!r}")
        sources = {}
        for function, seq_len in (("prefill", config.prompt), ("decode", 1)):
            m = module
            m.seq_len = seq_len
            try:
                traced = torch.jit.trace(m, (torch.zeros(1, seq_len, dtype=torch.int32),
                                             torch.zeros(1, dtype=torch.int32)), check_trace=False)
            finally:
                m.seq_len = None
            inputs = [ct.TensorType(name="tokens", shape=(1, seq_len), dtype=np.int32),
                      ct.TensorType(name="start", shape=(1,), dtype=np.int32)]
            sources[function] = _convert_traced(traced, inputs, config, os.path.join(directory, f"_{name}_{function}.mlpackage"),
                                                compute_precision, compress)
            del traced
        desc = ct.utils.MultiFunctionDescriptor()
        for target, source in sources.items():
            desc.add_function(source, src_function_name="main", target_function_name=target)
        desc.default_function_name = "prefill"
        import shutil

        shutil.rmtree(path, ignore_errors=True)
        ct.utils.save_multifunction(desc, path)
        for source in sources.values():
            shutil.rmtree(source, ignore_errors=True)
    return path


def hf_config(config, bos_token_id=1, eos_token_id=2):
    return {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
        "hidden_size": config.hidden, "intermediate_size": config.intermediate,
        "num_attention_heads": config.heads, "num_hidden_layers": config.layers,
        "num_key_value_heads": config.kv_heads, "vocab_size": config.vocab, "rms_norm_eps": config.eps,
        "rope_theta": config.rope_theta, "max_position_embeddings": config.max_len,
        "tie_word_embeddings": False, "attention_bias": False, "mlp_bias": False,
        "bos_token_id": bos_token_id, "eos_token_id": eos_token_id, "torch_dtype": "float16",
    }


def save_hf_folder(module, directory, dtype="float16", **token_ids):
    """config.json and model.safetensors of a transformers LlamaForCausalLM with the module's weights."""
    import torch
    from safetensors.torch import save_file

    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w") as f:
        json.dump(hf_config(module.config, **token_ids), f, indent=1)
    torch_dtype = {"float16": torch.float16, "float32": torch.float32}[dtype]
    tensors = {name: p.detach().to(torch_dtype).contiguous() for name, p in module.named_parameters()}
    save_file(tensors, os.path.join(directory, "model.safetensors"), metadata={"format": "pt"})
    return directory


CHAT_TEMPLATE = ("{{ bos_token }}{% for message in messages %}<|{{ message['role'] }}|>\n{{ message['content'] }}"
                 "{{ eos_token }}\n{% endfor %}{% if add_generation_prompt %}<|assistant|>\n{% endif %}")

SAMPLE_TEXT = (
    "The quick brown fox jumps over the lazy dog. A language model reads text as tokens and predicts the next "
    "one. Core ML models run on Linux with coremlrt. Caches of keys and values let each new token attend to the "
    "ones before it without computing them again. Perplexity is the exponential of the mean negative log "
    "likelihood of the tokens of a text. Héllo wörld, ça va? 日本語のテキストも少し。 12345 + 67890 = 80235.")


def make_tokenizer(directory, vocab_size=256, text=SAMPLE_TEXT, chat_template=CHAT_TEMPLATE):
    """A byte-level BPE of at most `vocab_size` tokens (<unk>=0, <s>=1, </s>=2) trained on `text`:
    writes tokenizer.json and tokenizer_config.json into `directory` and returns its path."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<unk>", "<s>", "</s>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tokenizer.train_from_iterator([text] * 4, trainer=trainer)
    # BOS first, as LLaMA's tokenizer.json files add it.
    tokenizer.post_processor = processors.TemplateProcessing(single="<s> $A", pair="<s> $A <s> $B",
                                                             special_tokens=[("<s>", 1)])
    os.makedirs(directory, exist_ok=True)
    tokenizer.save(os.path.join(directory, "tokenizer.json"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False,
                   "model_max_length": 1 << 20, "chat_template": chat_template}, f, indent=1)
    return str(directory)
