"""The C++ loader reads a Core AI model through the translation the Python package cached
(src/format/coreai_asset.h): found by the SHA-256 of main.mlirb, under the cache folder the
caller names or $COREMLRT_CACHE_DIR. Needs neither coreai-core nor a real Core AI program: the
cache entry here is a compiled model made from a MIL program, standing where the translator
would have written one."""

import hashlib
import os

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")

import coremlrt  # noqa: E402
from coremlrt import _core  # noqa: E402
from mil_helpers import save_program  # noqa: E402


def _core_model(path, cache_dir):
    # The native loader as model.py calls it, without model.py's own Core AI translation.
    return _core.Model(path, "", 1.0, 0, 0, "reference", False, 1, cache_dir, 1, True, 0)


@pytest.fixture
def cached(tmp_path):
    from coremltools.converters.mil import Builder as mb

    weight = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 8))], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.tanh(x=mb.linear(x=x, weight=weight), name="y")

    package = save_program(prog, tmp_path)
    asset = tmp_path / "m.aimodel"
    asset.mkdir()
    program = b"ML\xefR not a real program: the loader reads only its hash"
    (asset / "main.mlirb").write_bytes(program)
    (asset / "main.hash").write_bytes(hashlib.sha256(program).digest())
    (asset / "metadata.json").write_text("{}")
    cache = tmp_path / "cache"
    name = hashlib.sha256(program).hexdigest()
    coremlrt.compile_model(package, str(cache / "coreai" / f"{name}-t2.mlmodelc"))
    return package, str(asset), str(cache)


def test_native_loader_reads_the_cached_translation(cached, monkeypatch):
    package, asset, cache = cached
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    want = coremlrt.MLModel(package, backend="reference").predict({"x": x})["y"]
    got = _core_model(asset, cache).predict({"x": x})["y"]
    assert np.array_equal(got, want)
    # Without a cache folder named: $COREMLRT_CACHE_DIR, as the Python package's default.
    monkeypatch.setenv("COREMLRT_CACHE_DIR", cache)
    assert np.array_equal(_core_model(asset, "").predict({"x": x})["y"], want)
    assert _core.model_structure(asset) == _core.model_structure(package)


def test_native_loader_says_how_to_translate_a_model(cached, tmp_path):
    _, asset, _ = cached
    with pytest.raises(coremlrt.Error, match=r"has not been translated yet.*pip install coremlrt\[coreai\]"):
        _core_model(asset, str(tmp_path / "elsewhere"))


def test_native_loader_refuses_an_edited_program(cached):
    _, asset, cache = cached
    with open(os.path.join(asset, "main.mlirb"), "ab") as f:
        f.write(b"!")
    with pytest.raises(coremlrt.Error, match="main.hash does not match"):
        _core_model(asset, cache)
