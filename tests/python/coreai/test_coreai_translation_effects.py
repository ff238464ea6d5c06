"""The translator's rewrites that change the MIL program's structure (docs/design/coreai.md,
"Op mapping"): each model predicts as coreai-core's own runtime does, and its translated
model.mil (in the cache) and placements show the rewrite."""

import glob
import os
import re
import sys
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("coreai")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    pytest.importorskip("coreai_torch")
F = torch.nn.functional

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import coremlrt  # noqa: E402
from coreai_helpers import convert, coreai_predict  # noqa: E402


def _translated(module, args, tmp_path, inputs=("x",), outputs=("y",)):
    """The model loaded by coremlrt, its model.mil text, and its comparison with coreai.runtime."""
    path = convert(module, args, list(inputs), list(outputs), tmp_path / "m.aimodel")
    model = coremlrt.MLModel(path, cache_dir=tmp_path / "cache")
    feeds = {n: a.numpy() for n, a in zip(inputs, args)}
    got = model.predict(feeds)
    want = coreai_predict(path, feeds)
    for name in outputs:
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5, err_msg=name)
    (mil,) = glob.glob(str(tmp_path / "cache" / "coreai" / "*" / "model.mil"))
    with open(mil, encoding="utf-8") as f:
        return model, f.read()


def _ops(mil):
    return re.findall(r"= (\w+)\((?!name)", mil.replace("const()", ""))


class _PaddedCnn(torch.nn.Module):
    """Conv padding, a padded max pool, relu6 (F.relu6 and clamp(0, 6)), an asymmetric F.pad."""

    def __init__(self):
        super().__init__()
        self.a = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.b = torch.nn.Conv2d(8, 8, 3, padding=1, groups=8, stride=2)
        self.c = torch.nn.Conv2d(8, 4, 3)
        self.pool = torch.nn.MaxPool2d(3, 2, padding=1)

    def forward(self, x):
        y = self.pool(F.relu6(self.a(x)))
        y = torch.clamp(self.b(y), 0, 6)
        return self.c(F.pad(y, (2, 1, 0, 3)))


def test_pads_fold_into_convolutions_and_max_pools(tmp_path):
    torch.manual_seed(0)
    x = torch.randn(1, 3, 32, 32) * 4  # past 6, so that relu6's upper bound matters
    model, mil = _translated(_PaddedCnn().eval(), (x,), tmp_path)
    ops = _ops(mil)
    assert "pad" not in ops and "maximum" not in ops and "minimum" not in ops
    assert ops.count("conv") == 3 and ops.count("clip") == 2 and ops.count("max_pool") == 1
    assert mil.count('string("custom")') == 4  # conv a, the pool, conv b, and conv c (padded by F.pad)
    assert "tensor<int32, [4]>([0, 3, 2, 1])" in mil  # F.pad's (left, right, top, bottom) as MIL's pad
    placements = model.placements()
    assert {p["backend"] for p in placements} == {"openvino"}
    assert len({p["region"] for p in placements}) == 1


class _PadKept(torch.nn.Module):
    """Pads that are not a reader's padding: read by an add too; a nonzero value; channels."""

    def __init__(self):
        super().__init__()
        self.conv = torch.nn.Conv2d(4, 4, 3)

    def forward(self, x):
        shared = F.pad(x, (1, 1, 1, 1))
        ones = F.pad(x, (1, 1, 1, 1), value=1.0)
        channels = F.pad(x, (1, 1, 1, 1, 1, 1))[:, 1:5]
        clamped = torch.clamp(x, 0, 5)  # not relu6: stays maximum + minimum
        kept = self.conv(shared) + shared[:, :, 1:-1, 1:-1].sum() + self.conv(ones)
        return kept + self.conv(channels) * clamped.sum()


def test_pads_that_are_not_padding_stay(tmp_path):
    torch.manual_seed(0)
    _, mil = _translated(_PadKept().eval(), (torch.randn(1, 4, 8, 8),), tmp_path)
    ops = _ops(mil)
    assert ops.count("pad") == 3 and "clip" not in ops and "minimum" in ops


class _Inner(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(1, 4, 3))

    def forward(self, x, pos):
        self.k_cache.index_copy_(1, pos, x)
        return self.k_cache.sum(1)


class _Outer(torch.nn.Module):
    """A state of a submodule: its name has a dot ("gpt.k_cache")."""

    def __init__(self):
        super().__init__()
        self.gpt = _Inner()

    def forward(self, x, pos):
        return self.gpt(x, pos) * 2


