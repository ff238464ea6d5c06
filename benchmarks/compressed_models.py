"""The compressed models benchmarks/bench_compressed.py measures, each made once from a seeded
torch module and cached under build/bench-models/compressed/<model>/ (a manifest.json per model
names every file; a form asked for later is added to it, the others are reused).

    python3 benchmarks/compressed_models.py [--only lm6 ...] [--forms fp16 int4 ...]

Models:

* lm6: a GPT-2-like decoder (width 768, 12 heads, 6 layers, vocabulary 32,000, tied
  embeddings), its KV cache a Core ML state of 256 positions (fp16), prompt 128 tokens;
* lm1b: the same architecture at width 2048, 16 heads, 20 layers: 1.07 B parameters (checked
  against 1e9 at build); made only as fp16 and int4;
* resnet18, mobilenet_v2: torchvision's, random weights, input 1x3x224x224; mobilenet_v2's batch
  norms calibrated on random images (peer_models.calibrate_batch_norms), so its logits are of
  magnitude O(1) rather than 1e-9.

Core ML side: each network is converted by coremltools 9.0 with compute_precision FLOAT16 (its
default: fp16 weights), iOS18 target, then compressed with coremltools.optimize.coreml into

    fp16               the converted model as is
    int8               linear_quantize_weights, int8 symmetric, per output channel
    int4               linear_quantize_weights, int4 with an offset, per block of 32
    palettized         palettize_weights, 4 bits, a palette per group of 16 output channels
    sparse             prune_weights, 50 % of each weight zeroed by magnitude
    sparse_palettized  the sparse model palettized as above (joint_compression=True)

every weight included (weight_threshold=0), except that int4 leaves in fp16 a weight whose input
channels are not a whole number of blocks (coremltools skips it and says so in its log: the
first convolutions, depthwise ones, mobilenet_v2's convolutions over 16, 24 or 144 channels).
A decoder is two traced functions, "prefill" (the prompt) and "decode" (one token), converted
and compressed one by one, then joined into one multifunction .mlpackage whose functions share
the two cache states, as tests/python/lm_helpers.build_lm_package does.

OpenVINO side (fp16, int8, int4 only: it has no palettized or sparse weights): the same torch
module through openvino.convert_model (the decoder stateful: its caches are the infer request's
variables, as in OpenVINO's own language models; a dynamic token count so that one model serves
prefill and decode), then
nncf.compress_weights: INT8_SYM per channel, INT4_ASYM in groups of 32 with ratio 1.0 and
all_layers=True (nncf keeps embeddings and the last layer in int8 otherwise). nncf compresses
matrix products and embeddings in int4 but not convolutions: in the CNNs' int4 model they get
its int8 backup; the manifest records the element types of the weights it wrote
("openvino_weights").

Weights are random (seeded): speed does not depend on their values, and nothing here may be
downloaded.
"""

import argparse
import collections
import contextlib
import gc
import json
import logging
import os
import shutil
import sys
import warnings

import numpy as np

os.environ.setdefault("TQDM_DISABLE", "1")  # coremltools' progress bars

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DIR = os.path.join(ROOT, "build", "bench-models", "compressed")

FORMS = ("fp16", "int8", "int4", "palettized", "sparse", "sparse_palettized")
OPENVINO_FORMS = ("fp16", "int8", "int4")
MODELS = ("lm6", "lm1b", "resnet18", "mobilenet_v2")
DECODERS = ("lm6", "lm1b")
# lm1b exists to show what a model of a billion parameters costs in memory and per step in
# the form such a model ships in (int4); fp16 is its baseline.
MODEL_FORMS = {"lm1b": ("fp16", "int4")}
STATE_NAMES = ("k_cache", "v_cache")
# A model whose module changed since it was cached is built again (1: mobilenet_v2's batch norms
# calibrated, peer_models.calibrate_batch_norms).
REVISIONS = {"mobilenet_v2": 1}


