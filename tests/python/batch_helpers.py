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
