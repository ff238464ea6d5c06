"""Predictions over a Ray dataset: ``coremlrt.ray.predictor`` for ``Dataset.map_batches``.

    import ray, coremlrt.ray
    dataset = ray.data.read_parquet("inputs.parquet")
    predictions = dataset.map_batches(coremlrt.ray.predictor("model.mlpackage"), concurrency=2)
    predictions.write_parquet("predictions/")

``predictor`` returns a callable class: Ray makes one instance per actor, and each loads the
model once (cached by path and content, coremlrt.model_cache), so the path must name the same model
on every node. Needs the ``ray`` extra (``pip install coremlrt[ray]``).

``serve_deployment`` makes a Ray Serve application of a model, with ``@serve.batch`` batching
(coremlrt.serve.ray_serve):

    from ray import serve
    handle = serve.run(coremlrt.ray.serve_deployment("model.mlpackage", max_batch_size=16))
    outputs = handle.predict.remote({"x": array}).result()
"""

# This module is coremlrt.batch.ray (coremlrt.ray re-exports it); nothing here imports the real
# `ray` package: Ray calls us.
import concurrent.futures

import numpy as np

from . import as_model, for_parallel_predictions, reject_states
from .records import fit_to_input
from ..model import ComputeUnit, Error

_ON_ERROR = ("raise", "keep")


class Predictor:
    """Callable class for ``map_batches``: a batch (a dict of column arrays, or a pandas
    DataFrame) in, the same kind of batch out, with one column per model output.

    Columns named like the model's inputs feed it (row i of each is one record, reshaped to
    the input's shape when only the layout differs); the other columns (ids, labels) pass
    through. ``on_error="keep"`` adds an ``error`` column (``""`` for good rows) and fills a
    failed row's outputs with NaN (or 0 for integer outputs) instead of failing the batch.
    ``threads`` > 1 predicts a batch's rows on that many threads within the actor.
    """

    def __init__(self, model_path, *, function_name=None, compute_units=None, on_error="raise", threads=1):
        if on_error not in _ON_ERROR:
            raise Error(f"on_error must be one of {_ON_ERROR}, not {on_error!r}")
        model = as_model(model_path, function_name, compute_units)
        reject_states(model)
        # The actor's share of the machine: Ray reserves CPUs per actor (num_cpus, 1 by
        # default), so the model runs `threads` rows side by side on the actor's CPUs rather
        # than giving each prediction every core while the other actors do the same.
        self.model = for_parallel_predictions(model, threads, threads=_actor_cpus())
        self.on_error = on_error
        self._pool = concurrent.futures.ThreadPoolExecutor(threads) if threads > 1 else None

    def _predict(self, record):
        try:
            return self.model.predict(record), ""
        except Exception as exc:  # noqa: BLE001 - reported per row, or raised naming it
            if self.on_error == "raise":
                raise
            return None, str(exc) if isinstance(exc, Error) else f"{type(exc).__name__}: {exc}"

    def _fill(self, name, good):
        """A failed row's value for an output: NaN (0 for integers) of the output's shape."""
        if good is not None:
            template = np.asarray(good)
        else:
            feature = next(f for f in self.model._function["outputs"] if f["name"] == name)
            shape = [d for d in feature["shape"] if d > 0] if feature["shape"] else []
            template = np.zeros(shape, np.float32)
        fill = np.nan if template.dtype.kind == "f" else 0
        return np.full(template.shape, fill, template.dtype)

    def __call__(self, batch):
        pandas_batch = not isinstance(batch, dict)
        columns = {name: batch[name].to_numpy() for name in batch.columns} if pandas_batch else batch
        missing = [name for name in self.model._inputs if name not in columns]
        if missing:
            raise Error(f"batch has no column for the model's input(s) {missing}; its columns are {sorted(columns)}")
        count = len(next(iter(columns.values()))) if columns else 0
        records = []
        for row in range(count):
            record = {}
            for name, feature in self.model._inputs.items():
                value = columns[name][row]
                if value is not None:
                    record[name] = fit_to_input(np.asarray(value), feature)
            records.append(record)
        mapped = self._pool.map(self._predict, records) if self._pool else map(self._predict, records)
        results = list(mapped)
        output_names = [f["name"] for f in self.model._function["outputs"]]
        out = {name: value for name, value in columns.items() if name not in self.model._inputs}
        for name in output_names:
            good = next((o[name] for o, _ in results if o is not None), None)
            values = [_as_array(o[name]) if o is not None else self._fill(name, _as_array(good) if good is not None
                                                                          else None)
                      for o, _ in results]
            out[name] = np.stack(values) if values else np.empty((0,))
        if self.on_error == "keep":
            out["error"] = np.array([message for _, message in results], dtype=object)
        if pandas_batch:
            import pandas as pd

            return pd.DataFrame({name: list(v) if np.ndim(v) > 1 else v for name, v in out.items()})
        return out


def _actor_cpus():
    """Whole CPUs Ray assigned to this actor; None outside an actor (or a fraction below 1)."""
    try:
        import ray

        cpus = ray.get_runtime_context().get_assigned_resources().get("CPU")
    except Exception:  # noqa: BLE001 - not in a Ray worker: no share to respect
        return None
    return int(cpus) if cpus and cpus >= 1 else None


def _as_array(value):
    # A classifier's {label: probability} output becomes its probabilities in class order.
    return np.asarray(list(value.values())) if isinstance(value, dict) else np.asarray(value)


def predictor(model_path, *, function_name=None, compute_units=None, on_error="raise", threads=1):
    """A :class:`Predictor` class bound to a model, to pass to ``Dataset.map_batches``
    (with ``concurrency=N`` actors). The model is loaded here once to check it (it must exist
    and declare no states) and again once in each actor."""
    model = as_model(model_path, function_name, compute_units)
    reject_states(model)
    options = dict(function_name=function_name, compute_units=compute_units or ComputeUnit.ALL,
                   on_error=on_error, threads=threads)
    if on_error not in _ON_ERROR:
        raise Error(f"on_error must be one of {_ON_ERROR}, not {on_error!r}")
    path = model.package_path

    class BoundPredictor(Predictor):
        __doc__ = f"coremlrt predictions of {path}."

        def __init__(self):
            super().__init__(path, **options)

    BoundPredictor.__name__ = BoundPredictor.__qualname__ = "CoreMLPredictor"
    return BoundPredictor


def serve_deployment(model_path, **options):
    """A Ray Serve application serving ``model_path`` (coremlrt.serve.ray_serve.serve_deployment
    documents the options)."""
    from ..serve.ray_serve import serve_deployment as make

    return make(model_path, **options)
