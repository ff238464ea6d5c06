"""Batch prediction throughput: a plain Python loop over predict vs coremlrt.predict_dataset
(2 threads), coremlrt.dask.predict (LocalCluster, 2 worker processes) and coremlrt.ray.predictor
(map_batches, 2 actors), on the same records. Prints records/s, the ratio of each to the plain
loop, and the peak RSS of each process that predicted.

    python3 benchmarks/bench_batch.py [--model cnn|lstm] [--records 2000] [--size 96] [--width 96] [--workers 2] [--rounds 1]

The model is a small image CNN converted from torch (4 conv+ReLU stages, global average
pooling, a linear classifier) on 3x96x96 inputs: the same kind of work as resnet18 (conv
kernels over feature maps), about 10 ms a prediction here where resnet18 at 224x224 takes
ten times longer, so that 2,000 predictions take tens of seconds on each path. A prediction
far shorter than a millisecond would measure Python and scheduling overheads (and, for Ray,
the actors' start) instead of the engine; one far longer only makes the run slow.
Records are placed where each path reads them (Dask: persisted on the workers; Ray: in its
object store) before the clock starts; the model loads, actor starts included, are timed.
Each line also gives the CPU time the predicting processes spent per record: on cores shared
with other work, wall-clock ratios follow the neighbours. The CPU-time ratio (workers x loop CPU
per record / path CPU per record) is each path against a loop that keeps one core busy. The
plain loop here keeps every core busy already (one prediction spreads over the cores), so its
wall-clock ratio cannot pass loop CPU / path CPU per record on an idle machine.

`--model lstm` is the other kind of network: a 2-layer LSTM (256 -> 512, 64 steps, as
benchmarks/peer_models.py's lstm2) with a linear head. Its steps are sequential and each step's
matrices are small, so one prediction cannot spread over the cores: the plain loop keeps one core
busy, and the parallel paths have the other to gain.
"""

import argparse
import os
import tempfile
import time

import numpy as np

import coremlrt


def peak_rss_mib():
    # VmHWM, not getrusage's ru_maxrss: Linux keeps ru_maxrss across exec, so a worker spawned
    # by this (torch-importing) process would report this process's peak as its own.
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def make_model(directory, kind, size, width):
    """Converts the network and saves it; returns its path and the shape of one record."""
    import coremltools as ct
    import torch

    torch.manual_seed(0)
    if kind == "lstm":
        return make_lstm(directory, ct, torch)
    layers, channels = [], 3
    for stage, out_channels in enumerate((width, width, 2 * width, 2 * width)):
        layers += [torch.nn.Conv2d(channels, out_channels, 3, stride=1 if stage == 0 else 2, padding=1),
                   torch.nn.ReLU()]
        channels = out_channels
    network = torch.nn.Sequential(*layers, torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(),
                                  torch.nn.Linear(channels, 10)).eval()
    return convert_and_save(ct, torch, network, torch.zeros(1, 3, size, size), os.path.join(directory, "cnn.mlpackage"))


def convert_and_save(ct, torch, network, example, path):
    """An fp32 ML program of `network` traced on `example` (input "x", output "y"), saved to
    `path`; returns the path and the input's shape."""
    traced = torch.jit.trace(network, example)
    model = ct.convert(traced, inputs=[ct.TensorType(name="x", shape=example.shape)],
                       outputs=[ct.TensorType(name="y")], convert_to="mlprogram",
                       compute_precision=ct.precision.FLOAT32, minimum_deployment_target=ct.target.iOS17)
    model.save(path)
    return path, tuple(example.shape)


