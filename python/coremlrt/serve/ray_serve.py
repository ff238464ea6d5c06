"""A Ray Serve deployment of a Core ML model (``coremlrt.ray.serve_deployment``).

Each replica loads the model once; concurrent calls are gathered by ``@serve.batch`` and
predicted with the rule of ``coremlrt serve`` (batching.py): merged on the batch dimension
when the model has a flexible one, else side by side on the replica's threads. Stateful
models are refused: Ray Serve routes a caller's calls to any replica, and a sequence's
state lives in one.
"""

import asyncio
import concurrent.futures

import numpy as np

from ..model import Error
from .batching import batch_limit, groups, mergeable, predict_requests


def _mergeable_request(model, request):
    """Whether a request can take part in a merge: every input given, as an array of the
    model's dtype with a batch dimension (anything else is predicted alone, where
    MLModel.predict converts or rejects it)."""
    if not isinstance(request, dict) or set(request) != set(model._inputs):
        return False
    for name, value in request.items():
        want = model._inputs[name]["dtype"]
        if not isinstance(value, np.ndarray) or value.ndim == 0 or value.dtype != np.dtype(want):
            return False
    return True


def serve_deployment(model_path, *, function_name=None, compute_units=None, max_batch_size=16,
                     batch_wait_timeout_s=0.0, threads=2, name="coremlrt", **deployment_options):
    """A bound Ray Serve application serving ``model_path``: ``serve.run(serve_deployment(...))``.

    Call it through a handle (``handle.predict.remote({"x": array})`` -> ``{"y": array}``) or
    over HTTP (POST JSON ``{"inputs": {"x": nested lists}}`` -> ``{"outputs": {...}}``).
    ``max_batch_size`` and ``batch_wait_timeout_s`` go to ``@serve.batch``; ``threads`` is
    how many predictions a replica runs side by side when it cannot merge; other keyword
    arguments (``num_replicas``, ``ray_actor_options``...) go to ``@serve.deployment``.
    """
    from ray import serve

    from ..batch import as_model

    model = as_model(model_path, function_name, compute_units)
    if model._function["states"]:
        raise Error(f"{model.package_path}: a stateful model cannot be a Ray Serve deployment (a sequence's "
                    f"state lives in one process); serve it with `coremlrt serve` and sequence ids")
    path, function = model.package_path, function_name

    @serve.deployment(name=name, **deployment_options)
    class CoreMLDeployment:
        def __init__(self):
            self.model = as_model(path, function, compute_units)
            self.merge = mergeable(self.model._function)
            self.rows_limit = batch_limit(self.model._function) if self.merge else 1
            self.pool = concurrent.futures.ThreadPoolExecutor(threads)
            self.predictions = 0
            self.requests = 0

        @serve.batch(max_batch_size=max_batch_size, batch_wait_timeout_s=batch_wait_timeout_s)
        async def _predict_batch(self, requests):
            loop = asyncio.get_running_loop()
            self.requests += len(requests)
            if self.merge:
                ok = [i for i, r in enumerate(requests) if _mergeable_request(self.model, r)]
                parts = [[ok[j] for j in g] for g in groups([requests[i] for i in ok], self.rows_limit)]
                parts += [[i] for i in range(len(requests)) if i not in set(ok)]
            else:
                parts = [[i] for i in range(len(requests))]
            self.predictions += len(parts)
            done = await asyncio.gather(*[
                loop.run_in_executor(self.pool, predict_requests, self.model, [requests[i] for i in part])
                for part in parts])
            results = [None] * len(requests)
            for part, outputs in zip(parts, done):
                for i, result in zip(part, outputs):
                    results[i] = result
            # @serve.batch hands each caller its own item; an exception item is raised to that caller.
            return results

        async def predict(self, inputs):
            result = await self._predict_batch(inputs)
            if isinstance(result, BaseException):
                raise result
            return result

        def stats(self):
            """Requests and the predictions they took (fewer predictions: merged)."""
            return {"requests": self.requests, "predictions": self.predictions, "merge": self.merge}

        async def __call__(self, request):
            body = await request.json()
            if not isinstance(body, dict) or not isinstance(body.get("inputs"), dict):
                return _json_error(400, 'the body must be {"inputs": {name: nested lists}}')
            inputs = {}
            for key, value in body["inputs"].items():
                feature = self.model._inputs.get(key)
                try:
                    inputs[key] = np.asarray(value, dtype=feature["dtype"]) if feature else value
                except (TypeError, ValueError) as exc:
                    return _json_error(400, f"input '{key}': {exc}")
            try:
                outputs = await self.predict(inputs)
            except Error as exc:
                return _json_error(400, str(exc))
            return {"outputs": {k: np.asarray(v).tolist() for k, v in outputs.items()}}

    return CoreMLDeployment.bind()


def _json_error(status, message):
    from starlette.responses import JSONResponse

    return JSONResponse({"error": message}, status_code=status)
