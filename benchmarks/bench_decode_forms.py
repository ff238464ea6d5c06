"""A decode step's matrix-vector product over compressed weights against the same weights in
fp16: one linear layer, [1, K] x [K, N], as an fp16 model, int4 per block of 32 (affine, with
offsets, as coremltools' "linear" mode writes it) and int8 per channel (symmetric), made by
coremltools from one torch layer with fixed random weights and cached.

    python3 benchmarks/bench_decode_forms.py [--runs 30] [--threads 1] [--k 2048] [--n 8192]

The forms are timed in turns, five predictions each per turn, on coremlrt's kernels (backend
"reference": the product stays there under "auto" too, by the cost rule's matrix-vector rule);
reported is each form's best turn and its ratio to fp16's best. On x86 the compressed forms run
the register loops of the CPU's level (src/ops/packed_dot_x86.cc with AVX-512,
src/ops/packed_dot_avx2.cc with AVX2), which the output names. ``--tiny`` is the smoke test.
"""

import argparse
import os
import sys
import time

import numpy as np

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_DIR = os.path.join(ROOT, "build", "bench-models", "decode-forms")
FORMS = ("fp16", "int4", "int8")


def simd_level():
    with open("/proc/cpuinfo") as f:
        flags = next((line for line in f if line.startswith("flags")), "").split()
    if {"avx512f", "avx512bw", "avx512dq", "avx512vl"} <= set(flags):
        return "avx512"
    return "avx2" if {"avx2", "fma", "f16c"} <= set(flags) else "portable"


def build(k, n, folder):
    """The three packages for [1, k] x [k, n] (made once per shape)."""
    paths = {form: os.path.join(folder, f"linear_{k}x{n}_{form}.mlpackage") for form in FORMS}
    if all(os.path.exists(p) for p in paths.values()):
        return paths
    import coremltools as ct
    import coremltools.optimize.coreml as cto
    import torch

    os.makedirs(folder, exist_ok=True)
    torch.manual_seed(0)
    layer = torch.nn.Linear(k, n, bias=False).eval()
    traced = torch.jit.trace(layer, torch.randn(1, k))
    fp16 = ct.convert(traced, inputs=[ct.TensorType(name="x", shape=(1, k))],
                      minimum_deployment_target=ct.target.iOS18, compute_precision=ct.precision.FLOAT16)
    fp16.save(paths["fp16"])
    int4 = cto.OpLinearQuantizerConfig(mode="linear", dtype="int4", granularity="per_block", block_size=32)
    cto.linear_quantize_weights(fp16, cto.OptimizationConfig(global_config=int4)).save(paths["int4"])
    int8 = cto.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", granularity="per_channel")
    cto.linear_quantize_weights(fp16, cto.OptimizationConfig(global_config=int8)).save(paths["int8"])
    return paths


def measure(paths, k, runs, threads):
    import coremlrt

    coremlrt.set_num_threads(threads)
    models = {form: coremlrt.MLModel(path, backend="reference", threads=threads) for form, path in paths.items()}
    x = {"x": np.random.default_rng(0).uniform(-1, 1, (1, k)).astype(np.float32)}
    best = {form: float("inf") for form in models}
    for _ in range(runs):
        for form, model in models.items():
            started = time.perf_counter()
            for _ in range(5):
                model.predict(x)
            best[form] = min(best[form], (time.perf_counter() - started) / 5)
    return best


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=30)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--k", type=int, default=2048)
    parser.add_argument("--n", type=int, default=8192)
    parser.add_argument("--dir", default=DEFAULT_DIR)
    parser.add_argument("--tiny", action="store_true", help="a 64 x 64 layer, 2 turns: the smoke test")
    args = parser.parse_args()
    if args.tiny:
        args.k, args.n, args.runs = 64, 64, 2
    best = measure(build(args.k, args.n, args.dir), args.k, args.runs, args.threads)
    print(f"[1, {args.k}] x [{args.k}, {args.n}], {args.threads} thread(s), best of {args.runs} turns, "
          f"register loops: {simd_level()}")
    print("| form | best ms | / fp16 |")
    print("|---|---|---|")
    for form in FORMS:
        print(f"| {form} | {best[form] * 1e3:.3f} | {best[form] / best['fp16']:.2f} |")


if __name__ == "__main__":
    sys.exit(main())
