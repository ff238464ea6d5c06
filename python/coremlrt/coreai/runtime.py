"""coremlrt's stand-in for coreai-core's runtime API, ``coreai.runtime``.

With ``COREMLRT_COREAI=1`` in the environment (``coremlrt_coreai.pth`` and
``python/coremlrt_coreai_hook.py``), or after :func:`enable`, existing Core AI code runs its
models on coremlrt unchanged::

    from coreai.authoring import AIModelAsset
    from coreai.runtime import NDArray

    async with AIModelAsset.load("m.aimodel").executable() as model:
        outputs = await model.load_function("main")({"x": NDArray(x)})

The classes here mirror what user code touches in coreai-core 1.0.0b3 (``AIModel``,
``InferenceFunction``, ``NDArray``, ``InferenceFunctionDescriptor``, ``NDArrayDescriptor``):
the same methods, awaitables, argument and return types, and the same exception types and
messages for the checks a call makes. Models are the ``.aimodel`` folders
``coremlrt.coreai`` translates (python/coremlrt/coreai/compiler.py); what is not mirrored
raises :class:`NotImplementedError` naming it. docs/design/coreai-runtime-standin.md
describes the mapping; it can also be used directly, without the switch::

    from coremlrt.coreai.runtime import AIModel, NDArray
"""

import asyncio
import concurrent.futures
import enum
import os
import sys
import threading
import time
from contextlib import asynccontextmanager
from pathlib import Path

import numpy as np
from coremlrt_import_hook import AfterImportFinder, watching

from .._core import Error

ENV_VAR = "COREMLRT_COREAI"

# A call whose function ran for less than this (a running average) runs on the event loop's
# thread, followed by one `await asyncio.sleep(0)` so that it still yields to other tasks:
# handing a prediction to a worker thread and back costs more than a small model's whole
# prediction (measured in docs/design/coreai-runtime-standin.md, "Calls and threads"). Longer
# calls go to the worker threads, so the loop stays responsive and several awaits in flight
# run side by side (the engine releases the GIL: python/src/module.cc, without_gil).
INLINE_LIMIT_S = 250e-6
_AVERAGE_WEIGHT = 0.25  # weight of the newest call in the running average

__all__ = ["AIModel", "InferenceFunction", "InferenceFunctionDescriptor", "NDArray", "NDArrayDescriptor",
           "StorageKind", "disable", "enable", "enabled"]


def _unsupported(what):
    return NotImplementedError(
        f"coremlrt's coreai.runtime stand-in ({ENV_VAR}) does not support {what}; unset {ENV_VAR} "
        f"(or call coremlrt.coreai.runtime.disable()) to use coreai-core's runtime for it "
        f"(docs/design/coreai-runtime-standin.md)")


class StorageKind(str, enum.Enum):
    """The backing of an NDArray; coreai-core's own enum is accepted too. Only BYTES exists off
    Apple hardware (coreai-core: "BYTES is the only supported value on non-Apple hardware")."""

    BYTES = "bytes"
    IO_SURFACE = "io_surface"
    METAL = "metal"


# numpy dtype names that coreai's runtime spells otherwise (coreai/runtime/_ndarray.py,
# _RUNTIME_TO_NUMPY_DTYPE, and NDArray.dtype of complex arrays as coreai-core 1.0.0b3 reports it).
_RUNTIME_DTYPE_NAMES = {"complex64": "cfloat32", "complex128": "cfloat64", "float8_e4m3fn": "float8e4m3fn",
                        "float8_e5m2": "float8e5m2", "float8_e8m0fnu": "float8e8m0fn",
                        "float4_e2m1fn": "float4e2m1fn"}
_NUMPY_DTYPE_NAMES = {v: k for k, v in _RUNTIME_DTYPE_NAMES.items()}
_ML_DTYPES = {"bfloat16", "float8_e4m3fn", "float8_e5m2", "float8_e8m0fnu", "float4_e2m1fn", "int2", "uint2",
              "int4", "uint4"}


