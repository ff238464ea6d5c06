"""coremlrt._core.LoadOptions: include/coremlrt/model.h's LoadOptions bound once
(python/src/load_options_bindings.cc), checked in one place (LoadOptions::validate), and carried
by MLModel through pickling."""

import ast
import os
import pickle

import numpy as np
import pytest

import coremlrt
from coremlrt import _core


def changed(value):
    """A valid value of the same type as an option's default, other than it."""
    if isinstance(value, bool):
        return not value
    if isinstance(value, int):
        return value + 3
    if isinstance(value, float):
        return value + 0.25
    return value + "-changed" if value else "changed"


@pytest.fixture(scope="module")
def tanh_path(tmp_path_factory):
    from coremltools.converters.mil import Builder as mb

    from mil_helpers import save_program

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3))])
    def prog(x):
        return mb.tanh(x=x, name="y")

    return save_program(prog, tmp_path_factory.mktemp("load_options"))


def stub_fields():
    """The fields _core.pyi declares for LoadOptions (what mypy checks callers against)."""
    with open(os.path.join(os.path.dirname(coremlrt.__file__), "_core.pyi")) as stub:
        tree = ast.parse(stub.read())
    cls = next(node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "LoadOptions")
    return [node.target.id for node in cls.body if isinstance(node, ast.AnnAssign)]


def test_every_option_round_trips_through_its_field():
    options = _core.LoadOptions()
    defaults = options.__getstate__()
    wanted = {name: changed(value) for name, value in defaults.items()}
    for name, value in wanted.items():
        setattr(options, name, value)
        assert getattr(options, name) == value and type(getattr(options, name)) is type(value), name
    assert options.__getstate__() == wanted
    assert _core.LoadOptions(**wanted) == options != _core.LoadOptions()
    copy = pickle.loads(pickle.dumps(options))
    assert copy == options and copy is not options and copy.__getstate__() == wanted


def test_fields_are_documented_and_declared_in_the_stub():
    names = list(_core.LoadOptions().__getstate__())
    assert stub_fields() == names  # _core.pyi's LoadOptions, in include/coremlrt/model.h's order
    for name in names:
        assert len(getattr(_core.LoadOptions, name).__doc__ or "") > 20, name


def test_a_negative_linger_keeps_contexts():
    # LoadOptions::context_linger: negative keeps idle contexts; the binding stores it as -1 ms.
    assert _core.LoadOptions(context_linger=-5).context_linger == -0.001


@pytest.mark.parametrize("name, value, message", [
    ("threads", -1, 'load option "threads" must be at least 0, got -1'),
    ("concurrent_predictions", 0, 'load option "concurrent_predictions" must be at least 1, got 0'),
    ("max_loop_iterations", -5, 'load option "max_loop_iterations" must be at least 0, got -5'),
    ("memory_limit_bytes", -1, 'load option "memory_limit_bytes" must be at least 0, got -1'),
    ("threads", 1 << 40, 'load option "threads" must be within'),
    ("backend", "", 'load option "backend" must be "auto", "reference" or a backend\'s name'),
])
def test_out_of_range_values_raise_value_error_and_change_nothing(name, value, message):
    options = _core.LoadOptions()
    before = getattr(options, name)
    with pytest.raises(ValueError) as caught:
        setattr(options, name, value)
    assert str(caught.value).startswith(message)
    assert getattr(options, name) == before
    with pytest.raises(ValueError, match=message.split(",")[0]):
        _core.LoadOptions(**{name: value})


@pytest.mark.parametrize("name, value", [
    ("threads", "2"), ("threads", True), ("threads", 2.0), ("packed_weights", 1), ("backend", 3),
    ("function_name", None), ("context_linger", "1"),
])
def test_values_of_the_wrong_type_raise_type_error(name, value):
    with pytest.raises(TypeError, match=f'load option "{name}" takes'):
        setattr(_core.LoadOptions(), name, value)


def test_unknown_options_are_named():
    with pytest.raises(TypeError, match='no option "thread"; its options are function_name, context_linger'):
        _core.LoadOptions(thread=2)


def test_mlmodel_raises_the_errors_of_load_options(tanh_path):
    with pytest.raises(ValueError, match='load option "threads" must be at least 0, got -1'):
        coremlrt.MLModel(tanh_path, threads=-1)
    with pytest.raises(ValueError, match='load option "concurrent_predictions" must be at least 1, got 0'):
        coremlrt.MLModel(tanh_path, concurrent_predictions=0)
    with pytest.raises(TypeError, match='load option "backend" takes a str'):
        coremlrt.MLModel(tanh_path, backend=1)
    with pytest.raises(TypeError, match='load option "function_name" takes a str'):
        coremlrt.MLModel(tanh_path, function_name=7)


def test_mlmodel_arguments_become_load_options(tanh_path, tmp_path, monkeypatch):
    monkeypatch.setenv("COREMLRT_BACKEND", "reference")
    monkeypatch.setenv("COREMLRT_CACHE_DIR", str(tmp_path / "env-cache"))
    defaults = coremlrt.MLModel(tanh_path)._options
    assert defaults == _core.LoadOptions(backend="reference", cache_dir=str(tmp_path / "env-cache"))
    model = coremlrt.MLModel(tanh_path, coremlrt.ComputeUnit.CPU_AND_NE, "main", context_linger=0.25,
                             backend="reference", threads=2, cache_dir=None, memory_limit_bytes=1 << 30,
                             max_loop_iterations=1000, concurrent_predictions=3, packed_weights=False,
                             weight_copies_limit_bytes=1 << 28)
    assert model._options == _core.LoadOptions(
        function_name="main", context_linger=0.25, backend="reference", low_precision=True, threads=2, cache_dir="",
        memory_limit_bytes=1 << 30, max_loop_iterations=1000, concurrent_predictions=3, packed_weights=False,
        weight_copies_limit_bytes=1 << 28)


def test_pickled_mlmodel_keeps_every_option(tanh_path, tmp_path):
    arguments = dict(context_linger=0.25, backend="reference", threads=2, cache_dir=str(tmp_path / "cache"),
                     memory_limit_bytes=1 << 30, max_loop_iterations=1000, concurrent_predictions=3,
                     packed_weights=False, weight_copies_limit_bytes=1 << 28)
    model = coremlrt.MLModel(tanh_path, coremlrt.ComputeUnit.CPU_AND_GPU, "main", **arguments)
    copy = pickle.loads(pickle.dumps(model))
    assert copy is not model and copy.compute_unit == coremlrt.ComputeUnit.CPU_AND_GPU
    assert copy._options == model._options  # every option, those MLModel does not take included
    assert copy._options.function_name == "main" and copy._options.low_precision is False
    for name, value in arguments.items():
        assert getattr(copy._options, name) == value, name
    x = np.linspace(-2, 2, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(copy.predict({"x": x})["y"], np.tanh(x), rtol=1e-6, atol=1e-6)


def test_mlmodel_holds_its_own_options(tanh_path):
    options = _core.LoadOptions(backend="reference")
    model = coremlrt.MLModel._from_options(tanh_path, coremlrt.ComputeUnit.ALL, options)
    options.threads = 5
    assert model._options.threads == 0 and model._options.backend == "reference"
