"""Make a Core ML model with coremltools, then run it on Linux with coremlrt.

The model is a two-layer classifier head built with coremltools' MIL builder (no torch) and
saved as an .mlpackage with the default (fp16) compute precision, exactly as a user would make
it. Its weights come from a seeded generator, so the numpy reference needs no model file.

    python3 examples/quickstart.py                        # make the model, then predict with it
    python3 examples/quickstart.py --save DIR/m.mlpackage  # only make it (needs coremltools)
    python3 examples/quickstart.py --model DIR/m.mlpackage # only predict (needs coremlrt, numpy)

The last two split the example between environments: scripts/test_wheel.sh makes the model
where coremltools is installed and predicts in a bare environment holding only the wheel.
"""

import argparse
import os
import tempfile

import numpy as np

rng = np.random.default_rng(0)
w1, b1 = rng.standard_normal((32, 16)).astype(np.float32) * 0.3, np.zeros(32, np.float32)
w2, b2 = rng.standard_normal((4, 32)).astype(np.float32) * 0.3, np.zeros(4, np.float32)


def make_model(path):
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 16))], opset_version=ct.target.iOS18)
    def classifier(x):
        hidden = mb.relu(x=mb.linear(x=x, weight=w1, bias=b1))
        return mb.softmax(x=mb.linear(x=hidden, weight=w2, bias=b2), axis=-1, name="probabilities")

    ct.convert(classifier, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
               skip_model_load=True).save(path)


def predict(path):
    import coremlrt

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


parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("--save", metavar="PATH", help="make the model, save it at PATH and stop")
parser.add_argument("--model", metavar="PATH", help="predict with the model saved earlier with --save")
args = parser.parse_args()
if args.save:
    make_model(args.save)
    print("saved", args.save)
else:
    path = args.model
    if not path:
        path = os.path.join(tempfile.mkdtemp(), "classifier.mlpackage")
        make_model(path)
    predict(path)
