"""The 1.1 B LLaMA-shaped model benchmarks/bench_llm.py measures, made once from a seeded torch
module (random weights: speed does not depend on them, and nothing may be downloaded) and cached
under build/bench-models/llm/ (manifest.json names every file; what is missing is made again):

* hf/: config.json and model.safetensors (fp16) of a transformers LlamaForCausalLM, and a small
  SentencePiece tokenizer (tokenizer.model) for llama.cpp's converter, which pads its vocabulary
  to the model's 32,000 entries (the benchmark feeds token ids);
* Core ML (coremltools 9.0, iOS18, fp16 compute): the prefill (128 tokens) / decode (1 token)
  package of tests/python/llama_helpers.py with a 256-position KV cache, as converted (fp16) and
  with every linear weight and the embedding in int4 per block of 32 with an offset
  (coremltools.optimize linear_quantize_weights, weight_threshold 0);
* GGUF (llama.cpp's own tools, from the llama-cpp-python source distribution): F16 by
  convert_hf_to_gguf.py, Q4_0 by llama_model_quantize with ``pure`` (every matrix Q4_0, blocks of
  32, the output and embedding matrices included);
* OpenVINO: the same torch module with its caches as inputs and outputs, converted by
  openvino.convert_model and made stateful (its caches become the model's variables, the form
  optimum-intel gives LLMs), fp16 weights, and nncf.compress_weights INT4_ASYM group 32,
  ratio 1.0, all layers.

    python3 benchmarks/llm_models.py [--llama-cpp build/llama-cpp] [--sdist DIR]

Memory: the torch module is made in fp32 (4.4 GB) and each converter runs on it in turn, its
copies freed before the next (the machine has 24 GiB, shared).
"""

import argparse
import gc
import glob
import json
import os
import shutil
import subprocess
import sys
import tarfile

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))
import llama_helpers as L  # noqa: E402
from lm_helpers import save_multifunction  # noqa: E402

DEFAULT_DIR = os.path.join(ROOT, "build", "bench-models", "llm")
LLAMA_CPP = os.path.join(ROOT, "build", "llama-cpp")
SDIST_DIR = os.path.join(ROOT, "build", "llama-cpp-sdist")
SEED = 0


def config(tiny=False):
    if tiny:  # bench_llm.py --tiny: the same code paths in seconds
        return L.LlamaConfig(vocab=512, hidden=128, layers=2, heads=4, kv_heads=2, intermediate=352, max_len=96,
                             prompt=16)
    return L.LLAMA_1B


def _sentencepiece_tokenizer(directory):
    import sentencepiece as spm

    text = os.path.join(directory, "_text.txt")
    with open(text, "w") as f:
        f.write((L.SAMPLE_TEXT + "\n") * 50)
    spm.SentencePieceTrainer.train(input=text, model_prefix=os.path.join(directory, "tokenizer"), vocab_size=200,
                                   model_type="bpe", bos_id=1, eos_id=2, unk_id=0, hard_vocab_limit=False,
                                   minloglevel=2)
    os.remove(text)
    os.remove(os.path.join(directory, "tokenizer.vocab"))
    with open(os.path.join(directory, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "add_bos_token": True}, f)


def _int4(model):
    import coremltools.optimize.coreml as cto

    op = cto.OpLinearQuantizerConfig(mode="linear", dtype="int4", granularity="per_block", block_size=32,
                                      weight_threshold=0)
    return cto.linear_quantize_weights(model, cto.OptimizationConfig(global_config=op))


