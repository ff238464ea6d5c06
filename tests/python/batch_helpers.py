"""Models and datasets for the batch prediction tests (test_batch, test_dask, test_ray, test_cli).

The model takes a float32 ``x`` [1, 8] and an int32 ``n`` [1, 8] and returns
``y = tanh((x + n) @ W)`` [1, 4]: an int32 input lets a record be refused for a NaN (the
model takes only whole numbers there), and numpy computes the reference.
"""

import os

import numpy as np

WEIGHTS = (np.random.default_rng(14).standard_normal((8, 4)) / np.sqrt(8)).astype(np.float32)


def reference(x, n):
    """The model's output for one record, computed with numpy."""
    return np.tanh((np.asarray(x, np.float32).reshape(1, 8) + np.asarray(n, np.float32).reshape(1, 8)) @ WEIGHTS)


def make_model(directory):
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    from mil_helpers import save_program

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 8)), mb.TensorSpec(shape=(1, 8), dtype=ct.converters.mil.mil.types.int32)],
                opset_version=ct.target.iOS18)
    def prog(x, n):
        total = mb.add(x=x, y=mb.cast(x=n, dtype="fp32"))
        return mb.tanh(x=mb.matmul(x=total, y=WEIGHTS), name="y")

    return save_program(prog, directory, name="batch_model")


def make_single_input_model(directory):
    """``y = tanh(x) * 3`` for x float32 [1, 2, 3]: a model of one input, for .npy files and Dask arrays."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    from mil_helpers import save_program

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 2, 3))], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.mul(x=mb.tanh(x=x), y=np.float32(3.0), name="y")

    return save_program(prog, directory, name="single_input")


def good_records(count, seed=0):
    """``count`` valid records: x float32 [1, 8], n int64 [1, 8] (converted to int32 by the model)."""
    rng = np.random.default_rng(seed)
    return [{"x": rng.standard_normal((1, 8)).astype(np.float32),
             "n": rng.integers(-3, 4, size=(1, 8)).astype(np.int64)} for _ in range(count)]


def write_npz_folder(folder, records):
    os.makedirs(folder, exist_ok=True)
    for index, record in enumerate(records):
        np.savez(os.path.join(folder, f"record-{index:05d}.npz"), **record)
    return folder


def make_stateful_model(directory):
    """A model that declares a state (``cache``), which batch paths refuse."""
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    from mil_helpers import save_program

    @mb.program(input_specs=[mb.TensorSpec(shape=(1, 4)),
                             mb.StateTensorSpec(shape=(1, 4), dtype=ct.converters.mil.mil.types.fp16)],
                opset_version=ct.target.iOS18)
    def prog(x, cache):
        mb.coreml_update_state(state=cache, value=mb.cast(x=x, dtype="fp16"))
        return mb.identity(x=x, name="y")

    return save_program(prog, directory, name="stateful")


def write_parquet_folder(folder, records, nan_at=None, null_at=None):
    """The records as two Parquet files (x, n as fixed-size lists of 8 values; an id column),
    with a NaN in n of record ``nan_at`` and a null x for record ``null_at``."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(folder, exist_ok=True)
    half = len(records) // 2
    for part, (start, rows) in enumerate(((0, records[:half]), (half, records[half:]))):
        x_values = np.concatenate([r["x"].ravel() for r in rows])
        n_values = np.concatenate([r["n"].ravel() for r in rows]).astype(np.float64)
        mask = np.zeros(len(rows), bool)
        if nan_at is not None and start <= nan_at < start + len(rows):
            n_values[(nan_at - start) * 8 + 2] = np.nan
        if null_at is not None and start <= null_at < start + len(rows):
            mask[null_at - start] = True
        table = pa.table({
            "x": pa.FixedSizeListArray.from_arrays(pa.array(x_values), 8, mask=pa.array(mask)),
            "n": pa.FixedSizeListArray.from_arrays(pa.array(n_values), 8),
            "id": pa.array(np.arange(start, start + len(rows))),
        })
        pq.write_table(table, os.path.join(folder, f"part-{part}.parquet"))
    return folder
