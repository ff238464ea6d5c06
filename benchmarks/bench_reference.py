"""Latency of our own kernels (backend="reference") with the intra-op pool at 1 thread and at
its default size, per network and precision, and optionally against another build.

    python3 benchmarks/bench_reference.py                      # pool size 1 vs default
    python3 benchmarks/bench_reference.py --threads 2 --runs 30
    python3 benchmarks/bench_reference.py --baseline /path/to/other-build/python

Models: <models-dir>/<net>/<net>_{fp32,fp16}.mlpackage with inputs in <net>/inputs.npz
(resnet18, mobilenet_v2 at 224x224, bert4: a 4-layer BERT-base-like encoder at seq 128,
lstm2: a 2-layer LSTM 256->512 over 64 steps), as `python3 benchmarks/peer_models.py` builds them.

Both settings are measured in one process, interleaved call by call (set_num_threads before
each call), so that load from other processes on the machine falls on both alike; the table
shows medians and their ratio, and the median CPU time per prediction (all threads of the
process), which shows the work done whatever the load. With --baseline, each model also runs in two child processes, one
importing coremlrt from the given directory (for example a build of an earlier commit), one
importing this build, which take turns prediction by prediction, each with the pool at its
default size; the second table is the ratio of the two medians.

A benchmark, not a test: it prints ratios measured in the same run (docs/design/architecture.md and
the README, "Benchmarks and stress runs").
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

NETWORKS = ("resnet18", "mobilenet_v2", "bert4", "lstm2")
PRECISIONS = ("fp32", "fp16")
DEFAULT_MODELS = os.path.join(os.path.expanduser("~"), ".cache", "coremlrt", "bench-models")


def model_path(models_dir, net, precision):
    return os.path.join(models_dir, net, f"{net}_{precision}.mlpackage")


def load(coremlrt, numpy, models_dir, net, precision):
    inputs = dict(numpy.load(os.path.join(models_dir, net, "inputs.npz")))
    model = coremlrt.MLModel(model_path(models_dir, net, precision), backend="reference")
    return model, inputs


def timed(model, inputs, cpu=None):
    """Wall-clock ms of one prediction; appends the process's CPU ms (every thread) to `cpu`."""
    cpu_start = time.process_time()
    start = time.perf_counter()
    model.predict(inputs)
    wall = (time.perf_counter() - start) * 1000.0
    if cpu is not None:
        cpu.append((time.process_time() - cpu_start) * 1000.0)
    return wall


def worker(args):
    """Child process of --baseline: loads one model with the coremlrt found in `--worker`, warms
    it up, then times one prediction per line read from stdin, answering with JSON."""
    sys.path.insert(0, args.worker)
    import coremlrt
    import numpy

    model, inputs = load(coremlrt, numpy, args.models_dir, args.net, args.precision)
    for _ in range(args.warmup):
        model.predict(inputs)
    print("ready", flush=True)
    for _ in sys.stdin:
        cpu = []
        wall = timed(model, inputs, cpu)
        print(json.dumps({"wall": wall, "cpu": cpu[0]}), flush=True)


def pool_table(args, nets):
    import coremlrt
    import numpy

    default = args.threads or coremlrt.num_threads()
    print(f"reference backend, pool size 1 vs {default}: median ms over {args.runs} interleaved runs "
          "(cpu: CPU time of the process per prediction, every thread)")
    print(f"{'network':<14}{'precision':<11}{'1 thread':>10}{f'{default} threads':>12}{'speedup':>9}"
          f"{'cpu 1':>9}{f'cpu {default}':>9}")
    for net in nets:
        for precision in PRECISIONS:
            if not os.path.isdir(model_path(args.models_dir, net, precision)):
                print(f"{net:<14}{precision:<11}  (model missing: {model_path(args.models_dir, net, precision)})")
                continue
            model, inputs = load(coremlrt, numpy, args.models_dir, net, precision)
            for threads in (1, default):
                coremlrt.set_num_threads(threads)
                for _ in range(args.warmup):
                    model.predict(inputs)
            one, many, cpu_one, cpu_many = [], [], [], []
            for _ in range(args.runs):
                coremlrt.set_num_threads(1)
                one.append(timed(model, inputs, cpu_one))
                coremlrt.set_num_threads(default)
                many.append(timed(model, inputs, cpu_many))
            m1, mn = statistics.median(one), statistics.median(many)
            print(f"{net:<14}{precision:<11}{m1:>10.2f}{mn:>12.2f}{m1 / mn:>8.2f}x"
                  f"{statistics.median(cpu_one):>9.2f}{statistics.median(cpu_many):>9.2f}", flush=True)
            del model
    coremlrt.set_num_threads(0)


