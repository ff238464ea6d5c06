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

The finder (coremlrt_import_hook.py, shared with the COREMLRT_COREMLTOOLS hook) removes itself
once both have been imported. This file uses only the standard library so that it stays cheap
and works before anything else is importable.
"""

import sys

from coremlrt_import_hook import AfterImportFinder

ENV_VAR = "COREMLRT_COREAI"


def _after_import(name, module):
    try:
        from coremlrt.coreai.runtime import _after_import as run_coremlrt
    except ImportError as exc:  # a broken coremlrt must not break `import coreai`
        import warnings
        warnings.warn(f"{ENV_VAR} is set but coremlrt cannot be imported: {exc}", RuntimeWarning)
        return
    try:
        run_coremlrt(name, module)
    except Exception as exc:  # noqa: BLE001 - leave coreai-core's runtime as it is, and say why
        import warnings
        warnings.warn(f"{ENV_VAR} is set but coremlrt was not installed into coreai.runtime: {exc}",
                      RuntimeWarning)


FINDER = AfterImportFinder(("coreai.runtime", "coreai.authoring.asset"), _after_import)


def install():
    """Arranges for coremlrt to back coreai.runtime once it is imported (idempotent)."""
    if "coreai.runtime" in sys.modules:  # too late for the finder: patch the loaded modules now
        from coremlrt.coreai.runtime import enable
        enable()
    else:
        FINDER.install()


def uninstall():
    FINDER.uninstall()