def make_lstm(directory, ct, torch):
    class LstmClassifier(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm = torch.nn.LSTM(256, 512, num_layers=2)
            self.head = torch.nn.Linear(512, 10)

        def forward(self, x):
            return self.head(self.lstm(x)[0][-1])

    return convert_and_save(ct, torch, LstmClassifier().eval(), torch.zeros(64, 1, 256),
                            os.path.join(directory, "lstm.mlpackage"))


def plain_loop(path, data):
    model = coremlrt.MLModel(path)
    model.predict({"x": data[0]})  # warm: one context made
    start, cpu = time.perf_counter(), time.process_time()
    outputs = [model.predict({"x": data[i]})["y"] for i in range(len(data))]
    return (time.perf_counter() - start, np.concatenate(outputs), {"this process": peak_rss_mib()},
            time.process_time() - cpu)


def local_batch(path, data, workers):
    model = coremlrt.MLModel(path)
    model.predict({"x": data[0]})
    records = ({"x": data[i]} for i in range(len(data)))
    start, cpu = time.perf_counter(), time.process_time()
    result = coremlrt.predict_dataset(model, records, threads=workers, progress=False)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    assert result.failed == 0
    return seconds, np.concatenate([result.outputs[i]["y"] for i in range(len(data))]), \
        {"this process": peak_rss_mib()}, cpu


def without_unit_axes(data):
    """The records as Dask and Ray hand them over, without the input's axes of size 1 (the
    batch axis): the partition functions fit each one back to the input's shape."""
    return data.reshape(len(data), *[d for d in data.shape[1:] if d != 1])


def _worker_rss():
    return peak_rss_mib()


def _worker_cpu():
    return time.process_time()


def _preload(path):
    # The model as the partition functions will resolve it on this worker (its task slots and
    # threads: coremlrt/batch/dask.py, _WorkerModel), loaded once as a first task would.
    from coremlrt.batch.dask import _WorkerModel
    from coremlrt.model import cached_model

    model = _WorkerModel(cached_model(path)).resolve()
    model.predict({"x": np.zeros(model._inputs["x"]["shape"], np.float32)})


def with_dask(path, data, workers, glibc_defaults=False):
    import dask
    import dask.array as da
    import distributed

    import coremlrt.dask

    environ = dict(dask.config.get("distributed.nanny.pre-spawn-environ"))
    if glibc_defaults:
        environ["MALLOC_TRIM_THRESHOLD_"] = None  # None: the nanny leaves the variable unset
    with dask.config.set({"distributed.nanny.pre-spawn-environ": environ}), distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  dashboard_address=None) as cluster, distributed.Client(cluster) as client:
        client.run(_preload, path)  # each worker loads the model once, as a first task would
        rows = without_unit_axes(data)
        array = da.from_array(rows, chunks=(len(data) // (8 * workers),) + (-1,) * (rows.ndim - 1))
        array = client.persist(array)  # the records already on the workers, as if read there
        distributed.wait(array)
        cpu_before = client.run(_worker_cpu)
        start = time.perf_counter()
        outputs = coremlrt.dask.predict(path, array).compute()
        seconds = time.perf_counter() - start
        cpu = sum(client.run(_worker_cpu).values()) - sum(cpu_before.values())
        rss = {f"worker {n}": v for n, v in enumerate(client.run(_worker_rss).values())}
    return seconds, outputs.reshape(len(data), -1), rss, cpu


def with_ray(path, data, workers):
    import ray

    import coremlrt.ray

    # One logical CPU more than actors: Ray Data's read tasks need one beside them.
    ray.init(num_cpus=workers + 1, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
    ray.data.DataContext.get_current().enable_progress_bars = False
    try:
        base = coremlrt.ray.predictor(path)

        class Measured(base):
            def __call__(self, batch):
                out = super().__call__(batch)
                out["worker_pid"] = np.full(len(out["y"]), os.getpid())
                out["worker_rss_mib"] = np.full(len(out["y"]), peak_rss_mib())
                out["worker_cpu_s"] = np.full(len(out["y"]), time.process_time())  # actor's start included
                return out

        # The records already in Ray's object store, as if read there; each keeps its index.
        items = without_unit_axes(data)
        dataset = ray.data.from_items([{"id": i, "x": items[i]} for i in range(len(data))])
        dataset = dataset.repartition(8 * workers).materialize()

        def run(records):
            return records.map_batches(Measured, compute=ray.data.ActorPoolStrategy(size=workers),
                                       batch_size=len(data) // (8 * workers)).take_all()

        run(dataset.limit(len(data) // 10))  # warm: Ray's first-use costs (worker processes, imports)
        start = time.perf_counter()
        rows = run(dataset)  # timed: the actors start and load the model inside it
        seconds = time.perf_counter() - start
    finally:
        ray.shutdown()
    outputs = np.empty((len(data), 10), np.float32)
    for row in rows:
        outputs[int(row["id"])] = np.asarray(row["y"]).reshape(-1)
    rss, cpu = {}, {}
    for row in rows:
        pid = int(row["worker_pid"])
        rss[pid] = max(rss.get(pid, 0), float(row["worker_rss_mib"]))
        cpu[pid] = max(cpu.get(pid, 0), float(row["worker_cpu_s"]))
    return seconds, outputs, {f"actor {n}": v for n, v in enumerate(rss.values())}, sum(cpu.values())


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", choices=["cnn", "lstm"], default="cnn")
    parser.add_argument("--records", type=int, default=2000)
    parser.add_argument("--size", type=int, default=96, help="cnn: input height and width")
    parser.add_argument("--width", type=int, default=96, help="cnn: channels of the first conv stage")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=1, help="run every path this many times; best counts")
    parser.add_argument("--skip", action="append", default=[], choices=["dask", "ray"])
    args = parser.parse_args()
    directory = tempfile.mkdtemp()
    path, record_shape = make_model(directory, args.model, args.size, args.width)
    # data[i] is one input, in the model's input shape.
    data = np.random.default_rng(0).standard_normal((args.records, *record_shape)).astype(np.float32)
    if args.model == "lstm":
        described = "2-layer LSTM 256->512, 64 steps, linear head"
    else:
        described = f"CNN 3x{args.size}x{args.size}, widths {args.width}/{2 * args.width}"
    print(f"model: {described}, {args.records} records, {args.workers} workers, {os.cpu_count()} cores")

    paths = [("plain loop", plain_loop), (f"predict_dataset ({args.workers} threads)", local_batch)]
    if "dask" not in args.skip:
        paths.append((f"dask ({args.workers} worker processes)", with_dask))
        # Dask's nanny starts workers with MALLOC_TRIM_THRESHOLD_=65536; setting it (to any
        # value) also freezes glibc's mmap threshold at 128 KiB, so every larger temporary (the
        # conv kernel's per-call im2col scratch) is a fresh mmap with page faults: about 1.6x
        # the CPU time per prediction here. The same cluster with glibc's defaults:
        paths.append(("dask, glibc malloc defaults",
                      lambda p, d, w: with_dask(p, d, w, glibc_defaults=True)))
    if "ray" not in args.skip:
        paths.append((f"ray ({args.workers} actors)", with_ray))
    # Rounds alternate the paths, and each path's best round counts: on a machine shared with
    # other work, a path's slow round says more about the neighbours than about the path.
    best = {}
    for round_number in range(args.rounds):
        for name, run in paths:
            seconds, outputs, rss, cpu = run(path, data) if run is plain_loop else run(path, data, args.workers)
            if name not in best or seconds < best[name][0]:
                best[name] = (seconds, outputs, rss, cpu)
            if args.rounds > 1:
                print(f"  round {round_number + 1}: {name}: {seconds:.2f} s", flush=True)
    baseline = reference = baseline_cpu_ms = None
    for name, _ in paths:
        seconds, outputs, rss, cpu = best[name]
        throughput = args.records / seconds
        if baseline is None:
            baseline, reference = throughput, outputs.reshape(args.records, -1)
        same = np.allclose(outputs.reshape(args.records, -1), reference, rtol=1e-5, atol=1e-5)
        rss_text = ", ".join(f"{k} {v:.0f} MiB" for k, v in rss.items())
        cpu_ms = 1000 * cpu / args.records
        if baseline_cpu_ms is None:
            baseline_cpu_ms = cpu_ms
        # With every worker on a core of its own, throughput would be workers x the loop's
        # CPU time per record / this path's: the figure to read when neighbours share the cores.
        workers = 1 if name == "plain loop" else args.workers
        print(f"{name:<30} {seconds:7.2f} s {throughput:7.1f} records/s  x{throughput / baseline:.2f}  "
              f"CPU {cpu_ms:5.1f} ms/record (x{workers * baseline_cpu_ms / cpu_ms:.2f} on idle cores)  "
              f"{'same outputs' if same else 'OUTPUTS DIFFER'}  peak RSS: {rss_text}", flush=True)

if __name__ == "__main__":
    main()
