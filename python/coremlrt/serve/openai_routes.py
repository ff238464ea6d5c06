"""The OpenAI-compatible API (coremlrt.llm.openai_service) under ``coremlrt serve``: an ASGI
middleware that answers /v1/models, /v1/completions and /v1/chat/completions and hands every
other request to the server it wraps. The service computes on worker threads, never on the
event loop; a streamed answer is read one server-sent event at a time, and a client that goes
away closes it (its sequence's slot is given back)."""

import asyncio
import logging

logger = logging.getLogger("mlserver.coremlrt")


class OpenAIRoutes:
    def __init__(self, app, service):
        self.app, self.service = app, service

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not self.service.handles(scope["path"]):
            return await self.app(scope, receive, send)
        chunks = []
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            chunks.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        reply = await asyncio.to_thread(self.service.handle, scope["method"], scope["path"], b"".join(chunks))
        headers = [(k.encode("latin-1"), v.encode("latin-1")) for k, v in reply.headers]
        if reply.stream is None:
            headers.append((b"content-length", str(len(reply.body)).encode()))
            await send({"type": "http.response.start", "status": reply.status, "headers": headers})
            await send({"type": "http.response.body", "body": reply.body})
            return
        events = reply.stream
        try:
            await send({"type": "http.response.start", "status": reply.status, "headers": headers})
            while True:
                event = await asyncio.to_thread(next, events, None)
                if event is None:
                    break
                await send({"type": "http.response.body", "body": event, "more_body": True})
            await send({"type": "http.response.body", "body": b""})
        finally:
            await asyncio.to_thread(events.close)


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