class DecoderConfig:
    def __init__(self, layers, dim, heads, vocab=32000, max_len=256, prompt=128):
        self.layers, self.dim, self.heads, self.vocab, self.max_len, self.prompt = layers, dim, heads, vocab, max_len, prompt
        self.head_dim = dim // heads
        self.cache_shape = (layers, heads, max_len, self.head_dim)

    def params(self):
        block = 4 * self.dim + 3 * self.dim * self.dim + 3 * self.dim + self.dim * self.dim + self.dim \
            + 8 * self.dim * self.dim + 4 * self.dim + self.dim
        return self.vocab * self.dim + self.max_len * self.dim + self.layers * block + 2 * self.dim

    def as_dict(self):
        return {k: getattr(self, k) for k in ("layers", "dim", "heads", "vocab", "max_len", "prompt")}


DECODER_CONFIGS = {"lm6": DecoderConfig(6, 768, 12), "lm1b": DecoderConfig(20, 2048, 16)}
CNN_INPUT = (1, 3, 224, 224)

# --tiny (bench_compressed.py's smoke test): the same code paths on models that build and run in
# seconds. The prompt stays 16 tokens: OpenVINO 2026.4.1 crashes compiling a block this narrow
# for a prompt of 4, 6 or 8 (docs/design/compressed-weights.md, "Known problems"). The cache
# has room for the prompt and the 100 decode steps of the memory measurement.
TINY_DECODER_CONFIGS = {"lm6": DecoderConfig(2, 64, 4, vocab=512, max_len=128, prompt=16),
                        "lm1b": DecoderConfig(2, 128, 4, vocab=512, max_len=128, prompt=16)}
TINY_CNN_INPUT = (1, 3, 64, 64)


def decoder_config(name, tiny=False):
    return (TINY_DECODER_CONFIGS if tiny else DECODER_CONFIGS)[name]


def model_forms(name):
    return MODEL_FORMS.get(name, FORMS)


def _decoder_classes(config):
    """(Decoder, DecoderWithCacheIO): benchmarks/peer_models._gpt_classes with the sizes of
    `config`."""
    import torch

    dim, heads, head_dim, max_len = config.dim, config.heads, config.head_dim, config.max_len

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.n1, self.n2 = torch.nn.LayerNorm(dim), torch.nn.LayerNorm(dim)
            self.qkv, self.o = torch.nn.Linear(dim, 3 * dim), torch.nn.Linear(dim, dim)
            self.ff1, self.ff2 = torch.nn.Linear(dim, 4 * dim), torch.nn.Linear(4 * dim, dim)

    class Decoder(torch.nn.Module):
        """tokens [1, T], start [1] -> logits [1, T, vocab]. The KV cache lives in fp16 buffers
        written in place (the Core ML state) unless step() is given caches. T is `seq_len`
        when set: coremltools cannot convert a traced tokens.shape[1] (tests/python/lm_helpers.py);
        OpenVINO's tracing keeps it symbolic, so its model leaves seq_len None."""

        def __init__(self, seq_len=None):
            super().__init__()
            self.seq_len = seq_len
            self.emb, self.pos = torch.nn.Embedding(config.vocab, dim), torch.nn.Embedding(max_len, dim)
            self.blocks = torch.nn.ModuleList([Block() for _ in range(config.layers)])
            self.norm = torch.nn.LayerNorm(dim)
            self.register_buffer("k_cache", torch.zeros(config.cache_shape, dtype=torch.float16))
            self.register_buffer("v_cache", torch.zeros(config.cache_shape, dtype=torch.float16))

        def step(self, tokens, start, k_cache, v_cache):
            T = self.seq_len or tokens.shape[1]
            p0 = start[0]
            positions = torch.arange(T, dtype=torch.int32) + p0
            x = self.emb(tokens[0]) + self.pos(positions)
            keys = torch.arange(max_len, dtype=torch.int32)
            bias = torch.where(keys[None, :] <= positions[:, None], 0.0, -1e4)
            for i, b in enumerate(self.blocks):
                q, k, v = b.qkv(b.n1(x)).reshape(T, 3, heads, head_dim).permute(1, 2, 0, 3)
                k_cache[i, :, p0:p0 + T] = k.to(torch.float16)
                v_cache[i, :, p0:p0 + T] = v.to(torch.float16)
                scores = q @ k_cache[i].to(torch.float32).transpose(1, 2) / head_dim ** 0.5 + bias
                attended = torch.softmax(scores, dim=-1) @ v_cache[i].to(torch.float32)
                x = x + b.o(attended.permute(1, 0, 2).reshape(T, dim))
                x = x + b.ff2(torch.nn.functional.gelu(b.ff1(b.n2(x))))
            # Tied embeddings, as GPT-2 has them.
            return (self.norm(x) @ self.emb.weight.T)[None]

        def forward(self, tokens, start):
            return self.step(tokens, start, self.k_cache, self.v_cache)

    class DecoderWithCacheIO(torch.nn.Module):
        def __init__(self, decoder):
            super().__init__()
            self.decoder = decoder

        def forward(self, tokens, start, k_cache, v_cache):
            k_cache, v_cache = k_cache.clone(), v_cache.clone()
            logits = self.decoder.step(tokens, start.to(torch.int64), k_cache, v_cache)
            return logits, k_cache, v_cache

    return Decoder, DecoderWithCacheIO


