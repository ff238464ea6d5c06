"""coremlrt serve against an in-process predict loop, on loopback.

    python3 benchmarks/bench_serve.py [--seconds S] [--requests N] [--clients 1,4,16]

Two models by default (tests/python/serving/serve_models.py; --models picks others, e.g.
conv64): ``tiny`` (a Linear(8, 8), fixed shape: requests run side by side; what it measures is
the server's own cost per request) and ``mobilenet_v2`` (torchvision's, on 224x224 images with a
flexible batch dimension: concurrent requests merge). For each model, protocol (REST through tritonclient.http with binary
tensors, its default; gRPC through tritonclient.grpc) and number of concurrent clients
(threads of this process, each sending one batch-1 request after the other), it reports
throughput and p50/p99 latency, and the same for an in-process ``MLModel.predict`` loop on one
thread (the baseline, run for half a cell's time right before and right after each served cell:
their mean is that cell's baseline): ratios are served / in-process. The last column takes the server's liveness-check latency
(framework_floor) off that overhead as well: what our runtime adds to MLServer's own per-request
cost. The clients share the machine's cores with the server: "client cpu" and "server cpu" are
the CPU milliseconds per request each side used (the in-process loop pays neither the client's
nor the server's part). Each cell runs at most --requests requests and --seconds seconds. The
server runs in a subprocess with its defaults (--max-wait-ms 0: batches form from what is
queued).
"""

import argparse
import concurrent.futures
import os
import sys
import tempfile
import threading
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python", "serving"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

import serve_models as SM  # noqa: E402
import server_helpers as SH  # noqa: E402


def _percentiles(latencies):
    ms = np.asarray(latencies) * 1000
    return float(np.percentile(ms, 50)), float(np.percentile(ms, 99))


def in_process(model, x, requests, seconds):
    for _ in range(5):
        model.predict({"x": x})
    latencies, began = [], time.perf_counter()
    while len(latencies) < requests and time.perf_counter() - began < seconds:
        t = time.perf_counter()
        model.predict({"x": x})
        latencies.append(time.perf_counter() - t)
    elapsed = time.perf_counter() - began
    return len(latencies) / elapsed, *_percentiles(latencies)


def _client(protocol, url):
    if protocol == "grpc":
        import tritonclient.grpc as module
    else:
        import tritonclient.http as module
    return module, module.InferenceServerClient(url)


