"""Open Inference Protocol tensors <-> the numpy dicts ``MLModel.predict`` takes and returns.

The transports (rest.py, grpc_server.py) turn a request's tensors into :class:`Tensor` values
whose data is raw little-endian bytes (binary extension, gRPC raw contents: viewed with
``np.frombuffer``, not copied), a numpy array (JSON numbers, parsed by rest_json.py), or a list
(BYTES strings). Every check a request can fail happens here, before anything runs, and raises
:class:`~.errors.RequestError` naming the input and what the model expects: datatype (the
model's own, as Triton requires; an FP16 input also takes FP32), shape (the model's fixed
shape, its ranges or its enumerated shapes), missing, doubled and unknown inputs, data that
does not fill the shape.
"""

import math

import numpy as np

from .errors import RequestError

# Model feature dtype -> protocol datatype.
DATATYPES = {"float32": "FP32", "float16": "FP16", "float64": "FP64", "int32": "INT32", "int8": "INT8",
             "double": "FP64", "int64": "INT64"}
NUMPY = {"FP32": np.float32, "FP16": np.float16, "FP64": np.float64, "INT32": np.int32, "INT8": np.int8,
         "INT16": np.int16, "INT64": np.int64, "UINT8": np.uint8, "UINT16": np.uint16, "UINT32": np.uint32,
         "UINT64": np.uint64, "BOOL": np.bool_}
# numpy dtype -> protocol datatype, for outputs.
OUTPUT_DATATYPES = {np.dtype(v): k for k, v in NUMPY.items()}

# Elements one input may declare; a shape past it is refused before any memory is taken.
MAX_ELEMENTS = 1 << 28


class Tensor:
    """One input tensor as a transport received it."""

    __slots__ = ("name", "datatype", "shape", "data")

    def __init__(self, name, datatype, shape, data):
        self.name, self.datatype, self.shape, self.data = name, datatype, shape, data


def datatype(feature, output=False):
    """The protocol datatype of a feature. float16 outputs are answered as FP32 (MLModel.predict
    widens them, as coremltools does)."""
    if output and feature.get("dtype") == "float16" and feature["kind"] == "multiArray":
        return "FP32"
    if feature["kind"] == "image":
        return "UINT8"  # an [H, W, C] image array (model.py's image input rule)
    if feature["kind"] in ("double", "int64"):
        return DATATYPES[feature["kind"]]
    if feature["kind"] == "dictionary":
        return "FP64"  # a classifier's probabilities, in class-label order
    return DATATYPES.get(feature.get("dtype"), "BYTES")


def metadata_shape(feature):
    """The shape a client is told: -1 where a dimension may vary (a range, enumerated shapes
    that differ there, or a dimension the description leaves unknown)."""
    if feature["kind"] == "image":
        return [feature["image_height"] or -1, feature["image_width"] or -1,
                1 if feature["color_space"].startswith("GRAYSCALE") else 3]
    if feature["kind"] in ("double", "int64", "string"):
        return [1]
    if feature["kind"] == "dictionary":
        return [-1]
    ranges = feature.get("shape_range") or []
    enumerated = feature.get("enumerated_shapes") or []
    rank = max(len(feature.get("shape") or []), len(ranges), *(len(s) for s in enumerated)) if (
        feature.get("shape") or ranges or enumerated) else 0
    if rank == 0:
        return [-1]  # nothing declared: any shape
    shape = list(feature.get("shape") or []) + [-1] * (rank - len(feature.get("shape") or []))
    shape = [d if d > 0 else -1 for d in shape]
    if enumerated:
        return [shape[i] if all(len(s) == rank and s[i] == shape[i] for s in enumerated) else -1 for i in range(rank)]
    for i, (low, high) in enumerate(ranges):
        if low != high:
            shape[i] = -1
        elif shape[i] == -1:
            shape[i] = low
    return shape


def check_shape(name, feature, shape):
    if feature["kind"] == "image":
        want = metadata_shape(feature)
        ok = len(shape) == 3 and all(w in (-1, d) for w, d in zip(want, shape))
    elif feature["kind"] in ("double", "int64"):
        want, ok = [1], math.prod(shape) == 1
    elif feature.get("enumerated_shapes"):
        want = " or ".join(str(list(s)) for s in feature["enumerated_shapes"])
        ok = any(list(s) == shape for s in feature["enumerated_shapes"])
    elif feature.get("shape_range"):
        want = [f"{lo}..{hi}" if lo != hi else lo for lo, hi in feature["shape_range"]]
        ok = len(shape) == len(feature["shape_range"]) and all(
            lo <= d and (hi < 0 or d <= hi) for d, (lo, hi) in zip(shape, feature["shape_range"]))
    elif feature.get("shape"):
        want = list(feature["shape"])
        ok = shape == want
    else:
        want, ok = "any shape", True
    if not ok:
        raise RequestError(f"input '{name}': shape {shape}, the model takes {want}")


