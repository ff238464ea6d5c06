"""``CoreMLRuntime``: the MLServer runtime that serves a Core ML model through coremlrt.

MLServer owns the network side (REST and gRPC of the Open Inference Protocol, health, model
metadata, Prometheus, logs); this class turns one request into a prediction:

* request parameters ``function`` (a multifunction model's function; default: the model's
  default), ``sequence_id`` / ``sequence_start`` / ``sequence_end`` (stateful models,
  sequences.py);
* stateless requests go through the function's :class:`~.batching.Batcher`; stateful ones
  through the model's :class:`~.sequences.SequenceTable`, on the same worker threads;
* every failure a client can cause is a :class:`mlserver.errors.MLServerError` with a 4xx
  status (503 for capacity), naming what was wrong; coremlrt.Error from the engine has the
  status of its kind (ENGINE_KIND_STATUS: 400 for a bad input, 507 for a resource limit, ...;
  law 5: it names the model, function and feature). Nothing else escapes as a 500 unless it
  is a bug here.
"""

import asyncio
import concurrent.futures
import logging
import time

import mlserver
from mlserver.errors import MLServerError
from mlserver.types import InferenceResponse, MetadataTensor

from ..model import Error, MLModel
from . import features as F
from .batching import Batcher
from .metrics import metrics
from .sequences import SequenceTable

logger = logging.getLogger("mlserver.coremlrt")  # MLServer's handlers (and JSON format) apply

# Elements one input may declare; a shape past it is refused before any memory is taken.
_MAX_ELEMENTS = 1 << 28

# Names of the models this process has loaded, ever (server.py exits 1 when one never was).
LOADED: set[str] = set()


# coremlrt.Error's kind -> HTTP status (docs/guide/limits-and-errors.md, "Error kinds"): a bad
# input is the client's to fix (400); a model the engine cannot read or run is no fault of the
# request (422); a resource limit is the server's capacity (507); an internal error is ours
# (500). An error without a kind (the Python layer's own checks of a request) is a bad input.
ENGINE_KIND_STATUS = {"bad_input": 400, "bad_model": 422, "unsupported": 422, "resource_limit": 507,
                      "internal": 500}



