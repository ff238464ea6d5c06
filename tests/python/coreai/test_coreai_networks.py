"""Whole networks converted from torch with coreai-torch (random weights, eval mode), predicted by
coremlrt and compared with torch: torchvision's resnet18 and mobilenet_v2, a BERT-like encoder,
a two-layer LSTM and a GPT-2-like decode step with a key/value cache. Skipped when
coreai-core / coreai-torch (or, for the two vision networks, torchvision) are not installed."""

import math
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("coreai")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # coreai-torch warns about torch versions newer than it was tested with
    coreai_torch = pytest.importorskip("coreai_torch")

import coremlrt  # noqa: E402
from coreai_helpers import convert as _convert  # noqa: E402

F = torch.nn.functional


class _Block(torch.nn.Module):
    """A transformer block's weights; the attention is written out (matmul, softmax)."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.qkv, self.o = torch.nn.Linear(d, 3 * d), torch.nn.Linear(d, d)
        self.f1, self.f2 = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def attention(self, x, mask=None, past=None):
        b, t, d = x.shape
        q, k, v = self.qkv(x).split(d, -1)
        q, k, v = (z.reshape(b, -1, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        if past is not None:
            k, v = torch.cat([past[0], k], 2), torch.cat([past[1], v], 2)
        scores = q @ k.transpose(-1, -2) / math.sqrt(d // self.heads)
        if mask is not None:
            scores = scores + mask
        y = (torch.softmax(scores, -1) @ v).transpose(1, 2).reshape(b, t, d)
        return self.o(y), k, v


class _Encoder(torch.nn.Module):
    """BERT-like: token embedding (a gather) + positions, post-norm blocks with exact gelu."""

    def __init__(self, vocab=100, d=32, layers=2, length=16):
        super().__init__()
        self.tok = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Parameter(torch.randn(length, d) * 0.1)
        self.ln = torch.nn.LayerNorm(d)
        self.blocks = torch.nn.ModuleList([_Block(d) for _ in range(layers)])

    def forward(self, ids, mask):
        x = self.ln(self.tok(ids) + self.pos)
        additive = (1.0 - mask[:, None, None, :]) * -1e4
        for block in self.blocks:
            x = block.ln1(x + block.attention(x, additive)[0])
            x = block.ln2(x + block.f2(F.gelu(block.f1(x))))
        return x


class _DecodeStep(torch.nn.Module):
    """GPT-2-like: one token at position 8 with an 8-step key/value cache per layer, pre-norm
    blocks with tanh gelu, tied output embedding; returns logits and the grown caches."""

    def __init__(self, vocab=100, d=32, layers=2, position=8):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(64, d)
        self.blocks = torch.nn.ModuleList([_Block(d) for _ in range(layers)])
        self.lnf = torch.nn.LayerNorm(d)
        self.position = position

    def forward(self, ids, past_k, past_v):
        x = self.tok(ids) + self.pos.weight[self.position:self.position + 1]
        keys, values = [], []
        for i, block in enumerate(self.blocks):
            a, k, v = block.attention(block.ln1(x), past=(past_k[i], past_v[i]))
            x = x + a
            x = x + block.f2(F.gelu(block.f1(block.ln2(x)), approximate="tanh"))
            keys.append(k)
            values.append(v)
        return self.lnf(x) @ self.tok.weight.T, torch.stack(keys), torch.stack(values)


class _Recurrent(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm = torch.nn.LSTM(16, 32, num_layers=2, batch_first=True)
        self.fc = torch.nn.Linear(32, 8)

    def forward(self, x):
        y, (h, c) = self.lstm(x)
        return self.fc(y), h, c


def _randomize_norms(module):
    """Batch norm statistics away from the identity, so that the folded batch norm matters and
    activations do not fade through the network."""
    with torch.no_grad():
        for m in module.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.running_mean.uniform_(-0.2, 0.2)
                m.running_var.uniform_(0.5, 1.5)
                m.weight.uniform_(0.8, 1.6)
                m.bias.uniform_(-0.1, 0.2)
    return module


def _vision(name):
    torchvision = pytest.importorskip("torchvision")
    return _randomize_norms(getattr(torchvision.models, name)().eval())


# name -> (module factory, example inputs, input names, output names, tolerance relative to the
# largest |output|). float32 on both sides; the differences are summation order only.
_NETWORKS = {
    "resnet18": (lambda: _vision("resnet18"), lambda: (torch.randn(1, 3, 64, 64),), ["image"], ["logits"], 1e-5),
    "mobilenet_v2": (lambda: _vision("mobilenet_v2"), lambda: (torch.randn(1, 3, 64, 64),), ["image"],
                     ["logits"], 1e-5),
    "encoder": (lambda: _Encoder().eval(), lambda: (torch.randint(0, 100, (1, 16)), torch.ones(1, 16)),
                ["ids", "mask"], ["hidden"], 1e-5),
    "lstm": (lambda: _Recurrent().eval(), lambda: (torch.randn(1, 10, 16),), ["x"], ["y", "h", "c"], 1e-5),
    "decode_step": (lambda: _DecodeStep().eval(),
                    lambda: (torch.randint(0, 100, (1, 1)), torch.randn(2, 1, 4, 8, 8), torch.randn(2, 1, 4, 8, 8)),
                    ["ids", "past_k", "past_v"], ["logits", "k", "v"], 1e-5),
}


def _inputs(name, args, seed):
    generator = torch.Generator().manual_seed(seed)
    inputs = []
    for example in args:
        if example.dtype == torch.int64:  # token ids
            inputs.append(torch.randint(0, 100, example.shape, generator=generator))
        elif name == "encoder":  # the attention mask: some positions masked out
            inputs.append((torch.rand(example.shape, generator=generator) > 0.3).float())
        else:
            inputs.append(torch.randn(example.shape, generator=generator))
    return inputs


@pytest.mark.parametrize("name", list(_NETWORKS))
def test_network_predicts_as_torch(name, tmp_path):
    factory, example, names, outputs, tolerance = _NETWORKS[name]
    torch.manual_seed(0)
    module = factory()
    path = _convert(module, example(), names, outputs, tmp_path / f"{name}.aimodel")
    model = coremlrt.MLModel(path, cache_dir=tmp_path)
    assert list(model.input_description) == names
    assert list(model.output_description) == outputs
    for seed in range(2):
        inputs = _inputs(name, example(), seed)
        with torch.no_grad():
            expected = module(*inputs)
        expected = expected if isinstance(expected, tuple) else (expected,)
        feeds = {n: (t.numpy().astype(np.int32) if t.dtype == torch.int64 else t.numpy()) for n, t in zip(names, inputs)}
        got = model.predict(feeds)
        for output, want in zip(outputs, expected):
            want = want.numpy()
            scale = float(np.abs(want).max())
            assert scale > 0.1, f"{name}.{output}: outputs too small to compare ({scale})"
            assert got[output].shape == want.shape and got[output].dtype == np.float32
            np.testing.assert_allclose(got[output], want, rtol=0, atol=tolerance * scale, err_msg=f"{name}.{output}")


class _Pieces(torch.nn.Module):
    """split by size (3, 3, 1), slices with a negative start and a step, concat on dim -1,
    reduce_mean, rsqrt and tanh gelu, each as its own output."""

    def forward(self, x):
        a, b, c = torch.split(x, 3, dim=-1)
        tail = x[:, -3:, 1:6:2]
        return (torch.cat([c, a * b], dim=-1), tail.mean(dim=(1,), keepdim=True), torch.rsqrt(x * x + 0.5),
                F.gelu(x, approximate="tanh"), F.gelu(x))


def test_shape_and_elementwise_ops_predict_as_torch(tmp_path):
    names = ["cat", "tail", "r", "g_tanh", "g_exact"]
    module = _Pieces().eval()
    path = _convert(module, (torch.randn(2, 5, 7),), ["x"], names, tmp_path / "pieces.aimodel")
    model = coremlrt.MLModel(path, cache_dir=tmp_path)
    x = torch.randn(2, 5, 7, generator=torch.Generator().manual_seed(3)) * 3
    got = model.predict({"x": x.numpy()})
    with torch.no_grad():
        expected = module(x)
    for name, want in zip(names, expected):
        assert got[name].shape == tuple(want.shape), name
        np.testing.assert_allclose(got[name], want.numpy(), rtol=0, atol=1e-5, err_msg=name)
    # The two gelu forms differ by more than the tolerance, so each was translated as its own.
    assert np.abs(expected[3] - expected[4]).max() > 1e-4


class _AveragePools(torch.nn.Module):
    """F.avg_pool2d becomes a private composite graph called with coreai.invoke: inlined, its
    constant parameters (cast, slice, concat) folded, its pad given the padded shape."""

    def forward(self, x):
        return F.avg_pool2d(x, 2, 1) + F.avg_pool2d(x, 3, 2, padding=1)[..., :1, :1]


def test_composite_graphs_are_inlined(tmp_path):
    module = _AveragePools().eval()
    path = _convert(module, (torch.randn(1, 3, 8, 8),), ["x"], ["y"], tmp_path / "pools.aimodel")
    model = coremlrt.MLModel(path, cache_dir=tmp_path)
    x = torch.randn(1, 3, 8, 8, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        expected = module(x).numpy()
    np.testing.assert_allclose(model.predict({"x": x.numpy()})["y"], expected, rtol=0, atol=1e-6)


class _CachedDecodeStep(torch.nn.Module):
    """GPT-2-like decode step whose key/value caches are buffers (Core AI states) written in
    place at the token's position (index_copy_: scatter_nd, broadcast_in_dims, and
    broadcasting_where to write one layer's rows of the stacked caches)."""

    def __init__(self, vocab=100, d=32, layers=2, length=16):
        super().__init__()
        self.tok, self.pos = torch.nn.Embedding(vocab, d), torch.nn.Embedding(length, d)
        self.blocks = torch.nn.ModuleList([_Block(d) for _ in range(layers)])
        self.lnf = torch.nn.LayerNorm(d)
        self.register_buffer("k_cache", torch.zeros(layers, 1, 4, length, d // 4))
        self.register_buffer("v_cache", torch.zeros(layers, 1, 4, length, d // 4))

    def forward(self, ids, pos, mask):
        x = self.tok(ids) + self.pos(pos)[None]
        for i, block in enumerate(self.blocks):
            h = block.ln1(x)
            b, t, d = h.shape
            q, k, v = (z.reshape(b, -1, 4, d // 4).transpose(1, 2) for z in block.qkv(h).split(d, -1))
            self.k_cache[i].index_copy_(2, pos, k)
            self.v_cache[i].index_copy_(2, pos, v)
            scores = q @ self.k_cache[i].transpose(-1, -2) / math.sqrt(d // 4) + mask
            y = (torch.softmax(scores, -1) @ self.v_cache[i]).transpose(1, 2).reshape(b, t, d)
            x = x + block.o(y)
            x = x + block.f2(F.gelu(block.f1(block.ln2(x)), approximate="tanh"))
        return self.lnf(x) @ self.tok.weight.T


def test_decode_steps_with_cache_states(tmp_path):
    import copy

    torch.manual_seed(0)
    module = _CachedDecodeStep().eval()
    reference = copy.deepcopy(module)
    args = (torch.tensor([[5]]), torch.tensor([0]), torch.zeros(16))
    _convert(module, args, ["ids", "pos", "mask"], ["logits"], tmp_path / "decode.aimodel", states=["k_cache", "v_cache"])
    model = coremlrt.MLModel(str(tmp_path / "decode.aimodel"), cache_dir=tmp_path)
    state = model.make_state()
    for position in range(6):
        ids = torch.tensor([[(7 * position + 3) % 100]])
        mask = torch.full((16,), -1e4)
        mask[:position + 1] = 0
        with torch.no_grad():
            expected = reference(ids, torch.tensor([position]), mask).numpy()
        got = model.predict({"ids": ids.numpy().astype(np.int32), "pos": np.array([position], np.int32),
                             "mask": mask.numpy()}, state=state)["logits"]
        scale = float(np.abs(expected).max())
        assert scale > 1
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5 * scale)
        for name in ("k_cache", "v_cache"):
            np.testing.assert_allclose(state.read_state(name), getattr(reference, name).numpy(), rtol=0, atol=1e-5)
