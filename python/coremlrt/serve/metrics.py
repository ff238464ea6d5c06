"""coremlrt's Prometheus metrics, served on ``--metrics-port`` from prometheus_client's default
registry (server.py), with the process's own (CPU, memory, open files)."""

import functools


class Metrics:
    def __init__(self):
        from prometheus_client import Counter, Gauge, Histogram

        self.batch_size = Histogram("coremlrt_batch_size", "Requests per prediction (merged batch size)", ["model"],
                                    buckets=(1, 2, 4, 8, 16, 32, 64, 128))
        self.queue_depth = Gauge("coremlrt_queue_depth", "Requests waiting for a worker", ["model"])
        self.live_sequences = Gauge("coremlrt_live_sequences", "Live stateful sequences", ["model"])
        self.requests = Counter("coremlrt_requests", "Inference requests by answer status", ["model", "status"])
        self.rejected = Counter("coremlrt_rejected", "Requests refused for capacity", ["model", "reason"])
        self.latency = Histogram("coremlrt_request_seconds", "Time in the runtime, from arrival to answer", ["model"],
                                 buckets=(0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10))


@functools.lru_cache(maxsize=None)
def metrics():
    """One set per process, shared by every served model (labelled by model name)."""
    return Metrics()
