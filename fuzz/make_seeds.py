"""Seed inputs for the fuzz targets (fuzz/README.md), one folder per target under OUT.

Sources: every case of ../shared/corpus when it is present (COREMLRT_CORPUS overrides), and
always the models tests/python/fixtures.py generates plus a neuralNetwork MLP converted here,
so a fresh clone has seeds too. Files over 256 KiB are left out (they slow the fuzzer down
without covering more of the readers).

    python3 fuzz/make_seeds.py OUT
"""

import glob
import hashlib
import os
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

import fixtures  # noqa: E402

MAX_SEED = 256 << 10
SPEC = os.path.join("Data", "com.apple.CoreML", "model.mlmodel")
WEIGHTS = os.path.join("Data", "com.apple.CoreML", "weights", "weight.bin")


def packages():
    corpus = os.environ.get("COREMLRT_CORPUS", os.path.join(HERE, "..", "..", "shared", "corpus"))
    found = sorted(glob.glob(os.path.join(corpus, "*", "*.mlpackage")))
    if found:
        print(f"seeds from the corpus at {os.path.abspath(corpus)}: {len(found)} packages")
    else:
        print(f"no corpus at {os.path.abspath(corpus)}: seeds from generated models only")
    for name in fixtures.BUILDERS:
        found += glob.glob(os.path.join(fixtures.case_dir(name), "*.mlpackage"))
    return found


def neural_network_models(out_dir):
    """Serialized neuralNetwork specs: the corpus' .mlmodel cases and an MLP converted here."""
    import numpy as np
    import coremltools as ct
    import torch

    corpus = os.environ.get("COREMLRT_CORPUS", os.path.join(HERE, "..", "..", "shared", "corpus"))
    paths = sorted(glob.glob(os.path.join(corpus, "*", "*.mlmodel")))
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(16, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4), torch.nn.Softmax(-1))
    model = ct.convert(torch.jit.trace(net.eval(), torch.zeros(1, 16)), convert_to="neuralnetwork",
                       inputs=[ct.TensorType(name="x", shape=(1, 16), dtype=np.float32)])
    generated = os.path.join(out_dir, "mlp.mlmodel")
    model.save(generated)
    return paths + [generated]


def write(folder, data):
    if len(data) > MAX_SEED:
        return
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, hashlib.sha1(data).hexdigest()), "wb") as f:
        f.write(data)


def read(path):
    with open(path, "rb") as f:
        return f.read()


def main(out):
    from coremltools.proto import Model_pb2

    for package in packages():
        manifest = read(os.path.join(package, "Manifest.json"))
        spec = read(os.path.join(package, SPEC))
        write(os.path.join(out, "package"), struct.pack("<H", len(manifest)) + manifest + spec)
        write(os.path.join(out, "program"), spec)
        if os.path.isfile(os.path.join(package, WEIGHTS)):
            write(os.path.join(out, "blob"), read(os.path.join(package, WEIGHTS)))
    for path in neural_network_models(out):
        model = Model_pb2.Model()
        model.ParseFromString(read(path))
        if model.WhichOneof("Type") == "neuralNetwork":
            write(os.path.join(out, "neural_network"), model.neuralNetwork.SerializeToString())
            write(os.path.join(out, "program"), read(path))
    rng = __import__("random").Random(7)
    for rows in (1, 3, 8):
        indices = struct.pack("<4i", *(rng.randrange(rows) for _ in range(4)))
        floats = struct.pack(f"<{rows * 16}f", *(rng.uniform(-4, 4) for _ in range(rows * 16)))
        write(os.path.join(out, "predict"), bytes([rows]) + indices + floats)
    for target in ("package", "program", "blob", "neural_network", "predict"):
        print(f"{target}: {len(os.listdir(os.path.join(out, target)))} seeds")


if __name__ == "__main__":
    main(sys.argv[1])