class CoreMLRuntime(mlserver.MLModel):
    async def load(self):
        options = dict(self.settings.parameters.extra or {})
        self.options = options
        self.path = self.settings.parameters.uri
        workers = options["workers"]
        loop = asyncio.get_running_loop()
        # Loading maps weights and may compile backend regions: off the event loop.
        default = await loop.run_in_executor(None, self._load_function, None)
        self.functions = {default.function_name: default}
        for function in default._description["functions"]:
            if function["name"] not in self.functions:
                self.functions[function["name"]] = await loop.run_in_executor(None, self._load_function,
                                                                              function["name"])
        self.default_function = default.function_name
        self.executor = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix=f"coremlrt-{self.name}")
        self.metrics = metrics()
        self.batchers = {}
        for name, model in self.functions.items():
            if not model._function["states"]:
                self.batchers[name] = Batcher(self.name, model, self.executor, options, self.metrics)
                self.batchers[name].start()
        self.sequences = SequenceTable(self.name, options["max_sequences"], options["sequence_timeout_s"],
                                       options["retry_after_s"], self.metrics)
        self.sequences.start()
        self._sequence_pending = 0
        function = default._function
        self.inputs = [MetadataTensor(name=f["name"], datatype=F.datatype(f), shape=F.metadata_shape(f))
                       for f in function["inputs"]]
        self.outputs = [MetadataTensor(name=f["name"], datatype=F.datatype(f, output=True), shape=F.metadata_shape(f))
                        for f in function["outputs"]]
        LOADED.add(self.name)
        logger.info("loaded model '%s' from %s: functions %s (default %s), merging %s, %d worker(s)", self.name,
                    self.path, sorted(self.functions), self.default_function,
                    sorted(n for n, b in self.batchers.items() if b.merge) or "none", workers)
        return True

    def _load_function(self, function_name):
        return MLModel(self.path, function_name=function_name, backend=self.options["backend"],
                       threads=self.options["threads"], concurrent_predictions=self.options["workers"])

    async def unload(self):
        # Also called after a load that failed part way: only what was made is stopped.
        for batcher in getattr(self, "batchers", {}).values():
            await batcher.stop()
        if getattr(self, "sequences", None) is not None:
            await self.sequences.stop()
        if getattr(self, "executor", None) is not None:
            self.executor.shutdown(wait=False)
        return True

    async def metadata(self):
        response = await super().metadata()
        response.platform = "coremlrt"
        response.parameters = mlserver.types.Parameters(
            functions=",".join(sorted(self.functions)), default_function=self.default_function,
            stateful=",".join(sorted(n for n, m in self.functions.items() if m._function["states"])))
        return response

    async def predict(self, payload):
        began = time.perf_counter()
        try:
            response = await self._predict(payload)
        except F.RequestError as exc:
            self.metrics.requests.labels(self.name, str(exc.status)).inc()
            raise MLServerError(str(exc), exc.status) from None
        except Error as exc:  # the engine refused: its error's kind says whose fault it is
            status = ENGINE_KIND_STATUS.get(getattr(exc, "kind", "bad_input"), 500)
            self.metrics.requests.labels(self.name, str(status)).inc()
            raise MLServerError(str(exc), status) from None
        self.metrics.requests.labels(self.name, "200").inc()
        self.metrics.latency.labels(self.name).observe(time.perf_counter() - began)
        return response

    async def _predict(self, payload):
        parameters = _parameters(payload.parameters)
        function_name = parameters.get("function") or self.default_function
        if not isinstance(function_name, str) or function_name not in self.functions:
            raise F.RequestError(f"model '{self.name}' has no function {function_name!r}; its functions are "
                                 f"{sorted(self.functions)}", 404)
        model = self.functions[function_name]
        inputs = F.decode_inputs(payload.inputs, model._inputs, _MAX_ELEMENTS)
        sequence_id = parameters.get("sequence_id")
        if sequence_id in (None, 0, ""):  # Triton: 0 (or "") means "no sequence"
            if model._function["states"]:
                raise F.RequestError(f"function '{function_name}' of model '{self.name}' is stateful: a request "
                                     f"needs a sequence_id parameter (and sequence_start=true to begin)")
            outputs = await self.batchers[function_name].submit(inputs)
        else:
            if not model._function["states"]:
                raise F.RequestError(f"function '{function_name}' of model '{self.name}' keeps no state; "
                                     f"drop the sequence_id parameter")
            if not isinstance(sequence_id, (int, str)) or isinstance(sequence_id, bool):
                raise F.RequestError(f"sequence_id must be an integer or a string, not {sequence_id!r}")
            outputs = await self._predict_in_sequence(model, inputs, sequence_id, parameters)
        requested = {o.name for o in payload.outputs or []}
        unknown = requested - set(outputs)
        if unknown:
            raise F.RequestError(f"unknown output(s) {sorted(unknown)}; the function's outputs are {sorted(outputs)}")
        return InferenceResponse(model_name=self.name, model_version=self.version, id=payload.id,
                                 outputs=F.encode_outputs(outputs, requested))

    async def _predict_in_sequence(self, model, inputs, sequence_id, parameters):
        start, end = _flag(parameters, "sequence_start"), _flag(parameters, "sequence_end")
        if self._sequence_pending >= self.options["max_queue"]:
            self.metrics.rejected.labels(self.name, "queue_full").inc()
            raise F.RequestError(f"model '{self.name}': {self._sequence_pending} sequence requests are queued "
                                 f"(the limit); retry after {self.options['retry_after_s']} s", 503)
        self._sequence_pending += 1
        try:
            async with self.sequences.use(sequence_id, start, end, model.make_state) as state:
                work = asyncio.get_running_loop().run_in_executor(self.executor, model.predict, inputs, state)
                try:
                    result = await asyncio.shield(work)
                except asyncio.CancelledError:
                    # The client went away: hold the sequence until its state is out of use,
                    # so the next request of the sequence never meets it mid-prediction.
                    await asyncio.wait([work])
                    raise
        finally:
            self._sequence_pending -= 1
        return result


def _parameters(parameters):
    if parameters is None:
        return {}
    return parameters.model_dump(exclude_none=True)


def _flag(parameters, key):
    value = parameters.get(key, False)
    if isinstance(value, str):
        return value.lower() in ("1", "true", "yes")
    return bool(value)