def _coreml(module, out, forms):
    """{form: package path}: each function converted once, compressed per form, then joined."""
    import coremltools as ct
    import torch

    config = module.config
    staging = os.path.join(out, "_functions")
    os.makedirs(staging, exist_ok=True)
    sources = {form: {} for form in forms}
    with L.quiet(), torch.no_grad():
        for function, seq_len in (("prefill", config.prompt), ("decode", 1)):
            module.seq_len = seq_len
            traced = torch.jit.trace(module, (torch.zeros(1, seq_len, dtype=torch.int32),
                                              torch.zeros(1, dtype=torch.int32)), check_trace=False)
            module.seq_len = None
            base = ct.convert(
                traced, inputs=[ct.TensorType(name="tokens", shape=(1, seq_len), dtype=np.int32),
                                ct.TensorType(name="start", shape=(1,), dtype=np.int32)],
                outputs=[ct.TensorType(name="logits", dtype=np.float16)],
                states=[ct.StateType(wrapped_type=ct.TensorType(shape=config.cache_shape, dtype=np.float16), name=n)
                        for n in ("keyCache", "valueCache")],
                minimum_deployment_target=ct.target.iOS18, convert_to="mlprogram",
                compute_precision=ct.precision.FLOAT16, skip_model_load=True)
            del traced
            gc.collect()
            for form in forms:
                path = os.path.join(staging, f"{function}_{form}.mlpackage")
                (base if form == "fp16" else _int4(base)).save(path)
                sources[form][function] = path
                gc.collect()
            del base
            gc.collect()
    paths = {}
    for form in forms:
        shutil.rmtree(os.path.join(out, f"llama_{form}.mlpackage"), ignore_errors=True)
        paths[form] = save_multifunction(out, f"llama_{form}", sources[form], default="prefill")
    shutil.rmtree(staging, ignore_errors=True)
    return paths


def _openvino(module, out, forms):
    """{form: .xml}: the stateful OpenVINO model (caches as variables), fp16 and int4."""
    import nncf
    import openvino as ov
    import torch
    from openvino._offline_transformations import apply_make_stateful_transformation

    config = module.config

    class WithCacheIO(torch.nn.Module):
        def __init__(self, llama):
            super().__init__()
            self.llama = llama

        def forward(self, tokens, start, key_cache, value_cache):
            key_cache, value_cache = key_cache.clone(), value_cache.clone()
            T = tokens.shape[1]
            p0 = start[0]
            positions = torch.arange(T, dtype=torch.int64) + p0
            keys = torch.arange(config.max_len, dtype=torch.int64)
            bias = torch.where(keys[None, :] <= positions[:, None], 0.0, -1e4)
            logits = self.llama.blocks(self.llama.model.embed_tokens(tokens[0]), positions, p0, T, config.max_len,
                                       bias, key_cache, value_cache)
            return logits, key_cache, value_cache

    caches = [torch.zeros(config.cache_shape, dtype=torch.float16) for _ in range(2)]
    with L.quiet(), torch.no_grad():
        model = ov.convert_model(WithCacheIO(module), example_input=(torch.zeros(1, 4, dtype=torch.int64),
                                                                    torch.zeros(1, dtype=torch.int64), *caches),
                                 input=[([1, -1], ov.Type.i64), ([1], ov.Type.i64),
                                        (list(config.cache_shape), ov.Type.f16), (list(config.cache_shape), ov.Type.f16)])
    for port, n in zip(model.inputs, ("input_ids", "start", "key_cache", "value_cache")):
        port.get_tensor().set_names({n})
    for port, n in zip(model.outputs, ("logits", "key_cache_out", "value_cache_out")):
        port.get_tensor().set_names({n})
    apply_make_stateful_transformation(model, {"key_cache": "key_cache_out", "value_cache": "value_cache_out"})
    paths = {}
    for form in forms:
        compressed = model if form == "fp16" else nncf.compress_weights(
            model.clone(), mode=nncf.CompressWeightsMode.INT4_ASYM, group_size=32, ratio=1.0, all_layers=True)
        paths[form] = os.path.join(out, f"llama_openvino_{form}.xml")
        ov.save_model(compressed, paths[form], compress_to_fp16=True)
        del compressed
        gc.collect()
    return paths


def llama_cpp_sdist(sdist_dir=SDIST_DIR):
    """The llama.cpp tree inside llama-cpp-python's source distribution (converter, gguf-py)."""
    trees = glob.glob(os.path.join(sdist_dir, "llama_cpp_python-*", "vendor", "llama.cpp"))
    if trees:
        return trees[0]
    archives = glob.glob(os.path.join(sdist_dir, "llama_cpp_python-*.tar.gz"))
    if not archives:
        raise SystemExit(f"no llama-cpp-python source distribution in {sdist_dir}: pip download --no-binary :all: "
                         f"--no-deps llama-cpp-python -d {sdist_dir}")
    with tarfile.open(archives[0]) as tar:
        tar.extractall(sdist_dir, filter="data")
    return glob.glob(os.path.join(sdist_dir, "llama_cpp_python-*", "vendor", "llama.cpp"))[0]