def decode_inputs(tensors, features):
    """[Tensor] -> {name: numpy array}, checked against the function's inputs ({name: feature})."""
    arrays = {}
    for tensor in tensors:
        feature = features.get(tensor.name)
        if feature is None:
            raise RequestError(f"unknown input '{tensor.name}'; the model's inputs are {sorted(features)}")
        if tensor.name in arrays:
            raise RequestError(f"input '{tensor.name}' is given twice")
        want = datatype(feature)
        # FP32 is also taken for an FP16 input (converted once), as MLModel.predict takes it.
        if tensor.datatype != want and not (want == "FP16" and tensor.datatype == "FP32"):
            raise RequestError(f"input '{tensor.name}': datatype {tensor.datatype}, the model takes {want}")
        shape = tensor.shape
        if any(d < 0 for d in shape):
            raise RequestError(f"input '{tensor.name}': shape {shape} has a negative dimension")
        if math.prod(shape) > MAX_ELEMENTS:
            raise RequestError(f"input '{tensor.name}': shape {shape} is over the limit of {MAX_ELEMENTS} "
                               f"elements", 413)
        check_shape(tensor.name, feature, shape)
        arrays[tensor.name] = to_array(tensor)
    missing = [name for name, f in features.items() if name not in arrays and not f["optional"]]
    if missing:
        raise RequestError(f"missing input(s) {missing}; the model's inputs are {sorted(features)}")
    for name, value in arrays.items():
        if features[name]["kind"] in ("double", "int64"):
            arrays[name] = value.reshape(())[()]  # a scalar feature takes a number
    return arrays


def to_array(tensor):
    """The tensor's data as an array of its shape: raw bytes are viewed, not copied."""
    dtype = NUMPY.get(tensor.datatype)
    if dtype is None:
        raise RequestError(f"input '{tensor.name}': datatype {tensor.datatype} is not one the server takes")
    data, count = tensor.data, math.prod(tensor.shape)
    try:
        if isinstance(data, (bytes, bytearray, memoryview)):
            itemsize = np.dtype(dtype).itemsize
            if len(data) != count * itemsize:
                raise RequestError(f"input '{tensor.name}': {len(data)} bytes for shape {tensor.shape} "
                                   f"({count * itemsize} needed)")
            flat = np.frombuffer(data, dtype)
        elif isinstance(data, np.ndarray):
            flat = data.reshape(-1) if data.dtype == dtype else data.reshape(-1).astype(dtype)
        else:
            flat = np.asarray(data, dtype=dtype).reshape(-1)
    except (TypeError, ValueError, OverflowError) as exc:
        raise RequestError(f"input '{tensor.name}': data is not {tensor.datatype} values: {exc}") from None
    if flat.size != count:
        raise RequestError(f"input '{tensor.name}': {flat.size} values for shape {tensor.shape} ({count} needed)")
    return flat.reshape(tensor.shape)


class Output:
    """One answered tensor: protocol datatype, shape, and an array (numbers) or a list of bytes
    (BYTES)."""

    __slots__ = ("name", "datatype", "shape", "value")

    def __init__(self, name, datatype, shape, value):
        self.name, self.datatype, self.shape, self.value = name, datatype, shape, value

    def raw(self):
        """The protocol's raw form: little-endian values, or BYTES as 4-byte lengths + bytes."""
        if self.datatype == "BYTES":
            return b"".join(len(b).to_bytes(4, "little") + b for b in self.value)
        return self.value.tobytes()

    def json_data(self):
        if self.datatype == "BYTES":
            return [b.decode("utf-8", "replace") for b in self.value]
        return self.value.reshape(-1).tolist()


def encode_outputs(outputs, requested=None, class_labels=None):
    """{name: value} -> [Output]: every output, or the requested ones ({name: classification
    count or 0}) in the order asked. A classifier's {label: probability} is FP64 values in label
    order; a requested classification is top-k "score:index[:label]" strings (BYTES)."""
    names = list(requested) if requested else list(outputs)
    encoded = []
    for name in names:
        value = outputs[name]
        labels = class_labels
        if isinstance(value, dict):  # a classifier's {label: probability}
            labels = [str(k) for k in value]
            value = np.asarray(list(value.values()), np.float64)
        count = requested.get(name, 0) if requested else 0
        if count:
            encoded.append(_classification(name, np.asarray(value), count, labels))
            continue
        if isinstance(value, (str, bytes)):
            encoded.append(Output(name, "BYTES", [1], [value.encode() if isinstance(value, str) else value]))
            continue
        array = np.asarray(value)
        if array.dtype.kind in "US":
            flat = [str(v).encode() for v in array.reshape(-1)]
            encoded.append(Output(name, "BYTES", list(array.shape) or [1], flat))
            continue
        if array.dtype not in OUTPUT_DATATYPES:
            array = array.astype(np.float32 if array.dtype == np.float16 else np.float64)
        if array.ndim == 0:
            array = array.reshape(1)
        encoded.append(Output(name, OUTPUT_DATATYPES[array.dtype], list(array.shape), np.ascontiguousarray(array)))
    return encoded


def _classification(name, value, count, labels):
    """Triton's classification extension: the ``count`` largest values of each row (of the whole
    tensor when it has one row) as "score:index" or "score:index:label" strings."""
    if value.dtype.kind not in "fiub" or value.size == 0:
        raise RequestError(f"output '{name}' holds no numbers to classify")
    rows = value.reshape(value.shape[0], -1) if value.ndim > 1 else value.reshape(1, -1)
    k = min(count, rows.shape[1])
    strings = []
    for row in rows:
        for index in np.argsort(-row.astype(np.float64), kind="stable")[:k]:
            label = f":{labels[index]}" if labels is not None and index < len(labels) else ""
            strings.append(f"{float(row[index]):g}:{index}{label}".encode())
    shape = [rows.shape[0], k] if value.ndim > 1 else [k]
    return Output(name, "BYTES", shape, strings)
