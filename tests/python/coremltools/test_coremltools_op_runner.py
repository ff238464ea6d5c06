"""The coremltools op-suite runner's own logic: how failures are classified and how a sample
run is checked against the recorded full run (scripts/coremltools_op_tests.py)."""

import importlib.util
import json
import os
import sys

import numpy as np
import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.join(REPO, "tests", "conformance"))

import coremltools_op_suite as suite  # noqa: E402


def _load_runner():
    spec = importlib.util.spec_from_file_location("coremltools_op_tests",
                                                  os.path.join(REPO, "scripts", "coremltools_op_tests.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _excinfo(fn):
    with pytest.raises(BaseException) as info:
        fn()
    return info


def test_numeric_mismatch_reports_max_errors():
    def compare():
        np.testing.assert_allclose(np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.5, 3.0]), atol=1e-3, rtol=1e-3)

    cause, detail, errors = suite.classify_failure(_excinfo(compare))
    assert cause == "wrong numbers"
    assert errors["max_abs_error"] == pytest.approx(0.5)
    assert errors["max_rel_error"] == pytest.approx(0.2)
    assert "1 / 3" in detail


def test_missing_kernel_names_the_op():
    def load():
        raise RuntimeError("unsupported op: function 'main', op 'y' (foo_bar): this build has no kernel "
                           "for op type 'foo_bar' in opset iOS17")

    cause, detail, _ = suite.classify_failure(_excinfo(load))
    assert (cause, detail) == ("missing op", "foo_bar (opset iOS17)")


def test_other_assertions_are_wrong_results():
    def check():
        assert (2, 3) == (3, 2), "expected shape (2, 3) != actual shape (3, 2)"

    cause, detail, _ = suite.classify_failure(_excinfo(check))
    assert cause == "wrong result" and "shape" in detail


def test_op_is_the_test_class():
    assert suite.op_of("iOS17/test_conv.py::TestConv::test_x[a-b]") == "TestConv"
    assert suite.op_of("iOS14/test_utils.py::test_free_function") == "test_free_function"


def test_check_flags_regressions_and_shrunken_samples(tmp_path, monkeypatch):
    runner = _load_runner()
    recorded = tmp_path / "recorded.json"
    recorded.write_text(json.dumps({"coremltools": "9.0", "applicable": 20,
                                    "not_passed": {"f.py::T::known": "failed: wrong numbers"}}))
    monkeypatch.setattr(runner, "RECORDED", recorded)
    ok = [{"nodeid": f"f.py::T::c{i}", "outcome": "passed"} for i in range(9)]
    known = {"nodeid": "f.py::T::known", "outcome": "failed", "cause": "wrong numbers"}
    assert runner.check_against_recorded(ok + [known], sample=2) == []
    new = {"nodeid": "f.py::T::c9", "outcome": "crash", "cause": "crash", "detail": "signal"}
    problems = runner.check_against_recorded(ok + [new], sample=2)
    assert len(problems) == 1 and problems[0].startswith("regression: f.py::T::c9")
    problems = runner.check_against_recorded(ok[:3], sample=2)
    assert len(problems) == 1 and "only 3 cases ran" in problems[0]


def test_other_model_types_are_named():
    def load():
        raise RuntimeError("model 'm.mlmodel' is of type 'glmRegressor'; this build runs ML programs (mlProgram) "
                           "and neuralNetwork models only")

    cause, _, _ = suite.classify_failure(_excinfo(load))
    assert cause == "glmRegressor model" and suite._is_other_model_cause(cause)

    def layer():
        raise RuntimeError("neuralNetwork layer 'add_0' (add) cannot run: ...")

    assert suite.classify_failure(_excinfo(layer))[0] == "neuralnetwork model"


def test_runtime_suite_files_and_report(tmp_path):
    runner = _load_runner()
    root = runner.suite_dir("runtime")
    files = [str(p.relative_to(root)) for p in runner.test_files(root, None, "runtime")]
    assert "test/api/test_api_examples.py" in files and "test/blob/test_weights.py" in files
    assert all(f.split("/")[1] in ("api", "modelpackage", "ml_program", "blob") for f in files)

    import coremltools_op_report as report
    records = [
        {"nodeid": "test/a.py::T::ok", "file": "test/a.py", "outcome": "passed"},
        {"nodeid": "test/a.py::T::bad", "file": "test/a.py", "outcome": "failed", "cause": "wrong result",
         "detail": "expected 3"},
        {"nodeid": "test/a.py::T::sk", "file": "test/a.py", "outcome": "failed", "cause": "fails before prediction",
         "detail": "ModuleNotFoundError: No module named 'sklearn'"},
        {"nodeid": "test/b.py::T::glm", "file": "test/b.py", "outcome": "not_applicable", "cause": "glmRegressor model"},
    ]
    assert report.missing_package(records[2]) == "sklearn"
    out = tmp_path / "r.md"
    report.write_runtime_report(records, out, "9.0", None, [])
    text = out.read_text()
    assert "| `test/a.py` | 1 | 1 | 1 | 0 | 0 | 50.0% |" in text
    assert "* `sklearn` (1 cases): `test/a.py::T::sk`" in text
    assert "* glmRegressor model (1 cases): `test/b.py::T::glm`" in text
    assert "* `test/a.py::T::bad`: wrong result: expected 3" in text
