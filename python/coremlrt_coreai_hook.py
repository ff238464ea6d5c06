"""COREMLRT_COREAI=1: coreai-core's runtime API (``coreai.runtime``) runs on coremlrt in every process.

``coremlrt_coreai.pth`` (installed next to this file in site-packages) runs, at every
interpreter start::

    import os; os.environ.get("COREMLRT_COREAI") == "1" and __import__(...).install()

so with the variable unset nothing is imported, as with COREMLRT_COREMLTOOLS
(python/coremlrt_coremltools_hook.py). With it set, install() only puts a small finder at the
front of ``sys.meta_path``; neither coremlrt nor coreai is imported until the program imports
coreai. The finder acts on two names, letting the normal finders locate each module and
running coremlrt after the module has executed:

* ``coreai.runtime`` -- coremlrt.coreai.runtime.enable() replaces its AIModel,
  InferenceFunction, NDArray and descriptor classes with coremlrt's, before any other module
  can bind them with ``from coreai.runtime import ...``;
* ``coreai.authoring.asset`` -- ``AIModelAsset.executable()`` loads the asset's folder with
  coremlrt instead of lowering it to .odix first. This module imports coreai.runtime while it
  runs, so it can be patched only once it has finished.

The finder removes itself once both have been imported. This file uses only the standard
library so that it stays cheap and works before anything else is importable.
"""

import sys

ENV_VAR = "COREMLRT_COREAI"
_WATCHED = ("coreai.runtime", "coreai.authoring.asset")


class _Finder:
    def find_spec(self, name, path=None, target=None):
        if name not in _WATCHED:
            return None
        for finder in sys.meta_path:  # the module itself, found as it would be without us
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _AfterImport(spec.loader, self)
                return spec
        return None


class _AfterImport:
    """Wraps the real loader of a watched module; runs coremlrt after it."""

    def __init__(self, loader, finder):
        self._loader = loader
        self._finder = finder

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        # The module sees its real loader while it runs, and keeps it afterwards.
        module.__loader__ = module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        if all(name in sys.modules for name in _WATCHED):
            uninstall(self._finder)
        try:
            from coremlrt.coreai.runtime import _after_import
        except ImportError as exc:  # a broken coremlrt must not break `import coreai`
            import warnings
            warnings.warn(f"{ENV_VAR} is set but coremlrt cannot be imported: {exc}", RuntimeWarning)
            return
        try:
            _after_import(module.__name__, module)
        except Exception as exc:  # noqa: BLE001 - leave coreai-core's runtime as it is, and say why
            import warnings
            warnings.warn(f"{ENV_VAR} is set but coremlrt was not installed into coreai.runtime: {exc}",
                          RuntimeWarning)

    def __getattr__(self, name):  # anything else a loader is asked (get_code, is_package, ...)
        return getattr(self._loader, name)


def install():
    """Arranges for coremlrt to back coreai.runtime once it is imported (idempotent)."""
    if "coreai.runtime" in sys.modules:  # too late for the finder: patch the loaded modules now
        from coremlrt.coreai.runtime import enable
        enable()
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def uninstall(finder=None):
    sys.meta_path[:] = [f for f in sys.meta_path if not (f is finder or finder is None and isinstance(f, _Finder))]