def _tiny_resnet():
    import torchvision

    return torchvision.models.resnet.ResNet(torchvision.models.resnet.BasicBlock, [1, 1, 1, 1], num_classes=100)


def make_module(name, tiny=False):
    """The seeded fp32 torch module of `name` (a decoder with seq_len None: eager takes any T)."""
    import torch
    import torchvision

    torch.manual_seed(0)
    if name in DECODERS:
        Decoder, _ = _decoder_classes(decoder_config(name, tiny))
        module = Decoder()
    elif name == "resnet18":
        module = _tiny_resnet() if tiny else torchvision.models.resnet18(weights=None)
    elif name == "mobilenet_v2":
        from peer_models import calibrate_batch_norms  # logits of magnitude O(1), not 1e-9

        module = torchvision.models.mobilenet_v2(weights=None, **({"width_mult": 0.5, "num_classes": 100} if tiny else {}))
        module = calibrate_batch_norms(module, make_inputs(name, tiny)["image"].shape)
    else:
        raise ValueError(f"unknown model {name!r}; known: {', '.join(MODELS)}")
    return module.eval()


def make_inputs(name, tiny=False):
    """Decoders: the prompt ("tokens" [1, prompt]) and the token of a decode step ("token" [1, 1]),
    int32; CNNs: "image" fp32."""
    rng = np.random.default_rng(0)
    if name in DECODERS:
        config = decoder_config(name, tiny)
        return {"tokens": rng.integers(0, config.vocab, (1, config.prompt)).astype(np.int32),
                "token": rng.integers(0, config.vocab, (1, 1)).astype(np.int32)}
    return {"image": rng.standard_normal(TINY_CNN_INPUT if tiny else CNN_INPUT).astype(np.float32)}


@contextlib.contextmanager
def _quiet():
    """Silences the converters' warnings and nncf's statistics tables."""
    import nncf  # imported first: importing it sets its logger's level

    # coremltools.optimize logs to the root logger (a weight it leaves uncompressed, for one).
    loggers = [logging.getLogger(), logging.getLogger("coremltools")]
    levels, nncf_level = [lg.level for lg in loggers], logging.getLogger("nncf").level
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    nncf.set_log_level(logging.ERROR)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
        nncf.set_log_level(nncf_level)


