"""Per-model statistics in the form of Triton's statistics extension (REST
``GET /v2/models/{m}/stats``, gRPC ``ModelStatistics``), which perf_analyzer reads to report
the server's share of a request's time.

Durations are cumulative nanoseconds with a count, per request: ``success`` (arrival to
answer, requests answered), ``fail`` (requests refused or failed), ``queue`` (arrival to the
start of the prediction that served it), ``compute_input`` (decoding and checking the
tensors), ``compute_infer`` (the prediction; a merged prediction's whole time for each of its
requests, as Triton counts it), ``compute_output`` (turning outputs into answer tensors).
``inference_count`` counts requests answered, ``execution_count`` predictions run (fewer
when requests merged); ``batch_stats`` counts predictions by the number of requests merged.
"""

import threading
import time


class ModelStats:
    _DURATIONS = ("success", "fail", "queue", "compute_input", "compute_infer", "compute_output")

    def __init__(self, name, version="1"):
        self.name, self.version = name, version
        self._lock = threading.Lock()  # executions are counted on worker threads
        self.durations = {key: [0, 0] for key in self._DURATIONS}
        self.inference_count = 0
        self.execution_count = 0
        self.last_inference_ms = 0
        self.batches = {}  # requests merged -> [count, compute_infer ns]

    def execution(self, requests, seconds):
        ns = int(seconds * 1e9)
        with self._lock:
            self.execution_count += 1
            entry = self.batches.setdefault(requests, [0, 0])
            entry[0] += 1
            entry[1] += ns

    def success(self, total_s, queue_s, input_s, infer_s, output_s):
        with self._lock:
            self.inference_count += 1
            self.last_inference_ms = int(time.time() * 1000)
            for key, seconds in (("success", total_s), ("queue", queue_s), ("compute_input", input_s),
                                 ("compute_infer", infer_s), ("compute_output", output_s)):
                entry = self.durations[key]
                entry[0] += 1
                entry[1] += max(0, int(seconds * 1e9))

    def failure(self, total_s):
        with self._lock:
            entry = self.durations["fail"]
            entry[0] += 1
            entry[1] += int(total_s * 1e9)

    def as_dict(self):
        """One entry of the extension's ``model_stats`` list (JSON form; grpc_server.py builds
        the message from it)."""
        with self._lock:
            durations = {key: {"count": c, "ns": ns} for key, (c, ns) in self.durations.items()}
            batches = [{"batch_size": size, "compute_input": {"count": 0, "ns": 0},
                        "compute_infer": {"count": count, "ns": ns}, "compute_output": {"count": 0, "ns": 0}}
                       for size, (count, ns) in sorted(self.batches.items())]
            return {"name": self.name, "version": self.version, "last_inference": self.last_inference_ms,
                    "inference_count": self.inference_count, "execution_count": self.execution_count,
                    "inference_stats": dict(durations, cache_hit={"count": 0, "ns": 0},
                                            cache_miss={"count": 0, "ns": 0}),
                    "batch_stats": batches}
