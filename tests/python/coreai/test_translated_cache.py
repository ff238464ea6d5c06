"""The C++ loader reads a Core AI model through the translation the Python package cached
(src/format/coreai_asset.h): found by the SHA-256 of main.mlirb, under the cache folder the
caller names or $COREMLRT_CACHE_DIR. Needs neither coreai-core nor a real Core AI program: the
cache entry here is a compiled model made from a MIL program, standing where the translator
would have written one."""

import hashlib
import os
import re

import numpy as np
import pytest

ct = pytest.importorskip("coremltools")

import coremlrt  # noqa: E402
from coremlrt import _core  # noqa: E402
from mil_helpers import save_program  # noqa: E402


def _core_model(path, cache_dir):
    # The native loader as model.py calls it, without model.py's own Core AI translation.
    return _core.Model(path, _core.LoadOptions(backend="reference", threads=1, cache_dir=cache_dir))


def _package_and_asset(tmp_path, weight, program):
    """tanh(linear(x, weight)) saved as a package, and a Core AI model folder whose main.mlirb
    holds `program` (main.hash its SHA-256)."""
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 8))], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.tanh(x=mb.linear(x=x, weight=weight), name="y")

    package = save_program(prog, tmp_path)
    asset = tmp_path / "m.aimodel"
    asset.mkdir()
    (asset / "main.mlirb").write_bytes(program)
    (asset / "main.hash").write_bytes(hashlib.sha256(program).digest())
    (asset / "metadata.json").write_text("{}")
    return package, asset


@pytest.fixture
def cached(tmp_path):
    weight = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
    program = b"ML\xefR not a real program: the loader reads only its hash"
    package, asset = _package_and_asset(tmp_path, weight, program)
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


# -- weights read in place from main.mlirb (RAWDATA values, docs/design/coreai.md) -------------

def _varint(value):
    # MLIR bytecode's prefix varint: n bytes (1..8) carry n - 1 zero bits, a one, then the value.
    for n in range(1, 9):
        if value < 1 << (7 * n):
            return ((value << n) | (1 << (n - 1))).to_bytes(n, "little")
    return b"\0" + value.to_bytes(8, "little")


def _bytecode_with_blob(payload, key="resource_1", alignment=16):
    """MLIR bytecode holding one blob resource, laid out as MLIR's bytecode format documents:
    the string section, the resource offset section, then the aligned resource section."""
    strings = ["aicode", key]
    string_section = (_varint(len(strings)) + b"".join(_varint(len(s) + 1) for s in reversed(strings))
                      + b"".join(s.encode() + b"\0" for s in strings))
    head = b"ML\xefR" + _varint(6) + b"test\0" + bytes([0]) + _varint(len(string_section)) + string_section
    entry_head = _varint(alignment) + _varint(len(payload))

    def resource_section(start):
        # The entry's data is aligned in the file: the section starts aligned, at `start`.
        padding = -(start + len(entry_head)) % alignment
        return entry_head + b"\xcb" * padding + payload

    for _ in range(2):  # the offsets' size depends on the entry's, which depends on its padding
        entry = resource_section(0)
        offsets = _varint(0) + _varint(0) + _varint(1) + _varint(1) + _varint(len(entry)) + b"\0"
        head6 = head + bytes([6]) + _varint(len(offsets)) + offsets
        section_head = bytes([5 | 0x80]) + _varint(len(entry)) + _varint(alignment)
        start = len(head6) + len(section_head)
        start += -start % alignment
        entry = resource_section(start)
        data = head6 + section_head + b"\xcb" * (start - len(head6) - len(section_head)) + entry
    return data, start + len(entry_head) + (-(start + len(entry_head)) % alignment)


