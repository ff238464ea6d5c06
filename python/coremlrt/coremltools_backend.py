"""Run coremltools' own ``MLModel.predict`` on Linux, with coremlrt doing the prediction.

coremltools' ``MLModel`` predicts through ``_MLModelProxy``, a class from the macOS-only
extension ``coremltools.libcoremlpython``. On Linux that import fails, so ``MLModel`` can
convert and save but not predict. This module provides a compatible proxy backed by
:class:`coremlrt.MLModel` and installs it:

    import coremlrt.coremltools_backend
    coremlrt.coremltools_backend.enable()   # imports coremltools; works with coremltools 9.x
    import coremltools as ct
    ct.models.MLModel("model.mlpackage").predict({"x": x})

Or set ``COREMLRT_COREMLTOOLS=1`` to do this in every Python process (see
``coremlrt_coremltools_hook``). What stays unavailable on Linux: ``CompiledMLModel``,
``compile_model``, ``MLModelAsset``, compute devices and compute plans, and non-empty
``optimization_hints`` (coremltools itself refuses them before reaching the proxy, or the
proxy lacks the static helpers they call).
"""

import contextlib
import functools
import sys
import time
import types

import numpy as np

from ._core import Error
from .model import ComputeUnit, MLModel

_SHIM_NAME = "coremltools.libcoremlpython"
_CORE_ML_PREDICTION_ERROR = "Unable to compute the prediction using ML Program"
_SUPPORTED_MAJOR = 9  # written against coremltools 9.0 (5-argument proxy constructor, MLState API)


@contextlib.contextmanager
def _as_core_ml_prediction_error():
    """A failed prediction raises RuntimeError starting with Core ML's own words, as Apple's proxy
    does, so that code matching them works unchanged; coremlrt's message follows."""
    try:
        yield
    except Error as exc:
        raise RuntimeError(f"{_CORE_ML_PREDICTION_ERROR}: {exc}") from exc


def _as_core_ml_outputs(outputs):
    """Core ML has no rank-0 multi-arrays: a rank-0 program output reaches coremltools' predict
    on macOS as shape (1,)."""
    return {name: value.reshape(1) if isinstance(value, np.ndarray) and value.ndim == 0 else value
            for name, value in outputs.items()}


class _MLModelProxy:
    """Stands in for the ``_MLModelProxy`` of Apple's ``coremltools.libcoremlpython``.

    coremltools calls it as ``_MLModelProxy(path, compute_units_name, function_name,
    optimization_hints, asset)``. Inputs arrive as coremltools hands them over (numpy arrays,
    with float16 already turned into float32, Python scalars, PIL images) and outputs are
    returned as Core ML returns them: a dict of numpy arrays, float16 outputs as float32, and
    rank-0 outputs as shape (1,) (Core ML's multi-arrays have rank 1 or more; the native
    coremlrt API keeps the program's rank 0, see the README).
    """

    def __init__(self, path, compute_units="ALL", function_name="", optimization_hints=None, asset=None):
        if asset is not None:
            raise RuntimeError("coremlrt cannot load a model from an MLModelAsset; pass a model path")
        try:
            units = ComputeUnit[compute_units]
        except KeyError:
            raise RuntimeError(f"unknown compute units {compute_units!r}") from None
        # coremlrt runs everything on the CPU and has no use for the hints (which coremltools
        # only lets through on macOS 15 anyway); they are kept for inspection only.
        self.optimization_hints = dict(optimization_hints or {})
        start = time.perf_counter_ns()
        try:
            # "" selects the default function, as Core ML does: coremltools passes "" when the
            # caller gave no function_name, even for multifunction packages.
            self._model = MLModel(path, compute_units=units, function_name=function_name or None)
        except OSError as exc:  # the engine's own load errors are already RuntimeErrors
            raise RuntimeError(str(exc)) from exc
        self._load_ns = time.perf_counter_ns() - start
        self._last_predict_ns = None

    @staticmethod
    def maximum_supported_specification_version():
        # Mirrors kMaxSpecificationVersion in src/format/spec_reader.h: MLModel does not make a
        # proxy for newer specs and reports "specification has version N ..." at predict.
        return 10

    def predict(self, data, state=None):
        start = time.perf_counter_ns()
        with _as_core_ml_prediction_error():
            outputs = self._model.predict(data, state)
        self._last_predict_ns = time.perf_counter_ns() - start
        return _as_core_ml_outputs(outputs)

    def batchPredict(self, data):  # noqa: N802 - the name coremltools calls
        start = time.perf_counter_ns()
        with _as_core_ml_prediction_error():
            outputs = [self._model.predict(d) for d in data]
        self._last_predict_ns = time.perf_counter_ns() - start
        return [_as_core_ml_outputs(o) for o in outputs]

    def newState(self):  # noqa: N802 - the name coremltools calls
        # coremlrt.MLState already has read_state/write_state with coremltools' behaviour
        # (float16 states read back as float32); predict() takes it back as the state.
        return self._model.make_state()

    def get_compiled_model_path(self):
        # coremlrt runs the package (or .mlmodel file) directly and compiles nothing to disk, so
        # the "compiled model" is the path it loaded. Like Apple's .mlmodelc it is only valid
        # while the MLModel lives: a temporary package made by ct.convert is deleted with it.
        return self._model.package_path

    def get_load_duration_in_nano_seconds(self):
        return self._load_ns

    def get_last_predict_duration_in_nano_seconds(self):
        return self._last_predict_ns


