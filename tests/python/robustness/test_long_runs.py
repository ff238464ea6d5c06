"""Heavy use: no memory growth over 10,000 predictions, and 8 threads predicting on one
model give bit-identical results to serial predictions (generated models always, every
corpus model when ../shared/corpus is present). benchmarks/soak.py is the long version."""

import threading

import numpy as np
import pytest

import coremlrt
from corpus import case_names, load_case, model_path, step_arrays


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def case_inputs(name):
    case = load_case(name)
    return case, step_arrays(name, case, 0)[0]


def test_rss_flat_over_10000_predictions():
    """Mixed traffic on one model (two row counts, a rejected input every 50th call): RSS
    after a warm-up of 1,000 predictions grows by less than 4 MiB over 10,000 more."""
    case, inputs = case_inputs("fixture_fuzz_predict")
    model = coremlrt.MLModel(model_path("fixture_fuzz_predict", case))
    rng = np.random.default_rng(0)
    variants = [dict(inputs), {"x": rng.standard_normal((8, 16)).astype(np.float32), "indices": inputs["indices"]}]
    bad = {"x": np.zeros((9, 16), np.float32), "indices": inputs["indices"]}  # 9 rows: past the range

    def run(count):
        for i in range(count):
            if i % 50 == 49:
                with pytest.raises(coremlrt.Error):
                    model.predict(bad)
            else:
                model.predict(variants[i % 2])

    run(1000)
    before = rss_bytes()
    run(10000)
    growth = rss_bytes() - before
    assert growth < 4 << 20, f"RSS grew by {growth / 2**20:.1f} MiB over 10,000 predictions"


def serial_and_threaded(path, inputs, function_name=None, threads=8, rounds=20):
    model = coremlrt.MLModel(path, function_name=function_name)
    expected = model.predict(inputs)
    results, errors = [], []

    def worker():
        try:
            for _ in range(rounds):
                results.append(model.predict(inputs))
        except Exception as e:  # reported below, with the thread's error
            errors.append(e)

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    assert not errors, errors
    assert len(results) == threads * rounds
    for result in results:
        assert result.keys() == expected.keys()
        for name, value in expected.items():
            got = result[name]
            if isinstance(value, np.ndarray):
                assert got.dtype == value.dtype and got.shape == value.shape
                assert got.tobytes() == value.tobytes(), f"output {name} differs from the serial prediction"
            else:
                assert got == value


@pytest.mark.parametrize("name", ["fixture_add", "fixture_fuzz_predict", "fixture_multifunction/adapter_a",
                                  "fixture_multifunction/adapter_b"])
def test_eight_threads_match_serial_bit_for_bit(name):
    case, inputs = case_inputs(name)
    serial_and_threaded(model_path(name, case), inputs, case.get("function_name"))


@pytest.mark.parametrize("name", case_names())
def test_eight_threads_match_serial_on_corpus(name):
    case = load_case(name)
    if case.get("states") or case["steps"] != 1 or case["format"] not in ("mlprogram", "neuralnetwork"):
        pytest.skip("stateful, multi-step or not a program: a state cannot be shared by threads")
    from coremlrt import _core

    report = _core.inspect(model_path(name, case))
    if report["problem"] or any(f["unsupported"] for f in report["functions"]):
        pytest.skip("this build cannot run the model (test_corpus.py says why)")
    serial_and_threaded(model_path(name, case), step_arrays(name, case, 0)[0], case.get("function_name"),
                        rounds=3)
