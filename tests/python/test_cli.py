"""The coremlrt command: predict writing an .npz (on a generated model), info on every corpus model."""

import subprocess
import sys

import numpy as np
import pytest

from corpus import case_names, load_case, mismatches, model_path, step_arrays


def run_cli(*args):
    return subprocess.run([sys.executable, "-m", "coremlrt", *args], capture_output=True, text=True)


def test_predict_writes_expected_npz(tmp_path):
    case = load_case("fixture_add")
    inputs, expected = step_arrays("fixture_add", case, 0)
    np.save(tmp_path / "x.npy", inputs["x"])
    out = tmp_path / "out.npz"
    result = run_cli("predict", model_path("fixture_add", case), "--input", f"x={tmp_path / 'x.npy'}", "--output", str(out))
    assert result.returncode == 0, result.stderr
    assert "add_0: float32 [1, 64, 512]" in result.stdout
    with np.load(out) as written:
        assert not mismatches(case, expected, dict(written))


def test_predict_reports_bad_input(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((2, 2), np.float32))
    result = run_cli("predict", model_path("fixture_add", load_case("fixture_add")), "--input", f"x={tmp_path / 'x.npy'}")
    assert result.returncode == 1
    assert "coremlrt: error:" in result.stderr and "expected [1, 64, 512]" in result.stderr


@pytest.mark.parametrize("name", case_names())
def test_info_runs_on_every_corpus_model(name):
    case = load_case(name)
    result = run_cli("info", model_path(name, case))
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert f"specification version {case['spec_version']}" in out if "spec_version" in case else True
    if case["format"] == "neuralnetwork":
        for layer_type in case["ops"]:
            assert f"{layer_type} x" in out, f"layer histogram lacks {layer_type}"
        assert ("every layer is supported by this build" in out) != ("unsupported by this build" in out)
        return
    if case["format"] != "mlprogram":
        assert "unsupported: model type" in out
        return
    for function, opset in case["opsets"].items():
        assert f"- {function}" in out and f"opset {opset}" in out
    for op in case["ops"]:
        assert f"{op} x" in out, f"op histogram lacks {op}"
    for feature in case["inputs"]:
        assert f"      {feature}: " in out
    assert "weights:" in out
    assert ("every op is supported by this build" in out) != ("unsupported by this build" in out)
