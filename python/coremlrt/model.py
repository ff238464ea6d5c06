"""MLModel: the coremltools-shaped front of the engine.

Input conversion rules (applied per input, against the dtype the model declares):

* numpy arrays are used as they are when their dtype matches and they are C-contiguous;
  otherwise they are converted once;
* nested lists, Python scalars and objects exposing ``__dlpack__`` or ``__array__``
  (torch tensors, for example) are turned into numpy arrays first;
* float64, float16 and integer/bool arrays become float32 for float32 inputs, and likewise
  float16 for float16 inputs;
* int64 (and other integer or bool) arrays become int32 for int32 inputs when every value
  fits; float arrays are accepted for int32 inputs only when every value is a whole number;
* a single value (a scalar or 0-d array) is accepted for an input that holds one element;
* image inputs take a PIL image or a uint8 ``[H, W, C]`` array and are fed to the model as
  the float tensor ``[1, C, H, W]`` it declares (channels in the model's color order);
* anything else (strings, complex, object arrays) raises :class:`coremlrt.Error`.

Outputs are numpy arrays; float16 outputs are returned as float32, as coremltools does.
An image output is the float32 array ``[1, C, H, W]`` the model computed (channels in the
image's color order, the layout image inputs take); :func:`coremlrt.image_outputs.core_ml_image`
makes the PIL image Core ML would hand to coremltools.
A classifier's outputs are returned as coremltools returns them: the predicted label (an
``int`` or a ``str``) and a ``{label: probability}`` dict.
"""

import asyncio
import copy
import enum
import os
import threading

import numpy as np

from . import _core, model_cache
from ._core import BadInputError, Error, UnsupportedError


# MLModel's cache_dir when the caller names none (resolved at load, so the environment counts).
_DEFAULT_CACHE_DIR = object()


class ComputeUnit(enum.Enum):
    """Where Core ML may run a model. coremlrt runs every choice on the CPU."""

    ALL = 1
    CPU_AND_GPU = 2
    CPU_ONLY = 3
    CPU_AND_NE = 4


_NUMPY_DTYPES = {"float32": np.float32, "float16": np.float16, "float64": np.float64,
                 "int32": np.int32, "int8": np.int8}


def _as_array(value):
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "__dlpack__") and not isinstance(value, (list, tuple)):
        try:
            return np.from_dlpack(value)
        except (TypeError, RuntimeError, BufferError, ValueError):
            pass  # e.g. a torch tensor that requires grad: fall back to __array__
        if hasattr(value, "detach"):
            value = value.detach()
    return np.asarray(value)


def _convert(name, value, feature):
    """Returns (array for the engine, whether it is the caller's own memory)."""
    want_name = feature["dtype"]
    want = np.dtype(_NUMPY_DTYPES[want_name])
    if type(value) is np.ndarray and value.dtype == want and value.flags.c_contiguous and \
            value.ndim == len(feature["shape"]) and value.ndim:
        # Already what the engine takes (a language model's decode step passes two such arrays
        # per token: the checks below cost it about 0.1 ms each).
        return value, True
    try:
        array = source = _as_array(value)
    except Exception as exc:  # noqa: BLE001 - any failure here means "not array-like"
        raise BadInputError(f"input '{name}': cannot turn a {type(value).__name__} into an array "
                    f"(expected {feature['type']}): {exc}") from exc
    have = array.dtype
    if have != want:
        if have.kind == "f" and want.kind == "f":
            array = array.astype(want)
        elif have.kind in "iub" and want.kind == "f":
            array = array.astype(want)
        elif have.kind in "iub" and want.kind == "i":
            if have.kind != "b" and array.size:
                info = np.iinfo(want)
                lo, hi = array.min(), array.max()
                if lo < info.min or hi > info.max:
                    raise BadInputError(f"input '{name}': {have} values range over [{lo}, {hi}], which does not fit "
                                f"the model's {want_name}")
            array = array.astype(want)
        elif have.kind == "f" and want.kind == "i":
            if array.size and not np.all(np.isfinite(array) & (np.floor(array) == array)):
                raise BadInputError(f"input '{name}': {have} array has non-integer values; the model expects "
                                    f"{want_name}")
            array = array.astype(want)
        else:
            raise BadInputError(f"input '{name}': dtype {have} cannot be converted to the model's {want_name} "
                        f"(expected {feature['type']})")
    if array.ndim == 0 or (array.size == 1 and feature["shape"] and np.prod(feature["shape"]) == 1
                           and array.ndim != len(feature["shape"])):
        if feature["shape"] and int(np.prod(feature["shape"])) == 1:
            array = array.reshape(feature["shape"])
    array = np.ascontiguousarray(array)
    caller_memory = not isinstance(value, (list, tuple, int, float, bool)) and np.may_share_memory(array, source)
    return array, caller_memory


