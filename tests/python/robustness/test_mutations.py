"""Law 5 under random damage: bytes flipped, overwritten, truncated or spliced in the spec,
the weight blob and Manifest.json of packages built here with coremltools. Every load and
every prediction either works or raises coremlrt.Error naming the model; nothing else (no
UnicodeDecodeError, no MemoryError, no crash) ever comes out.
"""

import os
import random
import shutil

import numpy as np
import pytest

import coremlrt
import coremltools as ct
from coremltools.converters.mil import Builder as mb
from mil_helpers import save_program

SPEC = "Data/com.apple.CoreML/model.mlmodel"
WEIGHTS = "Data/com.apple.CoreML/weights/weight.bin"
MANIFEST = "Manifest.json"
MUTATIONS_PER_FILE = 100  # 3 files x 100 loads: a few seconds


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """A small ML program with blob weights, names, metadata and a nested block, so that
    damage lands in every kind of field the readers parse."""
    rng = np.random.default_rng(13)
    w1 = rng.standard_normal((24, 16)).astype(np.float32)
    w2 = rng.standard_normal((16, 24)).astype(np.float32)

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 16))], opset_version=ct.target.iOS18)
    def prog(x):
        h = mb.relu(x=mb.linear(x=x, weight=w1, name="hidden_layer"))
        y = mb.linear(x=h, weight=w2, name="output_layer")
        positive = mb.greater(x=mb.reduce_sum(x=y), y=0.0)
        return mb.cond(pred=positive, _true_fn=lambda: mb.mul(x=y, y=2.0), _false_fn=lambda: mb.sub(x=y, y=1.0),
                       name="y")

    directory = tmp_path_factory.mktemp("mutation_source")
    path = save_program(prog, directory, name="source")
    from coremltools.models import MLModel
    model = MLModel(path, skip_model_load=True)
    model.author = "Ærøskøbing model works ✓"
    model.short_description = "a model whose metadata has non-ASCII text"
    model.user_defined_metadata["clé"] = "valeur — ünïcode"
    annotated = os.path.join(directory, "annotated.mlpackage")
    model.save(annotated)  # not over `path`: the model still reads from there
    return annotated


def mutate(data, rng):
    """One random damage to `data` (bytes); returns (new bytes, description)."""
    if not data:
        return bytes([rng.randrange(256)]), "empty file given one byte"
    kind = rng.choice(["flip", "overwrite", "truncate", "splice", "high_bytes"])
    data = bytearray(data)
    at = rng.randrange(len(data))
    if kind == "flip":
        for _ in range(rng.randint(1, 4)):
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
    elif kind == "overwrite":
        length = rng.randint(1, 16)
        data[at:at + length] = bytes(rng.randrange(256) for _ in range(min(length, len(data) - at)))
    elif kind == "truncate":
        del data[at:]
    elif kind == "splice":
        source = rng.randrange(len(data))
        chunk = data[source:source + rng.randint(1, 64)]
        data[at:at + rng.randint(0, 64)] = chunk
    else:  # bytes >= 0x80: what turns a name or a metadata string into invalid UTF-8
        for _ in range(rng.randint(1, 3)):
            data[rng.randrange(len(data))] = rng.choice([0x80, 0xBF, 0xC0, 0xC3, 0xE2, 0xED, 0xF5, 0xFF])
    return bytes(data), f"{kind} at {at}"


def check_only_errors(path, description):
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)
    try:
        model = coremlrt.MLModel(path)
        model.predict({"x": x})
    except coremlrt.Error as e:
        assert path in str(e), f"{description}: error does not name the model: {e}"
    except Exception as e:  # the point of the test: anything else is a bug
        pytest.fail(f"{description}: {type(e).__name__} instead of coremlrt.Error: {e}")


@pytest.mark.parametrize("target", [SPEC, WEIGHTS, MANIFEST])
def test_damaged_package_raises_only_coremlrt_error(package, target, tmp_path):
    rng = random.Random(f"coremlrt-mutations-{target}")
    with open(os.path.join(package, target), "rb") as f:
        original = f.read()
    for i in range(MUTATIONS_PER_FILE):
        damaged, what = mutate(original, rng)
        copy = os.path.join(tmp_path, f"m{i}.mlpackage")  # a new file each time: no shared mapping reused
        shutil.copytree(package, copy)
        with open(os.path.join(copy, target), "wb") as f:
            f.write(damaged)
        check_only_errors(copy, f"{target}, mutation {i} ({what})")
        shutil.rmtree(copy)


def with_bytes_replaced(package, tmp_path, target, old, new):
    copy = os.path.join(tmp_path, "edited.mlpackage")
    shutil.copytree(package, copy)
    with open(os.path.join(copy, target), "rb") as f:
        data = f.read()
    assert data.count(old) == 1
    with open(os.path.join(copy, target), "wb") as f:
        f.write(data.replace(old, new))
    return copy


def test_invalid_utf8_in_metadata(package, tmp_path):
    """protobuf refuses a string field that is not UTF-8 while parsing: the spec does not parse."""
    value = "valeur — ünïcode".encode()
    copy = with_bytes_replaced(package, tmp_path, SPEC, value, b"val\xff\xfe" + value[5:])
    with pytest.raises(coremlrt.Error, match=r"model\.mlmodel' is not a valid Core ML model .*not valid UTF-8"):
        coremlrt.MLModel(copy)


def test_invalid_utf8_in_manifest(package, tmp_path):
    """Manifest.json that is not UTF-8 is named as such, with the offset of the bad byte."""
    copy = with_bytes_replaced(package, tmp_path, MANIFEST, b'"CoreML Model Weights"', b'"CoreML \x81Model Weights"')
    with open(os.path.join(copy, MANIFEST), "rb") as f:
        offset = f.read().index(b"\x81")
    with pytest.raises(coremlrt.Error, match=rf"Manifest.json is not valid UTF-8 text \(byte {offset} begins"):
        coremlrt.MLModel(copy)


def test_package_still_works(package):
    x = np.linspace(-1, 1, 32, dtype=np.float32).reshape(2, 16)
    assert coremlrt.MLModel(package).predict({"x": x})["y"].shape == (2, 16)
