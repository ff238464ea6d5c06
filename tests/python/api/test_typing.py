"""The package is typed (py.typed, stubs for the native module): mypy sees coremlrt's API."""

import os
import subprocess
import sys
import textwrap

import coremlrt

PACKAGE_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(coremlrt.__file__)))


def mypy_env():
    """An installed package is found by mypy as any typed package in site-packages (which mypy
    refuses on MYPYPATH); a build tree's copy (PYTHONPATH=build-dev/python) goes on MYPYPATH."""
    env = dict(os.environ)
    env.pop("MYPYPATH", None)
    if os.path.basename(PACKAGE_ROOT) not in ("site-packages", "dist-packages"):
        env["MYPYPATH"] = PACKAGE_ROOT
    return env


def run_mypy(tmp_path, source):
    script = tmp_path / "client.py"
    script.write_text(textwrap.dedent(source))
    env = mypy_env()
    proc = subprocess.run([sys.executable, "-m", "mypy", "--strict", "--no-incremental", "--follow-imports=silent",
                           str(script)], capture_output=True, text=True, env=env, cwd=tmp_path)
    return proc.returncode, proc.stdout + proc.stderr


def test_typed_markers_ship_with_the_package():
    package = os.path.dirname(coremlrt.__file__)
    assert os.path.isfile(os.path.join(package, "py.typed"))
    assert os.path.isfile(os.path.join(package, "_core.pyi"))


def test_mypy_accepts_correct_use(tmp_path):
    code, out = run_mypy(tmp_path, """
        from typing import Any, Dict, List
        import numpy as np
        import numpy.typing as npt
        import coremlrt
        from coremlrt import _core

        def run(path: str, x: npt.NDArray[np.float32]) -> Dict[str, npt.NDArray[Any]]:
            options = _core.LoadOptions(backend="reference", threads=2)
            options.context_linger = 0.5
            model = _core.Model(path, options)
            name: str = model.function_name
            size: int = model.weight_bytes
            labels: List[str] = model.class_labels
            return model.predict({"x": x})

        compiled: str = coremlrt.compile_model("model.mlpackage", "model.mlmodelc")
        structure: Dict[str, Any] = _core.model_structure(compiled)
        try:
            _core.compile_model("a.mlpackage", "b.mlmodelc")
        except coremlrt.Error as exc:
            message: str = str(exc)
        """)
    assert code == 0, out


def test_mypy_rejects_wrong_use(tmp_path):
    code, out = run_mypy(tmp_path, """
        from coremlrt import _core

        _core.compile_model(1, "b.mlmodelc")
        count: str = _core.Model("p").weight_bytes
        _core.Model("p").predict([1, 2])
        _core.LoadOptions().threads = "2"
        """)
    assert code == 1, out
    assert 'Argument 1 to "compile_model" has incompatible type "int"; expected "str"' in out
    assert 'Incompatible types in assignment (expression has type "int", variable has type "str")' in out
    assert 'Argument 1 to "predict" of "Model" has incompatible type "list[int]"' in out
    assert 'Incompatible types in assignment (expression has type "str", variable has type "int")' in out


def test_mypy_checks_the_package_against_its_stubs(tmp_path):
    # coremltools ships no type information, hence --ignore-missing-imports.
    env = mypy_env()
    proc = subprocess.run([sys.executable, "-m", "mypy", "--no-incremental", "--ignore-missing-imports", "-p", "coremlrt"],
                          capture_output=True, text=True, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