def compress(mlmodel, form):
    """`mlmodel` (a ct.models.MLModel in fp16) in `form` (FORMS)."""
    import coremltools.optimize.coreml as cto

    config = lambda op: cto.OptimizationConfig(global_config=op)  # noqa: E731
    q8 = cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", granularity="per_channel", weight_threshold=0)
    q4 = cto.OpLinearQuantizerConfig(mode="linear", dtype="int4", granularity="per_block", block_size=32, weight_threshold=0)
    p4 = cto.OpPalettizerConfig(nbits=4, granularity="per_grouped_channel", group_size=16, weight_threshold=0)
    sp = cto.OpMagnitudePrunerConfig(target_sparsity=0.5, weight_threshold=0)
    if form == "fp16":
        return mlmodel
    if form == "int8":
        return cto.linear_quantize_weights(mlmodel, config(q8))
    if form == "int4":
        return cto.linear_quantize_weights(mlmodel, config(q4))
    if form == "palettized":
        return cto.palettize_weights(mlmodel, config(p4))
    if form == "sparse":
        return cto.prune_weights(mlmodel, config(sp))
    if form == "sparse_palettized":
        return cto.palettize_weights(cto.prune_weights(mlmodel, config(sp)), config(p4), joint_compression=True)
    raise ValueError(f"unknown form {form!r}; known: {', '.join(FORMS)}")


def weight_bytes(path):
    """Bytes of a model's weight files: an .mlpackage's weights folder, an OpenVINO IR's .bin."""
    if path.endswith(".xml"):
        return os.path.getsize(path[:-4] + ".bin")
    weights = os.path.join(path, "Data", "com.apple.CoreML", "weights")
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(weights) for f in files)


def _convert_decoder(module, config, seq_len):
    """One function of the decoder (prefill: seq_len = prompt, decode: 1) as a fp16 ct model."""
    import coremltools as ct
    import torch

    module.seq_len = seq_len
    try:
        with torch.no_grad():
            traced = torch.jit.trace(module, (torch.zeros(1, seq_len, dtype=torch.int32), torch.zeros(1, dtype=torch.int32)),
                                     check_trace=False)
        return ct.convert(
            traced, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
            compute_precision=ct.precision.FLOAT16, skip_model_load=True,
            inputs=[ct.TensorType(name="tokens", shape=(1, seq_len), dtype=np.int32),
                    ct.TensorType(name="start", shape=(1,), dtype=np.int32)],
            outputs=[ct.TensorType(name="logits")],
            states=[ct.StateType(wrapped_type=ct.TensorType(shape=config.cache_shape, dtype=np.float16), name=n)
                    for n in STATE_NAMES])
    finally:
        module.seq_len = None


def _join_functions(path, functions, default):
    """functions: {function name: single-function .mlpackage}; as lm_helpers.save_multifunction."""
    import coremltools as ct

    desc = ct.utils.MultiFunctionDescriptor()
    for target, source in functions.items():
        desc.add_function(source, src_function_name="main", target_function_name=target)
    desc.default_function_name = default
    ct.utils.save_multifunction(desc, path)


def _build_coreml_decoder(name, module, config, forms, out):
    staging = os.path.join(out, "_functions")
    os.makedirs(staging, exist_ok=True)
    sources = {form: {} for form in forms}
    for function, seq_len in (("prefill", config.prompt), ("decode", 1)):
        base = _convert_decoder(module, config, seq_len)
        # Each function is compressed on its own before the two are joined (coremltools compresses
        # single-function models); the same weights compressed alike are stored once in the join.
        for form in forms:
            path = os.path.join(staging, f"{function}_{form}.mlpackage")
            compress(base, form).save(path)
            sources[form][function] = path
            gc.collect()
        del base
        gc.collect()
    paths = {}
    for form in forms:
        paths[form] = os.path.join(out, f"{name}_{form}.mlpackage")
        shutil.rmtree(paths[form], ignore_errors=True)
        _join_functions(paths[form], sources[form], default="prefill")
    shutil.rmtree(staging, ignore_errors=True)
    return paths


