"""Networks people convert (torchvision, a BERT-like encoder, a UNet, LSTM and GRU models), converted
with coremltools, exported to ONNX with coremlrt.export_onnx and run by ONNX Runtime: the
export's outputs match torch at the model tests' tolerances (tests/python/models) and coremlrt's
own outputs on the same inputs.
"""

import numpy as np
import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
torch = pytest.importorskip("torch")
pytest.importorskip("coremltools")

import coremlrt  # noqa: E402
from coremlrt.onnx_export import export_onnx  # noqa: E402
from coremlrt.onnx_export.runner import ExportedModel  # noqa: E402
from models.test_small_nets import NETWORKS as SMALL_NETS  # noqa: E402
from torch_convert import FP32_TOLERANCE, assert_close, calibrate_batchnorm, convert, torch_outputs  # noqa: E402


def _torchvision(name):
    def build():
        import torchvision

        model = calibrate_batchnorm(getattr(torchvision.models, name)(weights=None), (2, 3, 64, 64))
        return model, [torch.randn(1, 3, 64, 64)], ["image"], ["logits"]

    return build


def _bert():
    import transformers

    config = transformers.BertConfig(vocab_size=128, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=128, max_position_embeddings=32)
    bert = transformers.BertModel(config, add_pooling_layer=False).eval()

    class Encoder(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.bert = bert

        def forward(self, input_ids):
            return self.bert(input_ids=input_ids).last_hidden_state

    return Encoder().eval(), [torch.randint(0, 128, (1, 16))], None, None


# name -> (builder, fp16 tolerance or None for fp32 only, conversion route)
NETWORKS = {
    "resnet18": (_torchvision("resnet18"), 1e-2, "trace"),
    "mobilenet_v2": (_torchvision("mobilenet_v2"), None, "trace"),
    "bert2": (_bert, None, "export"),
    **{name: (build, tolerance, "trace") for name, (build, tolerance) in SMALL_NETS.items()},
}


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    cache = {}

    def get(name, precision):
        if (name, precision) not in cache:
            torch.manual_seed(0)
            model, inputs, input_names, output_names = NETWORKS[name][0]()
            directory = tmp_path_factory.mktemp(name)
            path, input_names, output_names = convert(model, inputs, directory, precision, name,
                                                      input_names=input_names, output_names=output_names,
                                                      via=NETWORKS[name][2])
            onnx_path = directory / f"{name}_{precision}.onnx"
            export_onnx(path, onnx_path)
            cache[(name, precision)] = (path, onnx_path, inputs, input_names, output_names, torch_outputs(model, inputs))
        return cache[(name, precision)]

    return get


CASES = [(name, "fp32") for name in NETWORKS] + [(name, "fp16") for name, (_, tol, _) in NETWORKS.items() if tol]


@pytest.mark.parametrize("name,precision", CASES)
def test_export_matches_torch_and_coremlrt(converted, name, precision):
    path, onnx_path, inputs, input_names, output_names, expected = converted(name, precision)
    model = coremlrt.MLModel(path)
    feeds = {}
    for input_name, example in zip(input_names, inputs):
        array = example.numpy()
        feeds[input_name] = array.astype(np.int32) if array.dtype == np.int64 else array
    got = ExportedModel(model, onnx_path).predict(feeds)
    native = model.predict(feeds)
    tolerance = FP32_TOLERANCE if precision == "fp32" else NETWORKS[name][1]
    for output_name, reference in zip(output_names, expected):
        assert_close(got[output_name], reference, tolerance, f"{name} {precision} {output_name} against torch")
        assert_close(got[output_name], native[output_name], tolerance,
                     f"{name} {precision} {output_name} against coremlrt")
