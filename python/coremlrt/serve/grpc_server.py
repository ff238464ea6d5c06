"""The Open Inference Protocol's gRPC service (``inference.GRPCInferenceService``) on grpc.aio,
with the messages of protocol/grpc_inference.proto.

Tensors: ``raw_input_contents`` (tritonclient's default) are handed on as bytes (viewed by
``np.frombuffer``); typed ``contents`` are read from the field of the input's datatype. An
input given both ways, contents in a field that is not its datatype's, or raw contents that do
not pair one to one with the inputs are refused (400 / INVALID_ARGUMENT). Answers carry every
output in ``raw_output_contents``, as Triton answers.

A message that does not parse gets INVALID_ARGUMENT naming the parse error (grpcio alone
answers UNKNOWN). Failures map to gRPC codes through errors.py, as REST's statuses do; a 4xx is
logged as one line, a 5xx with its traceback.
"""

import asyncio
import logging
import time

import grpc
import numpy as np

from .errors import RequestError, classify, grpc_code
from .features import Tensor
from .protocol import grpc_inference_pb2 as pb
from .rest_routes import check_admin, server_metadata
from .served_model import VERSION, InferRequest

logger = logging.getLogger("coremlrt.serve")

SERVICE = "inference.GRPCInferenceService"

# Datatype -> the InferTensorContents field that carries it.
CONTENTS_FIELDS = {"BOOL": "bool_contents", "INT8": "int_contents", "INT16": "int_contents",
                   "INT32": "int_contents", "INT64": "int64_contents", "UINT8": "uint_contents",
                   "UINT16": "uint_contents", "UINT32": "uint_contents", "UINT64": "uint64_contents",
                   "FP32": "fp32_contents", "FP64": "fp64_contents", "BYTES": "bytes_contents"}
_ALL_CONTENTS = sorted(set(CONTENTS_FIELDS.values()))

# Requests of one stream in flight at once (answers still go back in order).
STREAM_WINDOW = 64


class _Malformed:
    def __init__(self, message):
        self.message = message


def _parser(message_type):
    def parse(data):
        try:
            return message_type.FromString(data)
        except Exception as exc:  # noqa: BLE001 - any parse failure is the client's message
            return _Malformed(f"{type(exc).__name__}: {exc}")
    return parse


def _parameters(field):
    out = {}
    for key, value in field.items():
        which = value.WhichOneof("parameter_choice")
        out[key] = getattr(value, which) if which else None
    return out


def _set_parameter(target, value):
    if isinstance(value, bool):
        target.bool_param = value
    elif isinstance(value, int):
        if value >= 1 << 63:
            target.uint64_param = value
        else:
            target.int64_param = value
    elif isinstance(value, float):
        target.double_param = value
    else:
        target.string_param = str(value)


def to_infer_request(request, arrived):
    raw = request.raw_input_contents
    if raw and len(raw) != len(request.inputs):
        raise RequestError(f"{len(raw)} raw_input_contents for {len(request.inputs)} inputs: each input needs one")
    tensors = []
    for index, item in enumerate(request.inputs):
        if raw:
            if item.HasField("contents") and any(len(getattr(item.contents, f)) for f in _ALL_CONTENTS):
                raise RequestError(f"input '{item.name}' has both raw_input_contents and contents")
            data = raw[index]
        else:
            field = CONTENTS_FIELDS.get(item.datatype)
            if field is None:
                raise RequestError(f"input '{item.name}': datatype {item.datatype} travels only as "
                                   f"raw_input_contents")
            others = [f for f in _ALL_CONTENTS if f != field and len(getattr(item.contents, f))]
            if others:
                raise RequestError(f"input '{item.name}' ({item.datatype}) has values in {others}; they belong "
                                   f"in {field}")
            values = getattr(item.contents, field)
            data = list(values) if field == "bytes_contents" else np.array(values)
        tensors.append(Tensor(item.name, item.datatype, list(item.shape), data))
    outputs = {}
    for item in request.outputs if len(request.outputs) else ():
        if item.name in outputs:
            raise RequestError(f"output '{item.name}' is requested twice")
        count = _parameters(item.parameters).get("classification", 0)
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            raise RequestError(f"output '{item.name}': classification must be a non-negative integer")
        outputs[item.name] = count
    parameters = _parameters(request.parameters) if len(request.parameters) else {}
    return InferRequest(request.model_name, request.id, parameters, tensors, outputs, arrived)


