"""neuralNetwork models (the legacy layer graph) converted from small torch networks with pip's
coremltools, run by coremlrt and compared with torch."""

import os
import warnings

import coremltools as ct
import numpy as np
import pytest
import torch

import coremlrt
from coremlrt import _core

# The translated layers compute in fp32 like torch; only summation order differs.
RTOL, ATOL = 1e-5, 1e-5


def convert(net, example, directory, name):
    """Saves `net` (eval, traced on `example`) as a neuralNetwork .mlmodel with input 'x'."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mlmodel = ct.convert(torch.jit.trace(net.eval(), example), inputs=[ct.TensorType(name="x", shape=example.shape)],
                             convert_to="neuralnetwork", skip_model_load=True)
    path = os.path.join(str(directory), f"{name}.mlmodel")
    mlmodel.save(path)
    return path, mlmodel


def layer_kinds(mlmodel):
    return [layer.WhichOneof("layer") for layer in mlmodel.get_spec().neuralNetwork.layers]


def check_against_torch(path, net, example):
    model = coremlrt.MLModel(path)
    outputs = model.predict({"x": example.numpy()})
    assert len(outputs) == 1
    (actual,) = outputs.values()
    with torch.no_grad():
        expected = net(example).numpy()
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)


ACTIVATIONS = {
    "relu": (torch.nn.ReLU(), "activation"),
    "gelu": (torch.nn.GELU(), "gelu"),
    "gelu_tanh": (torch.nn.GELU(approximate="tanh"), "gelu"),
    "tanh": (torch.nn.Tanh(), "activation"),
    "sigmoid": (torch.nn.Sigmoid(), "activation"),
    "softmax": (torch.nn.Softmax(dim=-1), "softmaxND"),
    "leaky_relu": (torch.nn.LeakyReLU(0.2), "activation"),
    "elu": (torch.nn.ELU(0.7), "activation"),
    "softplus": (torch.nn.Softplus(), "activation"),
    "hardsigmoid": (torch.nn.Hardsigmoid(), "activation"),
}


@pytest.mark.parametrize("name", sorted(ACTIVATIONS))
def test_mlp_with_activation_matches_torch(tmp_path, name):
    torch.manual_seed(0)
    activation, layer_kind = ACTIVATIONS[name]
    net = torch.nn.Sequential(torch.nn.Linear(16, 24), activation, torch.nn.Linear(24, 5, bias=False))
    example = 2 * torch.randn(3, 16)
    path, mlmodel = convert(net, example, tmp_path, name)
    assert layer_kind in layer_kinds(mlmodel)
    check_against_torch(path, net, example)


def test_rank3_input_and_legacy_softmax(tmp_path):
    # innerProduct acts on the last axis of a rank-3 blob. The converter writes softmax over
    # the first of three axes as softmaxND; the legacy softmax layer (always axis -3) means
    # the same here, so the test swaps it in to run that layer too.
    torch.manual_seed(1)
    net = torch.nn.Sequential(torch.nn.Linear(6, 7), torch.nn.Softmax(dim=0))
    example = torch.randn(4, 3, 6)
    path, mlmodel = convert(net, example, tmp_path, "rank3")
    assert layer_kinds(mlmodel) == ["innerProduct", "softmaxND"]
    check_against_torch(path, net, example)
    spec = mlmodel.get_spec()
    layer = spec.neuralNetwork.layers[1]
    assert layer.softmaxND.axis in (0, -3)
    layer.softmax.SetInParent()
    legacy_path = str(tmp_path / "rank3_legacy_softmax.mlmodel")
    ct.utils.save_spec(spec, legacy_path)
    check_against_torch(legacy_path, net, example)


def test_fp16_weights(tmp_path):
    torch.manual_seed(2)
    net = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    example = torch.randn(2, 16)
    path, mlmodel = convert(net, example, tmp_path, "fp32_weights")
    spec = mlmodel.get_spec()
    for layer in spec.neuralNetwork.layers:
        if layer.HasField("innerProduct"):
            for weights in (layer.innerProduct.weights, layer.innerProduct.bias):
                values = np.array(weights.floatValue, np.float32)
                del weights.floatValue[:]
                weights.float16Value = values.astype("<f2").tobytes()
    fp16_path = str(tmp_path / "fp16_weights.mlmodel")
    ct.utils.save_spec(spec, fp16_path)
    # The reference is torch with its weights rounded to fp16 the same way.
    with torch.no_grad():
        for p in net.parameters():
            p.copy_(p.half().float())
    check_against_torch(fp16_path, net, example)


def test_info_lists_layers(tmp_path):
    net = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh())
    path, _ = convert(net, torch.randn(1, 8), tmp_path, "info")
    report = _core.inspect(path)
    assert report["description"]["model_type"] == "neuralNetwork"
    assert report["problem"] == ""
    (function,) = report["functions"]
    assert function["op_counts"] == {"innerProduct": 1, "activation": 1}
    assert function["unsupported"] == []


def custom_layer_model(tmp_path):
    """A conv + ReLU network whose convolution is swapped for a custom layer, a kind no build
    runs (its code lives in the app that ships the model)."""
    net = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU())
    _, mlmodel = convert(net, torch.randn(1, 3, 8, 8), tmp_path, "conv")
    spec = mlmodel.get_spec()
    (layer,) = [layer for layer in spec.neuralNetwork.layers if layer.HasField("convolution")]
    layer.custom.className = "AppConvolution"
    path = str(tmp_path / "custom.mlmodel")
    ct.utils.save_spec(spec, path)
    return path, layer.name


def test_unsupported_layer_is_refused_at_load_by_type_and_name(tmp_path):
    path, layer_name = custom_layer_model(tmp_path)
    with pytest.raises(coremlrt.Error) as error:
        coremlrt.MLModel(path)
    message = str(error.value)
    assert "custom" in message and f"'{layer_name}'" in message and path in message


def test_info_reports_unsupported_layer(tmp_path):
    path, layer_name = custom_layer_model(tmp_path)
    report = _core.inspect(path)
    (function,) = report["functions"]
    assert function["op_counts"]["custom"] == 1
    assert [(u["op_type"], u["op_name"]) for u in function["unsupported"]] == [("custom", layer_name)]
    # The ReLU after it is a layer kind this build runs, so it is not listed.
    assert function["op_counts"]["activation"] == 1


def test_rank4_inner_product_folds_trailing_axes(tmp_path):
    # On rank 4 innerProduct folds [x1, C, H, W] into [x1, C*H*W] and returns [x1, out, 1, 1]
    # (NeuralNetwork.proto's InnerProductLayerParams).
    net = torch.nn.Sequential(torch.nn.Linear(16, 4))
    path, mlmodel = convert(net, torch.randn(3, 16), tmp_path, "linear")
    spec = mlmodel.get_spec()
    del spec.description.input[0].type.multiArrayType.shape[:]
    spec.description.input[0].type.multiArrayType.shape.extend([3, 4, 2, 2])
    rank4_path = str(tmp_path / "rank4.mlmodel")
    ct.utils.save_spec(spec, rank4_path)
    x = np.random.default_rng(1).standard_normal((3, 4, 2, 2)).astype(np.float32)
    (actual,) = coremlrt.MLModel(rank4_path).predict({"x": x}).values()
    with torch.no_grad():
        expected = net(torch.from_numpy(x.reshape(3, 16))).numpy().reshape(3, 4, 1, 1)
    assert actual.shape == expected.shape
    np.testing.assert_allclose(actual, expected, rtol=RTOL, atol=ATOL)


def test_legacy_rank5_array_mapping_refuses_arrays_of_rank_2(tmp_path):
    # The legacy layout maps arrays of rank 1 ([C]) and 3 ([C, H, W]) only.
    path, mlmodel = convert(torch.nn.Sequential(torch.nn.Linear(16, 4)), torch.randn(3, 16), tmp_path, "linear")
    spec = mlmodel.get_spec()
    spec.neuralNetwork.arrayInputShapeMapping = 0  # RANK5_ARRAY_MAPPING
    legacy_path = str(tmp_path / "rank5.mlmodel")
    ct.utils.save_spec(spec, legacy_path)
    with pytest.raises(coremlrt.Error, match="rank 2; the rank-5 blob layout"):
        coremlrt.MLModel(legacy_path)
    assert "rank-5" in _core.inspect(legacy_path)["problem"]
