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


def test_exit_status_says_what_kind_of_error_stopped_it(tmp_path):
    """docs/guide/command-line.md, "Exit status": 3 for a model that cannot be read, 4 for one of
    a format this build does not read, 1 for a bad input (test_predict_reports_bad_input)."""
    import json
    import shutil

    garbage = tmp_path / "garbage.mlmodel"
    garbage.write_bytes(b"this is not a model")
    result = run_cli("predict", str(garbage))
    assert result.returncode == 3, result.stderr
    assert "coremlrt: error:" in result.stderr and "garbage.mlmodel" in result.stderr
    newer = tmp_path / "newer.mlpackage"
    shutil.copytree(model_path("fixture_add", load_case("fixture_add")), newer)
    manifest = json.loads((newer / "Manifest.json").read_text())
    manifest["fileFormatVersion"] = "2.0.0"
    (newer / "Manifest.json").write_text(json.dumps(manifest))
    result = run_cli("predict", str(newer))
    assert result.returncode == 4, result.stderr
    assert "unsupported fileFormatVersion '2.0.0'" in result.stderr


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


def test_batch_writes_shards_errors_and_resumes(tmp_path):
    """coremlrt batch over an npz folder with one bad record: exit status 2, the good records
    in shards, the bad one in _errors.jsonl; --resume skips them; --fail-fast stops at it."""
    from batch_helpers import good_records, make_model, reference, write_npz_folder
    from coremlrt.batch import read_errors, read_outputs

    model = make_model(tmp_path)
    records = good_records(10, seed=21)
    records[6] = {"x": records[6]["x"]}
    data = write_npz_folder(tmp_path / "data", records)
    out = tmp_path / "out"
    result = run_cli("batch", model, "--inputs", str(data), "--output", str(out), "--threads", "2")
    assert result.returncode == 2, result.stderr
    assert "9 record(s) written, 1 failed" in result.stdout and "record 6 (record-00006.npz)" in result.stdout
    outputs = read_outputs(out)
    assert sorted(outputs) == [0, 1, 2, 3, 4, 5, 7, 8, 9]
    for index, outs in outputs.items():
        np.testing.assert_allclose(outs["y"], reference(**records[index]), rtol=1e-5, atol=1e-6)
    assert [e["index"] for e in read_errors(out)] == [6]

    again = run_cli("batch", model, "--inputs", str(data), "--output", str(out))
    assert again.returncode == 1 and "already holds predictions" in again.stderr
    resumed = run_cli("batch", model, "--inputs", str(data), "--output", str(out), "--resume", "--no-progress")
    assert resumed.returncode == 2 and "0 record(s) written, 1 failed, 9 already written" in resumed.stdout

    stopped = run_cli("batch", model, "--inputs", str(data), "--output", str(tmp_path / "stopped"),
                      "--fail-fast", "--threads", "1", "--format", "parquet")
    assert stopped.returncode == 1 and "record 6 (record-00006.npz) failed" in stopped.stderr
    assert 6 not in read_outputs(tmp_path / "stopped") and list((tmp_path / "stopped").glob("part-*.parquet"))