def _convert_number(name, value, kind):
    """A double or int64 feature's value as a 0-d float64 or int64 array."""
    array = np.asarray(value)
    if array.size != 1 or array.dtype.kind not in "iufb":
        raise BadInputError(f"input '{name}' is a {kind} feature; got {type(value).__name__} {array.shape}")
    if kind == "int64" and array.dtype.kind == "f" and not float(array.reshape(())).is_integer():
        raise BadInputError(f"input '{name}' is an int64 feature; got the non-integer {float(array.reshape(()))}")
    return np.array(array.reshape(()), dtype=np.float64 if kind == "double" else np.int64)  # 0-d, contiguous


def _encode_string(name, value, vocabulary):
    """A string feature's value as the engine takes it (``Model::input_vocabulary``): its
    index in the vocabulary of the op that reads it, -1 for a string the model does not know."""
    if not isinstance(value, str):
        raise BadInputError(f"input '{name}' is a string feature; got {type(value).__name__}")
    index = vocabulary[0]
    return np.array(index.get(value, -1), dtype=np.int64)


def _encode_sequence(name, value, vocabulary, element):
    """A sequence feature's value as the engine takes it (``Model::input_vocabulary``): int64
    codes [m], each element's index in the vocabulary, -1 for one the model does not know. Takes
    a list or tuple, or a 1-D numpy array (of integers for an int64 sequence)."""
    if isinstance(value, np.ndarray):
        if value.ndim != 1 or (element == "int64" and value.dtype.kind not in "iu") or (
                element == "string" and value.dtype.kind not in "UO"):
            raise BadInputError(f"input '{name}' is a sequence of {element}; got a {value.dtype} array of shape "
                        f"{list(value.shape)}")
        value = value.tolist()
    if not isinstance(value, (list, tuple)):
        raise BadInputError(f"input '{name}' is a sequence of {element}; got {type(value).__name__}")
    index = vocabulary[0]
    codes = np.empty(len(value), dtype=np.int64)
    for i, item in enumerate(value):
        if element == "int64":
            if isinstance(item, (bool, np.bool_)) or not isinstance(item, (int, np.integer)):
                raise BadInputError(f"input '{name}' is a sequence of int64; element {i} is {item!r}")
            item = str(int(item))
        elif not isinstance(item, str):
            raise BadInputError(f"input '{name}' is a sequence of strings; element {i} is {item!r}")
        codes[i] = index.get(item, -1)
    return codes


def _encode_dictionary(name, value, vocabulary):
    """A dictionary feature's value as the engine takes it: float64 values laid out over the
    vocabulary (the vocabulary's absent value, 0 or NaN, for a key the dictionary lacks; keys
    the model does not list are dropped, as dictVectorizer drops them)."""
    if not isinstance(value, dict):
        raise BadInputError(f"input '{name}' is a dictionary feature; got {type(value).__name__}")
    index, integer_keys, absent_value = vocabulary
    out = np.full(len(index), absent_value, dtype=np.float64)
    for key, number in value.items():
        if integer_keys:
            if isinstance(key, (bool, np.bool_)) or not isinstance(key, (int, np.integer)):
                raise BadInputError(f"input '{name}' is a dictionary with int64 keys; got the key {key!r}")
            key = str(int(key))
        elif not isinstance(key, str):
            raise BadInputError(f"input '{name}' is a dictionary with string keys; got the key {key!r}")
        if isinstance(number, (bool, np.bool_)) or not isinstance(number, (int, float, np.integer, np.floating)):
            raise BadInputError(f"input '{name}': the value of key {key!r} is {type(number).__name__}, not a number")
        place = index.get(key)
        if place is not None:
            out[place] = float(number)
    return out


