"""Convert torch networks with pip's coremltools the way users do, run them with coremlrt and
compare with torch, for the model tests in tests/python/models/.

Converter facts (coremltools 9.0, torch 2.14.1, transformers 5.24):

* ``torch.jit.trace`` converts most networks. Where the traced graph turns a tensor size into
  a Python int (``aten::Int`` of a shape: torchvision's VisionTransformer, BERT's embeddings),
  coremltools fails with "only 0-dimensional arrays can be converted to Python scalars";
  those networks go through ``torch.export`` instead, which keeps sizes static.
* Tracing skips torch's re-trace sanity check, which runs the network again and flags graphs
  that differ between invocations (torchvision's VisionTransformer does); comparing the
  converted model with torch is the check that matters.
"""

import os
import warnings

import coremltools as ct
import numpy as np
import torch

import coremlrt

PRECISIONS = {"fp32": ct.precision.FLOAT32, "fp16": ct.precision.FLOAT16}

# Largest error allowed in fp32, relative to the largest reference value. A correct fp32
# network differs from torch only by summation order: measured at most 1.1e-5 (mobilenet_v2,
# 52 layers); a kernel that drops a term or mixes up an index is off by far more.
FP32_TOLERANCE = 1e-4


def convert(model, example_inputs, directory, precision, name, input_names=None, output_names=None,
            target=ct.target.iOS16, via="trace"):
    """Convert `model` (eval mode) for `example_inputs` (torch tensors, fixed shapes) and save
    it under `directory`; returns (path, input names, output names) in torch's order.

    via="trace" converts a torch.jit.trace'd module with inputs named `input_names` and outputs
    named `output_names`; via="export" converts a torch.export'ed program, whose input and
    output names the converter chooses.
    """
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if via == "trace":
            source = torch.jit.trace(model, tuple(example_inputs), check_trace=False)
            inputs = [
                ct.TensorType(name=input_name, shape=tuple(example.shape), dtype=_mil_dtype(example))
                for input_name, example in zip(input_names, example_inputs)
            ]
            outputs = [ct.TensorType(name=output_name) for output_name in output_names] if output_names else None
            options = {"inputs": inputs, "outputs": outputs}
        else:
            source = torch.export.export(model, tuple(example_inputs)).run_decompositions({})
            options = {}
        mlmodel = ct.convert(source, convert_to="mlprogram", compute_precision=PRECISIONS[precision],
                             minimum_deployment_target=target, skip_model_load=True, **options)
    path = os.path.join(str(directory), f"{name}_{precision}.mlpackage")
    mlmodel.save(path)
    description = mlmodel.get_spec().description
    return path, [feature.name for feature in description.input], [feature.name for feature in description.output]


def _mil_dtype(example):
    return np.int32 if example.dtype in (torch.int32, torch.int64) else np.float32


def torch_outputs(model, example_inputs):
    """The network's outputs as a list of float32 numpy arrays (tuples flattened)."""
    with torch.no_grad():
        result = model(*example_inputs)
    if isinstance(result, torch.Tensor):
        result = (result,)
    return [tensor.detach().float().numpy() for tensor in result]


def coremlrt_outputs(path, input_names, output_names, example_inputs):
    """Runs the package with coremlrt on the same inputs; outputs in torch's order."""
    model = coremlrt.MLModel(path)
    feeds = {}
    for input_name, example in zip(input_names, example_inputs):
        array = example.numpy()
        feeds[input_name] = array.astype(np.int32) if array.dtype == np.int64 else array
    result = model.predict(feeds)
    return [result[output_name] for output_name in output_names]


def relative_max_error(actual, expected):
    """max |actual - expected| over max |expected|: the error in units of the output's scale."""
    assert actual.shape == expected.shape, (actual.shape, expected.shape)
    scale = float(np.abs(expected).max())
    assert scale > 0 and np.isfinite(scale), "the reference output must be finite and nonzero"
    return float(np.abs(actual.astype(np.float64) - expected).max()) / scale


def assert_close(actual, expected, tolerance, what=""):
    assert np.all(np.isfinite(actual)), f"{what}: coremlrt output has non-finite values"
    error = relative_max_error(actual, expected)
    assert error <= tolerance, f"{what}: max error {error:.3g} x output scale exceeds {tolerance:.3g}"


def assert_top_classes_agree(actual, expected, tolerance, k_values=(1, 5)):
    """For each row of logits, the top-k classes agree wherever the reference separates the
    k-th and (k+1)-th logit by more than twice the error the tolerance allows (closer logits
    may legitimately swap); returns how many (row, k) pairs were checked."""
    allowed = tolerance * float(np.abs(expected).max())
    checked = 0
    for actual_row, expected_row in zip(actual.reshape(-1, actual.shape[-1]), expected.reshape(-1, expected.shape[-1])):
        order = np.argsort(-expected_row)
        for k in k_values:
            if expected_row[order[k - 1]] - expected_row[order[k]] <= 2 * allowed:
                continue
            assert set(np.argsort(-actual_row)[:k]) == set(order[:k]), f"top-{k} classes differ"
            checked += 1
    return checked


def calibrate_batchnorm(model, input_shape, batch=8):
    """Sets every batch norm's running statistics from one batch of random inputs.

    Freshly initialised statistics (mean 0, variance 1) let activations shrink layer after
    layer (mobilenet_v2's logits end near 1e-9, below fp16's range, where every runtime
    outputs zeros). Statistics measured on data keep activations near unit scale, as in a
    trained network, so that fp16 is tested on numbers it can represent.
    """
    for module in model.modules():
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm):
            module.reset_running_stats()
            module.momentum = None  # plain average over the batches seen
    model.train()
    with torch.no_grad():
        model(torch.randn(batch, *input_shape[1:]))
    return model.eval()
