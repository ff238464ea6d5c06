"""Smoke runs of the serving benchmark and soak (benchmarks/bench_serve.py, benchmarks/soak_serve.py;
README names their full runs): a few seconds each, so that both keep working. The figures are not
checked; the soak's own verdict is (no 5xx for a good request, no mismatch, every malformed request
refused with a 4xx)."""

import importlib.util
import os
import subprocess
import sys

import pytest

# MLServer is not imported here: its gRPC messages and tritonclient's clash in one process (the
# scripts run the server in a subprocess, as the serving tests do).
if importlib.util.find_spec("mlserver") is None:
    pytest.skip("the serving extra (mlserver) is not installed", allow_module_level=True)
pytest.importorskip("tritonclient.http")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _run(script, *args, timeout=600):
    return subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", script), *args], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, TQDM_DISABLE="1"))


def test_bench_serve_runs_every_protocol():
    proc = _run("bench_serve.py", "--models", "tiny", "--clients", "1,2", "--seconds", "0.5", "--requests", "40")
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    assert "liveness check p50 ms" in out and "rest" in out.split("liveness check")[1].splitlines()[0], out
    rows = [line.split() for line in out.splitlines() if line.startswith("tiny ")]
    served = [(r[1], r[2]) for r in rows if r[1] != "in-proc"]
    assert served == [("rest", "1"), ("rest", "2"), ("grpc", "1"), ("grpc", "2")], out
    assert sum(r[1] == "in-proc" for r in rows) == 4, out  # a baseline beside each served cell
    assert all(float(r[3]) > 0 for r in rows), out  # every cell answered requests


def test_soak_serve_short_run_is_clean():
    proc = _run("soak_serve.py", "--minutes", "0.25", "--clients", "4")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "server alive at the end: True" in out, out
    counts = dict(line.strip().rsplit(": ", 1) for line in out.splitlines()
                  if line.startswith("  ") and ": " in line and not line.strip().startswith(("live", "server RSS")))
    assert int(counts.get("malformed", 0)) > 0 and int(counts.get("sequences", 0)) > 0, out
    assert not any(k in counts for k in ("good: 5xx", "mismatch", "malformed not refused with 4xx")), out
    assert not any(k.startswith("client error") for k in counts), out
