"""coremlrt.export_onnx_functions and `coremlrt export --all-functions`: every function of a
multifunction package as its own ONNX model, the weights the functions share written once in one
external-data file (python/coremlrt/onnx_export/exporter.py, SharedWeights).
"""

import os
import subprocess
import sys

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
ct = pytest.importorskip("coremltools")

import coremlrt  # noqa: E402
from coremlrt.onnx_export import SHARED_DATA_FILE, export_onnx, export_onnx_functions  # noqa: E402
from coremlrt.onnx_export.exporter import EXTERNAL_THRESHOLD  # noqa: E402
import lm_helpers as H  # noqa: E402

SIZE = 256  # a [256, 256] fp32 weight: 256 KiB, far over the 1 KiB inline threshold


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    """Functions `shared` and `own` of one package:

    shared: y = linear(x, W, b)
    own:    y = linear(relu(linear(x, W, b)), V, c)

    W [SIZE, SIZE] and b are the same consts in both (save_multifunction keeps one copy); V and c
    are `own`'s alone. Returns (path, {weight name: bytes of its one copy})."""
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    directory = tmp_path_factory.mktemp("multifunction")
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((SIZE, SIZE)) / np.sqrt(SIZE)).astype(np.float32)
    v = (rng.standard_normal((SIZE, SIZE)) / np.sqrt(SIZE)).astype(np.float32)
    b = rng.standard_normal(SIZE).astype(np.float32)
    c = rng.standard_normal(SIZE).astype(np.float32)
    sources = {}
    for name, extra in (("shared", False), ("own", True)):
        @mb.program(input_specs=[mb.TensorSpec((1, SIZE), dtype=types.fp32)], opset_version=ct.target.iOS18)
        def prog(x):
            h = mb.linear(x=x, weight=w, bias=b, name="h" if extra else "y")
            return mb.linear(x=mb.relu(x=h), weight=v, bias=c, name="y") if extra else h

        sources[name] = H._save(prog, str(directory), "single_" + name)
    with H._quiet_coremltools():
        path = H.save_multifunction(directory, "model", sources, default="shared")
    return path, {"W": w.nbytes, "b": b.nbytes, "V": v.nbytes, "c": c.nbytes}


def _inputs():
    return {"x": np.random.default_rng(3).standard_normal((1, SIZE)).astype(np.float32)}


def test_every_function_is_written_with_the_shared_weights_once(package, tmp_path):
    path, weights = package
    out = tmp_path / "onnx"
    paths = export_onnx_functions(path, out)
    assert paths == {name: str(out / f"{name}.onnx") for name in ("shared", "own")}
    assert sorted(os.listdir(out)) == sorted(["own.onnx", "shared.onnx", SHARED_DATA_FILE])
    # One copy of W, b, V and c: W and b are not written again for the second function.
    one_copy = sum(weights.values())
    size = (out / SHARED_DATA_FILE).stat().st_size
    assert size == one_copy, (size, one_copy)
    locations = {}
    for name, model_path in paths.items():
        onnx.checker.check_model(model_path, full_check=True)
        model = onnx.load(model_path, load_external_data=False)
        for tensor in model.graph.initializer:
            if tensor.data_location == onnx.TensorProto.EXTERNAL:
                info = {e.key: e.value for e in tensor.external_data}
                assert info["location"] == SHARED_DATA_FILE
                locations.setdefault(name, set()).add((tuple(tensor.dims), info["offset"], info["length"]))
            else:
                assert sys.getsizeof(tensor.raw_data) < EXTERNAL_THRESHOLD  # only small ones stay inline
    # W (written transposed for MatMul) and b: the same offsets in both models.
    assert len(locations["shared"]) == 2 and locations["shared"] < locations["own"]
    assert len(locations["own"]) == 4


def test_onnx_runtime_on_each_function_gives_coremlrt_predictions(package, tmp_path):
    path, _ = package
    paths = export_onnx_functions(coremlrt.MLModel(path), tmp_path / "onnx")  # an MLModel works as a path does
    for name, model_path in paths.items():
        session = ort.InferenceSession(model_path, providers=["CPUExecutionProvider"])
        got = session.run(["y"], _inputs())[0]
        expected = coremlrt.MLModel(path, function_name=name).predict(_inputs())["y"]
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5, err_msg=name)


