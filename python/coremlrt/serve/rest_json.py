"""REST bodies of an inference request and its answer: JSON, and Triton's binary tensor
extension (tensors as raw bytes after a JSON header of ``Inference-Header-Content-Length``
bytes; tritonclient's http default).

Memory: a request costs about its body plus its tensors. Binary tensors are views of the body
(``np.frombuffer``), not copies. JSON number arrays (``"data": [...]``) are not turned into
Python objects (24-32 bytes a number, where the text took 10-20): :func:`parse_request` cuts
them out of the text before ``json.loads`` reads the rest, and :func:`_parse_numbers` reads
each into an array of the input's datatype, a slice of text at a time.

NaN and +-Infinity travel as Triton writes them in JSON (``NaN``, ``Infinity``,
``-Infinity``, which Python's json module and rapidjson read) and exactly in binary.
"""

import json
import re

import numpy as np

from .errors import RequestError
from .features import NUMPY, Tensor

# "data": [ ... ] whose contents may be numbers (checked while finding its end).
_DATA_ARRAY = re.compile(rb'"data"\s*:\s*\[')
_BRACKETS = re.compile(rb'[\[\]"{}]')
_SPAN_PREFIX = "\x00coremlrt-span-"
_SLICE_BYTES = 1 << 20  # text parsed at once into numbers
_NO_BRACKETS = bytes.maketrans(b"[]", b"  ")


def parse_request(body, header_length=None):
    """An infer body read: (tensors, parameters, outputs, binary_outputs, id). ``outputs`` maps
    requested output names to their classification count; ``binary_outputs`` is the set of
    outputs to answer in binary (or True: every output). ``header_length``: the
    Inference-Header-Content-Length header (binary extension), or None for plain JSON."""
    if header_length is not None:
        try:
            length = int(header_length)
        except ValueError:
            raise RequestError("Inference-Header-Content-Length is not a number") from None
        if not 0 <= length <= len(body):
            raise RequestError(f"Inference-Header-Content-Length {length} is outside the body of {len(body)} bytes")
        header, binary = body[:length], memoryview(body)[length:]
    else:
        header, binary = body, None
    document, spans = _load(header)
    if not isinstance(document, dict):
        raise RequestError("the request body must be a JSON object")
    parameters = _object(document.get("parameters"), "parameters")
    request_id = document.get("id", "")
    if not isinstance(request_id, str):
        raise RequestError("id must be a string")
    items = document.get("inputs")
    if not isinstance(items, list):
        raise RequestError('the request needs "inputs", a list of tensors')
    tensors, offset = [], 0
    for item in items:
        if not isinstance(item, dict):
            raise RequestError("each input must be a JSON object")
        name, datatype, shape = item.get("name"), item.get("datatype"), item.get("shape")
        if not isinstance(name, str) or not isinstance(datatype, str):
            raise RequestError("each input needs a string name and datatype")
        if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) for d in shape):
            raise RequestError(f"input '{name}': shape must be a list of integers")
        item_parameters = _object(item.get("parameters"), f"input '{name}' parameters")
        size = item_parameters.get("binary_data_size")
        if size is not None:
            if binary is None:
                raise RequestError(f"input '{name}' has binary_data_size but the request has no binary part "
                                   f"(Inference-Header-Content-Length)")
            if "data" in item:
                raise RequestError(f"input '{name}' has both data and binary_data_size")
            if not isinstance(size, int) or isinstance(size, bool) or size < 0:
                raise RequestError(f"input '{name}': binary_data_size must be a non-negative integer")
            if offset + size > len(binary):
                raise RequestError(f"input '{name}': its {size} binary bytes run past the body")
            data = binary[offset:offset + size]
            offset += size
        elif "data" not in item:
            raise RequestError(f"input '{name}' has no data")
        else:
            data = _data(item["data"], spans, header, name, datatype, shape)
        tensors.append(Tensor(name, datatype, shape, data))
    if binary is not None and offset != len(binary):
        raise RequestError(f"{len(binary) - offset} bytes after the last binary input: the body does not match "
                           f"the inputs' binary_data_size")
    outputs, binary_outputs = {}, set()
    every_binary = bool(parameters.get("binary_data_output", False))
    requested = document.get("outputs")
    if requested is not None:
        if not isinstance(requested, list):
            raise RequestError('"outputs" must be a list')
        for item in requested:
            if not isinstance(item, dict) or not isinstance(item.get("name"), str):
                raise RequestError("each requested output needs a string name")
            if item["name"] in outputs:
                raise RequestError(f"output '{item['name']}' is requested twice")
            item_parameters = _object(item.get("parameters"), f"output '{item['name']}' parameters")
            count = item_parameters.get("classification", 0)
            if not isinstance(count, int) or isinstance(count, bool) or count < 0:
                raise RequestError(f"output '{item['name']}': classification must be a non-negative integer")
            outputs[item["name"]] = count
            if item_parameters.get("binary_data", every_binary):
                binary_outputs.add(item["name"])
    return tensors, parameters, outputs, (True if every_binary and not requested else binary_outputs), request_id


