"""Long lifetime stress: many models alternating, idle gaps across the linger period,
several threads, inputs dropped right after predict, the heap churned. Run it under ASan:

    bash scripts/test_sanitizers.sh   # builds build/asan (or configure it by hand)
    LD_PRELOAD="$(clang++-16 -print-file-name=libclang_rt.asan-x86_64.so) $(g++ -print-file-name=libstdc++.so)" ASAN_OPTIONS=detect_leaks=0 \\
        PYTHONPATH=build/asan/python python3 benchmarks/stress_lifetime.py --minutes 3

Prints rounds, threads, wall time and mismatches; a crash ends the process (and ASan
prints the report), so a clean finish is the result.
"""

import argparse
import os
import random
import sys
import tempfile
import threading
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "tests", "python"))
import coremlrt  # noqa: E402
from mil_helpers import matmul_chain, matmul_chain_reference  # noqa: E402


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=3.0)
    parser.add_argument("--threads", type=int, default=4)
    parser.add_argument("--models", type=int, default=6)
    parser.add_argument("--linger", type=float, default=0.1, help="context linger period in seconds")
    args = parser.parse_args()

    workdir = tempfile.mkdtemp()
    path, weights = matmul_chain(workdir, depth=3, size=48)
    models = [coremlrt.MLModel(path, context_linger=args.linger) for _ in range(args.models)]
    rounds = [0] * args.threads
    mismatches = []
    deadline = time.time() + args.minutes * 60

    def worker(index):
        rng = random.Random(index)
        nprng = np.random.default_rng(index)
        while time.time() < deadline:
            model = models[rng.randrange(len(models))]
            x = nprng.standard_normal((48, 48)).astype(rng.choice([np.float32, np.float64]))
            out = model.predict({"x": x})["y"]
            if rounds[index] % 7 == 0:
                expected = matmul_chain_reference(x.astype(np.float32), weights)
                if not np.allclose(out, expected, rtol=1e-4, atol=1e-5):
                    mismatches.append((index, rounds[index]))
            del x
            if rng.random() < 0.3:
                junk = [bytearray(rng.randrange(1, 4096)) for _ in range(200)]
                del junk
            if rng.random() < 0.05:
                time.sleep(rng.uniform(0, 3 * args.linger))  # idle past the linger period
            rounds[index] += 1

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(args.threads)]
    start = time.time()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    wall = time.time() - start
    resets = sum(m.statistics()["contexts_reset"] for m in models)
    print(f"rounds {sum(rounds)}  threads {args.threads}  models {args.models}  wall {wall:.1f} s  "
          f"context resets {resets}  mismatches {len(mismatches)}  crashes 0")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())