def _runtime_dtype(dtype):
    return _RUNTIME_DTYPE_NAMES.get(dtype.name, dtype.name)


def _numpy_dtype(name):
    name = _NUMPY_DTYPE_NAMES.get(name, name)
    if name in _ML_DTYPES:
        import ml_dtypes  # coreai-core's own dependency for these types
        return np.dtype(getattr(ml_dtypes, name))
    return np.dtype(name)


def _shape_text(shape):
    return "[" + ", ".join(str(d) for d in shape) + "]"


def _names_text(names):
    return "[" + ", ".join(f'"{n}"' for n in names) + "]"


def _owned_copy(data):
    """A C-contiguous copy of ``data`` that nothing else refers to: coreai's NDArray copies at
    construction (a later change to the caller's array does not reach it)."""
    if isinstance(data, np.ndarray):
        source = data
    elif hasattr(data, "__dlpack__") and not isinstance(data, (str, bytes)):
        try:
            source = np.from_dlpack(data)  # a torch tensor, for example
        except (TypeError, RuntimeError, BufferError, ValueError) as exc:
            raise TypeError(f"Unable to create NDArray from {data}.") from exc
    else:
        raise TypeError(f"Unable to create NDArray from {data}.")
    if source.dtype.kind not in "biufc" and source.dtype.name not in _ML_DTYPES:
        raise TypeError(f"Unable to create NDArray from {data}.")
    return np.array(source, order="C", copy=True)


