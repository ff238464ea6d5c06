"""Run an exported model with ONNX Runtime the way ``MLModel.predict`` runs the original: the same
input conversion (images, numbers, dtypes), float32 results, a classifier's label and
{label: probability} dictionary, and a state object carried between calls. Tests and
``scripts/coremltools_op_tests.py --via onnx`` compare the two with it.

ONNX Runtime's default graph optimizations fuse a DequantizeLinear that feeds a MatMul into its
MatMulNBits kernel, which by default (``session.qdq_matmulnbits_accuracy_level`` 4) rounds the
activations to int8: errors of about 1e-3 that Core ML does not make. The runner asks for level 1
(fp32 arithmetic), and the docs say so (docs/design/onnx-export.md).

ONNX Runtime 1.32 crashes (a segmentation fault while it creates the session) at its highest
optimization level (ORT_ENABLE_ALL, which adds layout transformations) on the export of an fp16
GRU network, whose recurrence coremltools writes as a while_loop (an ONNX Loop); level
ORT_ENABLE_EXTENDED loads and runs it. The runner uses that level for graphs with a Loop or If.
"""

import json

import numpy as np

_ORT_TYPES = {"tensor(float)": np.float32, "tensor(float16)": np.float16, "tensor(double)": np.float64,
              "tensor(int32)": np.int32, "tensor(int64)": np.int64, "tensor(bool)": np.bool_,
              "tensor(int8)": np.int8, "tensor(uint8)": np.uint8}


def session_options(control_flow=False):
    import onnxruntime
    options = onnxruntime.SessionOptions()
    options.add_session_config_entry("session.qdq_matmulnbits_accuracy_level", "1")
    if control_flow:
        options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    return options


def _has_control_flow(path):
    import onnx
    return any(n.op_type in ("Loop", "If") for n in onnx.load(str(path), load_external_data=False).graph.node)


class ExportedModel:
    def __init__(self, mlmodel, onnx_path):
        import onnxruntime
        self.mlmodel = mlmodel
        self.session = onnxruntime.InferenceSession(str(onnx_path), session_options(_has_control_flow(onnx_path)),
                                                    providers=["CPUExecutionProvider"])
        meta = self.session.get_modelmeta().custom_metadata_map
        self.states = json.loads(meta.get("coremlrt.states", "{}"))  # state input -> output
        # An input with a default (an optional Core ML input: ops_detection.py) is listed by ORT
        # among the overridable initializers, not the inputs.
        self.inputs = {i.name: i for i in self.session.get_inputs() + self.session.get_overridable_initializers()}

    def make_state(self):
        """Zeros of each state's shape and type (as MLModel.make_state's start)."""
        state = {}
        for name in self.states:
            info = self.inputs[name]
            state[name] = np.zeros([d if isinstance(d, int) else 1 for d in info.shape], dtype=_ORT_TYPES[info.type])
        return state

    def predict(self, data, state=None):
        from ..model import _convert, _convert_image, _convert_number
        features = self.mlmodel._inputs
        feed = {}
        for name, value in data.items():
            feature = features[name]
            if feature["kind"] == "image":
                array = _convert_image(name, value, feature)[0]
            elif feature["kind"] == "multiArray":
                array = _convert(name, value, feature)[0]
            elif feature["kind"] in ("double", "int64"):
                array = _convert_number(name, value, feature["kind"])
            elif feature["kind"] == "dictionary":  # a map input (DictVectorizer) of float values
                feed[name] = {k: float(x) for k, x in value.items()}
                continue
            elif feature["kind"] == "string":  # a string tensor (CategoryMapper makes the code)
                if not isinstance(value, str):
                    raise TypeError("input '%s' takes a str, got %s" % (name, type(value).__name__))
                info = self.inputs[name]
                feed[name] = np.asarray(value, dtype=object).reshape([d if isinstance(d, int) else 1 for d in info.shape])
                continue
            else:
                raise ValueError("input '%s' is a %s feature, which the export runner does not take" % (name, feature["kind"]))
            info = self.inputs.get(name)
            if info is not None:
                feed[name] = np.ascontiguousarray(array, dtype=_ORT_TYPES.get(info.type, array.dtype))
        if self.states:
            if state is None:
                raise ValueError("the model has states: pass state=runner.make_state()")
            feed.update({name: state[name] for name in self.states})
        names = [o.name for o in self.session.get_outputs()]
        results = dict(zip(names, self.session.run(None, feed)))
        for name, out_name in self.states.items():
            state[name] = results.pop(out_name)
        outputs = {}
        for name, value in results.items():
            if isinstance(value, list):  # ZipMap: one {label: probability} per example
                outputs[name] = {k: float(p) for k, p in value[0].items()}
            elif isinstance(value, np.ndarray) and value.dtype == np.float16:
                outputs[name] = value.astype(np.float32)
            elif isinstance(value, np.ndarray) and value.dtype == object and value.size == 1 and \
                    self.mlmodel._string_outputs.get(name, ("",))[0] == "string":
                outputs[name] = str(value.reshape(-1)[0])  # a string feature, as MLModel.predict gives it
            else:
                outputs[name] = value
        classifier = self.mlmodel._classifier
        if classifier is not None and classifier[0] in outputs:
            label = outputs[classifier[0]].reshape(-1)[0]
            outputs[classifier[0]] = label.item() if isinstance(label, np.generic) else label
        return outputs
