"""Predictions mapped over the partitions of a Dask collection: ``coremlrt.dask.predict``.

    import dask.dataframe as dd, coremlrt.dask
    frame = dd.read_parquet("inputs.parquet")
    predictions = coremlrt.dask.predict("model.mlpackage", frame).compute()

The model travels to the workers as its path and load options (``MLModel`` pickles so) and is
loaded once per worker process, cached by path and content (coremlrt.model_cache): the path must
name the same model on every worker. Needs the ``dask`` extra (``pip install coremlrt[dask]``).

Speed: Dask's nanny sets ``MALLOC_TRIM_THRESHOLD_=65536`` for its workers, which also fixes
glibc's mmap threshold at 128 KiB, so each larger per-prediction temporary is a fresh mmap
(up to 1.6x the CPU time per prediction, benchmarks/bench_batch.py). Start workers with
``distributed.nanny.pre-spawn-environ.MALLOC_TRIM_THRESHOLD_`` set to None for glibc's defaults.
"""

# This module is coremlrt.batch.dask (coremlrt.dask re-exports it); `import dask` below is
# absolute and finds the real package.
import copy

import numpy as np

from . import as_model, reject_states
from .records import fit_to_input
from ..model import ComputeUnit, Error

_ON_ERROR = ("raise", "keep")


class _WorkerModel:
    """The model as the partition functions receive it: pickled as its path and load options,
    and loaded on the worker (once per process: coremlrt.model_cache) for the worker's task slots.
    A worker with N threads runs N partitions at once, so its model runs N predictions side by
    side on N threads (batch.for_parallel_predictions); without that, every worker process
    would give each prediction every core of the machine and the processes would contend."""

    def __init__(self, model=None, path=None, compute_units=None, options=None):
        self._model, self._path, self._compute_units, self._options = model, path, compute_units, options
        if model is not None:
            self._path, self._compute_units, self._options = model.package_path, model.compute_unit.name, model._options

    def __reduce__(self):
        return (_WorkerModel, (None, self._path, self._compute_units, self._options))

    def resolve(self):
        try:
            from distributed import get_worker

            slots = get_worker().state.nthreads
        except (ImportError, ValueError, AttributeError):
            slots = None  # not on a distributed worker (a local scheduler): as loaded
        if slots is None and self._model is not None:
            return self._model
        options = copy.copy(self._options)
        if slots is not None:
            options.concurrent_predictions = max(slots, 1)
            if options.threads == 0:  # every core, as no threads were asked for
                options.threads = slots
        from ..model import cached_model_for

        return cached_model_for(self._path, ComputeUnit[self._compute_units], options)


def _predict_rows(model, rows, on_error, where):
    """Outputs per row (a dict of inputs); a failed row gives {"error": message} with on_error="keep"."""
    results = []
    for position, record in enumerate(rows):
        try:
            if not isinstance(record, dict):
                raise Error(f"a {type(record).__name__}, not a dict of input arrays")
            results.append(model.predict(record))
        except Exception as exc:  # noqa: BLE001 - reported per record, or raised naming it
            if on_error == "raise":
                raise Error(f"{where}, record {position}: {exc}") from exc
            results.append({"error": str(exc) if isinstance(exc, Error) else f"{type(exc).__name__}: {exc}"})
    return results


def _array_block(block, model, input_name, output_name, output_shape, dtype):
    model = model.resolve()
    feature = model._inputs[input_name]
    rows = [{input_name: fit_to_input(np.ascontiguousarray(block[i]), feature)} for i in range(block.shape[0])]
    outputs = _predict_rows(model, rows, "raise", "array block")
    result = np.empty((len(rows),) + tuple(output_shape), dtype)
    for i, out in enumerate(outputs):
        result[i] = np.asarray(out[output_name]).reshape(output_shape)
    return result


def _frame_partition(frame, model, output_names, on_error):
    model = model.resolve()
    import pandas as pd

    inputs = [name for name in frame.columns if name in model._inputs]
    rows = []
    for values in zip(*(frame[name].tolist() for name in inputs)):
        # A missing cell (None) leaves the input out: the model reports it missing.
        rows.append({name: fit_to_input(np.asarray(value), model._inputs[name])
                     for name, value in zip(inputs, values) if value is not None})
    outputs = _predict_rows(model, rows, on_error, "dataframe partition")
    columns = {name: [out.get(name) for out in outputs] for name in output_names}
    if on_error == "keep":
        columns["error"] = [out.get("error") for out in outputs]
    return pd.DataFrame({name: pd.Series(values, index=frame.index, dtype=object)
                         for name, values in columns.items()}, index=frame.index)