class NDArray:
    """A multi-dimensional array, as ``coreai.runtime.NDArray``.

    It holds its own C-contiguous copy of the data it was made from; :meth:`numpy` returns a
    new copy each time, as coreai-core's runtime does on Linux. An NDArray passed as a state is
    updated by the call: its value then lives in the engine's state (no copy per call) until
    :meth:`numpy` or a call that needs it elsewhere reads it back.
    """

    def __init__(self, data, backing=StorageKind.BYTES):
        if not (isinstance(backing, enum.Enum) and type(backing).__name__ == "StorageKind"):
            raise TypeError(f"backing must be a StorageKind, got {type(backing).__name__}")
        if backing.value != StorageKind.BYTES.value:
            raise RuntimeError(f"Backing of kind '{backing.value}' is not supported")
        if isinstance(data, list):
            data = np.array(data)
        self._init(_owned_copy(data))

    def _init(self, array):
        self._array = array
        # (engine state, name) holding this array's current value once a call used it as a
        # state; _version counts those calls and _read the one whose value _array holds.
        self._binding = None
        self._version = 0
        self._read = 0
        self._lock = threading.Lock()  # one call at a time uses an NDArray as a state

    @classmethod
    def _wrap(cls, array):
        instance = object.__new__(cls)
        instance._init(array)
        return instance

    @classmethod
    def from_descriptor(cls, descriptor):
        """A zero-filled array of the descriptor's shape and dtype."""
        shape = list(descriptor.shape)
        if any(d is None or d < 0 for d in shape):
            raise RuntimeError(f"Cannot create an NDArray from the descriptor {descriptor}: it has dynamic "
                               f"dimensions")
        return cls._wrap(np.zeros(shape, _numpy_dtype(descriptor.dtype)))

    def _current(self):
        """The current value (not a copy: never handed to the caller)."""
        # The version before the binding: a call sets the binding first (Function.run), so a
        # value read here is at least as new as the version recorded for it.
        version = self._version
        binding = self._binding
        if binding is None:
            return self._array
        if self._read != version:
            engine, name = binding
            self._array = engine.state.read_state(name)  # waits for a call using it to end
            self._read = version
        return self._array

    @property
    def dtype(self):
        """The type of scalars in the array ("float32", "float16", "int32", ...)."""
        return _runtime_dtype(self._array.dtype)

    @property
    def shape(self):
        return tuple(self._array.shape)

    @property
    def strides(self):
        """The strides, in elements (not bytes)."""
        itemsize = self._array.dtype.itemsize
        return tuple(s // itemsize for s in self._array.strides)

    def __str__(self):
        return f"{_shape_text(self._array.shape)}, {self.dtype}"

    def numpy(self):
        """The array as a new numpy array."""
        return self._current().copy()


class NDArrayDescriptor:
    """The shape and dtype of an input, output or state; a dynamic dimension is -1."""

    def __init__(self):
        raise TypeError("cannot create 'NDArrayDescriptor' instances")

    @classmethod
    def _make(cls, shape, dtype):
        instance = object.__new__(cls)
        instance._shape = list(shape)
        instance._dtype = dtype
        return instance

    @property
    def shape(self):
        return list(self._shape)

    @property
    def dtype(self):
        return self._dtype

    def __str__(self):
        return f"{_shape_text(self._shape)}, {self._dtype}, bytes"


class InferenceFunctionDescriptor:
    """A function's name and the names and descriptors of its inputs, outputs and states."""

    def __init__(self):
        raise TypeError("cannot create 'InferenceFunctionDescriptor' instances")

    @classmethod
    def _make(cls, name, inputs, outputs, states):
        instance = object.__new__(cls)
        instance._name = name
        instance._features = {"input": inputs, "output": outputs, "state": states}
        return instance

    @property
    def name(self):
        return self._name

    @property
    def input_names(self):
        return list(self._features["input"])

    @property
    def output_names(self):
        return list(self._features["output"])

    @property
    def state_names(self):
        return list(self._features["state"])

    def _descriptor(self, kind, name):
        descriptor = self._features[kind].get(name)
        if descriptor is None:
            raise KeyError(f"No {kind} descriptor named: {name}")
        return descriptor

    def input_descriptor(self, name):
        return self._descriptor("input", name)

    def output_descriptor(self, name):
        return self._descriptor("output", name)

    def state_descriptor(self, name):
        return self._descriptor("state", name)

    def __str__(self):
        return (f"{self._name}\n\tInputs:  {_names_text(self._features['input'])}\n\tOutputs: "
                f"{_names_text(self._features['output'])}\n\tStates:  {_names_text(self._features['state'])}")


def _descriptor_shape(feature):
    """A feature's shape as coreai reports it: -1 for a dimension that is not fixed."""
    if feature["shape_range"]:
        return [lo if lo == hi else -1 for lo, hi in feature["shape_range"]]
    enumerated = feature["enumerated_shapes"]
    if enumerated and len({len(s) for s in enumerated}) == 1:
        return [dims[0] if len(set(dims)) == 1 else -1 for dims in zip(*enumerated)]
    return [d if d >= 0 else -1 for d in feature["shape"]]


def _accepts_shape(feature, shape):
    if feature["shape_range"]:
        return len(shape) == len(feature["shape_range"]) and all(
            lo <= d and (hi < 0 or d <= hi) for d, (lo, hi) in zip(shape, feature["shape_range"]))
    if feature["enumerated_shapes"]:
        return list(shape) in [list(s) for s in feature["enumerated_shapes"]]
    declared = feature["shape"]
    return len(shape) == len(declared) and all(d == e or e < 0 for d, e in zip(shape, declared))


class _EngineState:
    """An engine state (coremlrt._core.State) with the declarations it was made for: functions
    that declare the same states can use it (include/coremlrt/state.h)."""

    __slots__ = ("state", "key")

    def __init__(self, state, key):
        self.state = state
        self.key = key


class _Function:
    """One function of a loaded model: the engine model that runs it and its declarations."""

    def __init__(self, mlmodel, output_shapes=None):
        self._mlmodel = mlmodel  # keeps the engine model alive
        # The engine model itself: NDArrays already hold C-contiguous arrays of the declared dtype
        # (checked below), so MLModel.predict's per-input conversion (python/coremlrt/model.py,
        # _convert) has nothing to do.
        self._engine = mlmodel._model
        function = mlmodel._function
        self.name = function["name"]
        self._inputs = {f["name"]: f for f in function["inputs"]}
        self._outputs = [f["name"] for f in function["outputs"]]
        self._states = {f["name"]: f for f in function["states"]}
        # What a call's arrays must be, for the common case checked without building anything:
        # name -> (numpy dtype, the fixed shape or None when the feature's shape is flexible).
        def expected(features):
            return {f["name"]: (_numpy_dtype(f["dtype"]), None if f["shape_range"] or f["enumerated_shapes"]
                                or any(d < 0 for d in f["shape"]) else tuple(f["shape"])) for f in features}

        self._expected = {"input": expected(function["inputs"]), "state": expected(function["states"])}
        # float16 outputs reach Python as float32 (python/src/module.cc, PyModel::predict);
        # coreai's runtime returns them as float16.
        self._narrowed = {f["name"] for f in function["outputs"] if f["dtype"] == "float16"}
        self._state_key = tuple((f["name"], f["dtype"], tuple(f["shape"])) for f in function["states"])

        def descriptors(features, shapes=None):
            return {f["name"]: NDArrayDescriptor._make((shapes or {}).get(f["name"], _descriptor_shape(f)), f["dtype"])
                    for f in features}

        self.desc = InferenceFunctionDescriptor._make(self.name, descriptors(function["inputs"]),
                                                      descriptors(function["outputs"], output_shapes),
                                                      descriptors(function["states"]))
        self._seconds = None  # running average of the engine's time per call

    def check(self, inputs, states):
        """The checks coreai's runtime makes, in its order, with its exception types and words."""
        for name in states:
            if name not in self._states:
                raise RuntimeError(f"{name} is not a declared output of this function.")
        for name in inputs:
            if name not in self._inputs:
                raise RuntimeError(f"{name} is not a declared input of this function.")
        for name, feature in self._inputs.items():
            if name not in inputs:
                raise RuntimeError(name)
            self._check_array(name, inputs[name], feature, "input")
        for name, feature in self._states.items():
            if name not in states:
                raise RuntimeError(f"Missing state view for {name}.")
            self._check_array(name, states[name], feature, "state")
        if len({id(v) for v in states.values()}) != len(states):
            raise RuntimeError("the same NDArray is passed as two states; coremlrt keeps one value per state "
                               "array, so pass a separate NDArray for each state")

    def _check_array(self, name, array, feature, kind):
        dtype, shape = self._expected[kind][name]
        value = array._array  # its dtype and shape, even while its value lives in an engine state
        if value.dtype == dtype and value.shape == shape:
            return
        if array.dtype != feature["dtype"]:
            raise RuntimeError(f"{name} has an invalid scalar type: {array.dtype}, expected: {feature['dtype']}")
        if not _accepts_shape(feature, array.shape):
            raise RuntimeError(f"{name} has an invalid shape: {_shape_text(array.shape)}, expected: "
                               f"{_shape_text(_descriptor_shape(feature))}")

    def runs_inline(self, states):
        seconds = self._seconds
        return (seconds is not None and seconds < INLINE_LIMIT_S
                and not any(array._lock.locked() for array in states.values()))

    def run(self, inputs, states):
        """Runs one call (on the event loop's thread or a worker); returns the outputs as NDArrays."""
        arrays = {name: array._current() for name, array in inputs.items()}
        if not states:
            start = time.perf_counter()
            outputs = self._engine.predict(arrays, None)
            self._timed(start)
            return self._wrap(outputs)
        held = sorted(states.values(), key=id)  # one order for every call: no lock cycles
        for array in held:
            array._lock.acquire()
        try:
            engine = self._engine_state(states)
            start = time.perf_counter()
            outputs = self._engine.predict(arrays, engine.state)
            self._timed(start)
            # The new values stay in the engine state, which the arrays now refer to: the next
            # call that passes the same arrays uses it as it is (a decode loop copies nothing),
            # and NDArray.numpy reads a value back only when asked.
            for name, array in states.items():
                array._binding = (engine, name)
                array._version += 1
        finally:
            for array in held:
                array._lock.release()
        return self._wrap(outputs)

    def _engine_state(self, states):
        """The engine state holding every array's current value: the one they already share,
        or a new one the values are copied into."""
        engines = {id(array._binding[0]) if array._binding and array._binding[1] == name else None
                   for name, array in states.items()}
        first = next(iter(states.values()))._binding
        if None not in engines and len(engines) == 1 and first[0].key == self._state_key:
            return first[0]
        engine = _EngineState(self._engine.make_state(), self._state_key)
        for name, array in states.items():
            engine.state.write_state(name, array._current())
        return engine

    def _timed(self, start):
        seconds = time.perf_counter() - start
        previous = self._seconds
        self._seconds = seconds if previous is None else previous + _AVERAGE_WEIGHT * (seconds - previous)

    def _wrap(self, outputs):
        result = {}
        for name in self._outputs:
            value = outputs[name]
            if name in self._narrowed:
                value = value.astype(np.float16)
            result[name] = NDArray._wrap(value)
        return result


_executor = None
_executor_lock = threading.Lock()


def _worker_pool():
    global _executor
    with _executor_lock:
        if _executor is None:
            _executor = concurrent.futures.ThreadPoolExecutor(max_workers=max(4, os.cpu_count() or 1),
                                                              thread_name_prefix="coremlrt-coreai")
        return _executor


def _forget_worker_pool():
    global _executor, _executor_lock
    _executor = None  # a forked child has none of the parent's threads
    _executor_lock = threading.Lock()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_worker_pool)


