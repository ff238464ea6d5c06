"""Small torch networks of the kinds people convert (a UNet-like encoder-decoder with
learned, bilinear and nearest upsampling; LSTM and GRU sequence models), converted here with
coremltools in fp32 and fp16 and run with coremlrt; the expected outputs come from torch.
"""

import os

import pytest

ct = pytest.importorskip("coremltools")
torch = pytest.importorskip("torch")
nn = torch.nn
F = torch.nn.functional

from torch_convert import (  # noqa: E402
    FP32_TOLERANCE,
    assert_close,
    calibrate_batchnorm,
    convert,
    coremlrt_outputs,
    torch_outputs,
)


def conv_block(inputs, outputs):
    return nn.Sequential(
        nn.Conv2d(inputs, outputs, 3, padding=1), nn.BatchNorm2d(outputs), nn.ReLU(inplace=True),
        nn.Conv2d(outputs, outputs, 3, padding=1), nn.BatchNorm2d(outputs), nn.ReLU(inplace=True))


class TinyUNet(nn.Module):
    """Two poolings down, a transposed convolution and a bilinear upsampling back up, skip
    connections by concatenation, and a coarse auxiliary head upsampled with nearest."""

    def __init__(self, align_corners):
        super().__init__()
        self.encoder1, self.encoder2, self.bottom = conv_block(3, 16), conv_block(16, 32), conv_block(32, 64)
        self.pool = nn.MaxPool2d(2)
        self.up2 = nn.ConvTranspose2d(64, 32, 2, stride=2)
        self.decoder2 = conv_block(64, 32)
        self.up1 = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=align_corners)
        self.decoder1 = conv_block(32 + 16, 16)
        self.head = nn.Conv2d(16, 4, 1)
        self.coarse_head = nn.Conv2d(32, 4, 1)

    def forward(self, image):
        e1 = self.encoder1(image)
        e2 = self.encoder2(self.pool(e1))
        bottom = self.bottom(self.pool(e2))
        d2 = self.decoder2(torch.cat([self.up2(bottom), e2], dim=1))
        d1 = self.decoder1(torch.cat([self.up1(d2), e1], dim=1))
        coarse = F.interpolate(self.coarse_head(d2), scale_factor=2, mode="nearest")
        return self.head(d1), coarse


class SequenceModel(nn.Module):
    """A recurrent layer stack with a linear head on every step; initial states are inputs
    and the final states are outputs, as in a streaming model."""

    def __init__(self, cell, **config):
        super().__init__()
        self.rnn = cell(input_size=12, hidden_size=24, batch_first=True, **config)
        self.head = nn.Linear(self.rnn.hidden_size * (2 if self.rnn.bidirectional else 1), 6)

    def forward(self, sequence, *initial_state):
        state = initial_state if len(initial_state) > 1 else initial_state[0]
        output, final_state = self.rnn(sequence, state)
        final_state = final_state if isinstance(final_state, tuple) else (final_state,)
        return (self.head(output), *final_state)


def sequence_inputs(layers, directions, with_cell_state, batch=2, steps=10):
    state_shape = (layers * directions, batch, 24)
    states = [torch.randn(state_shape) * 0.5 for _ in range(2 if with_cell_state else 1)]
    return [torch.randn(batch, steps, 12), *states]


def unet(align_corners):
    def build():
        model = calibrate_batchnorm(TinyUNet(align_corners), (2, 3, 64, 64))
        return model, [torch.randn(2, 3, 64, 64)], ["image"], ["mask_logits", "coarse_logits"]

    return build


def sequence_model(cell, layers, bidirectional):
    def build():
        model = SequenceModel(cell, num_layers=layers, bidirectional=bidirectional).eval()
        with_cell_state = cell is nn.LSTM
        inputs = sequence_inputs(layers, 2 if bidirectional else 1, with_cell_state)
        state_names = ["h0", "c0"] if with_cell_state else ["h0"]
        final_names = ["h_n", "c_n"] if with_cell_state else ["h_n"]
        return model, inputs, ["sequence", *state_names], ["per_step", *final_names]

    return build


# name -> (builder, fp16 tolerance).
#
# fp16 tolerances: weights and activations are rounded to fp16 (relative error 2^-11 ~ 4.9e-4
# per value). The UNet has 13 convolutions in its longest path (measured error 2.0e-3 to
# 2.6e-3); the recurrent models carry their state through 10 steps of bounded gates (measured
# 3e-4..1.1e-3).
# A wrong kernel is off by the output's own scale.
NETWORKS = {
    "unet": (unet(align_corners=False), 1e-2),
    "unet_align_corners": (unet(align_corners=True), 1e-2),
    "lstm_2_layers": (sequence_model(nn.LSTM, layers=2, bidirectional=False), 5e-3),
    "lstm_bidirectional": (sequence_model(nn.LSTM, layers=1, bidirectional=True), 5e-3),
    "gru_2_layers": (sequence_model(nn.GRU, layers=2, bidirectional=False), 5e-3),
    "gru_bidirectional": (sequence_model(nn.GRU, layers=1, bidirectional=True), 5e-3),
}


@pytest.fixture(scope="module")
def run_network(tmp_path_factory):
    """(expected outputs, coremlrt outputs, output names) for a network and precision."""
    references, converted, results = {}, {}, {}

    def run(name, precision):
        if name not in references:
            torch.manual_seed(0)
            model, inputs, input_names, output_names = NETWORKS[name][0]()
            references[name] = (model, inputs, input_names, output_names, torch_outputs(model, inputs))
        model, inputs, input_names, output_names, expected = references[name]
        if (name, precision) not in converted:
            converted[(name, precision)] = convert(
                model, inputs, tmp_path_factory.mktemp(name), precision, name,
                input_names=input_names, output_names=output_names)
        key = (name, precision, os.environ.get("COREMLRT_BACKEND"))  # conftest.py runs each backend
        if key not in results:
            results[key] = coremlrt_outputs(*converted[(name, precision)], inputs)
        return expected, results[key], output_names

    return run


@pytest.mark.parametrize("precision", ["fp32", "fp16"])
@pytest.mark.parametrize("name", list(NETWORKS))
def test_outputs_match_torch(run_network, name, precision):
    expected, actual, output_names = run_network(name, precision)
    assert len(actual) == len(expected)
    tolerance = FP32_TOLERANCE if precision == "fp32" else NETWORKS[name][1]
    for output_name, actual_output, expected_output in zip(output_names, actual, expected):
        assert_close(actual_output, expected_output, tolerance, f"{name} {precision} {output_name}")
