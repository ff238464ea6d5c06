"""Smoke run of benchmarks/bench_coreai.py (coreai-core's runtime and coremlrt on the same
.aimodel, and coremlrt on the Core ML model): the tiny network, two runs, in a subprocess, so
that the benchmark keeps working; only that every contender ran and agreed is checked, not the
times. Skipped without coreai-core, coreai-torch, torch or coremltools (the Core ML model)."""

import os
import subprocess
import sys
import warnings

import pytest

pytest.importorskip("torch")
pytest.importorskip("coremltools")
pytest.importorskip("coreai.runtime")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # coreai-torch warns about torch versions newer than it was tested with
    pytest.importorskip("coreai_torch")

import coreai_oracle  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))


def test_bench_coreai_tiny(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "COREMLRT_COREAI"}  # coreai-core's own runtime
    env["TQDM_DISABLE"] = "1"
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "bench_coreai.py"), "--only", "tiny", "--runs", "2",
         "--threads", "1", "--placements", "--models-dir", str(tmp_path / "aimodels"),
         "--coreml-dir", str(tmp_path / "coreml")],
        capture_output=True, text=True, timeout=600, env=env)
    # coreai-core's runtime may abort as the benchmark's process exits, after its table is
    # printed (tests/python/coreai_oracle.py, finished_cleanly).
    assert coreai_oracle.finished_cleanly(proc.returncode, proc.stderr), proc.stderr[-3000:]
    assert "could not run" not in proc.stdout, proc.stdout
    row = next(line.split() for line in proc.stdout.splitlines() if line.startswith("tiny "))
    # network, three medians, the two ratios, max |a - b|, max |b - c|, max |b|
    assert len(row) == 9, row
    assert row[4].endswith("x") and row[5].endswith("x"), row
    assert float(row[6]) <= 1e-6 and float(row[7]) <= 1e-6, row
    assert (tmp_path / "aimodels" / "tiny" / "tiny.aimodel").is_dir()