def _build_coreml_cnn(name, module, inputs, forms, out):
    import coremltools as ct
    import torch

    traced = torch.jit.trace(module, (torch.from_numpy(inputs["image"]),), check_trace=False)
    base = ct.convert(traced, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
                      compute_precision=ct.precision.FLOAT16, skip_model_load=True,
                      inputs=[ct.TensorType(name="image", shape=inputs["image"].shape, dtype=np.float32)],
                      outputs=[ct.TensorType(name="output")])
    paths = {}
    for form in forms:
        paths[form] = os.path.join(out, f"{name}_{form}.mlpackage")
        shutil.rmtree(paths[form], ignore_errors=True)
        compress(base, form).save(paths[form])
    return paths


def _openvino_model(name, module, config, inputs):
    """The fp32 ov.Model of the torch module. A decoder is stateful, as OpenVINO runs language
    models (optimum-intel exports them so): its KV caches are variables of the infer request
    (ReadValue / Assign, made from the cache inputs and outputs by OpenVINO's MakeStateful
    transformation), read and written in place, not tensors passed in and copied out each step."""
    import openvino as ov
    import torch

    if name in DECODERS:
        _, DecoderWithCacheIO = _decoder_classes(config)
        caches = [torch.zeros(config.cache_shape, dtype=torch.float16) for _ in STATE_NAMES]
        example = (torch.from_numpy(inputs["tokens"]), torch.zeros(1, dtype=torch.int32), *caches)
        model = ov.convert_model(DecoderWithCacheIO(module), example_input=example,
                                 input=[([1, -1], ov.Type.i32), ([1], ov.Type.i32),
                                        (list(config.cache_shape), ov.Type.f16), (list(config.cache_shape), ov.Type.f16)])
        for port, n in zip(model.inputs, ("tokens", "start") + STATE_NAMES):
            port.get_tensor().set_names({n})
        for port, n in zip(model.outputs, ("logits", "k_cache_out", "v_cache_out")):
            port.get_tensor().set_names({n})
        from openvino._offline_transformations import apply_make_stateful_transformation

        apply_make_stateful_transformation(model, {"k_cache": "k_cache_out", "v_cache": "v_cache_out"})
        return model
    model = ov.convert_model(module, example_input=torch.from_numpy(inputs["image"]),
                             input=[(list(inputs["image"].shape), ov.Type.f32)])
    model.inputs[0].get_tensor().set_names({"image"})
    model.outputs[0].get_tensor().set_names({"output"})
    return model


def _weight_types(model):
    """{element type: count} of the model's constants of more than 1,024 elements."""
    counts = collections.Counter()
    for op in model.get_ops():
        if op.get_type_name() == "Constant" and int(np.prod(list(op.get_output_shape(0)) or [1])) > 1024:
            counts[op.get_output_element_type(0).get_type_name()] += 1
    return dict(counts)


def _build_openvino(name, module, config, inputs, forms, out):
    import nncf
    import openvino as ov

    base = _openvino_model(name, module, config, inputs)
    paths, types = {}, {}
    for form in forms:
        if form == "fp16":
            model = base
        elif form == "int8":
            model = nncf.compress_weights(base.clone(), mode=nncf.CompressWeightsMode.INT8_SYM)
        else:
            model = nncf.compress_weights(base.clone(), mode=nncf.CompressWeightsMode.INT4_ASYM, group_size=32,
                                          ratio=1.0, all_layers=True)
        paths[form] = os.path.join(out, f"{name}_openvino_{form}.xml")
        # compress_to_fp16: weights nncf left in float (and every weight of the fp16 form) are
        # stored in fp16, as in the Core ML model.
        ov.save_model(model, paths[form], compress_to_fp16=True)
        types[form] = _weight_types(ov.Core().read_model(paths[form]))
        del model
        gc.collect()
    return paths, types


