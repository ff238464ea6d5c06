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

The finder (coremlrt_import_hook.py, shared with the COREMLRT_COREAI hook) removes itself once
coremltools is imported. This file uses only the standard library so that it stays cheap and
works before anything else is importable.
"""

import sys

from coremlrt_import_hook import AfterImportFinder

ENV_VAR = "COREMLRT_COREMLTOOLS"


def _libcoremlpython():
    from coremlrt.coremltools_backend import libcoremlpython_module
    return libcoremlpython_module()


def _after_import(name, module):
    try:
        from coremlrt.coremltools_backend import _finish_hook_install
    except ImportError as exc:  # a broken coremlrt must not break `import coremltools`
        import warnings
        warnings.warn(f"{ENV_VAR} is set but coremlrt cannot be imported: {exc}", RuntimeWarning)
        return
    _finish_hook_install()


FINDER = AfterImportFinder(("coremltools",), _after_import,
                           stand_ins={"coremltools.libcoremlpython": _libcoremlpython})


def install():
    """Arranges for coremlrt to back coremltools once it is imported (idempotent)."""
    if "coremltools" in sys.modules:  # too late for the finder: patch the loaded package now
        from coremlrt.coremltools_backend import _finish_hook_install
        _finish_hook_install()
    else:
        FINDER.install()


def uninstall():
    FINDER.uninstall()
