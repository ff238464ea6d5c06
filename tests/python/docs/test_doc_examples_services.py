"""The examples of the batch and serving guides (doc_examples.SERVICE_DOCUMENTS): Dask, Ray and
server examples, a minute and more together, in a file of their own so that pytest-xdist runs
them beside the other guides' (test_doc_examples.py)."""

import importlib.util
import os
import signal
import subprocess
import time
import urllib.request

import pytest

pytest.importorskip("coremltools")
pytest.importorskip("pyarrow")

from doc_examples import SERVICE_DOCUMENTS, all_examples, example_environment, run_example  # noqa: E402

EXAMPLES = [e for e in all_examples() if e.document in SERVICE_DOCUMENTS]


def _next_runnable(server):
    later = [e for e in EXAMPLES if e.document == server.document and e.line > server.line]
    return later[0] if later else None


SERVER_CLIENTS = {_next_runnable(e).id for e in EXAMPLES if e.kind == "server" and _next_runnable(e)}


def test_service_documents_have_examples():
    for document in SERVICE_DOCUMENTS:
        assert any(e.document == document and e.language in ("python", "bash") for e in EXAMPLES), document


@pytest.mark.parametrize("example", [e for e in EXAMPLES if e.language in ("python", "bash") and e.kind == ""],
                         ids=lambda e: e.id)
def test_example_runs(example, workdir):
    if example.id in SERVER_CLIENTS:
        pytest.skip("runs against its server in test_server_examples")
    run_example(example, workdir)


@pytest.mark.parametrize("server", [e for e in EXAMPLES if e.kind == "server"], ids=lambda e: e.id)
def test_server_examples(server, workdir):
    """A server example serves until stopped: start it, wait until it is ready, run the example
    after it against it, stop it."""
    if importlib.util.find_spec("uvicorn") is None or importlib.util.find_spec("grpc") is None:
        pytest.skip("coremlrt serve's packages are not installed (pip install .[serve])")
    client = _next_runnable(server)
    assert client is not None and client.kind == "", f"{server.id}: no example follows the server"
    port = next(word.split("=")[-1] for word in server.code.replace("--port ", "--port=").split()
                if word.startswith("--port="))
    process = subprocess.Popen(["bash", "-c", server.code], cwd=workdir, env=example_environment(workdir),
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
        result = run_example(client, workdir)
        # The serving guide's client reads a model's metadata, the language-model guide's a chat answer.
        expected = '"object":"chat.completion"' if server.document.endswith("language-models.md") else '"name":"model"'
        assert expected in result.stdout.replace(" ", ""), result.stdout
    finally:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
