"""A long mixed load on ``coremlrt serve``: errors, mismatches and the server's memory.

    python3 benchmarks/soak_serve.py --minutes N [--clients 8]

The server (a subprocess, with its default limits and sequence timeout) serves the serving
tests' ``tiny``, ``conv`` and ``lm`` models (tests/python/serving/serve_models.py). Triton's
perf_analyzer loads it all along (gRPC on ``tiny``, HTTP on ``conv``, gRPC sequences on ``lm``,
one run after the other, each checked for errors), and each client thread loops over:

* good stateless requests (REST or gRPC, tiny or conv, from a fixed pool of inputs whose
  in-process answers are known): a wrong answer is a mismatch;
* stateful sequences of the LM (prefill, then 1-4 decode steps), checked step by step against
  the same steps in process; a third are abandoned without sequence_end;
* malformed requests, 5 % of all (bad JSON, JSON nested 50,000 deep, wrong dtype or shape,
  unknown model, function or input, garbage protobuf, a body over the limit): each must get a 4xx (or the gRPC code
  for one).

It reports requests by kind, 4xx and 5xx answers to good requests (503s for capacity counted apart),
mismatches, 4xx misses (a malformed request that was not refused with a 4xx), sequence starts
refused for want of a slot (after the first 10 % of the run, once abandoned sequences have
had time to time out), the gaps between a sequence's requests (what the idle timeout must
exceed), perf_analyzer's runs and errors, and the server's RSS: after warm-up, at the end, and
the largest seen. Exit status 1 if any good request got a 4xx or a 5xx other than 503, any answer
mismatched, a malformed request was not refused, a perf_analyzer run failed, or more than 1 %
of sequence starts were refused.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python", "serving"))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "python"))

import lm_helpers as H  # noqa: E402
import serve_models as SM  # noqa: E402
import server_helpers as SH  # noqa: E402


class Tally:
    def __init__(self):
        self.lock = threading.Lock()
        self.counts = {}
        self.gaps = []

    def gap(self, seconds):
        with self.lock:
            self.gaps.append(seconds)

    def add(self, key, n=1):
        with self.lock:
            self.counts[key] = self.counts.get(key, 0) + n


def _post(url, body, headers=None):
    request = urllib.request.Request(url, data=body, method="POST",
                                     headers=headers or {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as r:
            return r.status, r.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


# gRPC status codes as the HTTP statuses they stand for (the mapping of grpc-gateway and of
# Google's APIs: a client's mistake is a 4xx, the server's a 5xx).
_GRPC_AS_HTTP = {"OK": 200, "CANCELLED": 499, "UNKNOWN": 500, "INVALID_ARGUMENT": 400, "DEADLINE_EXCEEDED": 504,
                 "NOT_FOUND": 404, "ALREADY_EXISTS": 409, "PERMISSION_DENIED": 403, "RESOURCE_EXHAUSTED": 429,
                 "FAILED_PRECONDITION": 400, "ABORTED": 409, "OUT_OF_RANGE": 400, "UNIMPLEMENTED": 501,
                 "INTERNAL": 500, "UNAVAILABLE": 503, "DATA_LOSS": 500, "UNAUTHENTICATED": 401}


def _status_of(exc):
    status = str(exc.status() or "")
    if status.isdigit():
        return int(status)
    return _GRPC_AS_HTTP.get(status.replace("StatusCode.", ""), 599)


class Client:
    def __init__(self, server, pool, tally, seed, paths):
        import tritonclient.grpc as grpcclient
        import tritonclient.http as httpclient

        self.server, self.pool, self.tally = server, pool, tally
        self.rng = np.random.default_rng(seed)
        self.seed = seed
        self.modules = {"rest": (httpclient, httpclient.InferenceServerClient(server.http_url)),
                        "grpc": (grpcclient, grpcclient.InferenceServerClient(server.grpc_url))}
        import coremlrt

        self.prefill = coremlrt.MLModel(paths["lm"], function_name="prefill")
        self.decode = coremlrt.MLModel(paths["lm"], function_name="decode")
        self.sequences = 0

    def _answer(self, good, status, kind=None, start=False):
        if not good:
            self.tally.add("malformed")
            if not 400 <= status < 500:
                self.tally.add("malformed not refused with 4xx")
                self.tally.add(f"malformed not refused with 4xx: kind {kind}, status {status}")
            return
        if status == 503:
            self.tally.add("good: 503 (capacity)")
            if start and self.counting():
                self.tally.add("sequence starts refused")
        elif status >= 500:
            self.tally.add("good: 5xx")
        elif status >= 400:  # a live sequence dropped as idle, say: a good request must not get one
            self.tally.add("good: 4xx")

    def good_stateless(self):
        from tritonclient.utils import InferenceServerException

        model = "tiny" if self.rng.random() < 0.5 else "conv"
        index = int(self.rng.integers(len(self.pool[model])))
        x, expected = self.pool[model][index]
        protocol = "rest" if self.rng.random() < 0.5 else "grpc"
        module, client = self.modules[protocol]
        item = module.InferInput("x", list(x.shape), "FP32")
        item.set_data_from_numpy(x)
        self.tally.add(f"good {model} {protocol}")
        try:
            got = client.infer(model, [item]).as_numpy("y")
        except InferenceServerException as exc:
            return self._answer(True, _status_of(exc))
        if not np.array_equal(got, expected):
            self.tally.add("mismatch")

    def sequence(self):
        from tritonclient.utils import InferenceServerException

        protocol = "rest" if self.rng.random() < 0.5 else "grpc"
        module, client = self.modules[protocol]
        self.sequences += 1
        sequence_id = self.seed * 1_000_000 + self.sequences
        state = self.prefill.make_state()
        steps = int(self.rng.integers(1, 5))
        abandon = self.rng.random() < 1 / 3
        prompt = self.rng.integers(0, H.VOCAB, H.PROMPT).astype(np.int32)
        plan = [("prefill", prompt, 0)] + [("decode", [int(self.rng.integers(H.VOCAB))], H.PROMPT + i)
                                           for i in range(steps)]
        self.tally.add("sequences" + (" abandoned" if abandon else ""))
        if self.counting():
            self.tally.add("sequence starts counted")
        last = None
        for i, (function, tokens, start) in enumerate(plan):
            inputs = H.lm_inputs(tokens, start)
            items = []
            for name, value in inputs.items():
                item = module.InferInput(name, list(value.shape), "INT32")
                item.set_data_from_numpy(value)
                items.append(item)
            end = i == len(plan) - 1 and not abandon
            self.tally.add("sequence steps")
            if last is not None:
                self.tally.gap(time.monotonic() - last)
            try:
                got = client.infer("lm", items, sequence_id=sequence_id, sequence_start=i == 0, sequence_end=end,
                                   parameters={"function": function}).as_numpy("logits")
            except InferenceServerException as exc:
                return self._answer(True, _status_of(exc), start=i == 0)
            last = time.monotonic()
            expected = getattr(self, function).predict(inputs, state=state)["logits"]
            if not np.array_equal(got, expected):
                self.tally.add("mismatch")
                return

    def malformed(self):
        from tritonclient.utils import InferenceServerException

        kind = int(self.rng.integers(8))
        url = f"http://{self.server.http_url}/v2/models/tiny/infer"
        body = {"inputs": [{"name": "x", "datatype": "FP32", "shape": [1, 8], "data": [0.0] * 8}]}
        if kind == 0:
            status, _ = _post(url, b'{"inputs": [')
        elif kind == 1:
            body["inputs"][0]["datatype"] = "FP64"
            status, _ = _post(url, json.dumps(body).encode())
        elif kind == 2:
            body["inputs"][0]["shape"] = [3, 8]
            status, _ = _post(url, json.dumps(body).encode())
        elif kind == 3:
            status, _ = _post(url.replace("/tiny/", "/no_such_model/"), json.dumps(body).encode())
        elif kind == 4:
            body["parameters"] = {"function": "nope"}
            status, _ = _post(url, json.dumps(body).encode())
        elif kind == 5:
            status, _ = _post(url, b"x" * (self.server_limit + 1))
        elif kind == 7:  # JSON nested past any sensible depth
            status, _ = _post(url, b'{"inputs": ' + b"[" * 50_000 + b"]" * 50_000 + b"}")
        elif kind == 6:
            import grpc

            with grpc.insecure_channel(self.server.grpc_url) as channel:
                call = channel.unary_unary("/inference.GRPCInferenceService/ModelInfer",
                                           request_serializer=lambda b: b, response_deserializer=lambda b: b)
                try:
                    call(bytes(self.rng.integers(0, 256, 64, dtype=np.uint8)), timeout=60)
                    status = 200
                except grpc.RpcError as exc:
                    # Random bytes may parse as a request (for a model named "", say): NOT_FOUND.
                    status = _GRPC_AS_HTTP.get(exc.code().name, 599)
        self._answer(False, status, kind)
        del InferenceServerException

    server_limit = 1 << 20
    count_from = 0.0  # time.monotonic() after which sequence starts are counted

    def counting(self):
        return time.monotonic() >= self.count_from

    def run(self, stop_at):
        while time.monotonic() < stop_at:
            r = self.rng.random()
            try:
                if r < 0.05:
                    self.malformed()
                elif r < 0.20:
                    self.sequence()
                else:
                    self.good_stateless()
            except Exception as exc:  # noqa: BLE001 - a broken connection or a client bug: counted
                self.tally.add(f"client error {type(exc).__name__}")


def perf_analyzer_load(server, stop_at, tally):
    """perf_analyzer runs, one after the other, until ``stop_at``: each must end cleanly."""
    done = subprocess.run(["bash", os.path.join(HERE, "..", "scripts", "install_perf_analyzer.sh")],
                          capture_output=True, text=True, check=True)
    binary = done.stdout.strip().splitlines()[-1]
    runs = [("tiny", "grpc", []), ("conv", "http", []),
            ("lm", "grpc", ["--sequence-length", "4", "--input-data", "zero"])]
    index = 0
    while time.monotonic() < stop_at - 5:
        model, protocol, extra = runs[index % len(runs)]
        index += 1
        window = int(min(5000, max(500, (stop_at - time.monotonic() - 2) * 1000 / 4)))
        url = server.grpc_url if protocol == "grpc" else server.http_url
        done = subprocess.run([binary, "-m", model, "-u", url, "-i", protocol, "--concurrency-range", "2",
                               "-p", str(window), "-s", "1000", "-r", "3", *extra],
                              capture_output=True, text=True, timeout=600)
        count = sum(int(n) for n in re.findall(r"Request count: (\d+)", done.stdout))
        tally.add(f"perf_analyzer runs ({model} {protocol})")
        tally.add(f"perf_analyzer requests ({model} {protocol})", count)
        if done.returncode != 0 or "error" in done.stdout.lower():
            tally.add("perf_analyzer failed runs")
            print(f"perf_analyzer {model} {protocol} failed:\n{done.stdout[-2000:]}{done.stderr[-1000:]}", flush=True)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=2.0)
    parser.add_argument("--clients", type=int, default=8)
    args = parser.parse_args(argv)
    import coremlrt

    names = ("tiny", "conv", "lm")
    paths = {name: SM.model_path(name) for name in names}
    rng = np.random.default_rng(0)
    pool = {}
    for name in ("tiny", "conv"):
        model = coremlrt.MLModel(paths[name])
        pool[name] = [(x, model.predict({"x": x})["y"]) for x in (SM.random_input(name, rng)["x"] for _ in range(32))]
    folder = SH.model_folder(tempfile.mkdtemp(prefix="soak-serve-"), paths)
    tally = Tally()
    # The server's own sequence limits and timeout: abandoned sequences must not lock out new ones.
    with SH.serve(folder, "--max-request-bytes", str(Client.server_limit), "--workers", "2",
                  models=list(names)) as server:
        clients = [Client(server, pool, tally, seed, paths) for seed in range(1, args.clients + 1)]
        began = time.monotonic()
        stop_at = began + args.minutes * 60
        Client.count_from = began + args.minutes * 60 * 0.1
        threads = [threading.Thread(target=c.run, args=(stop_at,), daemon=True) for c in clients]
        threads.append(threading.Thread(target=perf_analyzer_load, args=(server, stop_at, tally), daemon=True))
        for t in threads:
            t.start()
        samples = []
        while any(t.is_alive() for t in threads):
            samples.append((time.monotonic() - began, server.rss_bytes()))
            time.sleep(2)
        for t in threads:
            t.join()
        alive = server.process.poll() is None
        live = [line for line in server.metrics().splitlines() if line.startswith("coremlrt_live_sequences{")]
    warm = next((rss for t, rss in samples if t >= min(30.0, args.minutes * 60 * 0.2)), samples[0][1])
    final = samples[-1][1]
    print(f"soak: {args.minutes:g} min, {args.clients} clients, server alive at the end: {alive}")
    for key, value in sorted(tally.counts.items()):
        print(f"  {key}: {value}")
    print(f"  live sequences at the end: {'; '.join(live)}")
    print(f"  server RSS: after warm-up {warm / 2**20:.1f} MiB, end {final / 2**20:.1f} MiB, "
          f"max {max(r for _, r in samples) / 2**20:.1f} MiB, growth {(final - warm) / 2**20:+.1f} MiB")
    starts = tally.counts.get("sequence starts counted", 0)
    refused = tally.counts.get("sequence starts refused", 0)
    share = refused / starts if starts else 0.0
    print(f"  sequence starts refused after the first 10 %: {refused} of {starts} ({share:.2%})")
    if tally.gaps:
        gaps = np.asarray(tally.gaps) * 1000
        print(f"  gap between a sequence's requests: p50 {np.percentile(gaps, 50):.1f} ms, p99 "
              f"{np.percentile(gaps, 99):.1f} ms, max {gaps.max():.1f} ms")
    bad = (tally.counts.get("good: 5xx", 0) + tally.counts.get("good: 4xx", 0) + tally.counts.get("mismatch", 0)
           + tally.counts.get("malformed not refused with 4xx", 0) + tally.counts.get("perf_analyzer failed runs", 0)
           + (0 if alive else 1) + (1 if share > 0.01 else 0))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