def test_names_that_are_not_identifiers_become_identifiers(tmp_path):
    path = convert(_Outer().eval(), (torch.randn(1, 1, 3), torch.tensor([1])), ["x.in", "2pos"], ["y-out"],
                   tmp_path / "m.aimodel", states=["gpt.k_cache"])
    model = coremlrt.MLModel(path, cache_dir=tmp_path / "cache")
    assert list(model.input_description) == ["x_in", "_2pos"]
    assert list(model.output_description) == ["y_out"]
    state = model.make_state()
    cache = {"gpt.k_cache": np.zeros((1, 4, 3), np.float32)}
    generator = np.random.default_rng(3)
    for pos in (1, 3, 1):
        x = generator.standard_normal((1, 1, 3)).astype(np.float32)
        feeds = {"x.in": x, "2pos": np.array([pos], np.int32)}
        want = coreai_predict(path, feeds, states=cache)
        got = model.predict({"x_in": x, "_2pos": feeds["2pos"]}, state=state)
        np.testing.assert_allclose(got["y_out"], want["y-out"], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(state.read_state("gpt_k_cache"), cache["gpt.k_cache"])
    assert cache["gpt.k_cache"][0, 3].any()


class _Tied(torch.nn.Module):
    """A language model's tied embedding: the output projection reads the embedding table."""

    def __init__(self):
        super().__init__()
        self.embed = torch.nn.Embedding(64, 32)
        self.mix = torch.nn.Linear(32, 32)

    def forward(self, ids):
        hidden = torch.tanh(self.mix(self.embed(ids)))
        return hidden @ self.embed.weight.T


def test_a_transposed_weight_is_stored_once(tmp_path):
    torch.manual_seed(0)
    ids = torch.tensor([[3, 0, 63, 17]], dtype=torch.int32)
    _, mil = _translated(_Tied().eval(), (ids,), tmp_path, ("ids",), ("logits",))
    assert "transpose" not in _ops(mil)
    # The table, read by gather and matmuls, and the Linear's weight, each once, both read in
    # place from main.mlirb (as stored there); weight.bin holds only the bias.
    assert mil.count("tensor<fp32, [64, 32]>(RAWDATA") == 1 and "tensor<fp32, [64, 32]>(BLOBFILE" not in mil
    assert mil.count("tensor<fp32, [32, 32]>(RAWDATA") == 1 and "tensor<fp32, [32, 32]>(BLOBFILE" not in mil
    assert re.search(r"matmul\(transpose_x = \w+, transpose_y = \w+, x = \w+, y = const_", mil)
    (weights,) = glob.glob(str(tmp_path / "cache" / "coreai" / "*" / "weights" / "weight.bin"))
    assert os.path.getsize(weights) < 32 * 4 + 64 * 8


class _Mlp(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.a = torch.nn.Linear(48, 64)
        self.b = torch.nn.Linear(64, 16)

    def forward(self, x):
        return self.b(torch.relu(self.a(x)))


def test_weights_are_read_in_place_from_main_mlirb(tmp_path):
    torch.manual_seed(0)
    module = _Mlp().eval()
    x = torch.randn(3, 48)
    _, mil = _translated(module, (x,), tmp_path)
    (folder,) = glob.glob(str(tmp_path / "cache" / "coreai" / "*.mlmodelc"))
    asset = tmp_path / "m.aimodel" / "main.mlirb"
    linked = os.path.join(folder, "weights", "main.mlirb")
    assert os.stat(linked).st_ino == os.stat(asset).st_ino  # a hard link: one file, one set of pages
    data = asset.read_bytes()
    found = {}
    for dims, offset in re.findall(r"tensor<fp32, \[(\d+, \d+)\]>\(RAWDATA\(path = string\(\"@model_path/weights/"
                                   r"main.mlirb\"\), offset = uint64\((\d+)\)\)\)", mil):
        rows, cols = map(int, dims.split(", "))
        found[(rows, cols)] = np.frombuffer(data, np.float32, rows * cols, int(offset)).reshape(rows, cols)
    # Each Linear's weight, bit for bit where the file holds it (torch's [out, in] layout).
    assert np.array_equal(found[(64, 48)], module.a.weight.detach().numpy())
    assert np.array_equal(found[(16, 64)], module.b.weight.detach().numpy())
    # Rewriting the model's file in place (the same bytes) changes the linked file: the cached
    # translation is stale, and the next load translates again.
    before = open(os.path.join(folder, "weights", "main.mlirb.stamp")).read()
    asset.write_bytes(data)
    with pytest.raises(coremlrt.Error, match="changed after the translation was written"):
        coremlrt._core.Model(str(tmp_path / "m.aimodel"),
                             coremlrt._core.LoadOptions(backend="reference", threads=1, cache_dir=str(tmp_path / "cache")))
    model = coremlrt.MLModel(tmp_path / "m.aimodel", cache_dir=tmp_path / "cache")
    assert open(os.path.join(folder, "weights", "main.mlirb.stamp")).read() != before
    np.testing.assert_allclose(model.predict({"x": x.numpy()})["y"], module(x).detach().numpy(), rtol=1e-5, atol=1e-5)


class _LayerCaches(torch.nn.Module):
    """index_copy_ into each layer of a stacked cache state, as a decoder's step writes its
    key rows: coreai-torch tiles the updated layer to the whole cache and selects it with a
    constant layer mask."""

    def __init__(self):
        super().__init__()
        self.register_buffer("k_cache", torch.zeros(3, 2, 8, 4))

    def forward(self, x, start):
        rows = (torch.arange(1, dtype=torch.int32) + start).to(torch.int64)
        out = []
        for i in range(3):
            self.k_cache[i].index_copy_(1, rows, x * (i + 1))
            out.append(self.k_cache[i].sum(-1))
        return torch.stack(out)


def test_a_row_written_into_a_stacked_cache_state_is_one_scatter_in_place(tmp_path):
    """Each layer's index_copy_ (copy the layer out, scatter the row into it, select it back) is
    one scatter_nd into the whole cache, written through to the state and read back
    (_ops_shape.py window_scatter, _ops_control_flow.py write_through): the engine writes each row
    in place, and the attention-like reads of every layer see the rows written before them."""
    path = convert(_LayerCaches().eval(), (torch.randn(2, 1, 4), torch.tensor([3], dtype=torch.int32)),
                   ["x", "start"], ["y"], tmp_path / "m.aimodel", states=["k_cache"])
    model = coremlrt.MLModel(path, cache_dir=tmp_path / "cache")
    (mil,) = glob.glob(str(tmp_path / "cache" / "coreai" / "*" / "model.mil"))
    with open(mil, encoding="utf-8") as f:
        text = f.read()
    ops = _ops(text)
    assert "slice_update" not in ops and not re.search(r"tensor<fp32, \[3, 2, 8, 4\]> \w+ = (tile|select)\(", text)
    assert ops.count("slice_by_index") == 3  # the layers read, no layer copied out to scatter into
    assert len(re.findall(r"tensor<fp32, \[3, 2, 8, 4\]> \w+ = scatter_nd\(", text)) == 3
    assert text.count("write_state(") == 3
    scatters = [p for p in model.placements() if p["op_type"] == "scatter_nd"]
    assert len(scatters) == 3 and all("in place" in p["reason"] for p in scatters), scatters
    state = model.make_state()
    cache = {"k_cache": np.zeros((3, 2, 8, 4), np.float32)}
    generator = np.random.default_rng(5)
    for step, start in enumerate((3, 0, 7, -1)):
        feeds = {"x": generator.standard_normal((2, 1, 4)).astype(np.float32), "start": np.array([start], np.int32)}
        want = coreai_predict(path, feeds, states=cache)
        before = coremlrt.state_traffic()
        got = model.predict(feeds, state=state)
        after = coremlrt.state_traffic()
        np.testing.assert_allclose(got["y"], want["y"], rtol=1e-6, atol=1e-6)
        np.testing.assert_array_equal(state.read_state("k_cache"), cache["k_cache"])
        written = after["bytes_written"] - before["bytes_written"]
        assert written == 3 * 2 * 4 * 4  # a row of 4 fp32 per layer and head
        if step:  # the first step may find the state shared; then only what is overwritten is kept
            assert after["bytes_copied"] - before["bytes_copied"] == written


class _Masked(torch.nn.Module):
    """where with a constant mask that is no box of the broadcast value: tile + select stay."""

    def __init__(self):
        super().__init__()
        self.register_buffer("mask", torch.tensor([[True, False, True], [False, False, False]]))

    def forward(self, x, y):
        return torch.where(self.mask, x.expand(2, 3), y), torch.where(self.mask[:, :1], x.expand(2, 3), y)


def test_a_where_that_is_no_slice_update_stays_a_select(tmp_path):
    args = (torch.randn(1, 3), torch.randn(2, 3))
    _, mil = _translated(_Masked().eval(), args, tmp_path, ("x", "y"), ("a", "b"))
    ops = _ops(mil)
    assert ops.count("select") == 1 and ops.count("slice_update") == 1


class _Lstm(torch.nn.Module):
    """nn.LSTM returning the sequence and the final states, with or without given ones."""

    def __init__(self, **options):
        super().__init__()
        self.lstm = torch.nn.LSTM(**options)

    def forward(self, x, *state):
        y, (h, c) = self.lstm(x, tuple(state) if state else None)
        return y, h, c


@pytest.mark.parametrize("options, inputs", [
    (dict(input_size=6, hidden_size=5, num_layers=2), [(7, 2, 6)]),
    (dict(input_size=6, hidden_size=5, num_layers=2, batch_first=True), [(2, 7, 6)]),
    (dict(input_size=6, hidden_size=5, bias=False), [(4, 3, 6), (1, 3, 5), (1, 3, 5)]),
], ids=["two_layers", "batch_first", "given_states_no_bias"])
def test_an_unrolled_lstm_layer_is_one_lstm_op(tmp_path, options, inputs):
    torch.manual_seed(0)
    args = tuple(torch.randn(*shape) for shape in inputs)
    names = ("x", "h0", "c0")[:len(args)]
    module = _Lstm(**options).eval()
    _, mil = _translated(module, args, tmp_path, inputs=names, outputs=("y", "h", "c"))
    ops = _ops(mil)
    layers = options.get("num_layers", 1)
    assert ops.count("lstm") == layers
    assert "split" not in ops and "sigmoid" not in ops and "tanh" not in ops and "matmul" not in ops
    # The weights are written once each, in MIL's gate order (i, f, o, g), not also as torch's.
    assert mil.count("BLOBFILE") <= 3 * layers


def test_a_bidirectional_lstm_runs_its_forward_direction_as_an_lstm_op(tmp_path):
    # The backward direction reads its steps in reverse, which the lstm op's direction does not
    # express as coreai-torch writes it: its ops stay as they are.
    torch.manual_seed(0)
    _, mil = _translated(_Lstm(input_size=6, hidden_size=5, bidirectional=True).eval(), (torch.randn(5, 2, 6),),
                         tmp_path, outputs=("y", "h", "c"))
    ops = _ops(mil)
    assert ops.count("lstm") == 1 and ops.count("split") == 5


class _LstmCellLoop(torch.nn.Module):
    """An LSTM written out by hand as coreai-torch writes nn.LSTM, except that the first step's
    hidden state is also returned: the chain's values are read outside it, so it is no layer."""

    def __init__(self):
        super().__init__()
        self.w_ih, self.w_hh = torch.nn.Linear(6, 20), torch.nn.Linear(5, 20)

    def forward(self, x):
        p = self.w_ih(x)
        h, c = torch.zeros(x.shape[1], 5), torch.zeros(1, x.shape[1], 5)
        ys = []
        for t in range(x.shape[0]):
            i, f, g, o = (self.w_hh(h) + p[t:t + 1]).split(5, -1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            ys.append(h)
        return torch.cat(ys, 0), ys[0] * 2


def test_an_lstm_chain_read_from_outside_stays_op_by_op(tmp_path):
    torch.manual_seed(0)
    _, mil = _translated(_LstmCellLoop().eval(), (torch.randn(4, 2, 6),), tmp_path, outputs=("y", "first"))
    ops = _ops(mil)
    assert "lstm" not in ops and ops.count("split") == 4


def test_the_same_loop_unread_from_outside_is_one_lstm_op(tmp_path):
    class Loop(_LstmCellLoop):
        def forward(self, x):
            return super().forward(x)[0]

    torch.manual_seed(0)
    _, mil = _translated(Loop().eval(), (torch.randn(4, 2, 6),), tmp_path)
    assert _ops(mil).count("lstm") == 1


class _LstmLoopOverAGivenWeight(_LstmCellLoop):
    """The same chain with the recurrent weight given as an input: its structure is a layer's,
    but the lstm op needs constant weights, so its ops are translated one by one after all."""

    def forward(self, x, w_hh):
        p = self.w_ih(x)
        h, c = torch.zeros(x.shape[1], 5), torch.zeros(1, x.shape[1], 5)
        ys = []
        for t in range(x.shape[0]):
            i, f, g, o = (h @ w_hh + p[t:t + 1]).split(5, -1)
            c = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
            h = torch.sigmoid(o) * torch.tanh(c)
            ys.append(h)
        return torch.cat(ys, 0)


def test_an_lstm_chain_over_a_computed_weight_is_translated_op_by_op(tmp_path):
    torch.manual_seed(0)
    _, mil = _translated(_LstmLoopOverAGivenWeight().eval(), (torch.randn(4, 2, 6), torch.randn(5, 20) * 0.3),
                         tmp_path, inputs=("x", "w_hh"))
    ops = _ops(mil)
    assert "lstm" not in ops and ops.count("split") == 4
