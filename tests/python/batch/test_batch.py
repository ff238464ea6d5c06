"""coremlrt.predict_dataset: npz folders, Parquet, Python iterables; bad records, fail-fast,
resume after a kill, MLModel pickling and the worker-side model cache."""

import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import numpy as np
import pytest

import coremlrt
from batch_helpers import (good_records, make_model, make_single_input_model, make_stateful_model, reference,
                           write_npz_folder, write_parquet_folder)
from coremlrt.batch import read_errors, read_outputs

pa = pytest.importorskip("pyarrow")
import pyarrow.parquet as pq  # noqa: E402


@pytest.fixture(scope="module")
def model_path(tmp_path_factory):
    return make_model(tmp_path_factory.mktemp("batch_model"))


@pytest.fixture(scope="module")
def single_input_path(tmp_path_factory):
    return make_single_input_model(tmp_path_factory.mktemp("single_input"))


def bad_npz_folder(folder, records):
    """The records as .npz files, with three bad ones: a wrong dtype, a missing input, a NaN
    in the int32 input. Returns {index: reason} of the bad records."""
    records = [dict(r) for r in records]
    records[3]["x"] = np.array([["a"] * 8])                      # strings: no conversion to float32
    del records[7]["n"]                                          # a missing feature
    records[11]["n"] = np.full((1, 8), np.nan, np.float32)       # int32 input refuses NaN
    write_npz_folder(folder, records)
    return {3: "dtype", 7: "'n'", 11: "non-integer"}