def test_resource_blobs_finds_each_blob_and_refuses_damage():
    from coremlrt.coreai._bytecode import resource_blobs

    payload = np.arange(24, dtype=np.float32).tobytes()
    data, offset = _bytecode_with_blob(payload)
    assert resource_blobs(data) == {"resource_1": (offset, len(payload))}
    assert offset % 16 == 0 and data[offset:offset + len(payload)] == payload
    # Every cut of the file either still holds the blob whole or is refused by name: never an
    # index error, never a blob past the data.
    for cut in range(len(data)):
        try:
            blobs = resource_blobs(data[:cut])
        except coremlrt.Error as e:
            assert "main.mlirb" in str(e)
            continue
        assert blobs == {} or blobs == {"resource_1": (offset, len(payload))}
        assert all(at + size <= cut for at, size in blobs.values())
    with pytest.raises(coremlrt.Error, match="not MLIR bytecode"):
        resource_blobs(b"MLIR" + data[4:])
    with pytest.raises(coremlrt.Error, match="not a power of two"):
        resource_blobs(_bytecode_with_blob(payload, alignment=16)[0].replace(_varint(16) + _varint(len(payload)),
                                                                            _varint(12) + _varint(len(payload))))


@pytest.fixture
def in_place(tmp_path):
    """A translation whose weight is a RAWDATA view of the Core AI model's main.mlirb (hard-linked
    into it with its stamp, as python/coremlrt/coreai/_translate.py writes it)."""
    from coremlrt.coreai._bytecode import resource_blobs

    weight = np.random.default_rng(2).standard_normal((4, 8)).astype(np.float32)
    program, _ = _bytecode_with_blob(weight.tobytes())
    package, asset = _package_and_asset(tmp_path, weight, program)
    cache = tmp_path / "cache"
    folder = cache / "coreai" / f"{hashlib.sha256(program).hexdigest()}-t7.mlmodelc"
    coremlrt.compile_model(package, str(folder))
    text = (folder / "model.mil").read_text()
    blob = re.search(r"tensor<fp32, \[4, 8\]>\(BLOBFILE\([^()]*\([^()]*\)[^()]*\([^()]*\)\)\)", text)
    assert blob, text
    (offset, _), = resource_blobs(program).values()
    raw = f'tensor<fp32, [4, 8]>(RAWDATA(path = string("@model_path/weights/main.mlirb"), offset = uint64({offset})))'
    (folder / "model.mil").write_text(text.replace(blob.group(0), raw))
    os.link(asset / "main.mlirb", folder / "weights" / "main.mlirb")
    from coremlrt.coreai._translate import source_stamp
    (folder / "weights" / "main.mlirb.stamp").write_text(source_stamp(folder / "weights" / "main.mlirb"))
    return package, asset, cache, folder, offset


def test_native_loader_reads_weights_in_place(in_place):
    package, asset, cache, _, _ = in_place
    x = np.random.default_rng(3).standard_normal((2, 8)).astype(np.float32)
    want = coremlrt.MLModel(package, backend="reference").predict({"x": x})["y"]
    assert np.array_equal(_core_model(str(asset), str(cache)).predict({"x": x})["y"], want)


def test_native_loader_refuses_a_translation_whose_linked_file_changed(in_place):
    _, asset, cache, _, _ = in_place
    (asset / "main.mlirb").write_bytes((asset / "main.mlirb").read_bytes())  # the same bytes, rewritten
    with pytest.raises(coremlrt.Error, match="changed after the translation was written"):
        _core_model(str(asset), str(cache))


@pytest.mark.parametrize("shift, message", [
    (1, "model.mil line .*: op 'const' attribute 'val': .*not a multiple of the 4-byte size of float32"),
    (1 << 20, "run past the end of the file")])
def test_raw_data_outside_the_file_or_misaligned_is_refused(in_place, shift, message):
    _, asset, cache, folder, offset = in_place
    text = (folder / "model.mil").read_text()
    (folder / "model.mil").write_text(text.replace(f"offset = uint64({offset})", f"offset = uint64({offset + shift})"))
    with pytest.raises(coremlrt.Error, match=message):
        _core_model(str(asset), str(cache))