def _as_input(name, value):
    if isinstance(value, NDArray):
        return value
    if type(value).__name__ == "NDArray" and type(value).__module__.startswith("coreai.runtime"):
        return NDArray._wrap(np.ascontiguousarray(value.numpy()))  # one made by coreai-core's runtime
    raise TypeError(f'Value for "{name}" in input is not an NDArray.')


class InferenceFunction:
    """A function of a loaded model: ``await function(inputs, state=...)``."""

    def __init__(self):
        raise TypeError("Use `AIModel.load_function(name)` to construct an InferenceFunction instance.")

    @classmethod
    def _wrap(cls, function):
        instance = object.__new__(cls)
        instance._function = function
        return instance

    def __str__(self):
        return str(self._function.desc)

    @property
    def desc(self):
        """The descriptor for this function."""
        return self._function.desc

    async def __call__(self, inputs=None, state=None):
        """Runs the function: ``inputs`` and ``state`` map names to NDArrays; returns a dict of
        output NDArrays. The state arrays are updated by the call."""
        if inputs is None:
            inputs = {}
        if state is None:
            state = {}
        values = {k: _as_input(k, v) for k, v in inputs.items()}
        states = {}
        for k, v in state.items():
            if not isinstance(v, NDArray):
                made_before = (" (it is coreai-core's own NDArray, made before coremlrt's stand-in was enabled: "
                               "its value cannot be updated here)") if type(v).__module__.startswith("coreai.") else ""
                raise TypeError(f'Value for "{k}" in state is not a NDArray{made_before}')
            states[k] = v
        function = self._function
        function.check(values, states)
        if function.runs_inline(states):
            outputs = function.run(values, states)
            await asyncio.sleep(0)
            return outputs
        return await asyncio.get_running_loop().run_in_executor(_worker_pool(), function.run, values, states)


