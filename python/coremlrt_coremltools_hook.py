"""COREMLRT_COREMLTOOLS=1: coremltools' MLModel predicts through coremlrt in every process.

``coremlrt_coremltools.pth`` (installed next to this file in site-packages) runs, at every
interpreter start::

    import os; os.environ.get("COREMLRT_COREMLTOOLS") == "1" and __import__(...).install()

so with the variable unset nothing is imported. With it set, install() only puts a small
finder at the front of ``sys.meta_path``; neither coremlrt nor coremltools is imported until
the program itself imports coremltools (importing coremltools costs seconds, and most
processes of an environment never do). Then the finder acts on exactly two names:

* ``coremltools`` -- it lets the normal finders locate the package and, once the package has
  finished importing, calls ``coremlrt.coremltools_backend`` to check the coremltools version
  and let ``make_state``, ``compile_model`` and ``CompiledMLModel`` past their macOS checks
  (see enable() there);
* ``coremltools.libcoremlpython`` -- the macOS-only extension, which coremltools imports
  while it loads: the finder supplies coremlrt's stand-in module, so every coremltools module
  binds our proxies (``_MLModelProxy``, the compute-device, compute-plan and asset proxies)
  at import time, as it binds Apple's on macOS.

The finder removes itself once coremltools is imported. This file uses only the standard
library so that it stays cheap and works before anything else is importable.
"""

import sys

ENV_VAR = "COREMLRT_COREMLTOOLS"


class _Finder:
    def find_spec(self, name, path=None, target=None):
        if name == "coremltools.libcoremlpython":
            from importlib.machinery import ModuleSpec
            return ModuleSpec(name, _StandInLoader())
        if name != "coremltools":
            return None
        for finder in sys.meta_path:  # the package itself, found as it would be without us
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None:
                    spec.loader = _EnableAfterImport(spec.loader, self)
                return spec
        return None


class _StandInLoader:
    def create_module(self, spec):
        from coremlrt.coremltools_backend import libcoremlpython_module
        return libcoremlpython_module()

    def exec_module(self, module):
        pass


class _EnableAfterImport:
    """Wraps the real loader of the coremltools package; runs the backend after it."""

    def __init__(self, loader, finder):
        self._loader = loader
        self._finder = finder

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        # coremltools sees its real loader while it runs, and keeps it afterwards.
        module.__loader__ = module.__spec__.loader = self._loader
        self._loader.exec_module(module)
        uninstall(self._finder)
        try:
            from coremlrt.coremltools_backend import _finish_hook_install
        except ImportError as exc:  # a broken coremlrt must not break `import coremltools`
            import warnings
            warnings.warn(f"{ENV_VAR} is set but coremlrt cannot be imported: {exc}", RuntimeWarning)
            return
        _finish_hook_install()

    def __getattr__(self, name):  # anything else a loader is asked (get_code, is_package, ...)
        return getattr(self._loader, name)


def install():
    """Arranges for coremlrt to back coremltools once it is imported (idempotent)."""
    if "coremltools" in sys.modules:  # too late for the finder: patch the loaded package now
        from coremlrt.coremltools_backend import _finish_hook_install
        _finish_hook_install()
    elif not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.insert(0, _Finder())


def uninstall(finder=None):
    sys.meta_path[:] = [f for f in sys.meta_path if not (f is finder or finder is None and isinstance(f, _Finder))]
