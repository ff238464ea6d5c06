"""Smoke runs of the serving benchmark and soak (benchmarks/bench_serve.py, benchmarks/soak_serve.py;
README names their full runs): a few seconds each, so that both keep working. The figures are not
checked; the soak's own verdict is (no 5xx for a good request, no mismatch, every malformed request
refused with a 4xx)."""

import importlib.util
import os
import subprocess
import sys

import pytest

if importlib.util.find_spec("uvicorn") is None or importlib.util.find_spec("grpc") is None:
    pytest.skip("coremlrt serve's packages are not installed (pip install .[serve])", allow_module_level=True)
pytest.importorskip("tritonclient.http")

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def _run(script, *args, timeout=600):
    return subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", script), *args], capture_output=True,
                          text=True, timeout=timeout, env=dict(os.environ, TQDM_DISABLE="1"))


def test_bench_serve_runs_every_protocol(tmp_path):
    report = tmp_path / "serving.md"
    proc = _run("bench_serve.py", "--models", "tiny,lm", "--clients", "2", "--seconds", "0.5", "--extra", "",
                "--stability", "10000", "--report", str(report))
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    rows = [line.split() for line in proc.stdout.splitlines() if line.startswith(("tiny ", "lm "))]
    assert [(r[0], r[1], r[2]) for r in rows] == [("tiny", "http", "2"), ("tiny", "grpc", "2"), ("lm", "http", "2"),
                                                  ("lm", "grpc", "2")], proc.stdout
    assert all(float(r[3]) > 0 and float(r[6]) > 0 for r in rows), proc.stdout  # served and in-process rates
    assert "perf_analyzer" in report.read_text() and rows[0][3] in report.read_text()


def test_soak_serve_short_run_is_clean():
    proc = _run("soak_serve.py", "--minutes", "0.25", "--clients", "4")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = proc.stdout
    assert "server alive at the end: True" in out, out
    counts = dict(line.strip().rsplit(": ", 1) for line in out.splitlines()
                  if line.startswith("  ") and ": " in line
                  and not line.strip().startswith(("live", "server RSS", "sequence starts refused", "gap")))
    assert int(counts.get("malformed", 0)) > 0 and int(counts.get("sequences", 0)) > 0, out
    assert not any(k in counts for k in ("good: 4xx", "good: 5xx", "mismatch", "malformed not refused with 4xx")), out
    assert not any(k.startswith("client error") for k in counts), out
    assert int(counts.get("perf_analyzer runs (tiny grpc)", 0)) > 0, out
    assert "sequence starts refused after the first 10 %" in out
