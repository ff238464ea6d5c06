"""Core AI models (.aimodel) converted from torch with coreai-torch, predicted by coremlrt and
compared with torch. Skipped when coreai-core / coreai-torch are not installed
(pip install coremlrt[coreai] coreai-torch)."""

import hashlib
import os
import sys
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
import coremlrt.coreai  # noqa: E402

# float32 on both sides; the differences are summation order only.
ATOL = 1e-5


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(8, 16)
        self.l2 = torch.nn.Linear(16, 4)
        self.w = torch.nn.Parameter(torch.randn(4, 4))

    def forward(self, x, y):
        h = torch.relu(self.l1(x))
        h = self.l2(h) + y
        return torch.softmax(h @ self.w, -1)


class _CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.c2 = torch.nn.Conv2d(8, 16, 3, stride=2)
        self.fc = torch.nn.Linear(16 * 4 * 4, 10)

    def forward(self, x):
        h = torch.relu(self.bn(self.c1(x)))
        h = torch.nn.functional.max_pool2d(h, 2)
        h = torch.relu(self.c2(h))
        h = torch.nn.functional.adaptive_avg_pool2d(h, (3, 3))
        h = torch.nn.functional.pad(h, (0, 1, 0, 1))
        return self.fc(torch.flatten(torch.sigmoid(h) * h, 1))


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("aimodels")
    mlp = _MLP().eval()
    cnn = _CNN().eval()
    with torch.no_grad():
        cnn.bn.running_mean.uniform_(-0.5, 0.5)
        cnn.bn.running_var.uniform_(0.5, 2.0)
        cnn.bn.weight.uniform_(0.5, 1.5)
        cnn.bn.bias.uniform_(-0.5, 0.5)
    mlp_args = (torch.randn(2, 8), torch.randn(2, 4))
    cnn_args = (torch.randn(1, 3, 16, 16),)
    return {
        "mlp": (mlp, _convert(mlp, mlp_args, ["x", "y"], ["probs"], root / "mlp.aimodel"), ["x", "y"], mlp_args),
        "cnn": (cnn, _convert(cnn, cnn_args, ["image"], ["logits"], root / "cnn.aimodel"), ["image"], cnn_args),
    }


@pytest.mark.parametrize("name", ["mlp", "cnn"])
def test_predicts_as_torch(models, name, tmp_path):
    module, path, names, args = models[name]
    model = coremlrt.MLModel(path, cache_dir=tmp_path)
    assert [f for f in model.input_description] == names
    for seed in range(3):
        generator = torch.Generator().manual_seed(seed)
        inputs = [torch.randn(a.shape, generator=generator) for a in args]
        with torch.no_grad():
            expected = module(*inputs).numpy()
        (output_name,) = list(model.output_description)
        got = model.predict({n: t.numpy() for n, t in zip(names, inputs)})[output_name]
        assert got.shape == expected.shape and got.dtype == np.float32
        np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL)


def test_cache_is_keyed_by_main_hash(models, tmp_path):
    _, path, _, _ = models["mlp"]
    folder = coremlrt.coreai.compile_aimodel(path, tmp_path)
    digest = open(os.path.join(path, "main.hash"), "rb").read()
    assert digest == hashlib.sha256(open(os.path.join(path, "main.mlirb"), "rb").read()).digest()
    assert os.path.basename(folder).startswith(digest.hex())
    assert coremlrt.coreai.compile_aimodel(path, tmp_path) == folder
    model = coremlrt.coreai.load(path, cache_dir=tmp_path)
    assert model.package_path == folder


def test_damaged_hash_is_refused(models, tmp_path):
    _, path, _, _ = models["mlp"]
    copy = tmp_path / "copy.aimodel"
    copy.mkdir()
    for name in ("main.mlirb", "metadata.json"):
        (copy / name).write_bytes(open(os.path.join(path, name), "rb").read())
    (copy / "main.hash").write_bytes(bytes(32))
    with pytest.raises(coremlrt.Error, match="main.hash does not match"):
        coremlrt.MLModel(str(copy), cache_dir=tmp_path)


def test_other_dialect_version_is_refused(models, tmp_path):
    _, path, _, _ = models["mlp"]
    data = bytearray(open(os.path.join(path, "main.mlirb"), "rb").read())
    # The dialect section (id 1) of this file: 1 dialect, name 0 with a version section (id 7)
    # of 1 byte, 0x05. Write 0x07 instead (version varint 3).
    at = data.index(bytes([0x03, 0x03, 0x07, 0x03, 0x05]))
    data[at + 4] = 0x07
    copy = tmp_path / "other.aimodel"
    copy.mkdir()
    (copy / "main.mlirb").write_bytes(bytes(data))
    (copy / "main.hash").write_bytes(hashlib.sha256(bytes(data)).digest())
    (copy / "metadata.json").write_bytes(open(os.path.join(path, "metadata.json"), "rb").read())
    with pytest.raises(coremlrt.Error, match="dialect version"):
        coremlrt.MLModel(str(copy), cache_dir=tmp_path)


def test_untranslatable_op_is_named(tmp_path):
    """An op MIL cannot express is refused by name, with the reason (here `&` of integers:
    MIL has no bitwise ops)."""

    class BitwiseAnd(torch.nn.Module):
        def forward(self, x):
            return ((x > 0).int() & (x < 1).int()).float()

    path = _convert(BitwiseAnd().eval(), (torch.randn(2, 5),), ["x"], ["y"], tmp_path / "bitwise.aimodel")
    with pytest.raises(coremlrt.Error, match=r"coreai\.decomposable\.broadcasting_bitwise_and: operands of element "
                                             r"types si32, si32 are not supported \(MIL has no bitwise ops\)"):
        coremlrt.MLModel(path, cache_dir=tmp_path)


