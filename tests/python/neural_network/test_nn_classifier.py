"""neuralNetworkClassifier and neuralNetworkRegressor models built with coremltools'
NeuralNetworkBuilder (mode "classifier" / "regressor"), in both blob layouts, run by coremlrt
and compared with numpy: a classifier's label is the argmax of the softmax and its dictionary
maps every class label to its probability."""

import os
import warnings

import numpy as np
import pytest

import coremlrt

ct = pytest.importorskip("coremltools")

from coremltools.models import datatypes  # noqa: E402
from coremltools.models.neural_network import NeuralNetworkBuilder  # noqa: E402
from nn_helpers import save_and_load  # noqa: E402

RTOL, ATOL = 1e-5, 1e-6
rng = np.random.default_rng(0)


def save(tmp_path, builder, name="model.mlmodel"):
    return save_and_load(tmp_path, builder, name)


def softmax(z):
    e = np.exp(z - z.max())
    return e / e.sum()


def dense_classifier(layout, labels, features=5, probability_blob=None):
    """data [features] -> innerProduct -> softmax 'probs'; returns the builder and (W, b)."""
    exact = layout == "exact"
    classes = len(labels)
    b = NeuralNetworkBuilder([("data", datatypes.Array(features))], [("probs", None)], mode="classifier",
                             disable_rank5_shape_mapping=exact)
    w = rng.standard_normal((classes, features)).astype(np.float32)
    bias = rng.standard_normal(classes).astype(np.float32)
    b.add_inner_product("ip", W=w, b=bias, input_channels=features, output_channels=classes, has_bias=True,
                        input_name="data", output_name="logits")
    if exact:
        b.add_softmax_nd("sm", "logits", "probs", axis=-1)
    else:
        b.add_softmax("sm", "logits", "probs")
    b.set_class_labels(labels, prediction_blob=probability_blob or "")
    return b, (w, bias)


LABELS = [["cat", "dog", "bird", "fish"], [3, 10, -7, 42]]


@pytest.mark.parametrize("layout", ["rank5", "exact"])
@pytest.mark.parametrize("labels", LABELS, ids=["string", "int64"])
def test_classifier_label_and_probabilities(tmp_path, layout, labels):
    b, (w, bias) = dense_classifier(layout, labels)
    model = save(tmp_path, b)
    for _ in range(5):
        x = rng.standard_normal(5).astype(np.float32)
        expected = softmax(w @ x + bias)
        out = model.predict({"data": x})
        assert set(out) == {"classLabel", "probs"}
        label = out["classLabel"]
        assert label == labels[int(np.argmax(expected))]
        assert type(label) is (str if isinstance(labels[0], str) else int)
        probabilities = out["probs"]
        assert isinstance(probabilities, dict)
        assert sorted(probabilities) == sorted(labels)
        for k, p in zip(labels, expected):
            assert type(next(iter(probabilities))) is type(k)
            assert type(probabilities[k]) is float
            np.testing.assert_allclose(probabilities[k], p, rtol=RTOL, atol=ATOL)


def test_classifier_label_follows_argmax_of_logits(tmp_path):
    """Probabilities from a network without softmax are passed through, not normalized."""
    labels = ["a", "b", "c"]
    b = NeuralNetworkBuilder([("data", datatypes.Array(3))], [("scores", None)], mode="classifier")
    b.add_activation("id", "LINEAR", "data", "scores", params=[2.0, 0.5])
    b.set_class_labels(labels)
    model = save(tmp_path, b)
    x = np.array([0.1, 0.9, -0.3], np.float32)
    out = model.predict({"data": x})
    assert out["classLabel"] == "b"
    for k, v in zip(labels, 2.0 * x + 0.5):
        np.testing.assert_allclose(out["scores"][k], v, rtol=RTOL, atol=ATOL)


def test_classifier_empty_probability_layer_name_uses_dangling_blob(tmp_path):
    labels = [1, 2, 3, 4]
    b, (w, bias) = dense_classifier("rank5", labels)
    b.spec.neuralNetworkClassifier.labelProbabilityLayerName = ""
    model = save(tmp_path, b)
    x = rng.standard_normal(5).astype(np.float32)
    expected = softmax(w @ x + bias)
    out = model.predict({"data": x})
    assert out["classLabel"] == labels[int(np.argmax(expected))]
    np.testing.assert_allclose([out["probs"][k] for k in labels], expected, rtol=RTOL, atol=ATOL)


def test_classifier_with_wrong_label_count_is_refused(tmp_path):
    b, _ = dense_classifier("rank5", ["a", "b", "c", "d"])
    b.spec.neuralNetworkClassifier.stringClassLabels.vector.append("e")
    # The description's keys are not checked by coremltools' spec; the label count is ours to refuse.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlmodel = ct.models.MLModel(b.spec, skip_model_load=True)
    path = os.path.join(str(tmp_path), "bad.mlmodel")
    mlmodel.save(path)
    with pytest.raises(Exception, match="values for 5 class labels"):
        coremlrt.MLModel(path).predict({"data": np.zeros(5, np.float32)})


@pytest.mark.parametrize("layout", ["rank5", "exact"])
def test_regressor_output_is_the_network_output(tmp_path, layout):
    exact = layout == "exact"
    b = NeuralNetworkBuilder([("data", datatypes.Array(6))], [("prediction", None)], mode="regressor",
                             disable_rank5_shape_mapping=exact)
    w = rng.standard_normal((2, 6)).astype(np.float32)
    bias = rng.standard_normal(2).astype(np.float32)
    b.add_inner_product("ip", W=w, b=bias, input_channels=6, output_channels=2, has_bias=True, input_name="data",
                        output_name="prediction")
    assert b.spec.WhichOneof("Type") == "neuralNetworkRegressor"
    model = save(tmp_path, b)
    x = rng.standard_normal(6).astype(np.float32)
    out = model.predict({"data": x})
    assert set(out) == {"prediction"}
    np.testing.assert_allclose(np.asarray(out["prediction"]).reshape(-1), w @ x + bias, rtol=1e-5, atol=1e-5)


def test_converted_torch_classifier(tmp_path):
    """ct.convert(..., convert_to="neuralnetwork", classifier_config=...) of a torch model."""
    torch = pytest.importorskip("torch")
    net = torch.nn.Sequential(torch.nn.Linear(6, 3), torch.nn.Softmax(dim=-1)).eval()
    example = torch.randn(1, 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlmodel = ct.convert(torch.jit.trace(net, example), inputs=[ct.TensorType(name="x", shape=example.shape)],
                             convert_to="neuralnetwork", classifier_config=ct.ClassifierConfig(["a", "b", "c"]),
                             skip_model_load=True)
    assert mlmodel.get_spec().WhichOneof("Type") == "neuralNetworkClassifier"
    path = os.path.join(str(tmp_path), "torch.mlmodel")
    mlmodel.save(path)
    model = coremlrt.MLModel(path)
    probabilities_name = mlmodel.get_spec().description.predictedProbabilitiesName
    for _ in range(3):
        x = rng.standard_normal((1, 6)).astype(np.float32)
        with torch.no_grad():
            expected = net(torch.from_numpy(x)).numpy()[0]
        out = model.predict({"x": x})
        assert out["classLabel"] == "abc"[int(np.argmax(expected))]
        np.testing.assert_allclose([out[probabilities_name][k] for k in "abc"], expected, rtol=RTOL, atol=ATOL)