def test_separate_exports_hold_one_copy_each(package, tmp_path):
    """What the shared file saves: export_onnx per function writes W and b twice."""
    path, weights = package
    total = 0
    for name in ("shared", "own"):
        export_onnx(path, tmp_path / f"{name}.onnx", function=name, external_data=True)
        total += (tmp_path / f"{name}.onnx.data").stat().st_size
    assert total == sum(weights.values()) + weights["W"] + weights["b"]


def test_a_subset_of_functions(package, tmp_path):
    path, weights = package
    paths = export_onnx_functions(path, tmp_path, functions=["own"])
    assert list(paths) == ["own"]
    assert (tmp_path / SHARED_DATA_FILE).stat().st_size == sum(weights.values())
    assert not (tmp_path / "shared.onnx").exists()


def test_a_missing_function_or_a_bad_directory_is_a_clear_error(package, tmp_path):
    path, _ = package
    with pytest.raises(coremlrt.Error, match=r"no function 'decode' in the model; it has own, shared"):
        export_onnx_functions(path, tmp_path / "out", functions=["shared", "decode"])
    assert not (tmp_path / "out").exists()  # checked before anything is written
    a_file = tmp_path / "file"
    a_file.write_text("")
    with pytest.raises(coremlrt.Error, match=r"'.*file': it is not a directory"):
        export_onnx_functions(path, a_file)
    with pytest.raises(coremlrt.Error, match=r"cannot make the directory"):
        export_onnx_functions(path, a_file / "below")
    with pytest.raises(ValueError, match="functions is empty"):
        export_onnx_functions(path, tmp_path / "out", functions=[])


def test_a_function_that_cannot_export_leaves_nothing(tmp_path):
    """One function with an op that has no ONNX form: the error names it, and neither the
    directory nor a weight file is left behind."""
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import types

    sources = {}
    for name, random in (("plain", False), ("noisy", True)):
        @mb.program(input_specs=[mb.TensorSpec((2, 3), dtype=types.fp32)], opset_version=ct.target.iOS18)
        def prog(x):
            if random:
                return mb.add(x=x, y=mb.random_normal(shape=np.array([2, 3], np.int32), seed=1))
            return mb.relu(x=x)

        sources[name] = H._save(prog, str(tmp_path), "single_" + name)
    with H._quiet_coremltools():
        path = H.save_multifunction(tmp_path, "mixed", sources, default="plain")
    with pytest.raises(coremlrt.Error, match=r"(?s)nothing written.*function 'noisy': 1 op\(s\).*random_normal"):
        export_onnx_functions(path, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    run = subprocess.run([sys.executable, "-m", "coremlrt", "export", "--check", path, "--all-functions"],
                         capture_output=True, text=True)
    assert run.returncode == 2 and "function 'noisy': random_normal producing" in run.stdout, run.stdout + run.stderr
    assert "'plain'" not in run.stdout


def test_cli_all_functions(package, tmp_path):
    path, weights = package
    out = tmp_path / "cli"
    run = subprocess.run([sys.executable, "-m", "coremlrt", "export", path, "-o", str(out), "--all-functions"],
                         capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert f"wrote {out / 'own.onnx'}" in run.stdout and SHARED_DATA_FILE in run.stdout
    assert (out / SHARED_DATA_FILE).stat().st_size == sum(weights.values())
    run = subprocess.run([sys.executable, "-m", "coremlrt", "export", "--check", path, "--all-functions"],
                         capture_output=True, text=True)
    assert run.returncode == 0 and "every op has an ONNX form" in run.stdout, run.stderr
    run = subprocess.run([sys.executable, "-m", "coremlrt", "export", path, "-o", str(out), "--all-functions",
                          "--function", "own"], capture_output=True, text=True)
    assert run.returncode == 1 and "--function NAME or --all-functions" in run.stderr
    run = subprocess.run([sys.executable, "-m", "coremlrt", "export", "--help"], capture_output=True, text=True)
    assert "--all-functions" in run.stdout
