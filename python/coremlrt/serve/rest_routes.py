"""The Open Inference Protocol's REST routes (KServe V2, with Triton's extensions), added to a
:class:`~.http_app.Router` by :func:`add_routes`."""

import hmac

from .errors import RequestError
from .http_app import Response
from .rest_json import encode_response, load_json, parse_request
from .served_model import VERSION, InferRequest

SERVER_NAME = "coremlrt"

# The protocol extensions this server implements (server metadata lists exactly these;
# model_repository only when model control is on).
EXTENSIONS = ["binary_tensor_data", "classification", "model_configuration", "parameters", "sequence",
              "statistics"]


def server_metadata(admin):
    from .. import __version__

    return {"name": SERVER_NAME, "version": __version__,
            "extensions": EXTENSIONS + (["model_repository"] if admin else [])}


def check_admin(token, given):
    """Model control (load, unload) needs the server's admin token: off (403) without one."""
    if not token:
        raise RequestError("model control is off on this server (start it with --admin-token to turn it on)", 403)
    if not given or not hmac.compare_digest(given.encode() if isinstance(given, str) else given,
                                            b"Bearer " + token.encode()):
        raise RequestError("model control needs the header 'Authorization: Bearer <admin token>'", 401)


def add_routes(router, repository, admin_token=None):
    async def live(request):
        return Response(b"", 200)

    async def ready(request):
        return Response(b"", 200)

    async def metadata_server(request):
        return Response.json(server_metadata(admin_token))

    async def metadata_model(request):
        return Response.json(repository.get(request.params["model"], request.params.get("version")).metadata())

    async def model_ready(request):
        model = repository.get(request.params["model"], request.params.get("version"))
        if not model.ready:
            return Response.json({"error": f"model '{model.name}' is not ready: {model.reason}"}, 400)
        return Response(b"", 200)

    async def config(request):
        return Response.json(repository.get(request.params["model"], request.params.get("version")).config())

    async def stats(request):
        name = request.params.get("model")
        models = [repository.get(name, request.params.get("version"))] if name else repository.models.values()
        return Response.json({"model_stats": [m.stats.as_dict() for m in models]})

    async def infer(request):
        model = repository.get(request.params["model"], request.params.get("version"))
        tensors, parameters, outputs, binary_outputs, request_id = parse_request(
            request.body, request.headers.get(b"inference-header-content-length"))
        request.body = None  # JSON tensors are parsed: let the text go (binary ones are views of it)
        answer = await model.infer(InferRequest(model.name, request_id, parameters, tensors, outputs,
                                                request.arrived))
        body, headers = encode_response(model.name, VERSION, request_id, answer, binary_outputs)
        return Response(body, 200, headers)

    async def index(request):
        ready_only = False
        if request.body:
            document = load_json(request.body)
            ready_only = bool(isinstance(document, dict) and document.get("ready"))
        return Response.json(repository.index(ready_only))

    async def load(request):
        check_admin(admin_token, request.headers.get(b"authorization", b"").decode("latin-1"))
        await repository.load(request.params["model"])
        return Response(b"", 200)

    async def unload(request):
        check_admin(admin_token, request.headers.get(b"authorization", b"").decode("latin-1"))
        await repository.unload(request.params["model"])
        return Response(b"", 200)

    router.add("GET", "/v2/health/live", live)
    router.add("GET", "/v2/health/ready", ready)
    router.add("GET", "/v2", metadata_server)
    router.add("GET", "/v2/models/stats", stats)
    for prefix in ("/v2/models/{model}", "/v2/models/{model}/versions/{version}"):
        router.add("GET", prefix, metadata_model)
        router.add("GET", prefix + "/ready", model_ready)
        router.add("GET", prefix + "/config", config)
        router.add("GET", prefix + "/stats", stats)
        router.add("POST", prefix + "/infer", infer)
    router.add("POST", "/v2/repository/index", index)
    router.add("POST", "/v2/repository/models/{model}/load", load)
    router.add("POST", "/v2/repository/models/{model}/unload", unload)
