"""The networks benchmarks/bench_peers.py measures, each made once from the same torch module
as a Core ML model (fp16 and fp32, iOS18 target, converted by coremltools the way users do)
and as an ONNX model (torch.onnx.export), cached in a folder.

    python3 benchmarks/peer_models.py [--dir DIR] [--only NAME ...]   # build (or reuse) them

Weights are random (seeded): speed does not depend on their values, and nothing here may be
downloaded. Shapes follow the benchmark table of docs/reports/performance.md.
"""

import argparse
import json
import os
import sys
import warnings

import numpy as np

DEFAULT_DIR = os.path.join(os.path.expanduser("~"), ".cache", "coremlrt", "bench-models")




def _tiny():
    import torch

    class Tiny(torch.nn.Module):
        def forward(self, x):
            return torch.relu(x + 1.0)

    return Tiny(), {"x": np.random.default_rng(0).standard_normal((16,)).astype(np.float32)}


def _resnet18():
    import torchvision

    return torchvision.models.resnet18(weights=None), {
        "image": np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}


def openvino_model(path, name):
    """The ov.Model OpenVINO runs for network `name` from its ONNX export at `path`. A stateful
    network (a decoder with KV caches) is made stateful as OpenVINO runs language models
    (optimum-intel exports them so): the cache inputs and outputs become variables of the infer
    request (ReadValue / Assign, OpenVINO's MakeStateful transformation), updated in place rather
    than passed in and copied out every step; its inputs are then the others alone."""
    import openvino as ov

    model = ov.Core().read_model(path)
    if name in STATEFUL:
        from openvino._offline_transformations import apply_make_stateful_transformation

        apply_make_stateful_transformation(model, {"k_cache": "k_cache_out", "v_cache": "v_cache_out"})
    return model


def calibrate_batch_norms(module, shape, batches=4, batch_size=8, seed=1):
    """Sets every batch norm's running mean and variance to those of random inputs of `shape`
    (batches of them, from a seeded generator), then puts `module` back in eval mode.

    Random weights with the default statistics (mean 0, variance 1) shrink mobilenet_v2's
    activations at every block: its logits come out near 1e-9, where any error looks like 0.
    Calibrated, they are of magnitude O(1) (max |logit| 0.46), so an accuracy figure means
    something."""
    import torch

    norms = [m for m in module.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    for norm in norms:
        norm.reset_running_stats()
        norm.momentum = None  # a cumulative average over the batches
    module.train()
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for _ in range(batches):
            module(torch.randn((batch_size,) + tuple(shape[1:]), generator=generator))
    return module.eval()


def _mobilenet_v2():
    import torchvision

    shape = (1, 3, 224, 224)
    return calibrate_batch_norms(torchvision.models.mobilenet_v2(weights=None), shape), {
        "image": np.random.default_rng(0).standard_normal(shape).astype(np.float32)}


def _bert():
    import torch
    import transformers

    config = transformers.BertConfig(hidden_size=768, num_hidden_layers=4, num_attention_heads=12,
                                     intermediate_size=3072, vocab_size=30522, max_position_embeddings=512)
    bert = transformers.BertModel(config, add_pooling_layer=False).eval()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids):
            return self.bert(input_ids=input_ids).last_hidden_state

    ids = np.random.default_rng(0).integers(0, config.vocab_size, (1, 128)).astype(np.int32)
    return Encoder(), {"input_ids": ids}


# Networks whose traced graph coremltools 9.0 cannot convert (BERT's embeddings turn a size into
# a Python int: tests/python/torch_convert.py) go through torch.export instead.
VIA_EXPORT = {"bert4"}


