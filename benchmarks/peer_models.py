"""The networks benchmarks/bench_peers.py measures, each made once from the same torch module
as a Core ML model (fp16 and fp32, iOS18 target, converted by coremltools the way users do)
and as an ONNX model (torch.onnx.export), cached in a folder.

    python3 benchmarks/peer_models.py [--dir DIR] [--only NAME ...]   # build (or reuse) them

Weights are random (seeded): speed does not depend on their values, and nothing here may be
downloaded. Shapes follow the benchmark table of docs/performance.md.
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


def _mobilenet_v2():
    import torchvision

    return torchvision.models.mobilenet_v2(weights=None), {
        "image": np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)}


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


NETWORKS = {
    "resnet18": _resnet18,
    "mobilenet_v2": _mobilenet_v2,
    "bert4": _bert,
    "lstm2": _lstm,
    "tiny": _tiny,
}


def _torch_inputs(inputs):
    import torch

    return tuple(torch.from_numpy(v.astype(np.int64) if v.dtype == np.int32 else v) for v in inputs.values())


def build(name, directory):
    """Returns {"coreml_fp32": path, "coreml_fp16": path, "onnx": path, "inputs": npz path}."""
    import coremltools as ct
    import torch

    out = os.path.join(directory, name)
    manifest = os.path.join(out, "models.json")
    if os.path.exists(manifest):
        with open(manifest) as f:
            return json.load(f)
    os.makedirs(out, exist_ok=True)
    torch.manual_seed(0)
    module, inputs = NETWORKS[name]()
    module.eval()
    example = _torch_inputs(inputs)
    paths = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if name in VIA_EXPORT:
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
        torch.onnx.export(module, example, onnx_path, input_names=list(inputs), output_names=["output"],
                          opset_version=17, dynamo=False)
        paths["onnx"] = onnx_path
    npz = os.path.join(out, "inputs.npz")
    np.savez(npz, **inputs)
    paths["inputs"] = npz
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