def _bag_partition(items, model, on_error):
    model = model.resolve()
    return _predict_rows(model, list(items), on_error, "bag partition")


def _output_layout(model, collection, input_name, output_name, output_shape):
    """(output name, shape, dtype) of an array result: from the description, else one prediction."""
    outputs = {f["name"]: f for f in model._function["outputs"]}
    if output_name is None:
        if len(outputs) != 1:
            raise Error(f"{model.package_path} has outputs {sorted(outputs)}; name the one to return "
                        f"with output=... (or predict over a dataframe or bag to get them all)")
        output_name = next(iter(outputs))
    if output_name not in outputs:
        raise Error(f"{model.package_path} has no output '{output_name}'; its outputs are {sorted(outputs)}")
    feature = outputs[output_name]
    dtype = np.float32 if feature["dtype"] in ("float16", "float32") else np.dtype(feature["dtype"])
    shape = output_shape if output_shape is not None else feature["shape"]
    if not shape or any(int(d) <= 0 for d in shape):
        # The description leaves the shape open: one prediction on the first record fixes it.
        first = np.asarray(collection[:1].compute())[0]
        out = model.predict({input_name: fit_to_input(first, model._inputs[input_name])})[output_name]
        shape, dtype = np.asarray(out).shape, np.asarray(out).dtype
    return output_name, tuple(int(d) for d in shape), dtype


def predict(model, collection, *, output=None, output_shape=None, on_error="raise", function_name=None,
            compute_units=None):
    """Maps predictions over a Dask array, dataframe or bag; returns the same collection type.

    * ``dask.array`` ``[N, ...]``: each row is one record of a single-input model; the result is
      an array ``[N, *shape]`` of the model's one output (or the one named by ``output``).
    * ``dask.dataframe``: columns named like inputs (tensor cells as arrays or flat lists;
      others are ignored); the result has the same index and one object column per output.
    * ``dask.bag`` of input dicts: the result is a bag of output dicts.

    ``on_error``: ``"raise"`` (a failed record fails its partition's task, naming the record) or
    ``"keep"`` (dataframes and bags only: a failed record gets its message in an ``error``
    column, or is the bag item ``{"error": message}``, and the other records are kept).
    ``model`` is a path or an :class:`MLModel`; stateful models are refused.
    """
    import dask.array as da
    import dask.bag as db
    import dask.dataframe as dd

    if on_error not in _ON_ERROR:
        raise Error(f"on_error must be one of {_ON_ERROR}, not {on_error!r}")
    model = as_model(model, function_name, compute_units)
    reject_states(model)
    output_names = [f["name"] for f in model._function["outputs"]]

    if isinstance(collection, da.Array):
        if on_error != "raise":
            raise Error("on_error='keep' needs a dataframe or bag: an array has no place for a failed record")
        if len(model._inputs) != 1:
            raise Error(f"{model.package_path} takes inputs {sorted(model._inputs)}; a Dask array feeds a model "
                        f"of one input: use a dataframe or bag")
        (input_name,) = model._inputs
        if collection.ndim == 0:
            raise Error("a Dask array of records needs a leading record axis")
        name, shape, dtype = _output_layout(model, collection, input_name, output, output_shape)
        records = collection.rechunk({axis: -1 for axis in range(1, collection.ndim)})
        return records.map_blocks(
            _array_block, _WorkerModel(model), input_name, name, shape, dtype, dtype=dtype,
            chunks=(records.chunks[0],) + tuple((d,) for d in shape),
            drop_axis=list(range(1, records.ndim)), new_axis=list(range(1, 1 + len(shape))),
            meta=np.empty((0,) * (1 + len(shape)), dtype))
    if isinstance(collection, dd.DataFrame):
        import pandas as pd

        missing = [name for name in model._inputs if name not in collection.columns]
        if missing:
            raise Error(f"the dataframe has no column for the model's input(s) {missing}; "
                        f"its columns are {list(collection.columns)}")
        columns = output_names + (["error"] if on_error == "keep" else [])
        meta = pd.DataFrame({name: pd.Series([], dtype=object) for name in columns})
        return collection.map_partitions(_frame_partition, _WorkerModel(model), output_names, on_error, meta=meta)
    if isinstance(collection, db.Bag):
        return collection.map_partitions(_bag_partition, _WorkerModel(model), on_error)
    raise Error(f"coremlrt.dask.predict takes a dask array, dataframe or bag, not {type(collection).__name__}")
