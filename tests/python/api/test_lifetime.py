"""Prediction lifetime and the GIL (docs/design/architecture.md, laws 1-4).

The crash these tests guard against: an engine that keeps a caller's input after predict
returns and drops the Python reference later, on its own thread, without the GIL.
"""

import gc
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import coremlrt
from mil_helpers import matmul_chain, matmul_chain_reference

LINGER = 0.2  # seconds; short so that tests can wait past it cheaply
# Under AddressSanitizer (scripts/lsan_python.sh preloads it) freed blocks wait in a quarantine
# and every allocation carries shadow memory, so the process's RSS says nothing about what our
# pools hold; the pool statistics are still checked there, the RSS figures only without it.
RSS_TELLS_POOL_SIZE = "asan" not in os.environ.get("LD_PRELOAD", "")  # gcc's libasan, clang's libclang_rt.asan


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    return matmul_chain(tmp_path_factory.mktemp("chain"), depth=4, size=64)


@pytest.fixture(scope="module")
def model(chain, coremlrt_backend):
    return coremlrt.MLModel(chain[0], context_linger=LINGER)


class Tracked(np.ndarray):
    """An array that records the thread on which it is freed (only the caller's own, tagged one:
    converted copies made from it are Tracked too, but untagged)."""

    freed_on = []

    def __del__(self):
        if getattr(self, "tag", None) == "caller":
            Tracked.freed_on.append(threading.get_ident())


@pytest.mark.parametrize("dtype", [np.float32, np.float64])  # read in place / converted first
def test_input_is_freed_at_once_on_the_calling_thread(model, chain, dtype):
    Tracked.freed_on.clear()
    x = np.random.default_rng(1).standard_normal((64, 64)).astype(dtype).view(Tracked)
    x.tag = "caller"
    before = model.statistics()
    out = model.predict({"x": x})["y"]
    after = model.statistics()
    key = "inputs_zero_copy" if dtype == np.float32 else "inputs_converted"
    assert after[key] == before[key] + 1
    np.testing.assert_allclose(out, matmul_chain_reference(np.asarray(x), chain[1]), rtol=1e-4, atol=1e-5)
    assert Tracked.freed_on == []  # the caller still holds it
    del x
    assert Tracked.freed_on == [threading.get_ident()]
    time.sleep(2 * LINGER + 0.1)  # past the linger period: nothing is released later, elsewhere
    gc.collect()
    assert Tracked.freed_on == [threading.get_ident()]


def test_dropped_inputs_and_heap_churn_across_linger(chain):
    """Inputs dropped right after predict, the heap churned, idle gaps past the linger period."""
    models = [coremlrt.MLModel(chain[0], context_linger=0.05) for _ in range(3)]
    rng = np.random.default_rng(2)
    for round_ in range(12):
        for m in models:
            x = rng.standard_normal((64, 64)).astype(np.float32)
            expected = matmul_chain_reference(x, chain[1])
            out = m.predict({"x": x})["y"]
            del x
            junk = [{"k": [str(i)] * 3} for i in range(2000)]  # churn the allocator
            del junk
            np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)
        if round_ % 3 == 2:
            time.sleep(0.12)  # let every context linger out and be reset
            gc.collect()
    assert all(m.statistics()["contexts_reset"] >= 1 for m in models)


def test_mutating_or_freeing_inputs_after_predict(model, chain):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((64, 64)).astype(np.float32)
    keep = x.copy()
    first = model.predict({"x": x})["y"]
    snapshot = first.copy()
    x[:] = 1e6  # the caller owns its array again the moment predict returns
    del x
    np.testing.assert_array_equal(first, snapshot)
    second = model.predict({"x": keep})["y"]
    np.testing.assert_array_equal(second, snapshot)


def test_outputs_survive_the_model(chain):
    m = coremlrt.MLModel(chain[0], context_linger=0.0)
    x = np.ones((64, 64), np.float32)
    out = m.predict({"x": x})["y"]
    del m
    gc.collect()
    time.sleep(0.05)
    np.testing.assert_allclose(out, matmul_chain_reference(x, chain[1]), rtol=1e-4, atol=1e-5)


def test_python_threads_run_while_predict_computes(tmp_path):
    # Long enough on every backend (OpenVINO runs it in about 40 ms on two cores).
    path, _ = matmul_chain(tmp_path, depth=24, size=640, name="long")
    m = coremlrt.MLModel(path)
    x = np.ones((640, 640), np.float32)
    m.predict({"x": x})  # warm up
    counter = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            counter[0] += 1

    spinner = threading.Thread(target=spin)
    spinner.start()
    try:
        time.sleep(0.05)
        start_count, start = counter[0], time.perf_counter()
        m.predict({"x": x})
        elapsed = time.perf_counter() - start
        progressed = counter[0] - start_count
    finally:
        stop.set()
        spinner.join()
    # A GIL held for the whole prediction would leave the spinner at (almost) zero.
    assert elapsed > 0.02, "prediction too short to tell"
    assert progressed > 1000, f"Python thread advanced only {progressed} steps during a {elapsed:.3f}s predict"