def test_without_coreai_core_says_what_to_install(models, tmp_path, monkeypatch):
    _, path, _, _ = models["mlp"]
    for name in [m for m in sys.modules if m == "coreai" or m.startswith("coreai.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "coreai", None)
    with pytest.raises(coremlrt.Error, match=r"pip install coremlrt\[coreai\]"):
        coremlrt.MLModel(path, cache_dir=tmp_path / "empty-cache")


class _Accumulate(torch.nn.Module):
    """A buffer updated in place: a Core AI state (a handle read and written with tokens)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("acc", torch.zeros(1, 4))
        self.l = torch.nn.Linear(4, 4)

    def forward(self, x):
        self.acc.add_(x)
        return self.l(self.acc) * 2


class _Triple(torch.nn.Module):
    def forward(self, x):
        return x * 3 - 1


def test_states_and_functions(tmp_path):
    import copy

    torch.manual_seed(0)
    module = _Accumulate().eval()
    reference = copy.deepcopy(module)
    x = torch.randn(1, 4)

    def export(m):
        return lambda mm: torch.export.export(mm, args=(x,)).run_decompositions(coreai_torch.get_decomp_table())

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converter = coreai_torch.TorchConverter(mode=coreai_torch.TorchConverter.Mode.RELEASE)
        converter.add_pytorch_module(module, export_fn=export(module), input_names=["x"], output_names=["y"],
                                     state_names=["acc"])
        converter.add_pytorch_module(_Triple().eval(), export_fn=export(_Triple()), input_names=["x"],
                                     output_names=["z"], entrypoint_name="triple")
        converter.to_coreai().save_asset(tmp_path / "functions.aimodel")
    path = str(tmp_path / "functions.aimodel")

    model = coremlrt.MLModel(path, cache_dir=tmp_path)  # "main", the default function
    assert list(model.input_description) == ["x"] and list(model.output_description) == ["y"]
    state = model.make_state()
    generator = torch.Generator().manual_seed(5)
    for _ in range(3):
        step = torch.randn(1, 4, generator=generator)
        with torch.no_grad():
            expected = reference(step).numpy()
        got = model.predict({"x": step.numpy()}, state=state)["y"]
        np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL)
        np.testing.assert_allclose(state.read_state("acc"), reference.acc.numpy(), rtol=0, atol=ATOL)

    triple = coremlrt.MLModel(path, cache_dir=tmp_path, function_name="triple")
    assert list(triple.output_description) == ["z"]
    np.testing.assert_array_equal(triple.predict({"x": x.numpy()})["z"], (x * 3 - 1).numpy())


class _Cache(torch.nn.Module):
    """A cache row written at a position given as an input (index_copy_ on a buffer: a state,
    scatter_nd with the replace update function, reduce_sum)."""

    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 8, 4))

    def forward(self, x, pos):
        self.cache.index_copy_(1, pos, x)
        return torch.softmax(self.cache.sum(-1), -1)


def test_cache_state_written_at_an_input_position(tmp_path):
    import copy

    module = _Cache().eval()
    reference = copy.deepcopy(module)
    args = (torch.randn(1, 1, 4), torch.tensor([3]))
    _convert(module, args, ["x", "pos"], ["y"], tmp_path / "cache.aimodel", states=["cache"])
    model = coremlrt.MLModel(str(tmp_path / "cache.aimodel"), cache_dir=tmp_path)
    state = model.make_state()
    generator = torch.Generator().manual_seed(6)
    for pos in (3, 0, 7, 3):
        x = torch.randn(1, 1, 4, generator=generator)
        with torch.no_grad():
            expected = reference(x, torch.tensor([pos])).numpy()
        got = model.predict({"x": x.numpy(), "pos": np.array([pos], np.int32)}, state=state)["y"]
        np.testing.assert_allclose(got, expected, rtol=0, atol=ATOL)
        np.testing.assert_array_equal(state.read_state("cache"), reference.cache.numpy())
    # Core AI wraps a negative index once: -1 is row 7.
    x = torch.randn(1, 1, 4, generator=generator)
    model.predict({"x": x.numpy(), "pos": np.array([-1], np.int32)}, state=state)
    np.testing.assert_array_equal(state.read_state("cache")[:, 7], x.numpy()[:, 0])


def test_command_line_reads_the_translated_program(models, tmp_path, monkeypatch, capsys):
    """`coremlrt info` and `coremlrt predict` take an .aimodel as they take a Core ML model."""
    from coremlrt.cli import main

    monkeypatch.setenv("COREMLRT_CACHE_DIR", str(tmp_path / "cache"))
    module, path, names, args = models["mlp"]
    assert main(["info", str(path)]) == 0
    out = capsys.readouterr().out
    assert "x: float32 [2, 8]" in out and "every op is supported by this build" in out
    np.savez(tmp_path / "in.npz", **{n: a.numpy() for n, a in zip(names, args)})
    assert main(["predict", str(path), "--inputs", str(tmp_path / "in.npz"), "--output", str(tmp_path / "out.npz")]) == 0
    with torch.no_grad():
        expected = module(*args).numpy()
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["probs"], expected, rtol=0, atol=ATOL)
