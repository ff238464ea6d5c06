"""Quality of coremlrt's ONNX export: ONNX Runtime on the export of a Core ML model against ONNX
Runtime on torch's own ONNX export of the same module, in one run on this machine.

    python3 benchmarks/bench_onnx_export.py [--runs 40] [--threads 2] [--only resnet18 mobilenet_v2 bert4]

Each network comes from benchmarks/peer_models.py (the fp32 Core ML conversion and torch's ONNX
export of one module, cached under its folder). The Core ML model is exported with
coremlrt.export_onnx; both ONNX models run in ONNX Runtime's CPU provider with the same
settings, interleaved in turns (bench_peers.measure). It prints the median latencies, the ratio
export / torch (the target: at most 1.1, no stray transposes or casts), the largest difference
between the two models' outputs, and the node counts of both graphs.
"""

import argparse
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_peers  # noqa: E402
import peer_models  # noqa: E402

NETWORKS = ("resnet18", "mobilenet_v2", "bert4")


def _op_counts(path):
    import collections

    import onnx

    return collections.Counter(n.op_type for n in onnx.load(path, load_external_data=False).graph.node)


def run(name, directory, threads, runs):
    import coremlrt
    from coremlrt.onnx_export import export_onnx

    paths = peer_models.build(name, directory)
    exported = os.path.join(directory, name, f"{name}_coremlrt_export.onnx")
    export_onnx(paths["coreml_fp32"], exported)
    inputs = dict(np.load(paths["inputs"]))
    # The Core ML model's inputs carry the converter's names; torch's export the module's.
    coreml_inputs = dict(zip(paths["coreml_inputs"], inputs.values()))
    ours = bench_peers._ort_runner(exported, coreml_inputs, threads)
    theirs = bench_peers._ort_runner(paths["onnx"], inputs, threads)
    difference = float(np.max(np.abs(np.asarray(ours()[0], np.float64) - np.asarray(theirs()[0], np.float64))))
    reference = coremlrt.MLModel(paths["coreml_fp32"], backend="reference", cache_dir=None).predict(coreml_inputs)
    vs_coremlrt = float(np.max(np.abs(np.asarray(ours()[0], np.float64) - next(iter(reference.values())))))

    # measure() asks bench_peers.contenders for its (label, make) pairs.
    original = bench_peers.contenders
    bench_peers.contenders = lambda *_: [("export", lambda: ours), ("torch", lambda: theirs)]
    try:
        times, errors = bench_peers.measure(name, paths, threads, runs, warmup=3)
    finally:
        bench_peers.contenders = original
    if errors:
        raise RuntimeError(errors)
    return {"times": times, "ratio": times["export"] / times["torch"], "difference": difference,
            "vs_coremlrt": vs_coremlrt, "ops_export": _op_counts(exported), "ops_torch": _op_counts(paths["onnx"])}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=40)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--only", nargs="*", default=list(NETWORKS))
    parser.add_argument("--dir", default=peer_models.DEFAULT_DIR)
    args = parser.parse_args(argv)
    print(f"ONNX Runtime, {args.threads} threads, median of {args.runs} runs each, interleaved")
    print(f"{'network':14} {'export ms':>10} {'torch ms':>10} {'ratio':>7} {'max |diff|':>11} {'vs coremlrt':>12}  nodes")
    worst = 0.0
    for name in args.only:
        r = run(name, args.dir, args.threads, args.runs)
        worst = max(worst, r["ratio"])
        print(f"{name:14} {r['times']['export']:10.3f} {r['times']['torch']:10.3f} {r['ratio']:7.2f} "
              f"{r['difference']:11.2e} {r['vs_coremlrt']:12.2e}  {sum(r['ops_export'].values())} vs "
              f"{sum(r['ops_torch'].values())}", flush=True)
        extra = {op: n - r["ops_torch"].get(op, 0) for op, n in r["ops_export"].items() if n > r["ops_torch"].get(op, 0)}
        if extra:
            print(f"{'':14} ops the export has more of: {extra}")
    print(f"worst ratio {worst:.2f} (target <= 1.1)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
