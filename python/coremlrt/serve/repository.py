"""The served models, by name: loading a folder, the repository index, and (when the server
was given an admin token) loading and unloading models while it runs.

A folder loads model by model; one that fails is listed as UNAVAILABLE with its error (the
index and its metadata show it, the log says why) and the others serve. An unloaded model keeps
its path, so loading it again reads it afresh from there.
"""

import asyncio

from .errors import RequestError
from .served_model import VERSION, ServedModel


class Repository:
    def __init__(self, models, options):
        """``models``: {served name: path}."""
        self.options = options
        self.models = {name: ServedModel(name, path, options) for name, path in models.items()}
        self._locks = {name: asyncio.Lock() for name in models}
        # Paths a client must never see (errors.scrub): each model's path and its folder.
        self.paths = {path: name for name, path in models.items()}

    async def load_all(self):
        for model in self.models.values():
            await model.load()
        return [name for name, model in self.models.items() if not model.ready]

    def get(self, name, version=None):
        """The model named ``name``, ready or not (404 when there is none)."""
        model = self.models.get(name)
        if model is None:
            raise RequestError(f"unknown model '{name}'; the served models are {sorted(self.models)}", 404)
        if version not in (None, "", VERSION):
            raise RequestError(f"model '{name}' has no version '{version}' (its only version is '{VERSION}')", 404)
        return model

    def ready(self, name, version=None):
        model = self.get(name, version)
        if not model.ready:
            raise RequestError(f"model '{name}' is not ready: {model.reason}", 400 if model.state != "LOADING"
                               else 503)
        return model

    def index(self, ready_only=False):
        entries = []
        for name, model in sorted(self.models.items()):
            if ready_only and not model.ready:
                continue
            entry = {"name": name, "version": VERSION, "state": model.state}
            if model.reason:
                entry["reason"] = model.reason
            entries.append(entry)
        return entries

    async def load(self, name):
        model = self.get(name)
        async with self._locks[name]:
            if model.ready:
                await model.unload()  # Triton reloads a loaded model: the files may have changed
            if not await model.load():
                raise RequestError(f"model '{name}' failed to load: {model.reason}", 400)

    async def unload(self, name):
        model = self.get(name)
        async with self._locks[name]:
            if model.ready:
                await model.unload()

    async def close(self):
        for model in self.models.values():
            if model.ready:
                await model.unload()
