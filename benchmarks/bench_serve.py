"""coremlrt serve driven by Triton's perf_analyzer, against an in-process predict loop.

    python3 benchmarks/bench_serve.py [--seconds S] [--clients 1,4,16] [--models tiny,mobilenet_v2,lm]
                                      [--report docs/reports/serving.md]

Models (tests/python/serving/serve_models.py): ``tiny`` (a Linear(8, 8): what it measures is
the server's own cost per request), ``mobilenet_v2`` (torchvision's, 224x224, batch dimension
flexible: Triton's max_batch_size, requests merge) and ``lm`` (the stateful prefill/decode LM:
perf_analyzer sends sequences of --sequence-length requests with sequence ids). For each
model, protocol (HTTP with binary tensors, perf_analyzer's default, and gRPC) and concurrency,
perf_analyzer runs against the server (a subprocess with its defaults) on the same cores; the
baseline is an in-process ``MLModel.predict`` loop on one thread (the LM: the same sequences,
with an MLState), run right before and right after each served cell, their mean being the
cell's baseline: whatever else the machine does then falls on both.

Columns: req/s and p50/p99 latency as perf_analyzer reports them; ``x in-proc`` the served
throughput over the baseline's; CPU milliseconds per request used by the server process
(``server cpu``), by perf_analyzer (``client cpu``) and by the in-process loop per prediction
(``in-proc cpu``): ``server - in-proc`` is what serving a request costs beyond the prediction.
``busy`` is the machine's 1-minute load average at the cell's end (2 cores: above 2 the cells
shared the cores with other work). A rate marked ``~`` did not settle within --stability
percent over perf_analyzer's windows and was measured again without that bound.
"""

import argparse
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tests", "python", "serving"))
sys.path.insert(0, os.path.join(ROOT, "tests", "python"))

import serve_models as SM  # noqa: E402
import server_helpers as SH  # noqa: E402

SEQUENCE_LENGTH = 8


def perf_analyzer_path():
    done = subprocess.run(["bash", os.path.join(ROOT, "scripts", "install_perf_analyzer.sh")], capture_output=True,
                          text=True, check=True)
    return done.stdout.strip().splitlines()[-1]


def _cpu_s(pid):
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _children_cpu_s():
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _own_cpu_s():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class InProcess:
    """The baseline: one thread predicting one request after the other (an LM sequence: a
    prefill, then decode steps, as perf_analyzer's sequences of SEQUENCE_LENGTH)."""

    def __init__(self, name, path):
        import coremlrt

        self.name = name
        if name == "lm":
            import lm_helpers as H

            self.prefill = coremlrt.MLModel(path, function_name="prefill")
            self.inputs = H.lm_inputs(np.zeros(H.PROMPT, np.int32), 0)
        else:
            self.model = coremlrt.MLModel(path)
            self.inputs = SM.random_input(name, np.random.default_rng(0))
        self.run(0.2)

    def run(self, seconds):
        """(predictions/s, p50 ms, p99 ms, CPU ms per prediction)."""
        latencies, cpu, began = [], _own_cpu_s(), time.perf_counter()
        state = None
        while time.perf_counter() - began < seconds:
            t = time.perf_counter()
            if self.name == "lm":
                # perf_analyzer's sequences here all call the default function (prefill) with
                # the sequence's state; a fresh state every SEQUENCE_LENGTH requests.
                if state is None or len(latencies) % SEQUENCE_LENGTH == 0:
                    state = self.prefill.make_state()
                self.prefill.predict(self.inputs, state=state)
            else:
                self.model.predict(self.inputs)
            latencies.append(time.perf_counter() - t)
        elapsed = time.perf_counter() - began
        ms = np.asarray(latencies) * 1000
        return (len(latencies) / elapsed, float(np.percentile(ms, 50)), float(np.percentile(ms, 99)),
                (_own_cpu_s() - cpu) / len(latencies) * 1000)


def served(perf_analyzer, server, protocol, model, clients, seconds, stability):
    """(req/s, p50 ms, p99 ms, server CPU ms/request, client CPU ms/request) or None."""
    url = server.grpc_url if protocol == "grpc" else server.http_url
    command = [perf_analyzer, "-m", model, "-u", url, "-i", protocol, "--concurrency-range", str(clients),
               "--measurement-interval", str(int(seconds * 1000)), "-s", str(stability), "--max-trials", "6"]
    if model == "lm":
        command += ["--sequence-length", str(SEQUENCE_LENGTH), "--input-data", "zero",
                    "--num-of-sequences", str(max(clients, 4))]
    before = _cpu_s(server.process.pid), _children_cpu_s(), _server_count(server, model)
    done = subprocess.run(command, capture_output=True, text=True, timeout=600)
    after = _cpu_s(server.process.pid), _children_cpu_s(), _server_count(server, model)
    out = done.stdout
    rate = re.search(r"Throughput: ([\d.]+) infer/sec", out)
    if done.returncode != 0 or not rate:
        return None, (out + done.stderr).strip().splitlines()[-1:]
    p50 = float(re.search(r"p50 latency: (\d+) usec", out).group(1)) / 1000
    p99 = float(re.search(r"p99 latency: (\d+) usec", out).group(1)) / 1000
    requests = max(after[2] - before[2], 1)  # every request of the run, warm-up and trials included
    return (float(rate.group(1)), p50, p99, (after[0] - before[0]) / requests * 1000,
            (after[1] - before[1]) / requests * 1000), None