def _convert_image(name, value, feature):
    """PIL image or uint8 [H, W, C] array -> float32 [1, C, H, W] in the model's channel order."""
    if hasattr(value, "mode") and hasattr(value, "size") and hasattr(value, "convert"):  # PIL.Image
        mode = {"RGB": "RGB", "BGR": "RGB", "GRAYSCALE": "L", "GRAYSCALE_FLOAT16": "F"}[feature["color_space"]]
        if value.mode != mode:
            raise BadInputError(f"image input '{name}' must be a PIL image of mode '{mode}', not '{value.mode}'")
        value = np.asarray(value)
    array = np.asarray(value)
    channels = 1 if feature["color_space"].startswith("GRAYSCALE") else 3
    if array.ndim == 2 and channels == 1:
        array = array[:, :, None]
    if array.ndim != 3 or array.shape[2] != channels:
        raise BadInputError(f"image input '{name}' must be an [H, W, {channels}] image; got shape {list(array.shape)}")
    if feature["color_space"] == "BGR":
        array = array[:, :, ::-1]
    dtype = np.float16 if feature["color_space"] == "GRAYSCALE_FLOAT16" else np.float32
    return np.ascontiguousarray(array.transpose(2, 0, 1)[None].astype(dtype)), False


def _classifier_layout(function, labels):
    """(label output, probabilities output, labels) of a classifier function, or None.

    The engine returns classify's label as the winning class index and its dictionary as a
    probability vector in class order (its tensors hold no strings or dicts); ``labels``
    (``Model::class_labels()``, int labels in decimal) turns them back into coremltools' form.
    The outputs are the description's predicted feature and probabilities names, or else the
    outputs whose kinds say label (int64 or string) and dictionary.
    """
    if not labels:
        return None
    kinds = {f["name"]: f["kind"] for f in function["outputs"]}
    label_name = function["predicted_feature_name"] or next(
        (n for n, k in kinds.items() if k in ("int64", "string")), None)
    probabilities_name = function["predicted_probabilities_name"] or next(
        (n for n, k in kinds.items() if k == "dictionary"), None)
    if kinds.get(label_name) == "int64":
        labels = [int(label) for label in labels]
    return label_name, probabilities_name, labels


def _describe(features):
    return ", ".join(f"{f['name']}: {f['type']}" for f in features) or "none"


class _FeatureDescription:
    """Read-only view of a model's inputs or outputs, like coremltools' description."""

    def __init__(self, features):
        self._features = {f["name"]: f for f in features}

    def __len__(self):
        return len(self._features)

    def __contains__(self, name):
        return name in self._features

    def __iter__(self):
        return iter(self._features)

    def __getitem__(self, name):
        if name not in self._features:
            raise KeyError(f"No feature with name {name}.")
        return self._features[name]["short_description"]

    def __repr__(self):
        return "Features(" + ",".join(self._features) + ")"


class MLState:
    """The states of a stateful model (a KV cache, say), carried across predictions.

    Made by :meth:`MLModel.make_state`; pass it as ``predict(data, state=...)``. It may be
    shared by instances of different functions of one package when their state
    declarations match. A state serves one prediction at a time: using it from two
    concurrent predictions raises :class:`coremlrt.Error`.
    """

    def __init__(self, core_state, declarations):
        self._state = core_state
        self._declarations = {d["name"]: d for d in declarations}

    def read_state(self, name):
        """A copy of the named state as a numpy array (float16 states come back as float32). While a
        prediction is using the state, this waits for it to end (a KV-cache update writes the
        state's buffer in place during the prediction: src/runtime/state_update.h)."""
        value = self._state.read_state(name)
        return value.astype(np.float32) if value.dtype == np.float16 else value

    def write_state(self, name, value):
        """Replaces the named state with ``value`` (converted to the state's dtype; the shape must match)."""
        if name not in self._declarations:
            raise BadInputError(f"state has no tensor named '{name}'; its states are {sorted(self._declarations)}")
        array, _ = _convert(f"state '{name}'", value, self._declarations[name])
        self._state.write_state(name, array)

    def __reduce__(self):
        raise BadInputError("an MLState cannot be pickled: a stateful sequence lives in one process; run it there "
                    "with predict(..., state=...) in order")

    def __repr__(self):
        return "coremlrt.MLState(" + ", ".join(f"{n}: {d['type']}" for n, d in self._declarations.items()) + ")"