def _gguf(hf_dir, out, llama_cpp_dir, sdist_dir):
    tree = llama_cpp_sdist(sdist_dir)
    f16 = os.path.join(out, "llama-f16.gguf")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([os.path.join(tree, "gguf-py"), llama_cpp_dir,
                                                       os.environ.get("PYTHONPATH", "")]))
    subprocess.run([sys.executable, os.path.join(tree, "convert_hf_to_gguf.py"), hf_dir, "--outtype", "f16",
                    "--outfile", f16], check=True, env=env, stdout=subprocess.DEVNULL)
    q4 = os.path.join(out, "llama-q4_0.gguf")
    code = ("import ctypes, llama_cpp as c, sys\n"
            "p = c.llama_model_quantize_default_params()\n"
            "p.ftype = c.LLAMA_FTYPE_MOSTLY_Q4_0\np.pure = True\np.nthread = 2\n"
            "sys.exit(c.llama_model_quantize(sys.argv[1].encode(), sys.argv[2].encode(), ctypes.byref(p)))\n")
    subprocess.run([sys.executable, "-c", code, f16, q4], check=True, env=env)
    return {"fp16": f16, "int4": q4}


KINDS = ("coreml", "openvino", "gguf")


def build(directory=DEFAULT_DIR, tiny=False, llama_cpp_dir=LLAMA_CPP, sdist_dir=SDIST_DIR, kinds=KINDS):
    """Makes what is missing of `kinds` (coreml, openvino, gguf) and returns the manifest."""
    out = os.path.join(directory, "tiny") if tiny else directory
    manifest_path = os.path.join(out, "manifest.json")
    manifest = json.load(open(manifest_path)) if os.path.exists(manifest_path) else {}
    exists = lambda kind: all(os.path.exists(p) for p in manifest.get(kind, {}).values()) and manifest.get(kind)  # noqa: E731
    if all(exists(k) for k in kinds) and os.path.isdir(manifest.get("hf", "")):
        return manifest
    os.makedirs(out, exist_ok=True)
    import torch

    cfg = config(tiny)
    module = L.make_llama(cfg, seed=SEED)
    manifest.update(config=cfg.as_dict(), params=sum(p.numel() for p in module.parameters()),
                    embedding_params=cfg.vocab * cfg.hidden)
    hf_dir = os.path.join(out, "hf")
    if not os.path.isdir(hf_dir):
        L.save_hf_folder(module, hf_dir + ".tmp", dtype="float16")
        os.rename(hf_dir + ".tmp", hf_dir)
    if "gguf" in kinds and not os.path.exists(os.path.join(hf_dir, "tokenizer.model")):
        _sentencepiece_tokenizer(hf_dir)  # llama.cpp's converter needs a tokenizer
    manifest["hf"] = hf_dir
    rng = np.random.default_rng(SEED)
    manifest["prompt"] = rng.integers(3, cfg.vocab, cfg.prompt).tolist()

    def save():
        with open(manifest_path, "w") as f:
            json.dump(manifest, f, indent=1)

    with torch.no_grad():
        if "coreml" in kinds and not exists("coreml"):
            print("building Core ML fp16, int4", file=sys.stderr, flush=True)
            manifest["coreml"] = _coreml(module, out, ("fp16", "int4"))
            save()
            gc.collect()
        if "openvino" in kinds and not exists("openvino"):
            print("building OpenVINO fp16, int4", file=sys.stderr, flush=True)
            manifest["openvino"] = _openvino(module, out, ("fp16", "int4"))
            save()
            gc.collect()
    del module
    gc.collect()
    if "gguf" in kinds and not exists("gguf"):
        print("building GGUF F16, Q4_0", file=sys.stderr, flush=True)
        manifest["gguf"] = _gguf(hf_dir, out, llama_cpp_dir, sdist_dir)
        save()
    return manifest


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dir", default=DEFAULT_DIR)
    parser.add_argument("--tiny", action="store_true")
    parser.add_argument("--llama-cpp", default=LLAMA_CPP, help="folder llama-cpp-python is installed in (--target)")
    parser.add_argument("--sdist", default=SDIST_DIR, help="folder holding llama-cpp-python's source distribution")
    args = parser.parse_args(argv)
    print(json.dumps(build(args.dir, args.tiny, args.llama_cpp, args.sdist), indent=1))


if __name__ == "__main__":
    sys.exit(main())