def build(name, forms=None, directory=DEFAULT_DIR, tiny=False):
    """Builds what is missing of `name` in `forms` (default: every form the model has) and
    returns its manifest: {"model", "kind", "params", "config", "inputs": npz path,
    "coreml": {form: .mlpackage}, "openvino": {form: .xml}, "weight_bytes": {"coreml": {form: n},
    "openvino": {form: n}}, "openvino_weights": {form: {element type: count}}}."""
    import torch

    forms = [f for f in (forms or FORMS) if f in model_forms(name)]
    out = os.path.join(directory, "tiny" if tiny else "", name)
    manifest_path = os.path.join(out, "manifest.json")
    manifest = None
    if os.path.exists(manifest_path):
        with open(manifest_path) as f:
            manifest = json.load(f)
    if manifest is None:
        manifest = {"model": name, "kind": "decoder" if name in DECODERS else "cnn", "coreml": {}, "openvino": {},
                    "weight_bytes": {"coreml": {}, "openvino": {}}, "openvino_weights": {}}
    if manifest.get("openvino_decoder") != "stateful":  # built before the decoders were stateful
        manifest["openvino"] = {}
        manifest["openvino_decoder"] = "stateful"
    if manifest.get("revision", 0) != REVISIONS.get(name, 0):  # the module changed: build all again
        manifest["coreml"], manifest["openvino"] = {}, {}
        manifest["revision"] = REVISIONS.get(name, 0)
    missing_coreml = [f for f in forms if not os.path.exists(manifest["coreml"].get(f, ""))]
    missing_openvino = [f for f in forms if f in OPENVINO_FORMS and not os.path.exists(manifest["openvino"].get(f, ""))]
    if not missing_coreml and not missing_openvino:
        return manifest
    os.makedirs(out, exist_ok=True)
    module = make_module(name, tiny)
    params = sum(p.numel() for p in module.parameters())
    if name == "lm1b" and not tiny and params < 1e9:
        raise AssertionError(f"lm1b has {params:,} parameters, fewer than 1e9")
    config = decoder_config(name, tiny) if name in DECODERS else None
    inputs = make_inputs(name, tiny)
    manifest["params"] = params
    manifest["config"] = config.as_dict() if config else {"input": list(inputs["image"].shape)}
    manifest["inputs"] = os.path.join(out, "inputs.npz")
    np.savez(manifest["inputs"], **inputs)
    with _quiet(), torch.no_grad():
        if missing_coreml:
            print(f"building {name}: Core ML {', '.join(missing_coreml)}", file=sys.stderr, flush=True)
            if name in DECODERS:
                paths = _build_coreml_decoder(name, module, config, missing_coreml, out)
            else:
                paths = _build_coreml_cnn(name, module, inputs, missing_coreml, out)
            manifest["coreml"].update(paths)
            gc.collect()
        if missing_openvino:
            print(f"building {name}: OpenVINO {', '.join(missing_openvino)}", file=sys.stderr, flush=True)
            paths, types = _build_openvino(name, module, config, inputs, missing_openvino, out)
            manifest["openvino"].update(paths)
            manifest["openvino_weights"].update(types)
    for kind in ("coreml", "openvino"):
        manifest["weight_bytes"][kind] = {f: weight_bytes(p) for f, p in manifest[kind].items()}
    with open(manifest_path, "w") as f:
        json.dump(manifest, f, indent=1)
    return manifest


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=DEFAULT_DIR)
    parser.add_argument("--only", nargs="*", default=list(MODELS), choices=MODELS)
    parser.add_argument("--forms", nargs="*", default=list(FORMS), choices=FORMS)
    parser.add_argument("--tiny", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in args.only:
        print(name, json.dumps(build(name, args.forms, args.dir, args.tiny), indent=1), flush=True)


if __name__ == "__main__":
    sys.exit(main())
