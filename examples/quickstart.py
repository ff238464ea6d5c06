"""Make a Core ML model with coremltools, then run it on Linux with coremlrt.

The model is a two-layer classifier head built with coremltools' MIL builder and saved as an
.mlpackage with the default (fp16) compute precision, exactly as a user would make it.
"""

import os
import tempfile

import numpy as np
import coremltools as ct
from coremltools.converters.mil import Builder as mb

import coremlrt

rng = np.random.default_rng(0)
w1, b1 = rng.standard_normal((32, 16)).astype(np.float32) * 0.3, np.zeros(32, np.float32)
w2, b2 = rng.standard_normal((4, 32)).astype(np.float32) * 0.3, np.zeros(4, np.float32)


@mb.program(input_specs=[mb.TensorSpec(shape=(2, 16))], opset_version=ct.target.iOS18)
def classifier(x):
    hidden = mb.relu(x=mb.linear(x=x, weight=w1, bias=b1))
    return mb.softmax(x=mb.linear(x=hidden, weight=w2, bias=b2), axis=-1, name="probabilities")


path = os.path.join(tempfile.mkdtemp(), "classifier.mlpackage")
ct.convert(classifier, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
           skip_model_load=True).save(path)

model = coremlrt.MLModel(path)
x = rng.standard_normal((2, 16)).astype(np.float32)
probabilities = model.predict({"x": x})["probabilities"]

logits = np.maximum(x @ w1.T + b1, 0) @ w2.T + b2
reference = np.exp(logits - logits.max(-1, keepdims=True))
reference /= reference.sum(-1, keepdims=True)

print(model)
print("coremlrt probabilities:\n", probabilities)
print("numpy reference:\n", reference)
print("max abs difference (fp16 model): %.2e" % np.abs(probabilities - reference).max())
assert np.allclose(probabilities, reference, atol=1e-2), "prediction does not match the reference"
