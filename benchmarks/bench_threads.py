"""Parallel speed-up of predict: a fixed number of compute-bound predictions on one model,
split over 2 threads vs run on 1. Prints the wall-time ratio (2 threads / 1 thread); with
the GIL released during compute, it approaches 0.5 on a 2-core machine.

    python3 benchmarks/bench_threads.py [--predictions 16] [--size 256] [--depth 8]
"""

import argparse
import os
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
import coremlrt  # noqa: E402
from mil_helpers import matmul_chain  # noqa: E402


def run(model, x, predictions, threads):
    per_thread = predictions // threads

    def work():
        for _ in range(per_thread):
            model.predict({"x": x})

    pool = [threading.Thread(target=work) for _ in range(threads)]
    start = time.perf_counter()
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return time.perf_counter() - start


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--predictions", type=int, default=16)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--depth", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    path, _ = matmul_chain(tempfile.mkdtemp(), depth=args.depth, size=args.size)
    model = coremlrt.MLModel(path)
    x = np.random.default_rng(0).standard_normal((args.size, args.size)).astype(np.float32)
    run(model, x, 2, 2)  # warm up both contexts
    one = min(run(model, x, args.predictions, 1) for _ in range(args.repeat))
    two = min(run(model, x, args.predictions, 2) for _ in range(args.repeat))
    print(f"{args.predictions} predictions: 1 thread {one:.3f} s, 2 threads {two:.3f} s, "
          f"ratio 2/1 = {two / one:.3f} (goal <= 0.65 on 2 cores)")


if __name__ == "__main__":
    main()
