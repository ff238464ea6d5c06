"""coremlrt fp32 (backend auto) against OpenVINO f32 and ONNX Runtime f32, one prediction of
each in turn, on the networks of bench_peers.py (peer_models.py builds and caches them).

    python3 benchmarks/bench_fp32_pairs.py [--runs 60] [--threads 2] NETWORK...

bench_peers.py times eleven contenders in blocks; this times three, alternating every
prediction, so that a change of the machine's load falls on all three alike. ONNX Runtime's
pool does not spin between runs here (it would take the cores from the next contender).
Prints the medians and coremlrt's ratio to the faster peer, the figure of the fp32 targets.
"""

import argparse
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_peers  # noqa: E402
import peer_models  # noqa: E402


def pair_times(name, runs, threads, models_dir):
    paths = peer_models.build(name, models_dir)
    inputs = dict(np.load(paths["inputs"]))
    coreml_inputs = dict(zip(paths["coreml_inputs"], inputs.values()))
    runners = {"coremlrt fp32 auto": bench_peers._coremlrt_runner(paths["coreml_fp32"], coreml_inputs, "auto", threads),
               "openvino f32": bench_peers._openvino_runner(name, paths["onnx"], inputs, threads, "f32"),
               "onnxruntime f32": bench_peers._ort_runner(paths["onnx"], inputs, threads, spinning=False)}
    for run in runners.values():
        for _ in range(3):
            run()
    times = {label: [] for label in runners}
    for _ in range(runs):
        for label, run in runners.items():
            start = time.perf_counter()
            run()
            times[label].append(time.perf_counter() - start)
    return {label: float(np.median(t)) * 1e3 for label, t in times.items()}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("networks", nargs="+", choices=sorted(peer_models.NETWORKS))
    parser.add_argument("--runs", type=int, default=60)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--models-dir", default=peer_models.DEFAULT_DIR)
    args = parser.parse_args(argv)
    print("| network | coremlrt fp32 auto (ms) | openvino f32 | onnxruntime f32 | coremlrt / min(peers) | coremlrt / ORT |")
    print("|---|---|---|---|---|---|")
    for name in args.networks:
        t = pair_times(name, args.runs, args.threads, args.models_dir)
        ours, ov, ort = t["coremlrt fp32 auto"], t["openvino f32"], t["onnxruntime f32"]
        print(f"| {name} | {ours:.3g} | {ov:.3g} | {ort:.3g} | {ours / min(ov, ort):.3f} | {ours / ort:.3f} |", flush=True)


if __name__ == "__main__":
    sys.exit(main())