def _lstm():
    import torch

    class Lstm(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(256, 512, num_layers=2)

        def forward(self, x):
            return self.lstm(x)[0]

    return Lstm(), {"x": np.random.default_rng(0).standard_normal((64, 1, 256)).astype(np.float32)}


# GPT-2-small-like decoder (width 768, 12 heads, GPT-2's vocabulary) with 4 layers, like the
# BERT-like encoder above; its KV cache has room for 256 positions.
GPT_LAYERS, GPT_DIM, GPT_HEADS, GPT_VOCAB, GPT_MAX, GPT_PROMPT = 4, 768, 12, 50257, 256, 128
GPT_CACHE = (GPT_LAYERS, GPT_HEADS, GPT_MAX, GPT_DIM // GPT_HEADS)


def _gpt_classes():
    import torch

    head_dim = GPT_DIM // GPT_HEADS

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = torch.nn.LayerNorm(GPT_DIM), torch.nn.LayerNorm(GPT_DIM)
            self.qkv, self.o = torch.nn.Linear(GPT_DIM, 3 * GPT_DIM), torch.nn.Linear(GPT_DIM, GPT_DIM)
            self.ff1, self.ff2 = torch.nn.Linear(GPT_DIM, 4 * GPT_DIM), torch.nn.Linear(4 * GPT_DIM, GPT_DIM)

    class Gpt(torch.nn.Module):
        """tokens [1, T], start [1] -> logits [1, T, vocab]. With caches=None the KV cache lives in
        fp16 buffers written in place (the Core ML state); otherwise step() takes and returns the
        caches (the ONNX form)."""

        def __init__(self, seq_len):
            super().__init__()
            self.seq_len = seq_len
            self.emb, self.pos = torch.nn.Embedding(GPT_VOCAB, GPT_DIM), torch.nn.Embedding(GPT_MAX, GPT_DIM)
            self.blocks = torch.nn.ModuleList([Block() for _ in range(GPT_LAYERS)])
            self.norm = torch.nn.LayerNorm(GPT_DIM)
            self.register_buffer("k_cache", torch.zeros(GPT_CACHE, dtype=torch.float16))
            self.register_buffer("v_cache", torch.zeros(GPT_CACHE, dtype=torch.float16))

        def step(self, tokens, start, k_cache, v_cache):
            T = self.seq_len
            p0 = start[0]
            positions = torch.arange(T, dtype=torch.int32) + p0
            x = self.emb(tokens[0]) + self.pos(positions)
            keys = torch.arange(GPT_MAX, dtype=torch.int32)
            bias = torch.where(keys[None, :] <= positions[:, None], 0.0, -1e4)
            for i, b in enumerate(self.blocks):
                q, k, v = b.qkv(b.n1(x)).reshape(T, 3, GPT_HEADS, head_dim).permute(1, 2, 0, 3)
                k_cache[i, :, p0:p0 + T] = k.to(torch.float16)
                v_cache[i, :, p0:p0 + T] = v.to(torch.float16)
                scores = q @ k_cache[i].to(torch.float32).transpose(1, 2) / head_dim ** 0.5 + bias
                attended = torch.softmax(scores, dim=-1) @ v_cache[i].to(torch.float32)
                x = x + b.o(attended.permute(1, 0, 2).reshape(T, GPT_DIM))
                x = x + b.ff2(torch.nn.functional.gelu(b.ff1(b.n2(x))))
            # Tied embeddings, as GPT-2 has them.
            return (self.norm(x) @ self.emb.weight.T)[None]

        def forward(self, tokens, start):
            return self.step(tokens, start, self.k_cache, self.v_cache)

    class GptWithCacheIO(torch.nn.Module):
        def __init__(self, gpt):
            super().__init__()
            self.gpt = gpt

        def forward(self, tokens, start, k_cache, v_cache):
            k_cache, v_cache = k_cache.clone(), v_cache.clone()
            # ONNX Runtime wants one index type in a Slice: the position as int64, like its constants.
            logits = self.gpt.step(tokens, start.to(torch.int64), k_cache, v_cache)
            return logits, k_cache, v_cache

    return Gpt, GptWithCacheIO


def _gpt(seq_len, start):
    def make():
        import torch

        Gpt, _ = _gpt_classes()
        torch.manual_seed(0)
        module = Gpt(seq_len)
        tokens = np.random.default_rng(0).integers(0, GPT_VOCAB, (1, seq_len)).astype(np.int32)
        return module, {"tokens": tokens, "start": np.array([start], np.int32)}

    return make


NETWORKS = {
    "resnet18": _resnet18,
    "mobilenet_v2": _mobilenet_v2,
    "bert4": _bert,
    "lstm2": _lstm,
    "gpt2_prefill": _gpt(GPT_PROMPT, 0),
    "gpt2_decode": _gpt(1, GPT_PROMPT),
    "tiny": _tiny,
}
STATEFUL = {"gpt2_prefill", "gpt2_decode"}
# A network whose module changed since models were cached is built again (1: mobilenet_v2's
# batch norms calibrated).
REVISIONS = {"mobilenet_v2": 1}


def _torch_inputs(inputs, keep_int32=False):
    """torch tensors of `inputs` (int32 widened to int64, torch's index type, unless kept)."""
    import torch

    return tuple(torch.from_numpy(v.astype(np.int64) if v.dtype == np.int32 and not keep_int32 else v)
                 for v in inputs.values())


def build(name, directory):
    """Returns {"coreml_fp32": path, "coreml_fp16": path, "onnx": path, "inputs": npz path}."""
    import coremltools as ct
    import torch

    out = os.path.join(directory, name)
    manifest = os.path.join(out, "models.json")
    if os.path.exists(manifest):
        with open(manifest) as f:
            built = json.load(f)
        if built.get("revision", 0) == REVISIONS.get(name, 0):
            return built
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    module, inputs = NETWORKS[name]()
    module.eval()
    example = _torch_inputs(inputs, keep_int32=name in STATEFUL)
    paths = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name in STATEFUL:
            source = torch.jit.trace(module, example, check_trace=False)
            options = {"inputs": [ct.TensorType(name=k, shape=v.shape, dtype=np.int32) for k, v in inputs.items()],
                       "outputs": [ct.TensorType(name="output")],
                       "states": [ct.StateType(wrapped_type=ct.TensorType(shape=GPT_CACHE, dtype=np.float16), name=n)
                                  for n in ("k_cache", "v_cache")]}
        elif name in VIA_EXPORT:
            source = torch.export.export(module, example).run_decompositions({})
            options = {}
        else:
            source = torch.jit.trace(module, example, check_trace=False)
            options = {"inputs": [ct.TensorType(name=k, shape=v.shape, dtype=np.int32 if v.dtype == np.int32 else np.float32)
                                  for k, v in inputs.items()],
                       "outputs": [ct.TensorType(name="output")]}
        for precision in ("fp32", "fp16"):
            mlmodel = ct.convert(source, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
                                 compute_precision=ct.precision.FLOAT16 if precision == "fp16" else ct.precision.FLOAT32,
                                 skip_model_load=True, **options)
            path = os.path.join(out, f"{name}_{precision}.mlpackage")
            mlmodel.save(path)
            paths[f"coreml_{precision}"] = path
            description = mlmodel.get_spec().description
            # Inputs are fed in the network's argument order; names are what the converter chose.
            paths["coreml_inputs"] = [f.name for f in description.input]
        onnx_path = os.path.join(out, f"{name}.onnx")
        if name in STATEFUL:
            # ONNX has no states: the caches go in and come out (fp16, as the Core ML states).
            _, GptWithCacheIO = _gpt_classes()
            caches = (torch.zeros(GPT_CACHE, dtype=torch.float16), torch.zeros(GPT_CACHE, dtype=torch.float16))
            torch.onnx.export(GptWithCacheIO(module), example + caches, onnx_path,
                              input_names=list(inputs) + ["k_cache", "v_cache"],
                              output_names=["output", "k_cache_out", "v_cache_out"], opset_version=17, dynamo=False)
            inputs = dict(inputs, k_cache=np.zeros(GPT_CACHE, np.float16), v_cache=np.zeros(GPT_CACHE, np.float16))
        else:
            torch.onnx.export(module, example, onnx_path, input_names=list(inputs), output_names=["output"],
                              opset_version=17, dynamo=False)
        paths["onnx"] = onnx_path
    npz = os.path.join(out, "inputs.npz")
    np.savez(npz, **inputs)
    paths["inputs"] = npz
    paths["revision"] = REVISIONS.get(name, 0)
    with open(manifest, "w") as f:
        json.dump(paths, f, indent=1)
    return paths


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=DEFAULT_DIR)
    parser.add_argument("--only", nargs="*", default=list(NETWORKS))
    args = parser.parse_args(argv)
    for name in args.only:
        print(name, build(name, args.dir), flush=True)


if __name__ == "__main__":
    sys.exit(main())
