"""Load cost vs one sequential read of the weight file.

Builds (once, cached under --workdir) a model holding about 100 MB of fp16 weights, made
with coremltools' MIL builder, then compares:

  read  - one sequential read of weights/weight.bin (the floor for any loader that copies)
  load  - coremlrt.MLModel(path): parse, map weights, plan

Each is measured with the file's pages evicted from the page cache first (cold) and with
them cached (warm); the median of --repeat runs is printed with the ratio load/read. The
goal is a ratio of at most 2: weights are memory-mapped, not copied, at load.

    python3 benchmarks/bench_load.py [--megabytes 100] [--repeat 5]
"""

import argparse
import os
import statistics
import tempfile
import time

import numpy as np


def build_model(path, megabytes):
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    width = 2048
    layers = max(1, int(megabytes * 1e6 / (width * width * 2)))
    rng = np.random.default_rng(0)
    weights = [(rng.standard_normal((width, width)) / np.sqrt(width)).astype(np.float16) for _ in range(layers)]

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, width))], opset_version=ct.target.iOS18)
    def prog(x):
        x = mb.cast(x=x, dtype="fp16")
        for w in weights:
            x = mb.relu(x=mb.linear(x=x, weight=w))
        return mb.cast(x=x, dtype="fp32", name="y")

    model = ct.convert(prog, convert_to="mlprogram", compute_precision=ct.precision.FLOAT16,
                       minimum_deployment_target=ct.target.iOS18, skip_model_load=True)
    model.save(path)


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def timed_read(path):
    start = time.perf_counter()
    with open(path, "rb", buffering=0) as f:
        buffer = bytearray(8 << 20)
        view = memoryview(buffer)
        while f.readinto(view):
            pass
    return time.perf_counter() - start


def timed_load(path):
    import coremlrt

    start = time.perf_counter()
    model = coremlrt.MLModel(path)
    elapsed = time.perf_counter() - start
    del model
    return elapsed


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--megabytes", type=float, default=100)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--workdir", default=os.path.join(tempfile.gettempdir(), "coremlrt-bench-load"))
    args = parser.parse_args()

    path = os.path.join(args.workdir, f"weights{int(args.megabytes)}mb.mlpackage")
    if not os.path.isdir(path):
        os.makedirs(args.workdir, exist_ok=True)
        print(f"building {path} ...")
        build_model(path, args.megabytes)
    weights = os.path.join(path, "Data", "com.apple.CoreML", "weights", "weight.bin")
    size = os.path.getsize(weights)
    print(f"weight file: {size / 1e6:.1f} MB")

    results = {}
    for mode in ("cold", "warm"):
        reads, loads = [], []
        for _ in range(args.repeat):
            if mode == "cold":
                evict(weights)
            else:
                timed_read(weights)
            reads.append(timed_read(weights))
            if mode == "cold":
                evict(weights)
            loads.append(timed_load(path))
        read, load = statistics.median(reads), statistics.median(loads)
        results[mode] = load / read
        print(f"{mode}: read {read * 1e3:8.2f} ms   load {load * 1e3:8.2f} ms   load/read {load / read:6.3f}")
    verdict = "OK" if max(results.values()) <= 2.0 else "OVER BUDGET"
    print(f"worst load/read ratio {max(results.values()):.3f} (budget 2.0): {verdict}")


if __name__ == "__main__":
    main()
