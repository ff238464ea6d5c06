"""One served model: its functions loaded, a batcher per stateless function, a table of live
sequences for stateful ones, its statistics, and what the protocol says about it (metadata,
Triton's model configuration).

A request reaches :meth:`ServedModel.infer` as an :class:`InferRequest` that a transport
(rest.py, grpc_server.py) built; every failure a client can cause is a
:class:`~.errors.RequestError` (or the engine's ``coremlrt.Error``), mapped to a status by
errors.py.

* request parameters ``function`` (a multifunction model's function; default: the model's
  default), ``sequence_id`` / ``sequence_start`` / ``sequence_end`` (stateful models,
  sequences.py);
* stateless requests go through the function's :class:`~.batching.Batcher`; stateful ones
  through the model's :class:`~.sequences.SequenceTable`, on the same worker threads.
"""

import asyncio
import concurrent.futures
import logging
import time

from ..model import MLModel
from . import features as F
from .batching import Batcher, batch_limit
from .errors import RequestError, classify, scrub
from .metrics import metrics
from .sequences import SequenceTable, sequence_key
from .stats import ModelStats

logger = logging.getLogger("coremlrt.serve")

VERSION = "1"  # one version per served model: the protocol's version fields say "1"

# Protocol datatype -> Triton's model-configuration enum name.
CONFIG_TYPES = {"BOOL": "TYPE_BOOL", "UINT8": "TYPE_UINT8", "UINT16": "TYPE_UINT16", "UINT32": "TYPE_UINT32",
                "UINT64": "TYPE_UINT64", "INT8": "TYPE_INT8", "INT16": "TYPE_INT16", "INT32": "TYPE_INT32",
                "INT64": "TYPE_INT64", "FP16": "TYPE_FP16", "FP32": "TYPE_FP32", "FP64": "TYPE_FP64",
                "BYTES": "TYPE_STRING"}


class InferRequest:
    """A request as the transports hand it over: ``outputs`` maps each requested output to its
    classification count (0: the tensor itself); empty asks for every output."""

    __slots__ = ("model", "id", "parameters", "inputs", "outputs", "arrived")

    def __init__(self, model, id, parameters, inputs, outputs, arrived):
        self.model, self.id, self.parameters = model, id, parameters
        self.inputs, self.outputs, self.arrived = inputs, outputs, arrived