def _output_shapes(folder, functions):
    """{function: {output: dims}} for the outputs whose shape depends on a flexible input: the
    engine's description leaves their shape out (type "float32 [?]"), the program's types hold
    it, with -1 where a dimension is not fixed (as coreai reports it)."""
    if not any(o["shape"] == [] and "?" in o["type"] for f in functions for o in f["outputs"]):
        return {}
    from .._core import read_program

    shapes = {}
    for name, function in read_program(folder)["functions"].items():
        returned = set(function["block"]["outputs"])
        for op in function["block"]["operations"]:
            for value in op["outputs"]:
                if value["name"] in returned:
                    shapes.setdefault(name, {})[value["name"]] = [d if d >= 0 else -1 for d in value["type"]["dims"]]
    return shapes


def _load_functions(path):
    """{name: _Function} for every function of the .aimodel at ``path``, in the program's order."""
    from ..model import MLModel
    from .compiler import compile_aimodel

    path = os.fspath(path)
    if os.path.isdir(path) and not os.path.isfile(os.path.join(path, "main.mlirb")) and any(
            name.endswith(".odix") for name in os.listdir(path)):
        raise Error(f"'{path}' holds compiled Core AI artifacts (.odix) and no main.mlirb: coremlrt runs the "
                    f"program of an .aimodel folder (main.mlirb); load that folder instead")
    folder = compile_aimodel(path)
    default = MLModel(folder)
    models = {default.function_name: default}
    for function in default._description["functions"]:
        if function["name"] not in models:
            models[function["name"]] = MLModel(folder, function_name=function["name"])
    functions = default._description["functions"]
    output_shapes = _output_shapes(folder, functions)
    return {f["name"]: _Function(models[f["name"]], output_shapes.get(f["name"])) for f in functions}


