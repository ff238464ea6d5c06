"""Starts ``coremlrt serve`` in a subprocess on free loopback ports, for tests and benchmarks.

The server runs apart from the tests, as users run it: its crashes, signals and memory are its
own (the serving tests read its RSS and send it SIGTERM).
"""

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request


def free_ports(count):
    sockets = []
    try:
        for _ in range(count):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))
            sockets.append(s)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for s in sockets:
            s.close()


class Server:
    def __init__(self, process, http_port, grpc_port, metrics_port, log_path):
        self.process, self.log_path = process, log_path
        self.http_port, self.grpc_port, self.metrics_port = http_port, grpc_port, metrics_port
        self.http_url = f"127.0.0.1:{http_port}"
        self.grpc_url = f"127.0.0.1:{grpc_port}"

    def log(self):
        with open(self.log_path, errors="replace") as f:
            return f.read()

    def metrics(self):
        with urllib.request.urlopen(f"http://127.0.0.1:{self.metrics_port}/metrics", timeout=10) as r:
            return r.read().decode()

    def rss_bytes(self):
        with open(f"/proc/{self.process.pid}/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        return 0


@contextlib.contextmanager
def serve(model_or_folder, *args, models=(), timeout_s=120):
    """Runs ``coremlrt serve MODEL_OR_FOLDER ARGS...`` until the block ends; waits until every
    name in ``models`` is ready. Yields a :class:`Server`."""
    http_port, grpc_port, metrics_port = free_ports(3)
    log = tempfile.NamedTemporaryFile(prefix="coremlrt-serve-", suffix=".log", delete=False)
    command = [sys.executable, "-m", "coremlrt", "serve", str(model_or_folder), "--port", str(http_port),
               "--grpc-port", str(grpc_port), "--metrics-port", str(metrics_port), "--log-format", "text", *args]
    process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    server = Server(process, http_port, grpc_port, metrics_port, log.name)
    try:
        deadline = time.monotonic() + timeout_s
        pending = ["/v2/health/ready"] + [f"/v2/models/{m}/ready" for m in models]
        while pending:
            if process.poll() is not None:
                raise RuntimeError(f"coremlrt serve exited with {process.returncode}:\n{server.log()[-4000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"coremlrt serve not ready after {timeout_s} s:\n{server.log()[-4000:]}")
            try:
                with urllib.request.urlopen(f"http://{server.http_url}{pending[0]}", timeout=2) as r:
                    if r.status == 200:
                        pending.pop(0)
                        continue
            except OSError:
                pass
            time.sleep(0.2)
        yield server
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()
        os.unlink(log.name)


def model_folder(directory, models):
    """A folder serving ``models`` ({served name: package path}) by symbolic links."""
    os.makedirs(directory, exist_ok=True)
    for name, path in models.items():
        link = os.path.join(directory, name + os.path.splitext(path)[1])
        if not os.path.lexists(link):
            os.symlink(path, link)
    return directory