class ServedModel:
    def __init__(self, name, path, options):
        self.name, self.path, self.options = name, path, options
        self.state = "UNAVAILABLE"
        self.reason = "not loaded"
        self.functions = {}
        self.batchers = {}
        self.sequences = None
        self.executor = None
        self.stats = ModelStats(name, VERSION)
        self.metrics = metrics()
        self._answered = self.metrics.requests.labels(name, "200")
        self._latency = self.metrics.latency.labels(name)

    @property
    def ready(self):
        return self.state == "READY"

    # Loading -----------------------------------------------------------------------------

    async def load(self):
        """Loads every function. A model that fails is kept, not ready, with the error as its
        reason (its metadata and the repository index show it); the caller goes on."""
        self.state, self.reason = "LOADING", ""
        loop = asyncio.get_running_loop()
        try:
            # Loading maps weights and may compile backend regions: off the event loop.
            default = await loop.run_in_executor(None, self._load_function, None)
            functions = {default.function_name: default}
            for function in default._description["functions"]:
                if function["name"] not in functions:
                    functions[function["name"]] = await loop.run_in_executor(None, self._load_function,
                                                                             function["name"])
        except Exception as exc:  # noqa: BLE001 - one model's failure must not stop the others
            self.state, self.reason = "UNAVAILABLE", scrub(str(exc) or type(exc).__name__, {self.path: self.name})
            logger.error("model '%s' (%s) failed to load: %s", self.name, self.path, exc)
            return False
        self.functions = functions
        self.default_function = default.function_name
        self.class_labels = [str(c) for c in default._model.class_labels] or None
        workers = self.options["workers"]
        self.executor = concurrent.futures.ThreadPoolExecutor(workers, thread_name_prefix=f"coremlrt-{self.name}")
        self.batchers = {}
        for name, model in self.functions.items():
            if not model._function["states"]:
                batcher = Batcher(self.name, model, self.executor, self.options, self.metrics)
                batcher.on_execution = self.stats.execution
                batcher.start()
                self.batchers[name] = batcher
        self.sequences = SequenceTable(self.name, self.options["max_sequences"], self.options["sequence_timeout_s"],
                                       self.options["retry_after_s"], self.metrics)
        self.sequences.start()
        self._sequence_pending = 0
        self.state, self.reason = "READY", ""
        logger.info("loaded model '%s' from %s: functions %s (default %s), merging %s, %d worker(s)", self.name,
                    self.path, sorted(self.functions), self.default_function,
                    sorted(n for n, b in self.batchers.items() if b.merge) or "none", workers)
        return True

    def _load_function(self, function_name):
        return MLModel(self.path, function_name=function_name, backend=self.options["backend"],
                       threads=self.options["threads"], concurrent_predictions=self.options["workers"])

    async def unload(self):
        for batcher in self.batchers.values():
            await batcher.stop()
        if self.sequences is not None:
            await self.sequences.stop()
        if self.executor is not None:
            self.executor.shutdown(wait=False)
        self.functions, self.batchers, self.sequences, self.executor = {}, {}, None, None
        self.state, self.reason = "UNAVAILABLE", "unloaded"

    # What the protocol says about the model -----------------------------------------------

    def _default(self):
        return self.functions[self.default_function]._function

    def metadata(self):
        """The model-metadata answer (REST JSON form). A model that is not ready answers with
        its state and reason in ``parameters`` and no tensors."""
        if not self.ready:
            return {"name": self.name, "versions": [VERSION], "platform": "coremlrt", "inputs": [], "outputs": [],
                    "parameters": {"state": self.state, "reason": self.reason}}
        function = self._default()
        parameters = {"functions": ",".join(sorted(self.functions)), "default_function": self.default_function,
                      "stateful": ",".join(sorted(n for n, m in self.functions.items() if m._function["states"]))}
        return {"name": self.name, "versions": [VERSION], "platform": "coremlrt",
                "inputs": [_tensor_metadata(f) for f in function["inputs"]],
                "outputs": [_tensor_metadata(f, output=True) for f in function["outputs"]],
                "parameters": parameters}

    def config(self):
        """Triton's model configuration of the default function (REST JSON form): a function
        whose requests merge on a flexible first dimension declares ``max_batch_size`` and
        leaves that dimension out of ``dims``, as Triton's clients expect; a stateful one has
        ``sequence_batching``; inputs with a default are ``optional``."""
        if not self.ready:
            raise RequestError(f"model '{self.name}' is not ready: {self.reason}", 400)
        function = self._default()
        batched = self.default_function in self.batchers and self.batchers[self.default_function].merge
        # The most rows one request may bring: the first dimension's upper bound (int32's
        # largest where it has none).
        max_batch = min(batch_limit(function), (1 << 31) - 1) if batched else 0

        def dims(feature, output=False):
            shape = F.metadata_shape(feature)
            return shape[1:] if batched and len(shape) > 1 else shape

        config = {
            "name": self.name, "platform": "coremlrt", "backend": "coremlrt", "max_batch_size": max_batch,
            "input": [dict({"name": f["name"], "data_type": CONFIG_TYPES.get(F.datatype(f), "TYPE_STRING"),
                            "dims": dims(f)}, **({"optional": True} if f["optional"] else {}))
                      for f in function["inputs"]],
            "output": [{"name": f["name"], "data_type": CONFIG_TYPES.get(F.datatype(f, output=True), "TYPE_STRING"),
                        "dims": dims(f, output=True)} for f in function["outputs"]],
            "parameters": {"default_function": {"string_value": self.default_function},
                           "functions": {"string_value": ",".join(sorted(self.functions))}},
            "model_transaction_policy": {"decoupled": False},
        }
        if function["states"]:
            config["sequence_batching"] = {
                "max_sequence_idle_microseconds": int(self.options["sequence_timeout_s"] * 1e6)}
        elif batched:
            config["dynamic_batching"] = {"max_queue_delay_microseconds": int(self.options["max_wait_ms"] * 1000)}
        return config

    # Inference ---------------------------------------------------------------------------

    async def infer(self, request: InferRequest):
        """[features.Output] for a request; statistics and metrics counted either way."""
        try:
            outputs = await self._infer(request)
        except Exception as exc:
            self.stats.failure(time.perf_counter() - request.arrived)
            status = classify(exc)[0]
            self.metrics.requests.labels(self.name, str(status)).inc()
            raise
        self._answered.inc()
        self._latency.observe(time.perf_counter() - request.arrived)
        return outputs

    async def _infer(self, request):
        if not self.ready:
            raise RequestError(f"model '{self.name}' is not ready: {self.reason}", 503 if self.state == "LOADING"
                               else 400)
        parameters = request.parameters
        function_name = (parameters.get("function") if parameters else None) or self.default_function
        if not isinstance(function_name, str) or function_name not in self.functions:
            raise RequestError(f"model '{self.name}' has no function {function_name!r}; its functions are "
                               f"{sorted(self.functions)}", 404)
        model = self.functions[function_name]
        began = time.perf_counter()
        inputs = F.decode_inputs(request.inputs, model._inputs)
        output_names = [f["name"] for f in model._function["outputs"]]
        unknown = [name for name in request.outputs if name not in output_names]
        if unknown:
            raise RequestError(f"unknown output(s) {sorted(unknown)}; the function's outputs are "
                               f"{sorted(output_names)}")
        decoded = time.perf_counter()
        key = sequence_key(parameters.get("sequence_id")) if parameters else None
        if key is None:
            if model._function["states"]:
                raise RequestError(f"function '{function_name}' of model '{self.name}' is stateful: a request "
                                   f"needs a sequence_id parameter (and sequence_start=true to begin)")
            if parameters and (_flag(parameters, "sequence_start") or _flag(parameters, "sequence_end")):
                raise RequestError("sequence_start / sequence_end without a sequence_id")
            result, (started, seconds) = await self.batchers[function_name].submit(inputs)
        else:
            if not model._function["states"]:
                raise RequestError(f"function '{function_name}' of model '{self.name}' keeps no state; "
                                   f"drop the sequence_id parameter")
            result, (started, seconds) = await self._infer_in_sequence(model, inputs, key, parameters)
        predicted = time.perf_counter()
        outputs = F.encode_outputs(result, request.outputs or None, self.class_labels)
        done = time.perf_counter()
        self.stats.success(done - request.arrived, started - decoded, decoded - began, seconds, done - predicted)
        return outputs

    async def _infer_in_sequence(self, model, inputs, key, parameters):
        start, end = _flag(parameters, "sequence_start"), _flag(parameters, "sequence_end")
        if self._sequence_pending >= self.options["max_queue"]:
            self.metrics.rejected.labels(self.name, "queue_full").inc()
            retry = self.options["retry_after_s"]
            raise RequestError(f"model '{self.name}': {self._sequence_pending} sequence requests are queued "
                               f"(the limit); retry after {retry} s", 503, {"Retry-After": str(retry)})
        self._sequence_pending += 1
        try:
            async with self.sequences.use(key, start, end, model.make_state) as state:
                work = asyncio.get_running_loop().run_in_executor(self.executor, _timed, model.predict, inputs, state,
                                                                  self.stats)
                try:
                    return await asyncio.shield(work)
                except asyncio.CancelledError:
                    # The client went away: hold the sequence until its state is out of use,
                    # so the next request of the sequence never meets it mid-prediction.
                    await asyncio.wait([work])
                    raise
        finally:
            self._sequence_pending -= 1


def _timed(predict, inputs, state, stats):
    start = time.perf_counter()
    result = predict(inputs, state)
    seconds = time.perf_counter() - start
    stats.execution(1, seconds)
    return result, (start, seconds)


def _tensor_metadata(feature, output=False):
    entry = {"name": feature["name"], "datatype": F.datatype(feature, output), "shape": F.metadata_shape(feature)}
    if not output and feature["optional"]:
        entry["parameters"] = {"optional": True}
        if feature.get("default_value") is not None:
            entry["parameters"]["default_value"] = feature["default_value"]
    return entry


def _flag(parameters, key):
    value = parameters.get(key, False)
    if isinstance(value, str):
        return value.lower() in ("1", "true", "yes")
    return bool(value)


__all__ = ["InferRequest", "ServedModel", "VERSION"]
