"""The fenced examples of README.md and docs/guide/*.md, and the files they run against.

An example is a fenced block (```python, ```bash or ```cpp). The line before its fence may
be a marker, `<!-- example: KIND (why) -->`:

- `run by CI`: commands that set up a machine or build the package (scripts/test.sh and
  .ci/run run them); the test checks that the scripts they name exist;
- `long run`: commands that take minutes to an hour, each with a smoke version in the test
  command; the test checks that the scripts and test paths they name exist;
- `server`: a command that serves until stopped; the test starts it, waits until it answers,
  runs the next example against it, and stops it.

Every other example runs as written, in a folder holding the files the guides name
(`model.mlpackage`, `lm.mlpackage`, ...: `make_workdir`).
"""

import os
import re
import stat
import subprocess
import sys
from dataclasses import dataclass

import numpy as np

REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
DOCUMENTS = ["README.md"] + sorted(
    os.path.join("docs", "guide", name) for name in os.listdir(os.path.join(REPO, "docs", "guide"))
    if name.endswith(".md"))
KINDS = ("run by CI", "long run", "server")
# The guides whose examples start Dask, Ray or a server: tests/python/docs/test_doc_examples_services.py
# runs them, test_doc_examples.py the others.
SERVICE_DOCUMENTS = ("docs/guide/batch.md", "docs/guide/serving.md", "docs/guide/language-models.md")
_FENCE = re.compile(r"^```(\w+)\s*$")
_MARKER = re.compile(r"^<!-- example: (.+?) \((.+)\) -->$")


@dataclass
class Example:
    document: str
    line: int          # of the opening fence, 1-based
    language: str
    code: str
    kind: str = ""     # "" (run as written) or one of KINDS
    reason: str = ""

    @property
    def id(self):
        return f"{self.document}:{self.line}"


def collect(document):
    """The examples of one document, in order."""
    with open(os.path.join(REPO, document), encoding="utf-8") as f:
        lines = f.read().split("\n")
    examples, index = [], 0
    while index < len(lines):
        fence = _FENCE.match(lines[index])
        if not fence:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() != "```":
            end += 1
        assert end < len(lines), f"{document}:{index + 1}: the fence is never closed"
        example = Example(document, index + 1, fence.group(1), "\n".join(lines[index + 1:end]) + "\n")
        previous = next((line for line in reversed(lines[:index]) if line.strip()), "")
        marker = _MARKER.match(previous.strip())
        if marker:
            example.kind, example.reason = marker.group(1), marker.group(2)
        examples.append(example)
        index = end + 1
    return examples


def all_examples():
    return [example for document in DOCUMENTS for example in collect(document)]


def named_paths(code):
    """Repository paths a shell example runs: `bash X.sh`, `python3 X.py`, pytest's test paths."""
    paths = []
    for line in code.split("\n"):
        command = line.split("#", 1)[0].split()
        for position, word in enumerate(command):
            if re.match(r"^(scripts|benchmarks|tests|examples)/", word):
                paths.append(word.rstrip("/"))
            elif position > 0 and command[position - 1] == "bash" and word.endswith(".sh"):
                paths.append(word)
    return paths