def _server_count(server, model):
    import json
    import urllib.request

    with urllib.request.urlopen(f"http://{server.http_url}/v2/models/{model}/stats", timeout=30) as r:
        stats = json.loads(r.read())["model_stats"][0]
    return stats["inference_stats"]["success"]["count"] + stats["inference_stats"]["fail"]["count"]


HEADER = (f"{'model':<13} {'protocol':<8} {'clients':>7} {'req/s':>9} {'p50 ms':>8} {'p99 ms':>8} "
          f"{'in-proc/s':>10} {'x in-proc':>9} {'server cpu':>10} {'in-proc cpu':>11} {'client cpu':>10} {'busy':>5}")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="perf_analyzer's measurement window")
    parser.add_argument("--clients", default="1,4,16")
    parser.add_argument("--models", default="tiny,mobilenet_v2,lm")
    parser.add_argument("--protocols", default="http,grpc")
    parser.add_argument("--extra", default="tiny:grpc:8", help="more cells, model:protocol:clients, comma-separated")
    parser.add_argument("--report", default=None, help="write the table to this Markdown file")
    parser.add_argument("--stability", type=float, default=25,
                        help="perf_analyzer's stability percentage; a cell that does not settle within it is "
                             "measured again without a bound and marked ~")
    args = parser.parse_args(argv)
    names = args.models.split(",")
    cells = [(name, protocol, int(c)) for name in names for protocol in args.protocols.split(",")
             for c in args.clients.split(",")]
    for extra in filter(None, args.extra.split(",")):
        name, protocol, c = extra.split(":")
        if name in names and (name, protocol, int(c)) not in cells:
            cells.append((name, protocol, int(c)))
    paths = {name: SM.model_path(name) for name in names}
    perf_analyzer = perf_analyzer_path()
    folder = SH.model_folder(tempfile.mkdtemp(prefix="bench-serve-"), paths)
    rows = []
    print(HEADER, flush=True)
    with SH.serve(folder, models=names) as server:
        baselines = {name: InProcess(name, path) for name, path in paths.items()}
        for name, protocol, clients in cells:
            before = baselines[name].run(args.seconds / 2)
            result, error = served(perf_analyzer, server, protocol, name, clients, args.seconds, args.stability)
            mark = " "
            if result is None and error and "stable" in error[-1]:
                result, error = served(perf_analyzer, server, protocol, name, clients, args.seconds, 10000)
                mark = "~"
            after = baselines[name].run(args.seconds / 2)
            base = [(a + b) / 2 for a, b in zip(before, after)]
            busy = os.getloadavg()[0]
            if result is None:
                line = f"{name:<13} {protocol:<8} {clients:>7} perf_analyzer failed: {error}"
            else:
                rate, p50, p99, server_cpu, client_cpu = result
                line = (f"{name:<13} {protocol:<8} {clients:>7} {rate:>8.1f}{mark} {p50:>8.2f} {p99:>8.2f} {base[0]:>10.1f} "
                        f"{rate / base[0]:>9.2f} {server_cpu:>10.2f} {base[3]:>11.2f} {client_cpu:>10.2f} {busy:>5.1f}")
            rows.append(line)
            print(line, flush=True)
    if args.report:
        write_report(args.report, rows, args)
    return 0 if all("failed" not in r for r in rows) else 1


def write_report(path, rows, args):
    with open(path, "w") as f:
        f.write("# Serving: coremlrt serve under perf_analyzer\n\n")
        f.write("Written by `python3 benchmarks/bench_serve.py --report docs/reports/serving.md` "
                f"(measurement window {args.seconds:g} s; the benchmark's docstring defines the columns). "
                "perf_analyzer 2.41, the server and the in-process loop share this machine's 2 cores; CPU "
                "figures are milliseconds per request; `busy` is the 1-minute load average after the cell. "
                "Where `busy` is well above 2, other work shared the cores: throughputs are noisy and lean "
                "towards the side with more runnable threads (the server and perf_analyzer against the "
                "in-process loop's one), and CPU per request is the comparison that holds. A rate marked ~ "
                "did not settle within the stability bound (measured again without it).\n\n")
        f.write("```\n" + HEADER + "\n" + "\n".join(rows) + "\n```\n")


if __name__ == "__main__":
    sys.exit(main())
