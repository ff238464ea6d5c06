"""The OpenAI-compatible API (coremlrt.llm.openai_service) under ``coremlrt serve``: routes for
/v1/models, /v1/completions and /v1/chat/completions added to the server's router
(``server.main(..., extra_routes=[openai_routes(path, config)])``, docs/design/serving.md,
"Adding routes"). The service computes on worker threads, never on the event loop; a streamed
answer is read one server-sent event at a time, and a client that goes away closes it (its
sequence's slot is given back)."""

import asyncio
import logging

from .config import discover_models

logger = logging.getLogger("coremlrt.serve")

ROUTES = (("GET", "/v1/models"), ("GET", "/v1/models/{model}"), ("POST", "/v1/completions"),
          ("POST", "/v1/chat/completions"))


def language_models(models, tokenizer=None, **load_options):
    """{name: LanguageModel} for the served models that are language models coremlrt.llm
    recognises; `tokenizer` (a folder) applies to each, else the folder beside each model."""
    from ..llm import LanguageModel
    from ..llm.layout import plan
    from ..llm.tokenizer import find_tokenizer
    from ..model import Error

    found = {}
    for name, path in models.items():
        try:
            plan(path)
        except Error:
            continue
        found[name] = LanguageModel(path, tokenizer=tokenizer or find_tokenizer(path), **load_options)
        logger.info("serving %s under the OpenAI API (/v1/completions, /v1/chat/completions)%s", name,
                    "" if found[name].tokenizer else " with token-id prompts only (no tokenizer.json)")
    return found


def openai_routes(path, config):
    """An ``extra_routes`` callable: loads the language models among the models at `path` and
    adds the OpenAI routes when there are any."""

    def add(router, repository):
        from ..llm.openai_service import OpenAIService
        from .http_app import Response, StreamingResponse

        models = language_models(discover_models(path), config.tokenizer, backend=config.backend,
                                 threads=config.threads)
        if not models:
            return
        service = OpenAIService(models, config.max_sequences, config.retry_after_s)

        async def handle(request):
            reply = await asyncio.to_thread(service.handle, request.method, request.path, request.body)
            headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers]
            if reply.stream is None:
                return Response(reply.body, reply.status, headers)
            return StreamingResponse(_events(reply.stream), reply.status, headers, content_type=None)

        for method, pattern in ROUTES:
            router.add(method, pattern, handle)

    return add


async def _events(stream):
    try:
        while True:
            event = await asyncio.to_thread(next, stream, None)
            if event is None:
                return
            yield event
    finally:
        await asyncio.to_thread(stream.close)
