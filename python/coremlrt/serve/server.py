"""Runs ``coremlrt serve``: the models (repository.py), the REST side (http_app.py with the
routes of rest_routes.py, on uvicorn), the gRPC side (grpc_server.py, grpc.aio) and Prometheus
metrics, in one process and one event loop, until SIGTERM or SIGINT.

On SIGTERM the server stops accepting connections, answers the requests in flight (up to
``SHUTDOWN_GRACE_S``), then exits 0.
"""

import asyncio
import contextlib
import json
import logging
import signal
import sys
import time

from .config import ServeConfig, discover_models

logger = logging.getLogger("coremlrt.serve")

SHUTDOWN_GRACE_S = 30.0


class _JsonFormatter(logging.Formatter):
    def format(self, record):
        entry = {"time": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created)),
                 "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        if record.exc_info:
            entry["traceback"] = self.formatException(record.exc_info)
        return json.dumps(entry)


def configure_logging(log_format):
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_JsonFormatter() if log_format == "json" else
                         logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("coremlrt")
    root.handlers[:] = [handler]
    root.setLevel(logging.INFO)
    root.propagate = False


def build_app(repository, config, extra_routes=()):
    """The ASGI application: the protocol's routes, then ``extra_routes`` (callables given the
    router: where another API adds its routes)."""
    from .http_app import App, Router
    from .rest_routes import add_routes

    router = Router()
    add_routes(router, repository, config.admin_token)
    for add in extra_routes:
        add(router, repository)
    return App(router, config.max_request_bytes, repository.paths)


def _uvicorn_server(app, config):
    import uvicorn

    class Server(uvicorn.Server):
        @contextlib.contextmanager
        def capture_signals(self):  # serve() below handles SIGTERM / SIGINT for both transports
            yield

    settings = uvicorn.Config(app, host=config.host, port=config.http_port, loop="none", lifespan="off",
                              access_log=False, log_level="warning", server_header=False,
                              timeout_graceful_shutdown=SHUTDOWN_GRACE_S, h11_max_incomplete_event_size=1 << 20)
    return Server(settings)


async def serve(config: ServeConfig, models, extra_routes=()):
    """Serves ``models`` ({name: path}) until SIGINT/SIGTERM. Returns the exit status."""
    from prometheus_client import start_http_server

    from .grpc_server import make_server
    from .repository import Repository

    repository = Repository(models, config.runtime_options())
    failed = await repository.load_all()
    if failed and len(failed) == len(models) and not config.admin_token:
        for name in failed:
            logger.error("model '%s' cannot be served: %s", name, repository.models[name].reason)
        logger.error("no model could be loaded; nothing to serve")
        return 1
    http = _uvicorn_server(build_app(repository, config, extra_routes), config)
    grpc_server = make_server(repository, f"{config.host}:{config.grpc_port}", config.max_request_bytes,
                              config.admin_token)
    metrics_server, metrics_thread = start_http_server(config.metrics_port, addr=config.host)
    await grpc_server.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, stop.set)
    http_task = asyncio.ensure_future(http.serve())
    logger.info("serving %s on http://%s:%d (REST), %s:%d (gRPC), metrics on :%d%s", sorted(models), config.host,
                config.http_port, config.host, config.grpc_port, config.metrics_port,
                f"; not ready: {failed}" if failed else "")
    stopped = asyncio.ensure_future(stop.wait())
    await asyncio.wait([stopped, http_task], return_when=asyncio.FIRST_COMPLETED)
    if http_task.done() and http_task.exception() is not None:
        await grpc_server.stop(0)
        raise http_task.exception()
    if http_task.done() and not http.started:
        await grpc_server.stop(0)
        raise OSError(f"cannot listen on {config.host}:{config.http_port} (REST)")
    logger.info("shutting down: answering the requests in flight")
    http.should_exit = True
    await asyncio.gather(grpc_server.stop(SHUTDOWN_GRACE_S), http_task, return_exceptions=True)
    metrics_server.shutdown()
    await repository.close()
    return 0


def main(path, config: ServeConfig, extra_routes=()):
    config.check()
    models = discover_models(path)
    configure_logging(config.log_format)
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass
    return asyncio.run(serve(config, models, extra_routes))


__all__ = ["build_app", "main", "serve"]