def _object(value, what):
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise RequestError(f"{what} must be a JSON object")
    return value


def load_json(text):
    """json.loads of a body, refused with a 400 (not a 500) when it is not JSON or nested too deeply."""
    return _load(text)[0]


def _load(text):
    """json.loads of the body with each numeric "data" array replaced by a marker; the spans
    (start, end) of those arrays' text, by marker."""
    spans, pieces, last = {}, [], 0
    for match in _DATA_ARRAY.finditer(text):
        start = match.end() - 1
        if start < last:
            continue
        end = _array_end(text, start)
        if end is None:
            continue  # strings or objects inside: json reads it
        marker = f"{_SPAN_PREFIX}{len(spans)}"
        spans[marker] = (start + 1, end)
        pieces.append(text[last:start])
        pieces.append(json.dumps(marker).encode())
        last = end + 1
    if spans:
        pieces.append(text[last:])
        text = b"".join(pieces)
    try:
        return json.loads(text), spans
    except RecursionError:
        raise RequestError("the JSON body is nested too deeply") from None
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(f"the body is not valid JSON: {exc}") from None


def _array_end(text, start):
    """Index of the ']' closing the array that opens at ``start``, or None when the array holds
    strings or objects (or does not close)."""
    depth = 0
    for match in _BRACKETS.finditer(text, start):
        char = match.group()
        if char == b"[":
            depth += 1
        elif char == b"]":
            depth -= 1
            if depth == 0:
                return match.start()
        else:
            return None
    return None


def _data(value, spans, text, name, datatype, shape):
    if isinstance(value, str) and value in spans:
        dtype = NUMPY.get(datatype)
        if dtype is None or dtype == np.bool_:
            start, end = spans[value]
            return _json_list(text[start - 1:end + 1], name)
        return _parse_numbers(text, *spans[value], dtype, shape, name)
    return value


def _json_list(text, name):
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise RequestError(f"input '{name}': data is not valid JSON: {exc}") from None


def _parse_numbers(text, start, end, dtype, shape, name):
    """The numbers of text[start:end] (commas, brackets and blanks between them) as a flat
    array of ``dtype``, parsed a slice at a time: no Python object per number."""
    count = int(np.prod(shape)) if all(d >= 0 for d in shape) else -1
    parse_dtype = np.float64 if np.dtype(dtype).kind == "f" else dtype
    if count < 0 or count > (end - start + 1) // 2 + 1:
        # The text cannot hold that many numbers: read what it holds (bounded by the body, not
        # by the shape), for features.to_array to say how many there were.
        values = np.fromstring(bytes(memoryview(text)[start:end]).translate(_NO_BRACKETS) or b" ", dtype=parse_dtype,
                               sep=",")
        return values.astype(dtype)
    out = np.empty(count, dtype)
    filled, position = 0, start
    while position < end:
        stop = min(end, position + _SLICE_BYTES)
        if stop < end:
            comma = text.find(b",", stop, end)
            stop = end if comma < 0 else comma
        piece = bytes(memoryview(text)[position:stop]).translate(_NO_BRACKETS)
        position = stop + 1
        if not piece.strip():
            continue
        try:
            values = np.fromstring(piece, dtype=parse_dtype, sep=",")
        except (ValueError, DeprecationWarning):  # text that is not numbers, where warnings are errors
            values = None
        if values is None or values.size > count - filled or values.size != piece.count(b",") + 1:
            raise RequestError(f"input '{name}': data is not {np.dtype(dtype).name} numbers for shape {shape}")
        out[filled:filled + values.size] = values
        filled += values.size
    if filled != count:
        raise RequestError(f"input '{name}': {filled} values for shape {shape} ({count} needed)")
    return out


def encode_response(model_name, version, request_id, outputs, binary_outputs, parameters=None):
    """(body, headers): JSON, or JSON header + raw tensors when any output is binary."""
    entries, pieces = [], []
    for output in outputs:
        entry = {"name": output.name, "datatype": output.datatype, "shape": output.shape}
        if binary_outputs is True or output.name in binary_outputs:
            raw = output.raw()
            entry["parameters"] = {"binary_data_size": len(raw)}
            pieces.append(raw)
        else:
            entry["data"] = output.json_data()
        entries.append(entry)
    answer = {"model_name": model_name, "model_version": version}
    if request_id:
        answer["id"] = request_id
    if parameters:
        answer["parameters"] = parameters
    answer["outputs"] = entries
    header = json.dumps(answer, separators=(",", ":")).encode()
    if not pieces:
        return header, [(b"content-type", b"application/json")]
    return [header, *pieces], [(b"content-type", b"application/octet-stream"),
                               (b"Inference-Header-Content-Length", str(len(header)).encode())]