def check_coremltools_version(version):
    """Raises RuntimeError unless ``version`` is a coremltools release this backend fits."""
    major = version.split(".")[0]
    if not (major.isdigit() and int(major) == _SUPPORTED_MAJOR):
        raise RuntimeError(
            f"coremlrt's coremltools backend works with coremltools {_SUPPORTED_MAJOR}.x (written "
            f"for 9.0), but coremltools {version} is installed; its _MLModelProxy interface may "
            f"differ. Install coremltools {_SUPPORTED_MAJOR}.x, or unset COREMLRT_COREMLTOOLS.")


def libcoremlpython_module():
    """A new module object to stand in for ``coremltools.libcoremlpython``.

    It offers only ``_MLModelProxy``; coremltools' imports of the other names
    (``_MLModelAssetProxy``, the compute-device proxies) fail as they do on stock Linux, and
    coremltools logs that those features are unavailable.
    """
    module = types.ModuleType(_SHIM_NAME, "coremlrt's stand-in for Apple's libcoremlpython")
    module._MLModelProxy = _MLModelProxy
    module.__coremlrt__ = True
    module.__file__ = __file__  # so coremltools' "cannot import name ..." messages point here
    return module


def _is_ours(module):
    return getattr(module, "__coremlrt__", False) is True


def _coremltools_modules():
    """The loaded coremltools modules that may hold their own ``_MLModelProxy`` reference."""
    return [(name, module) for name, module in list(sys.modules.items())
            if module is not None and (name == "coremltools" or name.startswith("coremltools."))
            and name != _SHIM_NAME]


_saved = {}  # what enable() replaced: "shim" -> (sys.modules entry, attribute), module name -> reference


def _make_state_without_os_check(original):
    """MLModel.make_state refuses to run unless on macOS 15+, *before* it looks at the proxy
    (coremltools 9.0, models/model.py). That check is about Apple's framework, which our proxy
    does not use, so for a model our proxy loaded we skip it and do what make_state does next;
    every other model keeps the original method. Nothing else (predict's checks, the
    _macos_version() seen by other callers) is changed."""

    @functools.wraps(original)
    def make_state(self):
        proxy = self.__proxy__
        if isinstance(proxy, _MLModelProxy):
            from coremltools.models.model import MLState
            return MLState(proxy.newState())
        return original(self)

    make_state._coremlrt_original = original
    return make_state