def to_infer_response(model_name, request_id, outputs):
    response = pb.ModelInferResponse(model_name=model_name, model_version=VERSION, id=request_id)
    for output in outputs:
        response.outputs.add(name=output.name, datatype=output.datatype, shape=output.shape)
        response.raw_output_contents.append(output.raw())
    return response


class Service:
    def __init__(self, repository, admin_token=None):
        self.repository, self.admin_token = repository, admin_token

    async def _fail(self, context, exc):
        status, message, traceback = classify(exc, self.repository.paths)
        if traceback:
            logger.error("gRPC request failed: %s", message, exc_info=exc)
        else:
            logger.info("gRPC request refused (%s): %s", grpc_code(status).name, message)
        await context.abort(grpc_code(status), message)

    async def ServerLive(self, request, context):
        return pb.ServerLiveResponse(live=True)

    async def ServerReady(self, request, context):
        return pb.ServerReadyResponse(ready=True)

    async def ModelReady(self, request, context):
        # An unknown model is not ready (tritonclient's is_model_ready returns False), as Triton answers.
        model = self.repository.models.get(request.name)
        return pb.ModelReadyResponse(ready=model is not None and model.ready and request.version in ("", VERSION))

    async def ServerMetadata(self, request, context):
        meta = server_metadata(self.admin_token)
        return pb.ServerMetadataResponse(name=meta["name"], version=meta["version"], extensions=meta["extensions"])

    async def ModelMetadata(self, request, context):
        meta = self.repository.get(request.name, request.version).metadata()
        response = pb.ModelMetadataResponse(name=meta["name"], versions=meta["versions"], platform=meta["platform"])
        for field, tensors in (("inputs", meta["inputs"]), ("outputs", meta["outputs"])):
            for tensor in tensors:
                entry = getattr(response, field).add(name=tensor["name"], datatype=tensor["datatype"],
                                                     shape=tensor["shape"])
                for key, value in tensor.get("parameters", {}).items():
                    _set_parameter(entry.parameters[key], value)
        for key, value in meta["parameters"].items():
            _set_parameter(response.parameters[key], value)
        return response

    async def ModelConfig(self, request, context):
        from google.protobuf import json_format

        config = self.repository.get(request.name, request.version).config()
        return pb.ModelConfigResponse(config=json_format.ParseDict(config, pb.ModelConfig()))

    async def ModelStatistics(self, request, context):
        from google.protobuf import json_format

        if request.name:
            models = [self.repository.get(request.name, request.version)]
        else:
            models = list(self.repository.models.values())
        return json_format.ParseDict({"model_stats": [m.stats.as_dict() for m in models]},
                                     pb.ModelStatisticsResponse())

    async def ModelInfer(self, request, context):
        arrived = time.perf_counter()
        model = self.repository.get(request.model_name, request.model_version)
        outputs = await model.infer(to_infer_request(request, arrived))
        return to_infer_response(model.name, request.id, outputs)

    async def ModelStreamInfer(self, requests, context):
        """Answers in request order, one per request: an answer or an error message. Up to
        STREAM_WINDOW requests run at once; requests of one sequence keep their order (each
        waits for its sequence's lock in arrival order)."""
        pending = asyncio.Queue(STREAM_WINDOW)

        async def one(request):
            arrived = time.perf_counter()
            try:
                if isinstance(request, _Malformed):
                    raise RequestError(f"malformed request message: {request.message}")
                model = self.repository.get(request.model_name, request.model_version)
                outputs = await model.infer(to_infer_request(request, arrived))
                return pb.ModelStreamInferResponse(infer_response=to_infer_response(model.name, request.id, outputs))
            except Exception as exc:  # noqa: BLE001 - this request's answer; the stream goes on
                status, message, traceback = classify(exc, self.repository.paths)
                if traceback:
                    logger.error("gRPC stream request failed: %s", message, exc_info=exc)
                else:
                    logger.info("gRPC stream request refused (%s): %s", grpc_code(status).name, message)
                answer = pb.ModelInferResponse(model_name=getattr(request, "model_name", ""),
                                               id=getattr(request, "id", ""))
                return pb.ModelStreamInferResponse(error_message=message, infer_response=answer)

        async def read():
            try:
                async for request in requests:
                    await pending.put(asyncio.ensure_future(one(request)))
            finally:
                await pending.put(None)

        reader = asyncio.ensure_future(read())
        try:
            while True:
                task = await pending.get()
                if task is None:
                    break
                yield await task
        finally:
            reader.cancel()

    async def RepositoryIndex(self, request, context):
        response = pb.RepositoryIndexResponse()
        for entry in self.repository.index(request.ready):
            response.models.add(**entry)
        return response

    def _authorize(self, context):
        given = dict(context.invocation_metadata() or ()).get("authorization")
        check_admin(self.admin_token, given)

    async def RepositoryModelLoad(self, request, context):
        self._authorize(context)
        await self.repository.load(request.model_name)
        return pb.RepositoryModelLoadResponse()

    async def RepositoryModelUnload(self, request, context):
        self._authorize(context)
        await self.repository.unload(request.model_name)
        return pb.RepositoryModelUnloadResponse()