def baseline_table(args, nets):
    here = os.path.dirname(os.path.abspath(__import__("coremlrt").__file__))
    current = os.path.dirname(here)
    print(f"\nbaseline {args.baseline} vs this build {current}: median ms over {args.runs} runs each, "
          "the two builds in two processes taking turns call by call, pool at its default size")
    print(f"{'network':<14}{'precision':<11}{'baseline':>10}{'this':>10}{'speedup':>9}"
          f"{'cpu base':>10}{'cpu this':>10}{'cpu ratio':>10}")
    env = dict(os.environ)
    if args.threads:
        env["COREMLRT_NUM_THREADS"] = str(args.threads)
    for net in nets:
        for precision in PRECISIONS:
            if not os.path.isdir(model_path(args.models_dir, net, precision)):
                continue
            children = {}
            for label, directory in (("baseline", args.baseline), ("this", current)):
                command = [sys.executable, os.path.abspath(__file__), "--worker", directory, "--net", net,
                           "--precision", precision, "--warmup", str(args.warmup), "--models-dir", args.models_dir]
                child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
                if child.stdout.readline().strip() != "ready":
                    raise RuntimeError(f"{label} worker for {net} {precision} failed to start")
                children[label] = child
            times = {"baseline": [], "this": []}
            cpu = {"baseline": [], "this": []}
            for _ in range(args.runs):
                for label, child in children.items():
                    child.stdin.write("run\n")
                    child.stdin.flush()
                    result = json.loads(child.stdout.readline())
                    times[label].append(result["wall"])
                    cpu[label].append(result["cpu"])
            for child in children.values():
                child.stdin.close()
                child.wait()
            mb, mt = statistics.median(times["baseline"]), statistics.median(times["this"])
            cb, ct = statistics.median(cpu["baseline"]), statistics.median(cpu["this"])
            print(f"{net:<14}{precision:<11}{mb:>10.2f}{mt:>10.2f}{mb / mt:>8.2f}x{cb:>10.2f}{ct:>10.2f}{cb / ct:>9.2f}x",
                  flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models-dir", default=DEFAULT_MODELS)
    parser.add_argument("--nets", default=",".join(NETWORKS), help="comma-separated subset of " + ",".join(NETWORKS))
    parser.add_argument("--runs", type=int, default=20, help="timed predictions per setting")
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--threads", type=int, default=0, help="the pool size to compare with 1 (default: the pool's default)")
    parser.add_argument("--baseline", help="a directory holding another build's coremlrt package, to compare with")
    parser.add_argument("--skip-pool-table", action="store_true")
    # Child-process mode of --baseline.
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--net", help=argparse.SUPPRESS)
    parser.add_argument("--precision", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(args)
        return
    nets = [n for n in args.nets.split(",") if n]
    import coremlrt

    print(f"coremlrt from {os.path.dirname(coremlrt.__file__)}; {os.cpu_count()} CPUs; "
          f"load average {os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d %H:%M:%S')}")
    if not args.skip_pool_table:
        pool_table(args, nets)
    if args.baseline:
        baseline_table(args, nets)


if __name__ == "__main__":
    main()
