"""coremlrt.ray.predictor with Dataset.map_batches on a local Ray (3 logical CPUs: 2 actors and the Parquet reads): a
Parquet dataset with bad records kept with their errors, errors raised by default; the class
called directly; states refused."""

import os

import numpy as np
import pytest

import coremlrt
from batch_helpers import good_records, make_model, make_stateful_model, reference, write_parquet_folder

ray = pytest.importorskip("ray")
pytest.importorskip("pyarrow")
import coremlrt.ray  # noqa: E402


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    folder = tmp_path_factory.mktemp("ray_models")
    return {"two_inputs": make_model(folder), "stateful": make_stateful_model(folder)}


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False, configure_logging=False,
             runtime_env={"env_vars": {"PYTHONPATH": os.environ.get("PYTHONPATH", "")}})
    ray.data.DataContext.get_current().enable_progress_bars = False
    yield
    ray.shutdown()


def test_parquet_dataset_keeps_bad_records(local_ray, models, tmp_path):
    records = good_records(40, seed=11)
    folder = write_parquet_folder(tmp_path / "data", records, nan_at=9, null_at=31)
    dataset = ray.data.read_parquet(str(folder))
    predicted = dataset.map_batches(coremlrt.ray.predictor(models["two_inputs"], on_error="keep"),
                                    compute=ray.data.ActorPoolStrategy(size=2), batch_size=8)
    rows = sorted(predicted.take_all(), key=lambda row: row["id"])
    assert [row["id"] for row in rows] == list(range(40))  # the id column passes through
    for row in rows:
        record_id = row["id"]
        if record_id in (9, 31):
            assert ("non-integer" if record_id == 9 else "'x'") in row["error"]
            assert np.isnan(row["y"]).all()
        else:
            assert row["error"] == ""
            np.testing.assert_allclose(row["y"], reference(**records[record_id]), rtol=1e-5, atol=1e-6)


def test_error_raised_by_default(local_ray, models, tmp_path):
    folder = write_parquet_folder(tmp_path / "data", good_records(8, seed=12), nan_at=3)
    predicted = ray.data.read_parquet(str(folder)).map_batches(coremlrt.ray.predictor(models["two_inputs"]),
                                                               compute=ray.data.ActorPoolStrategy(size=1), batch_size=4)
    with pytest.raises(Exception, match="non-integer"):
        predicted.take_all()


def test_predictor_called_directly(models):
    """Without Ray: the class loads the model once (through the cache) and maps a numpy batch."""
    records = good_records(5, seed=13)
    batch = {"x": np.stack([r["x"][0] for r in records]), "n": np.stack([r["n"][0] for r in records]),
             "id": np.arange(5)}
    predictor_class = coremlrt.ray.predictor(models["two_inputs"], threads=2)
    first, second = predictor_class(), predictor_class()
    assert first.model is second.model
    out = first(batch)
    assert sorted(out) == ["id", "y"] and out["y"].shape == (5, 1, 4)
    for index, record in enumerate(records):
        np.testing.assert_allclose(out["y"][index], reference(**record), rtol=1e-5, atol=1e-6)


def test_states_refused(models):
    with pytest.raises(coremlrt.Error, match="declares states"):
        coremlrt.ray.predictor(models["stateful"])
