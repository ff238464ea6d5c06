"""Classifier outputs, as the ai.onnx.ml domain writes them.

``classify`` (src/ops/classify.h) turns a probability vector into the predicted label and the
{label: probability} dictionary. Exported: the label as a tensor of one element per example
([N]: ai.onnx.ml's convention, where coremlrt returns a scalar for the one example), from an
ArgMax over the classes, and the dictionary as ``ZipMap`` (a sequence with one map per example).
"""

import numpy as np
from onnx import TensorProto, helper

from .graph import Unsupported
from .registry import translates


def class_labels(constant):
    """(labels, integer) of classify's `classes` constant: a list of scalars or a 1-D tensor."""
    if constant.items:
        values = [item.scalar() for item in constant.items]
    elif constant.strings is not None:
        values = list(constant.strings)
    elif constant.array is not None:
        values = [v.item() for v in constant.array.reshape(-1)]
    else:
        raise Unsupported("classes of an unknown form")
    integer = all(isinstance(x, (int, np.integer)) and not isinstance(x, bool) for x in values)
    if not integer and not all(isinstance(x, str) for x in values):
        raise Unsupported("classes mixing strings and integers")
    return values, integer


@translates("classify")
def classify(v):
    b = v.builder
    labels, integer = class_labels(v.constant("classes", required=True))
    probabilities = v.input("probabilities")
    if v.dtype("probabilities") != "float32":
        probabilities = b.node("Cast", [probabilities], to=TensorProto.FLOAT)
    rows = b.node("Reshape", [probabilities, b.const_int64([-1, len(labels)], "rows")])
    index = b.node("ArgMax", [rows], axis=1, keepdims=0)
    table = b.initializer(np.asarray(labels, dtype=np.int64 if integer else object), "class_labels")
    b.node("Gather", [table, index], [v.output(0)], axis=0)
    label_type = TensorProto.INT64 if integer else TensorProto.STRING
    b.output_types[v.outputs[0]["name"]] = helper.make_tensor_type_proto(label_type, ["N"])
    if len(v.outputs) > 1:
        attribute = {"classlabels_int64s": labels} if integer else {"classlabels_strings": labels}
        b.node("ZipMap", [rows], [v.output(1)], domain="ai.onnx.ml", **attribute)
        b.output_types[v.outputs[1]["name"]] = helper.make_sequence_type_proto(
            helper.make_map_type_proto(label_type, helper.make_tensor_type_proto(TensorProto.FLOAT, [])))
