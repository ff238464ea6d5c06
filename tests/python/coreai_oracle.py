"""coreai-core's own runtime (coreai.runtime), the reference the Core AI tests compare coremlrt
with, run in a process of its own.

That runtime sometimes aborts as its process exits (docs/design/coreai-runtime-standin.md,
"Deliberate differences": exit status 134, "C++ exception handling detected but the Swift
runtime was compiled with exceptions disabled"), and aborts the process outright on some inputs.
In a pytest worker either would end the worker; here it ends only this module's child process:
a request it was running fails with the child's exit status and the end of its output, the next
request starts a new child, and how the child exits after its last request is not looked at.

The child runs the functions of this module whose names start with ``reference_`` (they import
coreai-core there); requests and results travel pickled over a pipe of their own, so nothing
the runtime prints can mix with them. ``call(name, *args)`` runs one in the child.
"""

import atexit
import os
import pickle
import struct
import subprocess
import sys
import tempfile
import threading

# How coreai-core's runtime ends a process it aborts at exit (see above).
EXIT_ABORT_MESSAGE = "C++ exception handling detected but the Swift runtime was compiled with exceptions disabled"
EXIT_ABORT_STATUSES = (134, -6)  # SIGABRT as a shell reports it, and as subprocess does


class OracleError(RuntimeError):
    """coreai-core's runtime raised, or its process ended, while computing a reference."""


def finished_cleanly(returncode, stderr):
    """Whether a process that ran coreai-core's runtime and wrote its results ended as expected:
    exit status 0, or the runtime's abort at exit (its message on stderr), which comes after
    the process's own work is done. Any other status is a failure."""
    return returncode == 0 or (returncode in EXIT_ABORT_STATUSES and EXIT_ABORT_MESSAGE in (stderr or ""))


# -- the functions the child runs ----------------------------------------------------------------

def _run_async(coroutine):
    import asyncio
    return asyncio.run(coroutine)


def _runtime():
    import coreai.runtime
    if coreai.runtime.NDArray.__module__.startswith("coremlrt"):  # coremlrt.coreai.runtime is enabled
        raise RuntimeError("coreai.runtime is coremlrt's stand-in here: it cannot be the reference")
    return coreai.runtime


def reference_predict(path, feeds, function="main", states=None):
    """One prediction of the .aimodel `path`: (outputs, the states' values after it)."""
    runtime = _runtime()
    from coreai.authoring import AIModelAsset

    async def run():
        async with AIModelAsset.load(path).executable() as model:
            held = {k: runtime.NDArray(v) for k, v in (states or {}).items()}
            out = await model.load_function(function)({k: runtime.NDArray(v) for k, v in feeds.items()},
                                                      **({"state": held} if held else {}))
            return {k: v.numpy() for k, v in out.items()}, {k: v.numpy() for k, v in held.items()}

    return _run_async(run())


def reference_describe_and_predict(path, feeds_list, function="main"):
    """The function's description as coreai-core gives it (str(desc), each input's and output's
    descriptor shape) and one prediction per feeds dict: [(output names in the order returned,
    {name: (dtype name, array)})]."""
    runtime = _runtime()
    from coreai.authoring import AIModelAsset

    async def run():
        async with AIModelAsset.load(path).executable() as model:
            f = model.load_function(function)
            d = f.desc
            described = (str(d), {n: list(d.input_descriptor(n).shape) for n in d.input_names},
                         {n: list(d.output_descriptor(n).shape) for n in d.output_names})
            results = []
            for feeds in feeds_list:
                out = await f({k: runtime.NDArray(v) for k, v in feeds.items()})
                results.append((list(out), {k: (str(v.dtype), v.numpy()) for k, v in out.items()}))
            return described, results

    return _run_async(run())


def _serve(requests, answers):
    """The child's loop: requests until the parent closes its end."""
    while True:
        message = _receive(requests)
        if message is None:
            return
        name, args, kwargs = message
        try:
            if not name.startswith("reference_"):
                raise ValueError(f"no reference function {name!r}")
            answer = ("ok", globals()[name](*args, **kwargs))
        except Exception as exc:  # noqa: BLE001 - every error goes back to the test that asked
            answer = ("error", f"{type(exc).__name__}: {exc}")
        _send(answers, answer)


# -- the pipe protocol: a length, then a pickle ----------------------------------------------

def _send(stream, obj):
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    stream.write(struct.pack("<Q", len(data)) + data)
    stream.flush()


def _receive(stream):
    header = stream.read(8)
    if len(header) < 8:
        return None
    (size,) = struct.unpack("<Q", header)
    data = stream.read(size)
    if len(data) < size:
        return None
    return pickle.loads(data)


# -- the parent's side ---------------------------------------------------------------------------

class _Child:
    def __init__(self):
        request_read, request_write = os.pipe()
        answer_read, answer_write = os.pipe()
        self.log = tempfile.TemporaryFile()
        env = {k: v for k, v in os.environ.items() if k != "COREMLRT_COREAI"}  # coreai-core's runtime
        self.proc = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), str(request_read), str(answer_write)],
            pass_fds=(request_read, answer_write), stdin=subprocess.DEVNULL, stdout=self.log,
            stderr=subprocess.STDOUT, env=env)
        os.close(request_read)
        os.close(answer_write)
        self.requests = os.fdopen(request_write, "wb")
        self.answers = os.fdopen(answer_read, "rb")

    def output_tail(self):
        self.log.seek(0)
        return self.log.read().decode(errors="replace")[-3000:]

    def close(self):
        try:
            self.requests.close()
        except OSError:
            pass
        try:
            self.proc.wait(timeout=60)  # its exit status is not looked at (see the module text)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.answers.close()
        self.log.close()


_lock = threading.Lock()
_child = None


def call(name, *args, **kwargs):
    """Runs ``name`` (a ``reference_*`` function of this module) in the child process and returns
    its result; raises OracleError when it raised or the process ended."""
    global _child
    with _lock:
        if _child is None:
            _child = _Child()
        try:
            _send(_child.requests, (name, args, kwargs))
            answer = _receive(_child.answers)
        except (BrokenPipeError, OSError):
            answer = None
        if answer is None:
            dead, _child = _child, None
            status = dead.proc.wait()
            tail = dead.output_tail()
            dead.close()
            raise OracleError(f"coreai-core's runtime process ended with status {status} while running "
                              f"{name}; its output ends:\n{tail}")
    kind, value = answer
    if kind == "error":
        raise OracleError(f"coreai-core's runtime: {value}")
    return value


@atexit.register
def _close():
    global _child
    if _child is not None:
        _child.close()
        _child = None


if __name__ == "__main__":
    _serve(os.fdopen(int(sys.argv[1]), "rb"), os.fdopen(int(sys.argv[2]), "wb"))
    # How the runtime's teardown ends this process does not matter to the parent (module text).