def enable():
    """Makes coremltools predict through coremlrt in this process (imports coremltools).

    Installs a ``coremltools.libcoremlpython`` module holding our ``_MLModelProxy``, points
    every already-imported coremltools module's own ``_MLModelProxy`` reference at it, and lets
    ``MLModel.make_state`` work for models our proxy loaded. Models created earlier keep the
    proxy they were created with (None on Linux): create them again after enable().
    Raises RuntimeError on a coremltools version whose proxy interface may differ.
    """
    import coremltools
    import coremltools.models.model as ct_model

    check_coremltools_version(coremltools.__version__)
    shim = sys.modules.get(_SHIM_NAME)
    if not _is_ours(shim):
        _saved.setdefault("shim", (shim, getattr(coremltools, "libcoremlpython", None)))
        shim = sys.modules[_SHIM_NAME] = libcoremlpython_module()
    coremltools.libcoremlpython = shim
    # Each coremltools module did its own `from ..libcoremlpython import _MLModelProxy` at import
    # time (model, _compiled_model, compute_device, compute_plan in 9.0), so rebind them all.
    for name, module in _coremltools_modules():
        current = vars(module).get("_MLModelProxy", _MLModelProxy)
        if current is not _MLModelProxy:
            _saved.setdefault(name, current)
            module._MLModelProxy = _MLModelProxy
    if not hasattr(ct_model.MLModel.make_state, "_coremlrt_original"):
        ct_model.MLModel.make_state = _make_state_without_os_check(ct_model.MLModel.make_state)


def disable():
    """Undoes enable() (and the COREMLRT_COREMLTOOLS hook): coremltools predicts as it would
    without coremlrt. Models created while enabled keep their coremlrt proxy."""
    coremltools = sys.modules.get("coremltools")
    if coremltools is None:
        return
    for name, module in _coremltools_modules():
        if vars(module).get("_MLModelProxy") is _MLModelProxy:
            # None is what coremltools binds when its import of the proxy fails.
            module._MLModelProxy = _saved.pop(name, None)
    shim, attribute = _saved.pop("shim", (None, None))
    if _is_ours(sys.modules.get(_SHIM_NAME)):
        if shim is None:
            del sys.modules[_SHIM_NAME]
        else:
            sys.modules[_SHIM_NAME] = shim
    if _is_ours(getattr(coremltools, "libcoremlpython", None)):
        if attribute is None:
            del coremltools.libcoremlpython
        else:
            coremltools.libcoremlpython = attribute
    ct_model = sys.modules.get("coremltools.models.model")
    original = getattr(getattr(ct_model, "MLModel", None), "make_state", None)
    if hasattr(original, "_coremlrt_original"):
        ct_model.MLModel.make_state = original._coremlrt_original


def enabled():
    """Whether coremltools would create coremlrt proxies now."""
    ct_model = sys.modules.get("coremltools.models.model")
    return getattr(ct_model, "_MLModelProxy", None) is _MLModelProxy


def _finish_hook_install():
    """Called by coremlrt_coremltools_hook once ``import coremltools`` has finished.

    During that import our stand-in module already served coremltools' own imports of the
    proxy; enable() now checks the version and patches make_state. On an unsupported version
    coremltools is left exactly as it is without coremlrt, with one warning saying why:
    failing the import would also break conversion, which needs no proxy.
    """
    try:
        enable()
    except Exception as exc:  # noqa: BLE001 - never break `import coremltools`
        disable()
        import warnings
        warnings.warn(f"COREMLRT_COREMLTOOLS is set but coremlrt was not installed into "
                      f"coremltools: {exc}", RuntimeWarning, stacklevel=2)


__all__ = ["check_coremltools_version", "disable", "enable", "enabled", "libcoremlpython_module"]
