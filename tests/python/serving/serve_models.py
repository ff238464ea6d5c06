"""Models the serving tests and benchmarks make with coremltools and torch (cached under
build/test-fixtures/serving, like tests/python/fixtures.py's cases):

* ``tiny``: y = tanh(x @ W + b), x fp32 [1, 8] (a fixed shape: requests run side by side);
* ``conv``: a small conv net, x fp32 [B, 3, 32, 32] with B flexible in 1..64 (requests merge);
  ``conv64`` the same net wider, on [B, 3, 64, 64] (benchmarks/bench_serve.py: enough work per
  request that batching, not the server's per-request cost, decides throughput);
* ``mobilenet_v2``: torchvision's mobilenet_v2 (random weights, eval mode), x fp32
  [B, 3, 224, 224] with B flexible in 1..64 (benchmarks/bench_serve.py's throughput target);
* ``lm``: the prefill/decode KV-cache LM of tests/python/lm_helpers.py (states, two functions);
* ``scale``: y = 2x - x computed in float16, x fp32 [1, N] with N flexible in 1..2^24: a
  flexible-shape model whose outputs hold NaN and +-Inf where x overflows float16 (|x| > 65504
  gives +-Inf in 2x, and Inf - Inf is NaN);
* ``detector``: tests/python/detection_helpers.py's detector joined to a nonMaximumSuppression
  stage as Ultralytics exports it: the pipeline declares iouThreshold / confidenceThreshold as
  required doubles (the model description makes them optional, with the stage's defaults), and
  the outputs' first dimension is only a range.
"""

import os
import shutil
import sys
import tempfile

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))  # fixtures, lm_helpers
import fixtures  # noqa: E402
import lm_helpers  # noqa: E402

# Bump when a builder changes, so that stale caches are rebuilt.
VERSION = 2
ROOT = os.path.join(os.path.abspath(fixtures.FIXTURES_DIR), "serving", f"v{VERSION}")


def _tiny(directory):
    import coremltools as ct
    import torch

    torch.manual_seed(11)
    module = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Tanh()).eval()
    traced = torch.jit.trace(module, torch.zeros(1, 8))
    model = ct.convert(traced, convert_to="mlprogram", inputs=[ct.TensorType(name="x", shape=(1, 8))],
                       outputs=[ct.TensorType(name="y")], compute_precision=ct.precision.FLOAT32,
                       minimum_deployment_target=ct.target.iOS16, skip_model_load=True)
    model.save(os.path.join(directory, "tiny.mlpackage"))


