"""Smoke runs of benchmarks/bench_compressed.py (the compressed-models benchmark, README): tiny
models through every code path of it (build, fresh-process load and memory, packed against
folded, interleaved latency, the report), so the benchmark keeps working; the numbers are not
checked, only that every contender ran and every table was written. And of
benchmarks/bench_flexible_shapes.py, bench_llm.py and bench_decode_forms.py at small sizes."""

import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
pytest.importorskip("openvino")
pytest.importorskip("nncf")


def test_bench_compressed_tiny(tmp_path):
    out = tmp_path / "performance.md"
    out.write_text("# Performance\n\n## Other section\n\nkept\n")
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "bench_compressed.py"), "--tiny", "--runs", "2",
         "--warmup", "1", "--threads", "1", "--only", "lm6", "--forms", "fp16", "int8", "sparse_palettized",
         "--models-dir", str(tmp_path / "models"), "--output", str(out)],
        capture_output=True, text=True, timeout=900, env=dict(os.environ, TQDM_DISABLE="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    written = out.read_text()
    assert "## Other section\n\nkept" in written, "the rest of the file is left as it was"
    assert "### lm6:" in written and "Decode step latency" in written and "Prefill latency" in written
    assert "could not run" not in written, written[written.find("could not run"):][:2000]
    for form, contender in [("fp16", "coremlrt auto"), ("int8", "openvino"), ("sparse_palettized", "coremlrt reference")]:
        assert f"| {form} | {contender} |" in written


def test_bench_flexible_shapes_small(tmp_path):
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_flexible_shapes.py"), "--size", "64",
                           "--rounds", "2"], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TQDM_DISABLE="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    lines = [line for line in proc.stdout.splitlines() if "ratio" in line]
    assert [line.split()[0] for line in lines] == ["fp32", "fp16"], proc.stdout
    assert all("flexible convs on openvino" in line for line in lines), proc.stdout


def test_bench_llm_tiny(tmp_path):
    """benchmarks/bench_llm.py on a small LLaMA, coremlrt's rows only (OpenVINO's model takes
    nncf minutes to make; llama.cpp is a benchmark-only dependency): every row and target line."""
    pytest.importorskip("tokenizers")
    proc = subprocess.run(
        [sys.executable, os.path.join(ROOT, "benchmarks", "bench_llm.py"), "--tiny", "--only", "coremlrt",
         "--processes", "1", "--runs", "1", "--rounds", "1", "--dir", str(tmp_path / "models")],
        capture_output=True, text=True, timeout=900, env=dict(os.environ, TQDM_DISABLE="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for form in ("fp16", "int4"):
        assert f"| {form} | coremlrt (" in proc.stdout, proc.stdout
        assert f"| {form} decode: weights streamed / measured bandwidth |" in proc.stdout
        assert f"| {form} generate() time around predict / decode step |" in proc.stdout


def test_bench_decode_forms_tiny(tmp_path):
    """benchmarks/bench_decode_forms.py on a 64 x 64 layer: the three forms made and timed."""
    pytest.importorskip("torch")
    proc = subprocess.run([sys.executable, os.path.join(ROOT, "benchmarks", "bench_decode_forms.py"), "--tiny",
                           "--dir", str(tmp_path / "models")], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, TQDM_DISABLE="1"))
    assert proc.returncode == 0, proc.stderr[-3000:]
    for form in ("fp16", "int4", "int8"):
        assert f"| {form} | " in proc.stdout, proc.stdout
    assert "| fp16 | " in proc.stdout and "| 1.00 |" in proc.stdout
