"""Open Inference Protocol tensors <-> the numpy dicts ``MLModel.predict`` takes and returns.

Every check a request can fail happens here, before anything runs, and raises
:class:`RequestError` naming the input and what the model expects: datatype (the model's own,
as Triton requires; an FP16 input also takes FP32), shape (the model's fixed shape, its
ranges or its enumerated shapes), missing and unknown inputs, data that does not fill the
shape.
"""

import numpy as np

from .rest_binary import PENDING, TOKEN_PARAMETER

# Model feature dtype -> protocol datatype.
DATATYPES = {"float32": "FP32", "float16": "FP16", "float64": "FP64", "int32": "INT32", "int8": "INT8",
             "double": "FP64", "int64": "INT64"}
_NUMPY = {"FP32": np.float32, "FP16": np.float16, "FP64": np.float64, "INT32": np.int32, "INT8": np.int8,
          "INT64": np.int64, "UINT8": np.uint8, "BOOL": np.bool_}


class RequestError(Exception):
    """A client's mistake: answered with ``status`` (400 unless said) and this message."""

    def __init__(self, message, status=400):
        super().__init__(message)
        self.status = status


def datatype(feature, output=False):
    """The protocol datatype of a feature. float16 outputs are answered as FP32 (MLModel.predict
    widens them, as coremltools does)."""
    if output and feature.get("dtype") == "float16" and feature["kind"] == "multiArray":
        return "FP32"
    if feature["kind"] == "image":
        return "UINT8"  # an [H, W, C] image array (model.py's image input rule)
    if feature["kind"] in ("double", "int64"):
        return DATATYPES[feature["kind"]]
    return DATATYPES.get(feature["dtype"], "BYTES")


def metadata_shape(feature):
    """The shape a client is told: -1 where a dimension may vary."""
    if feature["kind"] == "image":
        return [feature["image_height"] or -1, feature["image_width"] or -1,
                1 if feature["color_space"].startswith("GRAYSCALE") else 3]
    if feature["kind"] in ("double", "int64"):
        return [1]
    shape = list(feature["shape"])
    if feature["enumerated_shapes"]:
        return [d if all(s[i] == d for s in feature["enumerated_shapes"]) else -1 for i, d in enumerate(shape)]
    for i, (low, high) in enumerate(feature["shape_range"]):
        if low != high:
            shape[i] = -1
    return shape


def check_shape(name, feature, shape):
    shape = [int(d) for d in shape]
    if feature["kind"] == "image":
        want = metadata_shape(feature)
        ok = len(shape) == 3 and all(w in (-1, d) for w, d in zip(want, shape))
    elif feature["kind"] in ("double", "int64"):
        want, ok = [1], int(np.prod(shape)) == 1
    elif feature["enumerated_shapes"]:
        want = " or ".join(str(list(s)) for s in feature["enumerated_shapes"])
        ok = any(list(s) == shape for s in feature["enumerated_shapes"])
    elif feature["shape_range"]:
        want = [f"{lo}..{hi}" if lo != hi else lo for lo, hi in feature["shape_range"]]
        ok = len(shape) == len(feature["shape_range"]) and all(
            lo <= d and (hi < 0 or d <= hi) for d, (lo, hi) in zip(shape, feature["shape_range"]))
    else:
        want = list(feature["shape"])
        ok = shape == want
    if not ok:
        raise RequestError(f"input '{name}': shape {shape}, the model takes {want}")


def decode_inputs(request_inputs, features, max_elements):
    """``payload.inputs`` -> {name: numpy array}, checked against the function's inputs."""
    arrays = {}
    for item in request_inputs:
        feature = features.get(item.name)
        if feature is None:
            raise RequestError(f"unknown input '{item.name}'; the model's inputs are {sorted(features)}")
        if item.name in arrays:
            raise RequestError(f"input '{item.name}' is given twice")
        want = datatype(feature)
        # FP32 is also taken for an FP16 input (converted once), as MLModel.predict takes it.
        if item.datatype != want and not (want == "FP16" and item.datatype == "FP32"):
            raise RequestError(f"input '{item.name}': datatype {item.datatype}, the model takes {want}")
        shape = list(item.shape)
        if any(d < 0 for d in shape) or int(np.prod(shape, dtype=np.float64)) > max_elements:
            raise RequestError(f"input '{item.name}': shape {shape} is negative or too large", 413
                               if all(d >= 0 for d in shape) else 400)
        check_shape(item.name, feature, shape)
        arrays[item.name] = _to_array(item, shape)
    missing = [name for name, f in features.items() if name not in arrays and not f["optional"]]
    if missing:
        raise RequestError(f"missing input(s) {missing}; the model's inputs are {sorted(features)}")
    return arrays


def _to_array(item, shape):
    data = getattr(item.data, "root", item.data)
    token = getattr(item.parameters, TOKEN_PARAMETER, None) if item.parameters is not None else None
    if token is not None:  # a REST binary-extension tensor (rest_binary.py)
        data = PENDING.get(token) if isinstance(token, str) else None
        if data is None:
            raise RequestError(f"input '{item.name}': {TOKEN_PARAMETER} names no binary tensor of this request")
    dtype = _NUMPY[item.datatype]
    try:
        if isinstance(data, (bytes, bytearray)):
            flat = np.frombuffer(data, dtype)
        else:
            flat = np.asarray(data, dtype=dtype).reshape(-1)
    except (TypeError, ValueError, OverflowError) as exc:
        raise RequestError(f"input '{item.name}': data is not {item.datatype} values: {exc}") from None
    if flat.size != int(np.prod(shape)):
        raise RequestError(f"input '{item.name}': {flat.size} values for shape {shape} "
                           f"({int(np.prod(shape))} needed)")
    return flat.reshape(shape)


def encode_outputs(outputs, requested=None):
    """{name: value} -> protocol outputs (numpy arrays as they are; a classifier's label and
    probability dict as BYTES and FP64), only the requested ones when the request names some."""
    from mlserver.codecs import NumpyCodec, StringCodec

    encoded = []
    for name, value in outputs.items():
        if requested and name not in requested:
            continue
        if isinstance(value, dict):  # a classifier's {label: probability}
            value = np.asarray(list(value.values()), np.float64)
        if isinstance(value, str):
            encoded.append(StringCodec.encode_output(name, [value]))
            continue
        encoded.append(NumpyCodec.encode_output(name, np.asarray(value)))
    return encoded