class MLModel:
    """A Core ML model loaded for prediction, shaped like ``coremltools.models.MLModel``.

    ``MLModel(path, compute_units=ComputeUnit.ALL, function_name=None)`` loads an
    ``.mlpackage`` folder, an ``.mlmodel`` file or a compiled ``.mlmodelc`` folder. One instance may be used from many
    threads at once; loading and each ``predict`` call run with the GIL released.

    Each prediction runs in an execution context (its working buffers) taken from a
    per-model pool. A context idle for ``context_linger`` seconds (default 1.0) is freed
    by a background thread, so a process that stops predicting returns to its post-load
    memory; a negative value keeps idle contexts for the model's lifetime.

    ``backend`` chooses who runs the ops (docs/design/architecture.md, "Backends"): ``"auto"``
    (default) lets the OpenVINO backend take the regions of the program where its cost rule
    says it pays and runs the rest on coremlrt's own kernels; ``"openvino"`` gives OpenVINO
    every op it can run; ``"reference"`` runs everything on coremlrt's own kernels.
    ``coremlrt.available_backends()`` lists what this build has. Without ``backend``, the
    environment variable ``COREMLRT_BACKEND`` chooses, else ``"auto"``.

    ``compute_units=ComputeUnit.CPU_AND_NE`` is the opt-in low-precision mode: matrix ops of
    fp16 programs may compute in bf16 on the CPU's matrix unit (AMX), as Core ML's Neural
    Engine computes in reduced precision. Every other choice keeps fp32 programs in fp32 and
    fp16 programs in fp16 or fp32.

    ``threads`` caps the threads one prediction may use (default: every core).
    ``concurrent_predictions`` (default 1) says how many predictions the caller will run at
    once, from as many threads: the OpenVINO backend then runs that many side by side, each
    on its share of ``threads``, instead of queueing them with every thread on each (best
    throughput for batch runs; ``predict_dataset`` sets it to its thread count). With 1, one
    prediction has every thread (lowest latency).
    ``packed_weights`` (default True) keeps compressed weights (quantized, palettized or
    sparse: ``coremltools.optimize``) in the form the weight file stores them, and the kernels
    that read them decode them as they run: the model takes about its file's size in memory.
    ``False`` decodes every one into a dense constant at load (docs/design/compressed-weights.md).
    ``weight_copies_limit_bytes`` caps what the copies of the weights the OpenVINO backend holds
    may add to the process, net of the weight file's pages they replace (it repacks the weights
    its kernels read, and keeps fp16 ones as fp32):
    with ``backend="auto"``, regions past it run on coremlrt's kernels, which read the weights as
    stored. Default: the model's weight bytes, at least 64 MiB; and by default a function that
    reads weights another function of the same package reads too (a language model's prefill and
    decode) runs on coremlrt's kernels alone, with ``backend="openvino"`` too: OpenVINO would copy
    those weights once per loaded function, where coremlrt's kernels share the one mapping.
    Giving a limit lifts that rule.
    ``cache_dir`` is where compiled backend regions are cached across processes, keyed by the
    model's content and the options (default ``$COREMLRT_CACHE_DIR`` or ``~/.cache/coremlrt``;
    ``None`` turns the cache off).

    Bounds (a downloaded file is untrusted): ``memory_limit_bytes`` caps the engine memory
    the model may hold at once (default: the machine's physical memory); a tensor that would
    pass it, or whose element count overflows, raises :class:`Error` naming the op. A
    ``while_loop`` running more than ``max_loop_iterations`` iterations (default 10,000,000)
    raises as well; the model stays usable after either.

    The arguments become one ``coremlrt._core.LoadOptions`` (include/coremlrt/model.h, where each
    option is explained), which the model keeps and pickles with its path. ``None`` (or 0) for a
    count or limit means its default. A value of the wrong type raises ``TypeError``, one out of
    range (a negative count, ``concurrent_predictions=0``) ``ValueError``.
    """

    def __init__(self, model, compute_units=ComputeUnit.ALL, function_name=None, *, context_linger=1.0,
                 backend=None, threads=None, cache_dir=_DEFAULT_CACHE_DIR, memory_limit_bytes=None,
                 max_loop_iterations=None, concurrent_predictions=None, packed_weights=True,
                 weight_copies_limit_bytes=None):
        if not isinstance(model, (str, os.PathLike)):
            raise TypeError(f"Expected model to be a path to an .mlpackage or .mlmodelc folder or an .mlmodel file, "
                            f"got {type(model).__name__}")
        if not (isinstance(compute_units, ComputeUnit) or type(compute_units).__name__ == "ComputeUnit"):
            raise TypeError('"compute_units" parameter must be of type: coremlrt.ComputeUnit')
        options = _options_from_arguments(
            compute_units, function_name, context_linger=context_linger, backend=backend, threads=threads,
            cache_dir=cache_dir, memory_limit_bytes=memory_limit_bytes, max_loop_iterations=max_loop_iterations,
            concurrent_predictions=concurrent_predictions, packed_weights=packed_weights,
            weight_copies_limit_bytes=weight_copies_limit_bytes)
        self._load(os.fspath(model), compute_units, options)

    @classmethod
    def _from_options(cls, path, compute_units, options):
        """The model at ``path`` loaded with ``options`` (a LoadOptions), as unpickling needs."""
        model = cls.__new__(cls)
        model._load(path, compute_units, options)
        return model

    def _load(self, path, compute_units, options):
        if path.rstrip("/" + os.sep).endswith(".aimodel"):  # Core AI: translated to MIL (coremlrt.coreai)
            from .coreai.compiler import compile_aimodel
            path = compile_aimodel(path, options.cache_dir or None)
        # "coremlrt-memory:N" names a model given as bytes (coremlrt._core.MemoryModel), not a file.
        self.package_path = path if path.startswith("coremlrt-memory:") else os.path.abspath(os.path.expanduser(path))
        self.compute_unit = compute_units
        self._options = copy.copy(options)  # the caller may change theirs afterwards
        self.backend = options.backend
        self._model = _core.Model(self.package_path, self._options)
        self._counter_lock = threading.Lock()
        self._inputs_zero_copy = 0
        self._inputs_converted = 0
        self._description = self._model.description()
        self.function_name = self._model.function_name
        function = next(f for f in self._description["functions"] if f["name"] == self.function_name)
        self._function = function
        self._inputs = {f["name"]: f for f in function["inputs"]}
        self._classifier = _classifier_layout(function, list(self._model.class_labels))
        self._vocabularies = {}
        # Outputs the engine returns as numbers over Model::output_vocabulary, decoded here:
        # name -> (kind, entries, integer ids), for strings (codes), sequences (codes) and
        # dictionaries other than a classifier's (values over the entries, NaN for none).
        self._string_outputs = {}
        for feature in function["outputs"]:
            if feature["kind"] in ("string", "sequence", "dictionary"):
                strings = list(self._model.output_vocabulary(feature["name"]))
                if strings:
                    integer = feature["kind"] != "string" and feature["dtype"] == "int64"
                    entries = [int(s) for s in strings] if integer else strings
                    self._string_outputs[feature["name"]] = (feature["kind"], entries)

    # -- description ---------------------------------------------------------------------
    @property
    def input_description(self):
        return _FeatureDescription(self._function["inputs"])

    @property
    def output_description(self):
        return _FeatureDescription(self._function["outputs"])

    @property
    def user_defined_metadata(self):
        return dict(self._description["metadata"]["user_defined"])

    @property
    def author(self):
        return self._description["metadata"]["author"]

    @property
    def license(self):
        return self._description["metadata"]["license"]

    @property
    def short_description(self):
        return self._description["metadata"]["short_description"]

    @property
    def version(self):
        return self._description["metadata"]["version"]

    @property
    def specification_version(self):
        return self._description["specification_version"]

    @property
    def weights_bytes(self):
        return self._model.weight_bytes

    def statistics(self):
        """Counters for monitoring and tests.

        ``inputs_zero_copy``: inputs the engine read in place (the caller's array already had
        the model's dtype and a C-contiguous layout); ``inputs_converted``: inputs converted
        once into new memory first; ``contexts_*`` and ``pooled_bytes``: the execution-context
        pool (created, freed after lingering, idle now, buffer bytes they keep).
        """
        stats = dict(self._model.stats())
        with self._counter_lock:
            stats["inputs_zero_copy"] = self._inputs_zero_copy
            stats["inputs_converted"] = self._inputs_converted
        return stats

    def __reduce__(self):
        # Pickles as its path, compute units and LoadOptions, never as native state: unpickling
        # loads the model again (once per process, through model_cache), as Dask and Ray workers need.
        return (_unpickle_model, (self.package_path, self.compute_unit.name, self._options))

    def __repr__(self):
        return (f"coremlrt.MLModel({self.package_path!r}, function={self.function_name!r}, "
                f"inputs=[{_describe(self._function['inputs'])}], "
                f"outputs=[{_describe(self._function['outputs'])}])")

    # -- prediction ----------------------------------------------------------------------
    def placements(self):
        """Where each op of the loaded function runs: a list of dicts with ``op_type``,
        ``op_name``, ``output``, ``backend`` ("reference", "openvino", or "folded" for ops
        computed at load), ``region`` (the backend region, -1 on coremlrt's kernels) and
        ``reason`` (why an op is not on the backend that was asked for)."""
        return self._model.placements()

    def make_state(self):
        """A zero-filled :class:`MLState` for this function's state declarations."""
        if not self._function["states"]:
            raise BadInputError(f"function '{self.function_name}' of {self.package_path} declares no states")
        return MLState(self._model.make_state(), self._function["states"])

    def predict(self, data, state=None):
        """Run the model: ``dict`` -> ``dict`` of numpy arrays; a list of dicts -> a list.

        ``state`` (from :meth:`make_state`) is required by stateful models and is updated in
        place when the prediction succeeds; batch (list) prediction cannot take a state.
        """
        if state is not None and not isinstance(state, MLState):
            raise TypeError(f'"state" must be an MLState made by make_state(), not {type(state).__name__}')
        if type(data) is list:
            if not all(type(d) is dict for d in data):
                raise TypeError('"data" list must contain only dictionaries')
            if state is not None:
                raise BadInputError("State can only be used for unbatched predictions")
            return [self._predict_one(d, None) for d in data]
        if type(data) is not dict:
            raise TypeError(f'"data" parameter must be either a dict or list of dict, but got {type(data)}.')
        return self._predict_one(data, state)

    async def predict_async(self, data, state=None):
        """``await model.predict_async(data)``: predict on a worker thread without blocking
        the event loop (the engine releases the GIL while it computes)."""
        return await asyncio.get_running_loop().run_in_executor(None, self.predict, data, state)

    def _vocabulary(self, name):
        """({entry: index}, integer_keys, absent_value) of a string, dictionary or sequence
        input, built once."""
        vocabulary = self._vocabularies.get(name)
        if vocabulary is None:
            entries, integer_keys, absent_value = self._model.input_vocabulary(name)
            vocabulary = ({entry: i for i, entry in enumerate(entries)}, integer_keys, absent_value)
            self._vocabularies[name] = vocabulary  # a benign race: every thread builds the same
        return vocabulary

    def _predict_one(self, data, state):
        try:
            return self._predict_unnamed(data, state)
        except Error as e:  # law 5: the input checks here name the input; say which model too
            if self.package_path in str(e):
                raise
            raise type(e)(f"model '{self.package_path}': {e}") from None  # of the same kind

    def _predict_unnamed(self, data, state):
        arrays = {}
        in_place = 0
        for name, value in data.items():
            feature = self._inputs.get(name)
            if feature is None:
                raise BadInputError(f"unknown input '{name}'; the model's inputs are: "
                                    f"{_describe(self._function['inputs'])}")
            if feature["kind"] == "image":
                arrays[name], zero_copy = _convert_image(name, value, feature)
            elif feature["kind"] == "multiArray":
                arrays[name], zero_copy = _convert(name, value, feature)
            elif feature["kind"] in ("double", "int64"):  # a number: the engine takes a 0-d array
                arrays[name], zero_copy = _convert_number(name, value, feature["kind"]), False
            elif feature["kind"] == "string":
                arrays[name], zero_copy = _encode_string(name, value, self._vocabulary(name)), False
            elif feature["kind"] == "dictionary":
                arrays[name], zero_copy = _encode_dictionary(name, value, self._vocabulary(name)), False
            elif feature["kind"] == "sequence":
                arrays[name], zero_copy = _encode_sequence(name, value, self._vocabulary(name),
                                                           feature["dtype"]), False
            else:
                raise UnsupportedError(f"input '{name}' is a {feature['kind']} feature, which this build cannot "
                                       "take yet")
            in_place += zero_copy
        with self._counter_lock:
            self._inputs_zero_copy += in_place
            self._inputs_converted += len(arrays) - in_place
        # float16 outputs arrive as float32 (python/src/module.cc widens them).
        outputs = self._model.predict(arrays, state._state if state is not None else None)
        for name, (kind, entries) in self._string_outputs.items():
            if name not in outputs:
                continue
            if kind == "string":
                outputs[name] = entries[int(outputs[name])]
            elif kind == "sequence":
                outputs[name] = [entries[int(code)] for code in outputs[name]]
            else:
                outputs[name] = {entries[i]: float(v) for i, v in enumerate(outputs[name]) if not np.isnan(v)}
        if self._classifier is not None:
            label_name, probabilities_name, labels = self._classifier
            if label_name in outputs:
                outputs[label_name] = labels[int(outputs[label_name])]
            if probabilities_name in outputs:
                outputs[probabilities_name] = {label: float(p) for label, p in zip(labels, outputs[probabilities_name])}
        return outputs


