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
``coremlrt_coremltools_hook``). Besides ``predict`` and states, the proxy serves the rest of
coremltools' runtime API:

* ``ct.utils.compile_model``, ``ct.models.CompiledMLModel`` and
  ``MLModel.get_compiled_model_path()``: compiled ``.mlmodelc`` folders with ``model.mil``
  (see :mod:`coremlrt.compiled`);
* ``MLComputeDevice.get_all_compute_devices()`` and ``MLModel.get_available_compute_devices()``:
  an ``MLCPUComputeDevice`` (coremlrt computes on the CPU; there is no GPU device) and, where
  the low-precision mode can run (the OpenVINO backend on a CPU with bf16 matrix instructions),
  an ``MLNeuralEngineComputeDevice`` standing for the CPU's matrix unit that
  ``ComputeUnit.CPU_AND_NE`` uses;
* ``MLModelStructure.load_from_path`` (ML programs, neuralNetwork layers, pipelines by stage;
  classic models have no structure, as in Core ML) and
  ``MLComputePlan.load_from_path`` (every op on the CPU, the backend that runs it in
  coremlrt's terms, and cost as :mod:`coremlrt.compute_plan` estimates it);
* ``MLModelAsset.from_memory`` (loaded from memory: no file is written) / ``from_path`` with
  ``CompiledMLModel.from_asset``.

Optimization hints are accepted (checked as coremltools checks them) and kept; they change
nothing, since they steer Core ML's GPU and Neural Engine specialization. What stays
unavailable on Linux: the stages of a pipeline compiled by Apple's compiler, and models
coremlrt cannot run (see ``coremlrt info``).
"""

import contextlib
import functools
import os
import shutil
import sys
import tempfile
import threading
import time
import types
import weakref
from typing import Any, Dict

import numpy as np

from . import _core, compiled
from . import compute_plan as _plan
from ._core import Error
from .image_outputs import core_ml_image, image_output_spaces
from .model import ComputeUnit, MLModel

_SHIM_NAME = "coremltools.libcoremlpython"
_SUPPORTED_MAJOR = 9  # written against coremltools 9.0 (5-argument proxy constructor, MLState API)

# How Core ML's failed predictions begin, by the model's family: "Unable to compute the prediction
# using" and what ran it. Apple's words for ML programs and neural networks; the other kinds are
# named after their model type in the same sentence.
_CORE_ML_PREDICTION_ERROR = "Unable to compute the prediction using"
_FAMILY_WORDS = {"mlProgram": "ML Program", "neuralNetwork": "a neural network model", "pipeline": "a pipeline model"}


def _prediction_error_prefix(model):
    """Core ML's opening words for a failed prediction of ``model`` (a coremlrt.MLModel)."""
    description = model._description
    what = _FAMILY_WORDS.get(description["model_family"], f"a {description['model_type']} model")
    return f"{_CORE_ML_PREDICTION_ERROR} {what}"


@contextlib.contextmanager
def _as_core_ml_prediction_error(prefix):
    """A failed prediction raises RuntimeError starting with Core ML's own words for the model's
    kind (``prefix``), as Apple's proxy does, so that code matching them works unchanged;
    coremlrt's message follows."""
    try:
        yield
    except Error as exc:
        raise RuntimeError(f"{prefix}: {exc}") from exc


def _python_number_types(model):
    """{output name: float or int} for the outputs declared as a double or int64 feature (a
    regressor's prediction, an int64 class label): Core ML hands those to Python as a number,
    not an array (coremlrt's own API gives a rank-0 array)."""
    types = {"double": float, "int64": int}
    return {o["name"]: types[o["kind"]] for o in model._function["outputs"] if o["kind"] in types}


def _as_core_ml_outputs(outputs, number_types, image_spaces=None):
    """Core ML has no rank-0 multi-arrays: a rank-0 program output reaches coremltools' predict
    on macOS as shape (1,). A double or int64 feature reaches it as a Python float or int, and
    an image feature as a PIL image (coremlrt/image_outputs.py)."""
    image_spaces = image_spaces or {}

    def core_ml_value(name, value):
        if name in image_spaces:
            return core_ml_image(name, value, image_spaces[name])
        if not isinstance(value, np.ndarray) or value.ndim != 0:
            return value
        if name in number_types:
            return number_types[name](value)
        return value.reshape(1)

    return {name: core_ml_value(name, value) for name, value in outputs.items()}


class _MLModelProxy:
    """Stands in for the ``_MLModelProxy`` of Apple's ``coremltools.libcoremlpython``.

    coremltools calls it as ``_MLModelProxy(path, compute_units_name, function_name,
    optimization_hints, asset)``. Inputs arrive as coremltools hands them over (numpy arrays,
    with float16 already turned into float32, Python scalars, PIL images) and outputs are
    returned as Core ML returns them: a dict of numpy arrays, float16 outputs as float32, and
    rank-0 outputs as shape (1,) (Core ML's multi-arrays have rank 1 or more; the native
    coremlrt API keeps the program's rank 0, see the README); double and int64 features
    (a regressor's prediction, say) as a Python float or int; image features as PIL images
    (mode "RGBA", "L" or "F"; coremlrt/image_outputs.py).
    """

    def __init__(self, path, compute_units="ALL", function_name="", optimization_hints=None, asset=None):
        if asset is not None:
            if not isinstance(asset, _MLModelAssetProxy):
                raise RuntimeError("the asset was not made by coremlrt's MLModelAsset proxy")
            path = asset.path
            self._asset = asset  # keeps an in-memory asset registered while the model lives
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
        self._number_types = _python_number_types(self._model)
        self._image_spaces = image_output_spaces(self._model._function)
        self._last_predict_ns = None
        self._error_prefix = _prediction_error_prefix(self._model)
        self._compiled_lock = threading.Lock()
        self._compiled_dir = None  # a TemporaryDirectory holding get_compiled_model_path()'s folder
        # An .mlmodel file is held open: coremltools hands an in-memory spec over as a temporary
        # .mlmodel that it deletes once this proxy is made (MLModel.__init__ in
        # coremltools/models/model.py), so get_compiled_model_path() compiles from the bytes this
        # descriptor still reads, the ones loaded, not from the path, which may be gone or
        # rewritten by then. It closes with the proxy.
        self._source_file = None
        if os.path.isfile(path):
            self._source_file = open(path, "rb")  # noqa: SIM115 - lives as long as the proxy
            weakref.finalize(self, self._source_file.close)

    @staticmethod
    def maximum_supported_specification_version():
        # Mirrors kMaxSpecificationVersion in src/format/spec_reader.h: MLModel does not make a
        # proxy for newer specs and reports "specification has version N ..." at predict.
        return 10

    def predict(self, data, state=None):
        start = time.perf_counter_ns()
        with _as_core_ml_prediction_error(self._error_prefix):
            outputs = _as_core_ml_outputs(self._model.predict(data, state), self._number_types, self._image_spaces)
        self._last_predict_ns = time.perf_counter_ns() - start
        return outputs

    def batchPredict(self, data):  # noqa: N802 - the name coremltools calls
        start = time.perf_counter_ns()
        with _as_core_ml_prediction_error(self._error_prefix):
            outputs = [_as_core_ml_outputs(self._model.predict(d), self._number_types, self._image_spaces)
                       for d in data]
        self._last_predict_ns = time.perf_counter_ns() - start
        return outputs

    def newState(self):  # noqa: N802 - the name coremltools calls
        # coremlrt.MLState already has read_state/write_state with coremltools' behaviour
        # (float16 states read back as float32); predict() takes it back as the state.
        return self._model.make_state()

    def get_compiled_model_path(self):
        # A model loaded from a compiled folder is its own compiled model. Otherwise the package,
        # .mlmodel or in-memory asset is compiled once, on first request, into a temporary folder
        # that lives as long as this proxy, as Core ML's compiled copy lives as long as its MLModel.
        path = self._model.package_path
        if os.path.isfile(os.path.join(path, "model.mil")) or path.rstrip(os.sep).endswith(".mlmodelc"):
            return path
        with self._compiled_lock:
            if self._compiled_dir is None:
                directory = tempfile.TemporaryDirectory(prefix="coremlrt-compiled-")
                name = os.path.splitext(os.path.basename(path.rstrip(os.sep)))[0].replace(":", "-") or "model"
                if self._source_file is not None:
                    # The bytes loaded, copied beside the compiled folder (which keeps its own copy).
                    source = os.path.join(directory.name, name + ".mlmodel")
                    self._source_file.seek(0)
                    with open(source, "wb") as copy:
                        shutil.copyfileobj(self._source_file, copy)
                    path = source
                compiled.compile_model(path, os.path.join(directory.name, name + ".mlmodelc"))
                self._compiled_dir = (directory, os.path.join(directory.name, name + ".mlmodelc"))
            return self._compiled_dir[1]

    # -- static helpers coremltools calls on the proxy class ------------------------------

    @staticmethod
    def compileModel(path):  # noqa: N802 - the name coremltools calls
        """ct.utils.compile_model: compiles into a new temporary folder the caller owns (it
        moves the folder to its destination_path, if any)."""
        return compiled.compile_model(path)

    @staticmethod
    def get_all_compute_devices():
        return _devices()

    @staticmethod
    def get_available_compute_devices():
        return _devices()

    @staticmethod
    def get_model_structure(path):
        return _structure_objects(_core.model_structure(os.fspath(path)))[0]

    @staticmethod
    def get_compute_plan(path, compute_units="ALL"):
        from coremltools.models.compute_plan import MLComputePlan
        return MLComputePlan(_MLComputePlanProxy(os.fspath(path)))

    @staticmethod
    def create_model_asset_from_path(path):
        from coremltools.models.model import MLModelAsset
        return MLModelAsset(_MLModelAssetProxy.from_path(path))

    @staticmethod
    def create_model_asset_from_memory(spec_data, blob_mapping=None):
        from coremltools.models.model import MLModelAsset
        return MLModelAsset(_MLModelAssetProxy.from_memory(spec_data, blob_mapping or {}))

    def get_load_duration_in_nano_seconds(self):
        return self._load_ns

    def get_last_predict_duration_in_nano_seconds(self):
        return self._last_predict_ns


class _MLCPUComputeDeviceProxy:
    """The CPU coremlrt computes on (coremltools' MLCPUComputeDevice wraps it)."""


class _MLGPUComputeDeviceProxy:
    """Never made: coremlrt has no GPU device. Defined so that coremltools' isinstance checks
    and imports of the name work."""


class _MLNeuralEngineComputeDeviceProxy:
    """The Neural Engine's counterpart here: this CPU's bf16 matrix unit (AMX, or AVX-512 BF16),
    which the low-precision mode uses (ComputeUnit.CPU_AND_NE: fp16 programs may compute in bf16
    in the OpenVINO backend; docs/design/architecture.md, law 6). Listed only where that mode can run:
    a build with the OpenVINO backend on a CPU with bf16 matrix instructions. Its cores are the
    CPU's cores: the matrix unit is part of each of them."""

    def get_total_core_count(self):
        return os.cpu_count() or 1


def _has_low_precision_unit():
    if "openvino" not in _core.available_backends():
        return False
    try:
        with open("/proc/cpuinfo") as f:
            flags = next((line for line in f if line.startswith("flags")), "").split()
    except OSError:
        return False
    return "amx_bf16" in flags or "avx512_bf16" in flags


def _cpu_device():
    from coremltools.models.compute_device import MLCPUComputeDevice
    return MLCPUComputeDevice(_MLCPUComputeDeviceProxy())


def _devices():
    devices = [_cpu_device()]
    if _has_low_precision_unit():
        from coremltools.models.compute_device import MLNeuralEngineComputeDevice
        devices.append(MLNeuralEngineComputeDevice(_MLNeuralEngineComputeDeviceProxy()))
    return devices


class _MLModelAssetProxy:
    """A model asset: a compiled folder (from_path), or a spec and its weight files given as
    bytes (from_memory), which the engine loads from memory (coremlrt._core.MemoryModel)
    without writing any file; the asset keeps them registered while it lives."""

    def __init__(self, path, memory=None):
        self.path = path
        self._memory = memory

    @classmethod
    def from_path(cls, path):
        path = os.path.abspath(os.path.expanduser(os.fspath(path)))
        if not os.path.isdir(path):
            raise RuntimeError(f"compiled model '{path}' does not exist (expected an .mlmodelc folder)")
        return cls(path)

    @classmethod
    def from_memory(cls, spec_data, blob_mapping):
        if not isinstance(spec_data, (bytes, bytearray)):
            raise TypeError("spec_data must be bytes (a serialized Model protobuf)")
        try:
            memory = _core.MemoryModel(bytes(spec_data), {str(k): bytes(v) for k, v in blob_mapping.items()})
        except Error as exc:
            raise RuntimeError(str(exc)) from exc
        return cls(memory.path, memory)


class _MLComputePlanProxy:
    """What coremltools' MLComputePlan asks of Core ML's compute plan, from coremlrt's plan
    (coremlrt/compute_plan.py): every op on the CPU, with its estimated share of the FLOPs."""

    def __init__(self, path=None):
        if path is None:
            # coremltools' experimental remote compute plan subclasses this class, calls
            # __init__ without arguments and supplies the plan itself (compute_plan_utils.py).
            return
        raw = _core.model_structure(path)
        self.model_structure, self._ops = _structure_objects(raw)
        self._plan = {}
        if raw["model_family"] == "mlProgram":
            for function, ops in _plan.compute_plan(path, raw).items():
                for op in ops:
                    self._plan[(function, op.path)] = op

    def _usage(self):
        from coremltools.models.compute_plan import MLComputePlanDeviceUsage
        device = _cpu_device()
        return MLComputePlanDeviceUsage(preferred_compute_device=device, supported_compute_devices=[device])

    def _planned(self, operation):
        key = getattr(operation, "__proxy__", None)
        if key not in self._plan:
            raise ValueError("the operation does not belong to this compute plan's model structure")
        return self._plan[key]

    def get_compute_device_usage_for_mlprogram_operation(self, operation):
        self._planned(operation)
        return self._usage()

    def get_compute_device_usage_for_neuralnetwork_layer(self, layer):
        if getattr(layer, "__proxy__", None) not in self._ops:
            raise ValueError("the layer does not belong to this compute plan's model structure")
        return self._usage()

    def get_estimated_cost_for_mlprogram_operation(self, operation):
        from coremltools.models.compute_plan import MLComputePlanCost
        return MLComputePlanCost(weight=self._planned(operation).weight)


def _structure_objects(raw):
    """coremltools' MLModelStructure for ``_core.model_structure``'s dict, and the keys its
    operations and layers carry in ``__proxy__``: (function, path) and ("layer", index), a
    pipeline stage's with the stage indices put before the function name or the index."""
    from coremltools.models import compute_plan as cp

    keys = set()

    def named(values):
        return [cp.MLModelStructureProgramNamedValueType(name=v["name"], type=cp.MLModelStructureProgramValueType())
                for v in values]

    def block(data, function, path):
        operations = []
        for index, op in enumerate(data["operations"]):
            key = (function, path + (index,))
            keys.add(key)
            inputs = {param: cp.MLModelStructureProgramArgument(bindings=[
                cp.MLModelStructureProgramBinding(
                    name=b["name"], value=None if b["name"] is not None else cp.MLModelStructureProgramValue())
                for b in bindings]) for param, bindings in op["inputs"].items()}
            operations.append(cp.MLModelStructureProgramOperation(
                inputs=inputs, operator_name=op["type"], outputs=named(op["outputs"]),
                blocks=[block(nested, function, path + (index, b)) for b, nested in enumerate(op["blocks"])],
                __proxy__=key))
        return cp.MLModelStructureProgramBlock(inputs=named(data["inputs"]), operations=operations,
                                               output_names=list(data["output_names"]))

    def structure(raw, stage):
        """`stage`: the path of stage indices to this sub-model (() for the model itself), so
        that the keys of a stage's operations and layers differ from every other stage's."""
        program = neuralnetwork = pipeline = None
        if raw["model_family"] == "mlProgram":
            program = cp.MLModelStructureProgram(functions={
                f["name"]: cp.MLModelStructureProgramFunction(
                    inputs=named(f["inputs"]), block=block(f["block"], stage + (f["name"],) if stage else f["name"], ()))
                for f in raw["functions"]})
        elif raw["model_family"] == "neuralNetwork":
            layers = []
            for index, layer in enumerate(raw["layers"]):
                key = ("layer",) + stage + (index,)
                keys.add(key)
                # input_names: coremlrt's layer reading keeps the outputs only (format/neural_network_reader.h).
                layers.append(cp.MLModelStructureNeuralNetworkLayer(
                    name=layer["name"], type=layer["type"], input_names=[], output_names=list(layer["output_names"]),
                    __proxy__=key))
            neuralnetwork = cp.MLModelStructureNeuralNetwork(layers=layers)
        elif raw["model_family"] == "pipeline":
            pipeline = cp.MLModelStructurePipeline(sub_models=tuple(
                (name, structure(sub, stage + (index,))) for index, (name, sub) in enumerate(raw["sub_models"])))
        # Any other (classic) model: Core ML describes no structure, so all three stay None.
        return cp.MLModelStructure(neuralnetwork=neuralnetwork, program=program, pipeline=pipeline)

    return structure(raw, ()), keys


def check_coremltools_version(version):
    """Raises RuntimeError unless ``version`` is a coremltools release this backend fits."""
    major = version.split(".")[0]
    if not (major.isdigit() and int(major) == _SUPPORTED_MAJOR):
        raise RuntimeError(
            f"coremlrt's coremltools backend works with coremltools {_SUPPORTED_MAJOR}.x (written "
            f"for 9.0), but coremltools {version} is installed; its _MLModelProxy interface may "
            f"differ. Install coremltools {_SUPPORTED_MAJOR}.x, or unset COREMLRT_COREMLTOOLS.")


_PROXY_CLASSES = {
    "_MLModelProxy": _MLModelProxy,
    "_MLModelAssetProxy": _MLModelAssetProxy,
    "_MLComputePlanProxy": _MLComputePlanProxy,
    "_MLCPUComputeDeviceProxy": _MLCPUComputeDeviceProxy,
    "_MLGPUComputeDeviceProxy": _MLGPUComputeDeviceProxy,
    "_MLNeuralEngineComputeDeviceProxy": _MLNeuralEngineComputeDeviceProxy,
}


def libcoremlpython_module():
    """A new module object to stand in for ``coremltools.libcoremlpython``.

    It offers the proxy classes coremltools 9.0 imports from it (_PROXY_CLASSES).
    """
    module = types.ModuleType(_SHIM_NAME, "coremlrt's stand-in for Apple's libcoremlpython")
    for name, cls in _PROXY_CLASSES.items():
        setattr(module, name, cls)
    module.__coremlrt__ = True
    module.__file__ = __file__  # so coremltools' "cannot import name ..." messages point here
    return module


def _is_ours(module):
    return getattr(module, "__coremlrt__", False) is True


def _coremltools_modules():
    """The loaded coremltools modules that may hold their own proxy references."""
    return [(name, module) for name, module in list(sys.modules.items())
            if module is not None and (name == "coremltools" or name.startswith("coremltools."))
            and name != _SHIM_NAME]


# What enable() replaced: "shim" -> (sys.modules entry, attribute); (module name, attribute
# name) -> the module's original reference; "patched" -> [(owner, attribute, original)].
_saved: Dict[Any, Any] = {}


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

    return make_state


def _predict_raising_the_load_error(original):
    """A model our proxy refused to load keeps no proxy; coremltools 9.0 keeps the error
    (MLModel._framework_error) but its predict first says "only supported on macOS", which
    hides why. For such a model predict raises coremlrt's own load error (a coremlrt.Error
    naming the model and the reason); every other model keeps the original method."""

    @functools.wraps(original)
    def predict(self, *args, **kwargs):
        error = getattr(self, "_framework_error", None)
        if self.__proxy__ is None and isinstance(error, Error):
            raise error
        return original(self, *args, **kwargs)

    return predict


def _compiled_init_check_without_os_check(original):
    """CompiledMLModel's argument check starts by refusing anything older than macOS 10.13,
    which Linux reports as (); with our proxy installed the check is about nothing, so this
    runs the rest of the check (types, optimization hints) unchanged (coremltools 9.0,
    models/_compiled_model.py)."""

    def _init_check(path, compute_units, function_name, optimization_hints=None, asset=None):
        from coremltools import ComputeUnit as _ComputeUnit
        from coremltools.models.model import MLModelAsset, _verify_optimization_hint_input
        if not isinstance(path, str):
            raise TypeError('The "path" parameter must be of type "str".')
        if asset is not None and not isinstance(asset, MLModelAsset):
            raise TypeError('The "asset" parameter must be of type "MLModelAsset".')
        if not isinstance(compute_units, _ComputeUnit):
            raise TypeError('The "compute_units" parameter must be of type: "coremltools.ComputeUnit".')
        if not isinstance(function_name, str):
            raise TypeError('The "function_name" parameter must be of type "str".')
        _verify_optimization_hint_input(optimization_hints)

    return staticmethod(_init_check)


def _compile_model_without_os_check(original):
    """ct.utils.compile_model, which refuses to run off macOS before reaching the proxy: the same
    checks and results (coremltools 9.0, models/utils.py) with coremlrt compiling."""

    @functools.wraps(original)
    def compile_model(model, destination_path=None):
        from coremltools import proto
        from coremltools.models import MLModel as _CtMLModel
        from coremltools.models.utils import save_spec

        source = None
        if isinstance(model, str):
            if not model.rstrip("/").endswith((".mlpackage", ".mlmodel")):
                raise ValueError(f"Invalid model file path: '{model}'."
                                 "Expected a file with .mlpackage or .model extension. ")
            source = model
        elif isinstance(model, _CtMLModel):
            raise TypeError('This model has already been compiled. Call "get_compiled_model_path"'
                            " to get the compiled model.")
        elif not isinstance(model, proto.Model_pb2.Model):
            raise TypeError('Unrecognized input for "model" parameter. It should be a spec or model file path.')
        if destination_path is not None and not destination_path.rstrip("/").endswith(".mlmodelc"):
            raise Exception('"destination_path" parameter must have ".mlmodelc" file extension.')
        if source is None:
            with tempfile.TemporaryDirectory() as save_dir:
                spec_file = os.path.join(save_dir, "spec.mlmodel")
                save_spec(model, spec_file)
                path = _MLModelProxy.compileModel(spec_file)
        else:
            path = _MLModelProxy.compileModel(source)
        if destination_path is None:
            return path
        shutil.move(path, destination_path)
        # compileModel made the folder inside a temporary directory of its own, now empty.
        os.rmdir(os.path.dirname(path))
        return destination_path

    return compile_model


def _verify_hints_without_os_check(original):
    """coremltools refuses optimization hints off macOS 15 (models/model.py,
    _verify_optimization_hint_input) before checking them. coremlrt accepts them and keeps them
    (``MLModel.optimization_hints``); they change nothing, as the hints are about Core ML's
    GPU and Neural Engine specialization. The keys and value types are checked as before."""

    @functools.wraps(original)
    def _verify_optimization_hint_input(optimization_hint_input=None):
        from coremltools import ReshapeFrequency, SpecializationStrategy
        if optimization_hint_input is None:
            return
        if not isinstance(optimization_hint_input, dict):
            raise TypeError('"optimization_hint_input" must be a dictionary or None')
        expected = {"allowLowPrecisionAccumulationOnGPU": (bool, "bool"),
                    "specializationStrategy": (SpecializationStrategy, "coremltools.SpecializationStrategy"),
                    "reshapeFrequency": (ReshapeFrequency, "coremltools.ReshapeFrequency")}
        for key in optimization_hint_input:
            if key not in expected:
                raise ValueError(f"Unrecognized key in optimization_hint dictionary: {key}")
        for key, (kind, name) in expected.items():
            if key in optimization_hint_input and not isinstance(optimization_hint_input[key], kind):
                raise TypeError(f'"{key}" value of "optimization_hint_input" dictionary must be of type {name}')

    return _verify_optimization_hint_input


def _patch(owner, attribute, make):
    """Replaces owner.attribute with make(original), once; disable() puts the original back."""
    current = owner.__dict__.get(attribute)
    if getattr(current, "_coremlrt_patch", False) or getattr(getattr(current, "__func__", None), "_coremlrt_patch", False):
        return
    original = getattr(owner, attribute)
    replacement = make(original)
    target = replacement.__func__ if isinstance(replacement, staticmethod) else replacement
    target._coremlrt_patch = True
    setattr(owner, attribute, replacement)
    _saved.setdefault("patched", []).append((owner, attribute, current))


def enable():
    """Makes coremltools run models through coremlrt in this process (imports coremltools).

    Installs a ``coremltools.libcoremlpython`` module holding our proxy classes, points every
    already-imported coremltools module's own references to them at ours, lets
    ``MLModel.make_state`` work for models our proxy loaded, makes ``MLModel.predict`` of a
    model our proxy refused raise coremlrt's load error, and lets ``compile_model`` and
    ``CompiledMLModel`` past their macOS checks. Models created earlier keep the proxy they
    were created with (None on Linux): create them again after enable().
    Raises RuntimeError on a coremltools version whose proxy interface may differ.
    """
    import coremltools
    import coremltools.models._compiled_model as ct_compiled
    import coremltools.models.model as ct_model
    import coremltools.models.utils as ct_utils

    check_coremltools_version(coremltools.__version__)
    shim = sys.modules.get(_SHIM_NAME)
    if not _is_ours(shim):
        _saved.setdefault("shim", (shim, getattr(coremltools, "libcoremlpython", None)))
        shim = sys.modules[_SHIM_NAME] = libcoremlpython_module()
    # coremltools' modules reach the proxies through their own bindings (rebound below), so its
    # namespace stays as it is on Linux: the stand-in is sys.modules[_SHIM_NAME] only, never an
    # attribute of the package (which the lazy hook's import would otherwise leave there, and
    # which coremltools' own test_api_visibilities checks).
    if _is_ours(vars(coremltools).get("libcoremlpython")):
        del coremltools.libcoremlpython
    # Each coremltools module did its own `from ..libcoremlpython import _X` at import time
    # (model, _compiled_model, compute_device, compute_plan in 9.0), so rebind them all.
    for name, module in _coremltools_modules():
        for attribute, ours in _PROXY_CLASSES.items():
            if attribute not in vars(module):
                continue
            current = vars(module)[attribute]
            if current is not ours:
                _saved.setdefault((name, attribute), current)
                setattr(module, attribute, ours)
    _patch(ct_model.MLModel, "make_state", _make_state_without_os_check)
    _patch(ct_model.MLModel, "predict", _predict_raising_the_load_error)
    _patch(ct_compiled.CompiledMLModel, "_init_check", _compiled_init_check_without_os_check)
    for owner, attribute, make in ((ct_utils, "compile_model", _compile_model_without_os_check),
                                   (ct_model, "_verify_optimization_hint_input", _verify_hints_without_os_check)):
        original = getattr(owner, attribute)
        _patch(owner, attribute, make)
        for name, module in _coremltools_modules():  # copies made by `from .x import name`
            if module is not owner and vars(module).get(attribute) is original:
                _saved.setdefault((name, attribute), original)
                setattr(module, attribute, getattr(owner, attribute))


def disable():
    """Undoes enable() (and the COREMLRT_COREMLTOOLS hook): coremltools behaves as it would
    without coremlrt. Models created while enabled keep their coremlrt proxy."""
    coremltools = sys.modules.get("coremltools")
    if coremltools is None:
        return
    for owner, attribute, original in reversed(_saved.pop("patched", [])):
        if original is None:
            delattr(owner, attribute)  # it was inherited or absent: uncover the original
        else:
            setattr(owner, attribute, original)
    for name, module in _coremltools_modules():
        for attribute, ours in list(_PROXY_CLASSES.items()) + [("compile_model", None),
                                                               ("_verify_optimization_hint_input", None)]:
            key = (name, attribute)
            if ours is None:
                if key in _saved:
                    setattr(module, attribute, _saved.pop(key))
                continue
            if vars(module).get(attribute) is ours:
                # None is what coremltools binds when its import of the proxy fails.
                setattr(module, attribute, _saved.pop(key, None))
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