def test_many_threads_match_serial_results(chain):
    m = coremlrt.MLModel(chain[0])
    other = coremlrt.MLModel(chain[0])
    rng = np.random.default_rng(4)
    xs = [rng.standard_normal((64, 64)).astype(np.float32) for _ in range(8)]
    serial = [m.predict({"x": x})["y"] for x in xs]
    results = {}

    def worker(i):
        target = m if i % 2 else other
        for _ in range(5):
            results[i] = target.predict({"x": xs[i]})["y"]

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(xs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for i, expected in enumerate(serial):
        np.testing.assert_array_equal(results[i], expected)


def test_idle_contexts_are_reset_and_memory_returns(tmp_path):
    from coremltools.converters.mil import Builder as mb
    import coremltools as ct
    from mil_helpers import save_program

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 1024))], opset_version=ct.target.iOS18)
    def prog(x):
        big = mb.tile(x=x, reps=[4096, 1])  # a 16 MB intermediate
        return mb.reduce_sum(x=mb.exp(x=big), axes=[0], name="y")

    m = coremlrt.MLModel(save_program(prog, tmp_path), context_linger=LINGER)

    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

    x = np.zeros((1, 1024), np.float32)

    # Our kernels keep the working buffers in the context's pool; a backend keeps them in its
    # per-context state (OpenVINO's infer request). Either way they go when the context does.
    ours = m.placements()[-1]["backend"] == "reference"

    def predict_then_linger_out():
        np.testing.assert_allclose(m.predict({"x": x})["y"], np.full((1024,), 4096.0))
        stats = m.statistics()
        assert stats["contexts_idle"] == 1 and (stats["pooled_bytes"] >= 32 << 20 or not ours)
        busy = rss()
        deadline = time.time() + 2 * LINGER + 2.0
        while m.statistics()["contexts_idle"] and time.time() < deadline:
            time.sleep(0.05)
        stats = m.statistics()
        assert stats["contexts_idle"] == 0 and stats["pooled_bytes"] == 0
        gc.collect()
        return busy, rss()

    # The first round also pays one-time costs (the reaper thread, lazily built tables), so
    # the post-load level is taken after it: a process that stops predicting comes back to it.
    _, post_load = predict_then_linger_out()
    for round_ in range(2):
        busy, idle = predict_then_linger_out()
        # (OpenVINO fuses tile, exp and the sum: it needs no 16 MB intermediate at all.)
        if not RSS_TELLS_POOL_SIZE:
            continue
        assert busy > post_load + (24 << 20) or not ours, "the 32 MB of working buffers should be resident while pooled"
        assert idle < post_load + (4 << 20), f"round {round_}: memory did not return to the post-load level"
    assert m.statistics()["contexts_reset"] == 3


def test_predict_async(model, chain):
    import asyncio

    xs = [np.full((64, 64), i / 10, np.float32) for i in range(4)]

    async def main():
        return await asyncio.gather(*(model.predict_async({"x": x}) for x in xs))

    for x, out in zip(xs, asyncio.run(main())):
        np.testing.assert_allclose(out["y"], matmul_chain_reference(x, chain[1]), rtol=1e-4, atol=1e-5)


def test_interpreter_exit_with_live_objects(chain):
    """Exit with models, outputs and a state alive, a context reset pending and a daemon
    thread still predicting: the process must exit cleanly."""
    from corpus import load_case, model_path

    stateful = model_path("fixture_stateful_accumulator", load_case("fixture_stateful_accumulator"))
    script = textwrap.dedent(f"""
        import threading, numpy as np, coremlrt
        m = coremlrt.MLModel({chain[0]!r}, context_linger=5.0)  # reset still pending at exit
        other = coremlrt.MLModel({chain[0]!r}, context_linger=0.0)
        out = m.predict({{"x": np.ones((64, 64), np.float32)}})["y"]
        kept = [other.predict({{"x": np.ones((64, 64), np.float32)}})["y"] for _ in range(3)]
        acc = coremlrt.MLModel({stateful!r}, context_linger=5.0)
        state = acc.make_state()
        acc.predict({{"x": np.ones((1, 8), np.float32)}}, state=state)
        def busy():
            while True:
                other.predict({{"x": np.ones((64, 64), np.float32)}})
        threading.Thread(target=busy, daemon=True).start()  # still predicting when the interpreter exits
        print("ok", float(out.sum()), float(state.read_state("acc").sum()))
    """)
    # The daemon thread races the exit: several runs give the race several chances to show.
    for _ in range(5):
        result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
        assert result.returncode == 0, result.stderr
        assert result.stdout.startswith("ok")