def _conv(directory, name="conv", size=32, width=16):
    import coremltools as ct
    import torch

    torch.manual_seed(12)
    module = torch.nn.Sequential(
        torch.nn.Conv2d(3, width, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(2 * width, 2 * width, 3, padding=1), torch.nn.ReLU(),
        torch.nn.AdaptiveAvgPool2d(1), torch.nn.Flatten(), torch.nn.Linear(2 * width, 10)).eval()
    traced = torch.jit.trace(module, torch.zeros(1, 3, size, size))
    batch = ct.RangeDim(lower_bound=1, upper_bound=64, default=1)
    model = ct.convert(traced, convert_to="mlprogram",
                       inputs=[ct.TensorType(name="x", shape=(batch, 3, size, size))],
                       outputs=[ct.TensorType(name="y")], compute_precision=ct.precision.FLOAT32,
                       minimum_deployment_target=ct.target.iOS16, skip_model_load=True)
    model.save(os.path.join(directory, name + ".mlpackage"))


def _conv64(directory):
    _conv(directory, "conv64", size=64, width=32)


def _mobilenet_v2(directory):
    import coremltools as ct
    import torch
    import torchvision

    torch.manual_seed(13)
    module = torchvision.models.mobilenet_v2(weights=None).eval()
    traced = torch.jit.trace(module, torch.zeros(1, 3, 224, 224))
    batch = ct.RangeDim(lower_bound=1, upper_bound=64, default=1)
    model = ct.convert(traced, convert_to="mlprogram",
                       inputs=[ct.TensorType(name="x", shape=(batch, 3, 224, 224))],
                       outputs=[ct.TensorType(name="y")], compute_precision=ct.precision.FLOAT32,
                       minimum_deployment_target=ct.target.iOS16, skip_model_load=True)
    model.save(os.path.join(directory, "mobilenet_v2.mlpackage"))


def _lm(directory):
    path, _ = lm_helpers.build_lm_package(directory)
    os.rename(path, os.path.join(directory, "lm.mlpackage"))
    for name in ("lm_prefill.mlpackage", "lm_decode.mlpackage"):
        shutil.rmtree(os.path.join(directory, name), ignore_errors=True)


def _scale(directory):
    import coremltools as ct
    import torch

    class Scale(torch.nn.Module):
        def forward(self, x):
            return x * 2 - x

    traced = torch.jit.trace(Scale().eval(), torch.zeros(1, 8))
    length = ct.RangeDim(lower_bound=1, upper_bound=1 << 24, default=8)
    model = ct.convert(traced, convert_to="mlprogram", inputs=[ct.TensorType(name="x", shape=(1, length))],
                       outputs=[ct.TensorType(name="y")], compute_precision=ct.precision.FLOAT16,
                       minimum_deployment_target=ct.target.iOS16, skip_model_load=True)
    model.save(os.path.join(directory, "scale.mlpackage"))


def _detector(directory):
    import warnings

    import coremltools as ct
    import torch

    import detection_helpers as D

    traced = torch.jit.trace(D.Detector(), torch.zeros(D.IMAGE))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        detector = ct.convert(traced, convert_to="mlprogram", compute_precision=ct.precision.FLOAT32,
                              minimum_deployment_target=ct.target.iOS16,
                              inputs=[ct.TensorType(name="image", shape=D.IMAGE)],
                              outputs=[ct.TensorType(name="raw_confidence"), ct.TensorType(name="raw_coordinates")])
        pipeline = ct.utils.make_pipeline(detector, ct.models.MLModel(D.nms_spec(threshold_inputs="pipeline")))
        spec = pipeline.get_spec()
        for name in ("iouThreshold", "confidenceThreshold"):  # required doubles, as the export declares them
            feature = spec.description.input.add()
            feature.name = name
            feature.type.doubleType.SetInParent()
        ct.models.MLModel(spec, weights_dir=pipeline.weights_dir).save(os.path.join(directory, "detector.mlpackage"))


BUILDERS = {"tiny": _tiny, "conv": _conv, "conv64": _conv64, "mobilenet_v2": _mobilenet_v2, "lm": _lm,
            "scale": _scale, "detector": _detector}


def model_path(name):
    """The package of a serving test model, built on first use (atomically: concurrent test
    processes never see half a package)."""
    target = os.path.join(ROOT, name)
    if not os.path.isdir(target):
        os.makedirs(ROOT, exist_ok=True)
        scratch = tempfile.mkdtemp(prefix=name + ".", dir=ROOT)
        try:
            os.environ.setdefault("TQDM_DISABLE", "1")
            with _temporary_files_in(scratch):
                BUILDERS[name](scratch)
            os.rename(scratch, target)
        except OSError:
            if not os.path.isdir(target):
                raise
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
    return os.path.join(target, name + ".mlpackage")


class _temporary_files_in:
    """tempfile's default folder set to ``directory`` for a while (coremltools' make_pipeline
    writes temporary packages there)."""

    def __init__(self, directory):
        self.directory = directory

    def __enter__(self):
        self.saved, tempfile.tempdir = tempfile.tempdir, self.directory

    def __exit__(self, *exc):
        tempfile.tempdir = self.saved


def torch_lm():
    """The torch module the LM package was converted from (same seed): the sequence reference."""
    return lm_helpers.make_torch_lm(0)


def random_input(name, rng, batch=1):
    if name == "tiny":
        return {"x": rng.standard_normal((1, 8)).astype(np.float32)}
    if name in ("conv", "conv64", "mobilenet_v2"):
        size = {"conv": 32, "conv64": 64, "mobilenet_v2": 224}[name]
        return {"x": rng.standard_normal((batch, 3, size, size)).astype(np.float32)}
    raise KeyError(name)