class AIModel:
    """A loaded Core AI model, with one or more functions: ``await AIModel.load(path)``."""

    def __init__(self):
        raise TypeError("Use `await AIModel.load(path)` to construct an AIModel instance.")

    @classmethod
    async def load(cls, path, specialization_options=None):
        """Loads an ``.aimodel`` folder: translated once (cached by main.hash), then every function
        is loaded by the engine, off the event loop's thread. ``specialization_options`` is kept
        (``SpecializationOptions`` exist only on macOS) and changes nothing."""
        path = Path(path) if isinstance(path, str) else path
        functions = await asyncio.get_running_loop().run_in_executor(_worker_pool(), _load_functions, path)
        instance = object.__new__(cls)
        instance._functions = functions
        instance._specialization_options = specialization_options
        return instance

    def __str__(self):
        return "Function Names:" + "".join(f"\n\t{name}" for name in self._functions)

    @property
    def function_names(self):
        return list(self._functions)

    @property
    def specialization_options(self):
        return self._specialization_options

    def load_function(self, function_name, intermediate_logger=None, profiler=None):
        """The function named ``function_name`` (KeyError when there is none)."""
        if not isinstance(function_name, str):
            raise TypeError("load_function() can't convert argument 'function_name' (position 0) to String")
        function = self._functions.get(function_name)
        if function is None:
            raise KeyError(f"No function named {function_name!r}")
        if intermediate_logger is not None:
            raise _unsupported("load_function(intermediate_logger=...) (intermediate values)")
        if profiler is not None:
            raise _unsupported("load_function(profiler=...) (profiling events)")
        return InferenceFunction._wrap(function)

    @property
    def _debug_infos(self):
        raise _unsupported("AIModel._debug_infos (the compiler's debug information)")


# -- the switch -------------------------------------------------------------------------------

# coreai.runtime's names that this module replaces.
_MIRRORED = {"AIModel": AIModel, "InferenceFunction": InferenceFunction, "NDArray": NDArray,
             "InferenceFunctionDescriptor": InferenceFunctionDescriptor, "NDArrayDescriptor": NDArrayDescriptor}
_saved: dict = {}  # "runtime": {name: coreai-core's class}; "executable": AIModelAsset's own method


def _executable(original):
    """AIModelAsset.executable, loading the asset's own folder: coreai-core's Linux path first
    lowers the program to .odix in a temporary .aimodelx (coreai/authoring/asset.py), which
    coremlrt does not read and does not need."""

    @asynccontextmanager
    async def executable(self, specialization_options=None):
        if specialization_options is not None and sys.platform != "darwin":
            raise RuntimeError(f"specialization_options is only available on macOS, but current platform is "
                               f"'{sys.platform}'")
        model = await AIModel.load(self.path, specialization_options)
        try:
            yield model
        finally:
            del model

    executable.__doc__ = original.__doc__
    executable._coremlrt_original = original
    return executable


