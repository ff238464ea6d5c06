"""One loaded model per process for each model path, content and load options.

Dask and Ray workers receive an MLModel as its path and load options (``MLModel.__reduce__``
in model.py); every task that unpickles it, and every Ray actor, asks this cache (through
``coremlrt.model.cached_model``), so a worker process loads a model once. The cache knows
nothing of MLModel: the caller hands it the load to run on a miss, so model.py may use it
without the two modules importing each other. The key holds a fingerprint of the files' bytes, so a model
rewritten at the same path (a new conversion saved over the old one) is loaded afresh
instead of being served stale. Hashing the bytes is paid once per file version: it is
remembered under the files' (size, mtime) signature, which is re-read on every lookup.
"""

import atexit
import hashlib
import os
import threading

from typing import Any, Callable, Dict, Tuple

_MAX_MODELS = 8  # least recently used models beyond this are dropped (their memory is freed)

_lock = threading.Lock()
_models: Dict[Tuple[Any, ...], Any] = {}  # (path, fingerprint, options) -> model, least recently used first
_fingerprints: Dict[str, Tuple[Any, str]] = {}  # path -> (signature, fingerprint)
_loads = 0          # models this process has loaded through the cache


def _files(path):
    if os.path.isdir(path):
        for root, dirs, names in os.walk(path):
            dirs.sort()
            for name in sorted(names):
                yield os.path.join(root, name)
    else:
        yield path


def _signature(path):
    """(relative name, size, mtime) of every file of the model: cheap to take on each lookup."""
    result = []
    for file in _files(path):
        stat = os.stat(file)
        result.append((os.path.relpath(file, path) if file != path else "", stat.st_size, stat.st_mtime_ns))
    return tuple(result)


def fingerprint(path):
    """sha256 over the model's file names and bytes (an .mlpackage folder or an .mlmodel file)."""
    path = os.path.abspath(path)
    signature = _signature(path)
    with _lock:
        known = _fingerprints.get(path)
    if known is not None and known[0] == signature:
        return known[1]
    digest = hashlib.sha256()
    for file in _files(path):
        digest.update(os.path.relpath(file, path).encode() + b"\0")
        with open(file, "rb") as stream:
            for block in iter(lambda: stream.read(1 << 20), b""):
                digest.update(block)
    value = digest.hexdigest()
    with _lock:
        _fingerprints[path] = (signature, value)
    return value


def cached(path, options_key, load: Callable[[], Any]):
    """The process's model for this path (absolute, existing), its content and ``options_key``
    (hashable: the load options), made by ``load()`` on first use."""
    key = (path, fingerprint(path), options_key)
    with _lock:
        model = _models.pop(key, None)
        if model is not None:
            _models[key] = model  # most recently used last
            return model
    # Loading runs outside the lock (it releases the GIL and may take a while); two threads
    # racing on a first load both load, and one of the models is kept.
    model = load()
    global _loads
    with _lock:
        _loads += 1
        model = _models.setdefault(key, model)
        while len(_models) > _MAX_MODELS:
            _models.pop(next(iter(_models)))
    return model


def stats():
    """{"models": models held now, "loads": models loaded through the cache so far}."""
    with _lock:
        return {"models": len(_models), "loads": _loads}


def clear():
    """Forgets every cached model (they are freed once no caller holds them)."""
    with _lock:
        _models.clear()
        _fingerprints.clear()


# Models held here would otherwise live until the extension module itself is torn down,
# which nanobind reports as leaked instances; let them go while the interpreter still runs.
atexit.register(clear)