def _options_from_arguments(compute_units=ComputeUnit.ALL, function_name=None, *, context_linger=1.0, backend=None,
                            threads=None, cache_dir=_DEFAULT_CACHE_DIR, memory_limit_bytes=None,
                            max_loop_iterations=None, concurrent_predictions=None, packed_weights=True,
                            weight_copies_limit_bytes=None):
    """The LoadOptions (include/coremlrt/model.h) for MLModel's arguments. None stands for the
    engine's default; the environment names the backend (COREMLRT_BACKEND) and the cache folder
    (COREMLRT_CACHE_DIR) where the caller does not; ComputeUnit.CPU_AND_NE is the low-precision
    mode. LoadOptions checks the values (TypeError, ValueError: python/src/load_options_bindings.cc)."""
    if backend is None:
        backend = os.environ.get("COREMLRT_BACKEND") or "auto"
    if cache_dir is _DEFAULT_CACHE_DIR:
        cache_dir = os.environ.get("COREMLRT_CACHE_DIR") or os.path.join(os.path.expanduser("~"), ".cache", "coremlrt")

    def given(value, default=0):
        return default if value is None else value

    return _core.LoadOptions(function_name=given(function_name, ""), context_linger=context_linger,
                             backend=backend, low_precision=compute_units.name == "CPU_AND_NE",
                             threads=given(threads), cache_dir=os.fspath(cache_dir) if cache_dir else "",
                             memory_limit_bytes=given(memory_limit_bytes),
                             max_loop_iterations=given(max_loop_iterations),
                             concurrent_predictions=given(concurrent_predictions, 1),
                             packed_weights=bool(packed_weights),
                             weight_copies_limit_bytes=given(weight_copies_limit_bytes))


def cached_model(path, compute_units=ComputeUnit.ALL, function_name=None, **options):
    """The process's MLModel for this path, content and options, loaded on first use
    (model_cache.py). `options` are MLModel's keyword arguments (backend, threads, cache_dir...)."""
    return cached_model_for(path, compute_units, _options_from_arguments(compute_units, function_name, **options))


def cached_model_for(path, compute_units, options):
    """cached_model for a LoadOptions: equal options share one model."""
    path = os.path.abspath(os.path.expanduser(os.fspath(path)))

    def load():
        return MLModel._from_options(path, compute_units, options)

    if not os.path.exists(path):
        return load()  # the same words MLModel uses, without hashing anything first
    options_key = (compute_units.name, tuple(options.__getstate__().items()))
    return model_cache.cached(path, options_key, load)


def _unpickle_model(path, compute_units, options):
    return cached_model_for(path, ComputeUnit[compute_units], options)