def make_workdir(directory):
    """The files the guides' examples name, made with coremltools' MIL builder.

    model.mlpackage: x float32 [1, 3] -> y = relu(x + 1), fp32 (tests/python/fixtures.py's
    fixture_doc_model, also as models/model.mlpackage);
    lm.mlpackage: functions prefill (tokens int32 [1, 4]) and decode (token int32 [1, 1]) over
    one fp16 state k_cache [1, 4], each adding its tokens' sum to the cache and returning it as
    `logits`; x.npy; inputs/ (four .npz records); inputs.parquet and data.parquet (x as a
    fixed-size list of 3 floats); llama.mlpackage and llama-folder/ (its tokenizer) and text.txt:
    the small LLaMA of tests/python/llm/llm_models.py."""
    import shutil

    import coremltools as ct
    import pyarrow as pa
    import pyarrow.parquet as pq
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    from fixtures import case_dir
    from lm_helpers import save_multifunction

    os.makedirs(directory, exist_ok=True)

    def save(prog, path):
        ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
                   compute_precision=ct.precision.FLOAT32, skip_model_load=True).save(path)
        return path

    doc_model = os.path.join(case_dir("fixture_doc_model"), "model.mlpackage")   # also tests/cpp's
    for target in ("model.mlpackage", os.path.join("models", "model.mlpackage")):
        shutil.copytree(doc_model, os.path.join(directory, target))

    def add_to_cache(tokens, k_cache):
        total = mb.cast(x=mb.reduce_sum(x=tokens, axes=[1], keep_dims=True), dtype="fp16")
        new = mb.coreml_update_state(state=k_cache, value=mb.add(x=mb.read_state(input=k_cache), y=total))
        return mb.cast(x=new, dtype="fp32", name="logits")

    def specs(length):
        return [mb.TensorSpec(shape=(1, length), dtype=types.int32), mb.StateTensorSpec(shape=(1, 4), dtype=types.fp16)]

    # mb.program names a function's inputs after its parameters: prefill's is `tokens`, decode's `token`.
    @mb.program(input_specs=specs(4), opset_version=ct.target.iOS18)
    def prefill(tokens, k_cache):
        return add_to_cache(tokens, k_cache)

    @mb.program(input_specs=specs(1), opset_version=ct.target.iOS18)
    def decode(token, k_cache):
        return add_to_cache(token, k_cache)

    parts = os.path.join(directory, "lm-parts")
    os.makedirs(parts, exist_ok=True)
    functions = {name: save(prog, os.path.join(parts, name + ".mlpackage"))
                 for name, prog in (("prefill", prefill), ("decode", decode))}
    save_multifunction(directory, "lm", functions, default="prefill")

    sys.path.insert(0, os.path.join(REPO, "tests", "python", "llm"))
    import llm_models
    from llama_helpers import SAMPLE_TEXT

    shutil.copytree(llm_models.package("mask_fp16"), os.path.join(directory, "llama.mlpackage"))
    shutil.copytree(llm_models.path("tokenizer"), os.path.join(directory, "llama-folder"))
    with open(os.path.join(directory, "text.txt"), "w", encoding="utf-8") as f:
        f.write(SAMPLE_TEXT * 2)

    rng = np.random.default_rng(0)
    records = [rng.standard_normal((1, 3)).astype(np.float32) for _ in range(4)]
    np.save(os.path.join(directory, "x.npy"), records[0])
    os.makedirs(os.path.join(directory, "inputs"), exist_ok=True)
    for index, record in enumerate(records):
        np.savez(os.path.join(directory, "inputs", f"record-{index:05d}.npz"), x=record)
    table = pa.table({"x": pa.FixedSizeListArray.from_arrays(pa.array(np.concatenate(records).ravel()), 3)})
    for name in ("inputs.parquet", "data.parquet"):
        pq.write_table(table, os.path.join(directory, name))
    return directory


def prepare_workdir(directory):
    """make_workdir, plus what shell examples call: `coremlrt` (the command of the coremlrt
    under test, not whatever an environment has installed) and the repository's folders."""
    make_workdir(directory)
    bin_dir = os.path.join(directory, "bin")
    os.makedirs(bin_dir)
    shim = os.path.join(bin_dir, "coremlrt")
    with open(shim, "w") as f:
        f.write(f'#!/bin/sh\nexec "{sys.executable}" -m coremlrt.cli "$@"\n')
    os.chmod(shim, os.stat(shim).st_mode | stat.S_IEXEC)
    for name in ("scripts", "benchmarks", "tests", "examples", "docs"):
        os.symlink(os.path.join(REPO, name), os.path.join(directory, name))


def example_environment(workdir):
    env = dict(os.environ)
    env["PATH"] = os.path.join(workdir, "bin") + os.pathsep + env.get("PATH", "")
    import coremlrt

    # The package under test first on the path of every example (a development tree's too).
    package_root = os.path.dirname(os.path.dirname(coremlrt.__file__))
    env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def run_example(example, workdir, timeout=300):
    command = [sys.executable, "-c", example.code] if example.language == "python" else \
        ["bash", "-euo", "pipefail", "-c", example.code]
    result = subprocess.run(command, cwd=workdir, env=example_environment(workdir), capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, (
        f"{example.id} failed (exit {result.returncode}):\n{example.code}\n--- stdout\n{result.stdout[-3000:]}"
        f"\n--- stderr\n{result.stderr[-3000:]}")
    return result