_METHODS = {
    "ServerLive": (pb.ServerLiveRequest, False), "ServerReady": (pb.ServerReadyRequest, False),
    "ModelReady": (pb.ModelReadyRequest, False), "ServerMetadata": (pb.ServerMetadataRequest, False),
    "ModelMetadata": (pb.ModelMetadataRequest, False), "ModelConfig": (pb.ModelConfigRequest, False),
    "ModelStatistics": (pb.ModelStatisticsRequest, False), "ModelInfer": (pb.ModelInferRequest, False),
    "ModelStreamInfer": (pb.ModelInferRequest, True), "RepositoryIndex": (pb.RepositoryIndexRequest, False),
    "RepositoryModelLoad": (pb.RepositoryModelLoadRequest, False),
    "RepositoryModelUnload": (pb.RepositoryModelUnloadRequest, False),
}


def _serialize(message):
    return message.SerializeToString()


def handlers(service):
    def unary(method):
        async def handle(request, context):
            if isinstance(request, _Malformed):
                await context.abort(grpc.StatusCode.INVALID_ARGUMENT, f"malformed request message: {request.message}")
            try:
                return await method(request, context)
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - answered with its code
                if isinstance(exc, grpc.aio.AbortError):
                    raise
                await service._fail(context, exc)
        return handle

    table = {}
    for name, (request_type, streaming) in _METHODS.items():
        method = getattr(service, name)
        if streaming:
            table[name] = grpc.stream_stream_rpc_method_handler(method, request_deserializer=_parser(request_type),
                                                                response_serializer=_serialize)
        else:
            table[name] = grpc.unary_unary_rpc_method_handler(unary(method), request_deserializer=_parser(request_type),
                                                              response_serializer=_serialize)
    return grpc.method_handlers_generic_handler(SERVICE, table)


def make_server(repository, address, max_message_bytes, admin_token=None):
    server = grpc.aio.server(options=[("grpc.max_receive_message_length", max_message_bytes),
                                      ("grpc.max_send_message_length", -1)])
    server.add_generic_rpc_handlers((handlers(Service(repository, admin_token)),))
    if server.add_insecure_port(address) == 0:
        raise OSError(f"cannot listen on {address} (gRPC)")
    return server
