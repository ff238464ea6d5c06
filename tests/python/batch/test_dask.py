"""coremlrt.dask.predict on a distributed.LocalCluster of 2 worker processes: arrays,
dataframes read from Parquet (bad records kept with their errors), bags; one model load per
worker process; states refused."""

import numpy as np
import pytest

import coremlrt
from batch_helpers import (good_records, make_model, make_single_input_model, make_stateful_model, reference,
                           write_parquet_folder)

distributed = pytest.importorskip("distributed")
pytest.importorskip("pyarrow")
import dask.array as da  # noqa: E402
import dask.bag as db  # noqa: E402
import dask.dataframe as dd  # noqa: E402

import coremlrt.dask  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("dask_models")
    return {"two_inputs": make_model(folder), "single": make_single_input_model(folder),
            "stateful": make_stateful_model(folder)}


@pytest.fixture(scope="module")
def client():
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  worker_dashboard_address=None) as cluster, distributed.Client(cluster) as c:
        yield c


def is_missing(value):
    # pandas may turn a None cell into NaN or NA on the way back from the workers.
    import pandas as pd

    return value is None or (np.ndim(value) == 0 and bool(pd.isna(value)))


def _worker_loads():
    from coremlrt import model_cache

    return model_cache.stats()["loads"]


def _worker_model_threads():
    from coremlrt import model_cache

    return sorted({model._options.threads for model in model_cache._models.values()})


def test_array_same_collection_type(client, models):
    rng = np.random.default_rng(0)
    data = rng.standard_normal((40, 2, 3)).astype(np.float32)  # records without the batch dimension
    result = coremlrt.dask.predict(models["single"], da.from_array(data, chunks=(5, 2, 3)))
    assert isinstance(result, da.Array) and result.shape == (40, 1, 2, 3)
    values = result.compute()
    np.testing.assert_allclose(values, np.tanh(data)[:, None] * 3, rtol=1e-5, atol=1e-6)
    # 8 partitions over 2 worker processes, computed twice: each process loaded the model once.
    result.compute()
    loads = client.run(_worker_loads)
    assert len(loads) == 2 and all(n <= 1 for n in loads.values()) and sum(loads.values()) >= 1
    # Each worker process has one task slot: its model predicts on one thread, not on every core
    # of the machine beside the other worker (coremlrt/batch/dask.py, _WorkerModel).
    per_worker = list(client.run(_worker_model_threads).values())
    assert any(per_worker) and all(threads == [1] for threads in per_worker if threads)


def test_dataframe_from_parquet_keeps_bad_records(client, models, tmp_path):
    records = good_records(30, seed=7)
    folder = write_parquet_folder(tmp_path / "data", records, nan_at=4, null_at=22)
    frame = dd.read_parquet(str(folder))
    result = coremlrt.dask.predict(models["two_inputs"], frame, on_error="keep")
    assert isinstance(result, dd.DataFrame)
    table = result.compute()
    ids = frame["id"].compute()
    assert list(table.index) == list(ids.index) and list(table.columns) == ["y", "error"]
    for (index, row), record_id in zip(table.iterrows(), ids):
        if record_id in (4, 22):
            assert is_missing(row["y"]) and row["error"]
            assert ("non-integer" if record_id == 4 else "'x'") in row["error"]
        else:
            assert is_missing(row["error"])
            np.testing.assert_allclose(row["y"], reference(**records[record_id]), rtol=1e-5, atol=1e-6)


def test_dataframe_error_raised_by_default(client, models, tmp_path):
    folder = write_parquet_folder(tmp_path / "data", good_records(10, seed=8), nan_at=6)
    result = coremlrt.dask.predict(models["two_inputs"], dd.read_parquet(str(folder)))
    with pytest.raises(coremlrt.Error, match="dataframe partition, record 1: .*non-integer"):
        result.compute()


def test_bag_of_dicts(client, models):
    records = good_records(12, seed=9)
    records[5] = {"x": records[5]["x"]}
    bag = db.from_sequence(records, npartitions=3)
    kept = coremlrt.dask.predict(models["two_inputs"], bag, on_error="keep")
    assert isinstance(kept, db.Bag)
    outputs = kept.compute()
    assert len(outputs) == 12 and "'n'" in outputs[5]["error"]
    for index, out in enumerate(outputs):
        if index != 5:
            np.testing.assert_allclose(out["y"], reference(**records[index]), rtol=1e-5, atol=1e-6)
    with pytest.raises(coremlrt.Error, match="bag partition, record 1"):
        coremlrt.dask.predict(models["two_inputs"], bag).compute()


def test_states_and_wrong_collections_are_refused(models):
    with pytest.raises(coremlrt.Error, match="declares states"):
        coremlrt.dask.predict(models["stateful"], db.from_sequence([{"x": np.zeros((1, 4), np.float32)}]))
    with pytest.raises(coremlrt.Error, match="a model of one input"):
        coremlrt.dask.predict(models["two_inputs"], da.zeros((4, 8), chunks=2))
    with pytest.raises(coremlrt.Error, match="needs a dataframe or bag"):
        coremlrt.dask.predict(models["single"], da.zeros((4, 2, 3), chunks=2), on_error="keep")
    with pytest.raises(coremlrt.Error, match="takes a dask array, dataframe or bag"):
        coremlrt.dask.predict(models["single"], [1, 2])
