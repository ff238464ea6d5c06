"""Every example of README.md and docs/guide/ runs as written (tests/python/docs/doc_examples.py
says how examples are found and marked). C++ examples are compiled and run by
tests/cpp/runtime/doc_examples_test.cc; here they are checked to be that test's code."""

import importlib.util
import os
import signal
import stat
import subprocess
import sys
import time
import urllib.request

import pytest

pytest.importorskip("coremltools")
pytest.importorskip("pyarrow")

from doc_examples import KINDS, REPO, all_examples, make_workdir, named_paths  # noqa: E402

EXAMPLES = all_examples()
RUNNABLE = [e for e in EXAMPLES if e.language in ("python", "bash") and e.kind == ""]


def _next_runnable(server):
    later = [e for e in EXAMPLES if e.document == server.document and e.line > server.line]
    return later[0] if later else None


SERVER_CLIENTS = {_next_runnable(e).id for e in EXAMPLES if e.kind == "server" and _next_runnable(e)}
CPP_TEST = os.path.join(REPO, "tests", "cpp", "runtime", "doc_examples_test.cc")


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    directory = str(tmp_path_factory.mktemp("doc-examples"))
    make_workdir(directory)
    # Shell examples call `coremlrt` and scripts/...: the command of the coremlrt under test
    # (not whatever an environment has installed), and the repository's folders.
    bin_dir = os.path.join(directory, "bin")
    os.makedirs(bin_dir)
    shim = os.path.join(bin_dir, "coremlrt")
    with open(shim, "w") as f:
        f.write(f'#!/bin/sh\nexec "{sys.executable}" -m coremlrt.cli "$@"\n')
    os.chmod(shim, os.stat(shim).st_mode | stat.S_IEXEC)
    for name in ("scripts", "benchmarks", "tests", "examples", "docs"):
        os.symlink(os.path.join(REPO, name), os.path.join(directory, name))
    return directory


def _environment(workdir):
    env = dict(os.environ)
    env["PATH"] = os.path.join(workdir, "bin") + os.pathsep + env.get("PATH", "")
    import coremlrt

    # The package under test first on the path of every example (a development tree's too).
    package_root = os.path.dirname(os.path.dirname(coremlrt.__file__))
    env["PYTHONPATH"] = os.pathsep.join([package_root] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    return env


def _run(example, workdir, timeout=300):
    command = [sys.executable, "-c", example.code] if example.language == "python" else \
        ["bash", "-euo", "pipefail", "-c", example.code]
    result = subprocess.run(command, cwd=workdir, env=_environment(workdir), capture_output=True, text=True,
                            timeout=timeout)
    assert result.returncode == 0, (
        f"{example.id} failed (exit {result.returncode}):\n{example.code}\n--- stdout\n{result.stdout[-3000:]}"
        f"\n--- stderr\n{result.stderr[-3000:]}")
    return result


def test_examples_are_found():
    """The collector sees the documents' examples: the README's quick start among them."""
    documents = {e.document for e in EXAMPLES}
    assert "README.md" in documents and len(documents) >= 10, documents
    assert any(e.document == "README.md" and "coremlrt.MLModel(" in e.code for e in RUNNABLE)
    for example in EXAMPLES:
        assert example.language in ("python", "bash", "cpp", ""), f"{example.id}: unknown language {example.language}"
        assert example.kind in ("",) + KINDS, f"{example.id}: unknown marker '{example.kind}'"


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.kind in ("run by CI", "long run")], ids=lambda e: e.id)
def test_examples_not_run_here_name_real_commands(example):
    """Examples left to CI or to their own long runs name scripts and tests that exist."""
    assert example.reason, f"{example.id}: a marked example says why it is not run here"
    paths = named_paths(example.code)
    assert paths, f"{example.id}: names no script of the repository"
    for path in paths:
        assert os.path.exists(os.path.join(REPO, path)), f"{example.id}: {path} does not exist"


@pytest.mark.parametrize("example", RUNNABLE, ids=lambda e: e.id)
def test_example_runs(example, workdir):
    if example.id in SERVER_CLIENTS:
        pytest.skip("runs against its server in test_server_examples")
    _run(example, workdir)


@pytest.mark.parametrize("server", [e for e in EXAMPLES if e.kind == "server"], ids=lambda e: e.id)
def test_server_examples(server, workdir):
    """A server example serves until stopped: start it, wait until it is ready, run the example
    after it against it, stop it."""
    # Looked up, not imported: this process may hold tritonclient's copy of the same protobuf
    # messages (another doc example imported it), and a second copy fails to register.
    if importlib.util.find_spec("mlserver") is None:
        pytest.skip("mlserver is not installed (pip install .[serve])")
    client = _next_runnable(server)
    assert client is not None and client.kind == "", f"{server.id}: no example follows the server"
    port = next(word.split("=")[-1] for word in server.code.replace("--port ", "--port=").split()
                if word.startswith("--port="))
    process = subprocess.Popen(["bash", "-c", server.code], cwd=workdir, env=_environment(workdir),
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        deadline = time.monotonic() + 180
        while True:
            assert process.poll() is None, f"{server.id}: the server stopped:\n{process.stdout.read()[-3000:]}"
            try:
                with urllib.request.urlopen(f"http://localhost:{port}/v2/health/ready", timeout=2) as answer:
                    if answer.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, f"{server.id}: not ready after 180 s"
            time.sleep(0.5)
        result = _run(client, workdir)
        assert '"name":"model"' in result.stdout.replace(" ", ""), result.stdout
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.language == "cpp"], ids=lambda e: e.id)
def test_cpp_examples_are_the_tested_code(example):
    """A C++ example's lines appear, in order and together, in doc_examples_test.cc (its
    #include lines anywhere in that file), so the example compiles and runs under ctest."""
    with open(CPP_TEST, encoding="utf-8") as f:
        tested = [line.strip() for line in f.read().split("\n")]
    lines = [line.strip() for line in example.code.split("\n") if line.strip()]
    includes = [line for line in lines if line.startswith("#include")]
    body = [line for line in lines if not line.startswith("#include")]
    for include in includes:
        assert include in tested, f"{example.id}: {include} is not in {CPP_TEST}"
    starts = [i for i, line in enumerate(tested) if line == body[0]]
    assert any(tested[i:i + len(body)] == body for i in starts), (
        f"{example.id}: its code is not in {CPP_TEST} as written:\n" + "\n".join(body))