def _other_modules():
    """Loaded modules outside coreai.runtime that may hold their own references to its names
    (``from coreai.runtime import AIModel``: coreai.authoring.asset, coreai_torch.debugging.*)."""
    return [(name, module) for name, module in list(sys.modules.items())
            if module is not None and (name.startswith("coreai.") or name.startswith("coreai_torch"))
            and not (name == "coreai.runtime" or name.startswith("coreai.runtime."))]


def _rebind_others(old, new):
    """In the other modules, points each name bound to ``old[name]`` at ``new[name]``."""
    for _, module in _other_modules():
        namespace = vars(module)
        for name in _MIRRORED:
            if old.get(name) is not None and new.get(name) is not None and namespace.get(name) is old[name]:
                setattr(module, name, new[name])


def _patch_asset(module):
    asset = getattr(module, "AIModelAsset", None)
    if asset is None or getattr(asset.executable, "_coremlrt_original", None) is not None:
        return
    _saved["executable"] = asset.__dict__["executable"]
    asset.executable = _executable(asset.executable)


def _asset_imported(name, module):
    if enabled():
        _after_import(name, module)


# Patches ``coreai.authoring.asset`` once it has been imported, for enable() called before it
# (the finder is python/coremlrt_import_hook.py's, as the COREMLRT_COREAI hook's is).
_ASSET_FINDER = AfterImportFinder(("coreai.authoring.asset",), _asset_imported)


def _after_import(name, module):
    """Called once ``coreai.runtime`` or ``coreai.authoring.asset`` has been imported
    (by python/coremlrt_coreai_hook.py, or by the finder enable() installs)."""
    if name == "coreai.runtime":
        enable()
    elif name == "coreai.authoring.asset":
        _rebind_others(_saved.get("runtime", {}), _MIRRORED)
        _patch_asset(module)


def enable():
    """Makes ``coreai.runtime`` run models on coremlrt in this process (imports coreai.runtime).

    Replaces coreai.runtime's AIModel, InferenceFunction, NDArray and the descriptor classes
    with this module's, rebinds the copies other coreai and coreai_torch modules imported, and
    makes ``AIModelAsset.executable()`` load the asset's folder. Objects made earlier by
    coreai-core's runtime keep working with it (an NDArray of it is also taken as an input);
    modules of your own that ran ``from coreai.runtime import NDArray`` before enable() keep
    coreai-core's classes: enable first, or set COREMLRT_COREAI=1.
    """
    import coreai.runtime as runtime

    if "runtime" not in _saved:
        _saved["runtime"] = {name: vars(runtime).get(name) for name in _MIRRORED}
    for name, ours in _MIRRORED.items():
        setattr(runtime, name, ours)
    _rebind_others(_saved["runtime"], _MIRRORED)
    asset = sys.modules.get("coreai.authoring.asset")
    if asset is None:
        # The COREMLRT_COREAI hook's finder (python/coremlrt_coreai_hook.py) patches it already.
        if not watching("coreai.authoring.asset"):
            _ASSET_FINDER.install()
    else:
        _patch_asset(asset)  # nothing yet while asset.py is still importing coreai.runtime


def disable():
    """Undoes enable(): coreai.runtime is coreai-core's again. Objects made while enabled keep
    running on coremlrt."""
    _ASSET_FINDER.uninstall()
    runtime = sys.modules.get("coreai.runtime")
    originals = _saved.pop("runtime", None)
    if runtime is not None and originals is not None:
        for name, original in originals.items():
            if original is None:
                vars(runtime).pop(name, None)
            else:
                setattr(runtime, name, original)
    if originals is not None:
        _rebind_others(_MIRRORED, originals)  # those bound while enabled too (coreai.authoring.asset's)
    executable = _saved.pop("executable", None)
    asset = sys.modules.get("coreai.authoring.asset")
    if executable is not None and asset is not None:
        asset.AIModelAsset.executable = executable


def enabled():
    """Whether coreai.runtime runs on coremlrt now."""
    runtime = sys.modules.get("coreai.runtime")
    return runtime is not None and getattr(runtime, "AIModel", None) is AIModel