def _server_cpu_s(server):
    """CPU seconds (user + system, all threads) the server process has used."""
    with open(f"/proc/{server.process.pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _own_cpu_s():
    t = os.times()
    return t.user + t.system


def served(server, protocol, model, x, clients, requests, seconds):
    """(req/s, p50 ms, p99 ms, client CPU ms per request, server CPU ms per request) of `clients`
    threads, timed from when every one has warmed up. The clients run in this process, on the
    same cores as the server: their CPU time is what the load itself costs the machine."""
    url = server.grpc_url if protocol == "grpc" else server.http_url
    ready = threading.Barrier(clients + 1)
    window = {}
    budget = [requests]
    lock = threading.Lock()

    def worker(_):
        module, client = _client(protocol, url)
        item = module.InferInput("x", list(x.shape), "FP32")
        if protocol == "grpc":
            item.set_data_from_numpy(x)
        else:
            item.set_data_from_numpy(x, binary_data=True)
        for _ in range(3):
            client.infer(model, [item])
        ready.wait()
        latencies = []
        while time.perf_counter() < window["stop"]:
            with lock:
                budget[0] -= 1
                if budget[0] < 0:
                    break
            t = time.perf_counter()
            client.infer(model, [item])
            latencies.append(time.perf_counter() - t)
        return latencies, time.perf_counter()

    with concurrent.futures.ThreadPoolExecutor(clients) as pool:
        futures = [pool.submit(worker, i) for i in range(clients)]
        window["stop"] = float("inf")
        ready.wait()
        began = time.perf_counter()
        cpu_before = _own_cpu_s(), _server_cpu_s(server)
        window["stop"] = began + seconds
        results = [f.result() for f in futures]
        cpu_after = _own_cpu_s(), _server_cpu_s(server)
    latencies = [t for r, _ in results for t in r]
    elapsed = max(end for _, end in results) - began
    n = max(len(latencies), 1)
    return (len(latencies) / elapsed, *_percentiles(latencies), (cpu_after[0] - cpu_before[0]) / n * 1000,
            (cpu_after[1] - cpu_before[1]) / n * 1000)


def framework_floor(server, protocol, requests, seconds):
    """p50 ms of the server's liveness check (tritonclient's is_server_live: GET /v2/health/live,
    gRPC ServerLive) at one client: what one request through MLServer's network stack costs with
    no model behind it. A served request cannot be cheaper; the prediction and our runtime's
    own work come on top of it."""
    _, client = _client(protocol, server.grpc_url if protocol == "grpc" else server.http_url)
    for _ in range(20):
        client.is_server_live()
    latencies, began = [], time.perf_counter()
    while len(latencies) < requests and time.perf_counter() - began < seconds:
        t = time.perf_counter()
        client.is_server_live()
        latencies.append(time.perf_counter() - t)
    return _percentiles(latencies)[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=4.0, help="time limit per cell")
    parser.add_argument("--requests", type=int, default=2000, help="request limit per cell")
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--max-wait-ms", default="0")
    parser.add_argument("--models", default="tiny,mobilenet_v2")
    args = parser.parse_args(argv)
    clients = [int(c) for c in args.clients.split(",")]
    names = args.models.split(",")
    paths = {name: SM.model_path(name) for name in names}
    rng = np.random.default_rng(0)
    inputs = {name: SM.random_input(name, rng)["x"] for name in names}
    folder = SH.model_folder(tempfile.mkdtemp(prefix="bench-serve-"), paths)
    print(f"{'model':<6} {'protocol':<8} {'clients':>7} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'x in-proc req/s':>16} {'p50 - in-proc ms':>17} {'... - liveness ms':>17} {'client cpu':>11} "
          f"{'server cpu':>11}")
    with SH.serve(folder, "--max-wait-ms", args.max_wait_ms, models=names) as server:
        floors = {protocol: framework_floor(server, protocol, args.requests, args.seconds) for protocol in ("rest", "grpc")}
        print("liveness check p50 ms (MLServer's network stack alone, 1 client): " +
              ", ".join(f"{protocol} {ms:.3f}" for protocol, ms in floors.items()), flush=True)
        for name in names:
            import coremlrt

            model = coremlrt.MLModel(paths[name])
            for protocol in ("rest", "grpc"):
                for n in clients:
                    # The baseline runs right before and right after each served cell, and their
                    # mean is its baseline: whatever else the machine does then falls on both.
                    before = in_process(model, inputs[name], args.requests, args.seconds / 2)
                    rate, p50, p99, client_cpu, server_cpu = served(server, protocol, name, inputs[name], n,
                                                                    args.requests, args.seconds)
                    after = in_process(model, inputs[name], args.requests, args.seconds / 2)
                    base = [(a + b) / 2 for a, b in zip(before, after)]
                    print(f"{name:<6} {'in-proc':<8} {1:>7} {base[0]:>9.1f} {base[1]:>8.3f} {base[2]:>8.3f}", flush=True)
                    print(f"{name:<6} {protocol:<8} {n:>7} {rate:>9.1f} {p50:>8.3f} {p99:>8.3f} "
                          f"{rate / base[0]:>16.2f} {p50 - base[1]:>17.3f} {p50 - base[1] - floors[protocol]:>17.3f} "
                          f"{client_cpu:>11.2f} {server_cpu:>11.2f}", flush=True)
        batches = [line for line in server.metrics().splitlines() if line.startswith("coremlrt_batch_size_")
                   and ("_sum" in line or "_count" in line)]
        print("server batch sizes:", "; ".join(batches))


if __name__ == "__main__":
    sys.exit(main())