def assert_all_good_written(outputs, records, bad):
    assert sorted(outputs) == [i for i in range(len(records)) if i not in bad]
    for index, outs in outputs.items():
        np.testing.assert_allclose(outs["y"], reference(**records[index]), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("fmt", ["npz", "parquet"])
def test_npz_folder_with_bad_records(tmp_path, model_path, fmt):
    records = good_records(40)
    bad = bad_npz_folder(tmp_path / "data", records)
    out = tmp_path / "out"
    result = coremlrt.predict_dataset(model_path, tmp_path / "data", out, threads=2, output_format=fmt,
                                      records_per_shard=8, progress=False)
    assert (result.written, result.failed, result.skipped) == (37, 3, 0)
    assert_all_good_written(read_outputs(out), records, bad)
    assert len(list(out.glob(f"part-*.{fmt}"))) >= 5  # written as shards, as they came
    errors = {e["index"]: e for e in read_errors(out)}
    assert sorted(errors) == sorted(bad)
    for index, words in bad.items():
        assert words in errors[index]["error"], errors[index]
        assert errors[index]["source"] == f"record-{index:05d}.npz"


def test_parquet_dataset_with_bad_records(tmp_path, model_path):
    """One column per input as fixed-size lists, over two files; a null cell is a missing
    input and a NaN in the int column is refused; the other records are written."""
    records = good_records(30, seed=1)
    folder = write_parquet_folder(tmp_path / "data.parquet", records, nan_at=5, null_at=20)
    out = tmp_path / "predictions.parquet"
    result = coremlrt.predict_dataset(model_path, folder, out, threads=2, progress=False, records_per_shard=7)
    assert (result.written, result.failed) == (28, 2)
    assert_all_good_written(read_outputs(out), records, {5, 20})
    errors = {e["index"]: e for e in read_errors(out)}
    assert sorted(errors) == [5, 20]
    assert "non-integer" in errors[5]["error"] and errors[5]["source"] == "part-0.parquet row 5"
    assert "'x'" in errors[20]["error"] and errors[20]["source"] == "part-1.parquet row 5"
    # The shards are plain Parquet: y as a fixed-size list with its shape in the metadata.
    table = pq.read_table(next(out.glob("part-*.parquet")))
    assert json.loads(table.schema.field("y").metadata[b"shape"]) == [1, 4]
    # The folder reads as one Parquet dataset (the errors file is skipped).
    assert sorted(pq.read_table(out).column("index").to_pylist()) == sorted(read_outputs(out))


def test_parquet_missing_column_is_refused(tmp_path, model_path):
    pq.write_table(pa.table({"x": pa.array([[0.0] * 8])}), tmp_path / "data.parquet")
    with pytest.raises(coremlrt.Error, match=r"no column for the model's input\(s\) \['n'\]"):
        coremlrt.predict_dataset(model_path, tmp_path / "data.parquet", progress=False)


def test_iterable_in_memory_and_fail_fast(model_path):
    records = good_records(12, seed=2)
    records[4] = {"x": records[4]["x"]}
    model = coremlrt.MLModel(model_path)
    result = coremlrt.predict_dataset(model, iter(records), threads=3, progress=False)
    assert (result.written, result.failed) == (11, 1)
    assert result.errors[0][0] == 4 and "'n'" in result.errors[0][2]
    assert_all_good_written(result.outputs, records, {4})
    with pytest.raises(coremlrt.Error, match=r"record 4 \(record 4\) failed: .*'n'"):
        coremlrt.predict_dataset(model, records, threads=1, fail_fast=True, progress=False)


def test_fail_fast_keeps_what_finished(tmp_path, model_path):
    records = good_records(20, seed=3)
    bad = bad_npz_folder(tmp_path / "data", records)
    out = tmp_path / "out"
    with pytest.raises(coremlrt.Error, match="record 3 .*record-00003.npz"):
        coremlrt.predict_dataset(model_path, tmp_path / "data", out, threads=1, fail_fast=True, progress=False)
    # Records already in flight when record 3 failed finish and are kept; no later bad record
    # was reached (one thread keeps at most 4 records in flight).
    kept = sorted(read_outputs(out))
    assert kept[:3] == [0, 1, 2] and 3 not in kept and len(kept) <= 7
    assert [e["index"] for e in read_errors(out)] == [3]
    # A rerun without resume refuses to mix runs; with resume it finishes the rest.
    with pytest.raises(coremlrt.Error, match="already holds predictions"):
        coremlrt.predict_dataset(model_path, tmp_path / "data", out, progress=False)
    result = coremlrt.predict_dataset(model_path, tmp_path / "data", out, resume=True, progress=False)
    assert (result.skipped, result.written, result.failed) == (len(kept), 17 - len(kept), 3)
    assert_all_good_written(read_outputs(out), records, bad)


def test_npy_folder_single_input(tmp_path, single_input_path):
    rng = np.random.default_rng(4)
    data = tmp_path / "data"
    data.mkdir()
    arrays = [rng.standard_normal((2, 3)).astype(np.float32) for _ in range(6)]  # batch dim dropped
    for index, array in enumerate(arrays):
        np.save(data / f"{index:03d}.npy", array)
    result = coremlrt.predict_dataset(single_input_path, data, tmp_path / "out", threads=2, progress=False)
    assert result.written == 6
    outputs = read_outputs(tmp_path / "out")
    for index, array in enumerate(arrays):
        np.testing.assert_allclose(outputs[index]["y"], np.tanh(array)[None] * 3, rtol=1e-5, atol=1e-6)


RESUMABLE_RUN = textwrap.dedent("""
    import sys, time, coremlrt
    from coremlrt.model import MLModel

    slow = MLModel(sys.argv[1])
    original = slow.predict

    def predict(data, state=None):
        time.sleep(0.01)  # slow enough to be killed half-way
        return original(data, state)

    slow.predict = predict
    coremlrt.predict_dataset(slow, sys.argv[2], sys.argv[3], threads=2, resume=True,
                             records_per_shard=5, progress=False)
""")


@pytest.mark.parametrize("fmt", ["npz", "parquet"])
def test_killed_run_resumes_writing_each_record_once(tmp_path, model_path, fmt):
    records = good_records(200, seed=5)
    write_npz_folder(tmp_path / "data", records)
    out = tmp_path / ("out.parquet" if fmt == "parquet" else "out")
    script = tmp_path / "run.py"
    script.write_text(RESUMABLE_RUN)
    process = subprocess.Popen([sys.executable, str(script), model_path, str(tmp_path / "data"), str(out)],
                               env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    deadline = time.monotonic() + 60
    while len(list(out.glob(f"part-*.{fmt}"))) < 3 and time.monotonic() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGKILL)
    process.wait()
    written_before = sorted(read_outputs(out))
    assert 0 < len(written_before) < 200, "the run was not killed half-way"
    result = coremlrt.predict_dataset(model_path, tmp_path / "data", out, resume=True, progress=False)
    assert result.skipped == len(written_before) and result.written == 200 - len(written_before)
    assert not list(out.glob(".part-*.tmp"))
    # Every record is written exactly once over all shards.
    indices = []
    for shard in sorted(out.glob(f"part-*.{fmt}")):
        if fmt == "npz":
            with np.load(shard) as npz:
                indices += npz["index"].tolist()
        else:
            indices += pq.read_table(shard, columns=["index"]).column("index").to_pylist()
    assert sorted(indices) == list(range(200))
    assert_all_good_written(read_outputs(out), records, set())


def test_states_are_refused(tmp_path):
    model = coremlrt.MLModel(make_stateful_model(tmp_path))
    with pytest.raises(coremlrt.Error, match=r"declares states \(cache\).*stateful sequence"):
        coremlrt.predict_dataset(model, [{"x": np.zeros((1, 4), np.float32)}], progress=False)
    with pytest.raises(coremlrt.Error, match="MLState cannot be pickled"):
        pickle.dumps(model.make_state())


def test_model_pickles_as_path_and_reloads_once(tmp_path, model_path):
    from coremlrt import model_cache

    model = coremlrt.MLModel(model_path, compute_units=coremlrt.ComputeUnit.CPU_ONLY)
    payload = pickle.dumps(model)
    assert len(payload) < 1000 and model_path.encode() in payload  # a path, not native state
    loads = model_cache.stats()["loads"]
    first, second = pickle.loads(payload), pickle.loads(payload)
    assert first is second and first is not model  # one load per process
    assert model_cache.stats()["loads"] <= loads + 1
    assert first.compute_unit == coremlrt.ComputeUnit.CPU_ONLY
    record = good_records(1)[0]
    np.testing.assert_allclose(first.predict(record)["y"], reference(**record), rtol=1e-5, atol=1e-6)
    # A model saved again over the same path is a new content: loaded afresh, not served stale.
    copy = str(tmp_path / "copy.mlpackage")
    import shutil

    shutil.copytree(model_path, copy)
    from coremlrt.model import cached_model

    before = cached_model(copy)
    weights = next(p for p in (tmp_path / "copy.mlpackage").rglob("weight.bin"))
    data = bytearray(weights.read_bytes())
    data[-1] ^= 1
    weights.write_bytes(bytes(data))
    assert cached_model(copy) is not before
    assert cached_model(copy) is cached_model(copy)


def test_core_package_imports_no_extras():
    code = ("import sys, coremlrt, coremlrt.batch, coremlrt.cli; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'dask', 'distributed', 'ray', 'pyarrow', 'tqdm'}))")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert result.stdout.strip() == "[]"


def test_parallel_runs_get_a_model_loaded_for_them(model_path):
    # A model loaded for one prediction at a time queues predictions on OpenVINO's single
    # stream; batch runs reload it for their thread count (coremlrt.batch.for_parallel_predictions).
    import concurrent.futures

    from coremlrt.batch import for_parallel_predictions

    model = coremlrt.MLModel(model_path, backend="openvino")
    parallel = for_parallel_predictions(model, 2)
    assert parallel is not model and parallel._options.concurrent_predictions == 2
    assert for_parallel_predictions(parallel, 2) is parallel
    assert any(p["backend"] == "openvino" for p in parallel.placements())
    records = good_records(16)
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        outputs = list(pool.map(parallel.predict, records))
    for record, out in zip(records, outputs):
        np.testing.assert_allclose(out["y"], reference(**record), rtol=1e-5, atol=1e-6)
    # Our own kernels have no streams to split: the model is used as it is.
    ours = coremlrt.MLModel(model_path, backend="reference")
    assert for_parallel_predictions(ours, 2) is ours
    with pytest.raises(ValueError, match="concurrent_predictions"):
        coremlrt.MLModel(model_path, concurrent_predictions=0)
