"""coremltools' own MLModel API predicting through coremlrt (coremlrt.coremltools_backend).

In-process tests call enable()/disable(). The subprocess tests run scripts that never import
coremlrt, with only COREMLRT_COREMLTOOLS=1 set: they need the coremlrt_coremltools.pth hook
that `pip install .` puts in site-packages and skip when the package comes from a build tree.
"""

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import coremltools as ct
import torch
from coremltools.converters.mil import Builder as mb

import corpus
from coremlrt import coremltools_backend as backend

HOOK_SOURCE = os.path.join(os.path.dirname(__file__), "..", "..", "..", "python", "coremlrt_coremltools_hook.py")


@pytest.fixture(scope="module", autouse=True)
def enabled():
    backend.enable()
    yield
    backend.disable()


def small_net():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4)).eval()


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """(model returned by ct.convert, its saved path, the torch module)."""
    net = small_net()
    traced = torch.jit.trace(net, torch.zeros(2, 8))
    model = ct.convert(traced, inputs=[ct.TensorType(name="x", shape=(2, 8))], convert_to="mlprogram",
                       compute_precision=ct.precision.FLOAT32, minimum_deployment_target=ct.target.iOS16)
    path = str(tmp_path_factory.mktemp("torch") / "net.mlpackage")
    model.save(path)
    return model, path, net


def torch_reference(net, x):
    with torch.no_grad():
        return net(torch.from_numpy(x)).numpy()


def only_output(outputs):
    assert isinstance(outputs, dict) and len(outputs) == 1
    return next(iter(outputs.values()))


def test_converted_model_predicts(converted):
    model, _, net = converted
    assert isinstance(model.__proxy__, backend._MLModelProxy)
    x = np.random.default_rng(1).standard_normal((2, 8)).astype(np.float32)
    y = only_output(model.predict({"x": x}))
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, torch_reference(net, x), rtol=1e-5, atol=1e-5)


def test_saved_model_predicts(converted):
    _, path, net = converted
    model = ct.models.MLModel(path)
    x = np.random.default_rng(2).standard_normal((2, 8)).astype(np.float32)
    np.testing.assert_allclose(only_output(model.predict({"x": x})), torch_reference(net, x), rtol=1e-5, atol=1e-5)
    # coremltools converts torch tensors and float16/float64 arrays before the proxy sees them.
    np.testing.assert_allclose(only_output(model.predict({"x": torch.from_numpy(x)})),
                               torch_reference(net, x), rtol=1e-5, atol=1e-5)
    x16 = x.astype(np.float16)
    np.testing.assert_allclose(only_output(model.predict({"x": x16})),
                               torch_reference(net, x16.astype(np.float32)), rtol=1e-5, atol=1e-5)


def test_batch_predict_compute_units_and_properties(converted):
    _, path, net = converted
    model = ct.models.MLModel(path, compute_units=ct.ComputeUnit.CPU_ONLY)
    assert model.compute_unit == ct.ComputeUnit.CPU_ONLY
    assert model.__proxy__._model.compute_unit.name == "CPU_ONLY"
    assert model.last_predict_duration_in_nano_seconds is None
    assert model.load_duration_in_nano_seconds > 0
    compiled = model.get_compiled_model_path()  # compiled once, kept while the model lives
    assert compiled.endswith(".mlmodelc") and os.path.isfile(os.path.join(compiled, "model.mil"))
    assert model.get_compiled_model_path() == compiled
    rng = np.random.default_rng(3)
    batch = [{"x": rng.standard_normal((2, 8)).astype(np.float32)} for _ in range(3)]
    results = model.predict(batch)
    assert isinstance(results, list) and len(results) == 3
    for data, outputs in zip(batch, results):
        np.testing.assert_allclose(only_output(outputs), torch_reference(net, data["x"]), rtol=1e-5, atol=1e-5)
    assert model.last_predict_duration_in_nano_seconds > 0


def test_mil_program():
    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3))], opset_version=ct.target.iOS17)
    def prog(x):
        return mb.add(x=mb.mul(x=x, y=2.0), y=1.0, name="y")

    model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS17)  # fp16 compute
    x = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
    y = model.predict({"x": x})["y"]
    assert y.dtype == np.float32  # fp16 internally, float32 at the interface as on macOS
    np.testing.assert_allclose(y, x * 2 + 1, rtol=1e-3)


def test_coremltools_input_checks_unchanged(converted):
    model = converted[0]
    with pytest.raises(KeyError, match='Provided key "nope", in the input dict, does not match any of the model input name'):
        model.predict({"nope": np.zeros((2, 8), np.float32)})
    with pytest.raises(TypeError, match='"data" parameter must be either a dict or list of dict'):
        model.predict(np.zeros((2, 8), np.float32))
    with pytest.raises(AssertionError, match="State can only be used for unbatched predictions"):
        model.predict([{"x": np.zeros((2, 8), np.float32)}], state=object())


def test_model_without_proxy_keeps_coremltools_behaviour(converted):
    model = ct.models.MLModel(converted[1], skip_model_load=True)
    assert model.__proxy__ is None
    with pytest.raises(Exception, match="State functionality is only supported on macOS 15"):
        model.make_state()  # the make_state patch applies only to models our proxy loaded
    with pytest.raises(Exception, match="Model prediction is only supported on macOS"):
        model.predict({"x": np.zeros((2, 8), np.float32)})


def test_load_failure_becomes_coremltools_warning(converted, tmp_path):
    import shutil
    broken = str(tmp_path / "broken.mlpackage")
    shutil.copytree(converted[1], broken)
    for root, _, files in os.walk(broken):
        for name in files:
            if name == "weight.bin":
                open(os.path.join(root, name), "wb").close()
    with pytest.warns(RuntimeWarning, match="You will not be able to run predict"):
        model = ct.models.MLModel(broken)
    assert model.__proxy__ is None and isinstance(model._framework_error, RuntimeError)


def test_stateful_model():
    name = "fixture_stateful_accumulator"
    case = corpus.load_case(name)
    model = ct.models.MLModel(corpus.model_path(name, case))
    state = model.make_state()
    assert isinstance(state, ct.models.model.MLState)
    for step in range(case["steps"]):
        inputs, expected = corpus.step_arrays(name, case, step)
        outputs = model.predict(inputs, state=state)
        assert not corpus.mismatches(case, expected, outputs)
        for state_name, want in corpus.step_states(name, step).items():
            got = state.read_state(state_name)
            assert got.dtype == np.float32  # the fp16 state reads back as float32
            np.testing.assert_allclose(got, want, rtol=1e-2, atol=1e-2)
    # Writing zeros back replays step 0.
    state.write_state("acc", np.zeros((1, 8), np.float32))
    inputs, expected = corpus.step_arrays(name, case, 0)
    assert not corpus.mismatches(case, expected, model.predict(inputs, state=state))


@pytest.mark.parametrize("name", ["fixture_multifunction/adapter_a", "fixture_multifunction/adapter_b"])
def test_multifunction(name):
    case = corpus.load_case(name)
    model = ct.models.MLModel(corpus.model_path(name, case), function_name=case["function_name"])
    assert model.function_name == case["function_name"]
    inputs, expected = corpus.step_arrays(name, case, 0)
    assert not corpus.mismatches(case, expected, model.predict(inputs))
    if case["function_name"] == case["default_function_name"]:  # no function_name: the default one
        default = ct.models.MLModel(corpus.model_path(name, case))
        assert not corpus.mismatches(case, expected, default.predict(inputs))


def test_version_check(monkeypatch):
    backend.check_coremltools_version("9.0")
    with pytest.raises(RuntimeError, match=r"coremltools 8\.3\.0 is installed"):
        backend.check_coremltools_version("8.3.0")
    monkeypatch.setattr(ct, "__version__", "10.0")
    with pytest.raises(RuntimeError, match=r"coremltools 10\.0 is installed"):
        backend.enable()
    # What the COREMLRT_COREMLTOOLS hook does on such a version: warn, leave coremltools stock.
    with pytest.warns(RuntimeWarning, match=r"coremltools 10\.0 is installed"):
        backend._finish_hook_install()
    assert not backend.enabled() and "coremltools.libcoremlpython" not in sys.modules
    monkeypatch.undo()
    backend.enable()
    assert backend.enabled()


def test_disable_restores_coremltools(converted):
    import coremltools.models._compiled_model as compiled
    backend.disable()
    try:
        assert compiled._MLModelProxy is None and ct.models.model._MLModelProxy is None
        assert not hasattr(ct, "libcoremlpython") and "coremltools.libcoremlpython" not in sys.modules
        assert not hasattr(ct.models.MLModel.make_state, "_coremlrt_original")
        assert ct.models.MLModel(converted[1]).__proxy__ is None
    finally:
        backend.enable()
    assert compiled._MLModelProxy is backend._MLModelProxy
    assert sys.modules["coremltools.libcoremlpython"]._MLModelProxy is backend._MLModelProxy
    # coremltools' namespace stays as on Linux: the stand-in is not an attribute of the package.
    assert not hasattr(ct, "libcoremlpython")
    assert ct.models.MLModel(converted[1]).__proxy__ is not None


# -- subprocesses: scripts that never import coremlrt -------------------------------------------

def run_scripts(scripts, hook_variable, cwd):
    """Runs the scripts concurrently (each pays for importing coremltools and torch)."""
    env = {k: v for k, v in os.environ.items() if k != "COREMLRT_COREMLTOOLS"}
    if hook_variable:
        env["COREMLRT_COREMLTOOLS"] = "1"
    procs = []
    for script in scripts:
        path = os.path.join(cwd, f"script_{len(procs)}.py")
        with open(path, "w") as f:
            f.write(textwrap.dedent(script))
        procs.append(subprocess.Popen([sys.executable, path], cwd=cwd, env=env, text=True,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE))
    results = []
    for proc in procs:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode == 0, f"script failed:\n{out}\n{err}"
        assert "Failed to load _MLModelProxy" not in err, err
        results.append(out)
    return results


def pth_hook_installed():
    check = "import sys; print('coremlrt_coremltools_hook' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", check], env=dict(os.environ, COREMLRT_COREMLTOOLS="1"),
                         capture_output=True, text=True).stdout
    return out.strip() == "True"


needs_pth = pytest.mark.skipif(
    not pth_hook_installed(),
    reason="coremlrt_coremltools.pth is not installed in this interpreter's site-packages "
           "(coremlrt comes from a build tree); run against `pip install .`")

# The classic coremltools example, unchanged: convert a PyTorch model on this machine, then predict.
DOCS_EXAMPLE = """
    import coremltools as ct
    import numpy as np
    import torch

    class TinyNet(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, kernel_size=3, padding=1)
            self.fc = torch.nn.Linear(8, 5)

        def forward(self, x):
            x = torch.relu(self.conv(x))
            return torch.softmax(self.fc(x.mean(dim=(2, 3))), dim=1)

    torch_model = TinyNet().eval()
    example_input = torch.rand(1, 3, 32, 32)
    traced_model = torch.jit.trace(torch_model, example_input)

    model = ct.convert(traced_model, convert_to="mlprogram",
                       inputs=[ct.TensorType(shape=example_input.shape)])
    model.save("newmodel.mlpackage")

    input_name = model.get_spec().description.input[0].name
    output_name = model.get_spec().description.output[0].name
    coreml_out = model.predict({input_name: example_input.numpy()})[output_name]
    torch_out = torch_model(example_input).detach().numpy()
    np.testing.assert_allclose(coreml_out, torch_out, atol=1e-2)
    print("top class", coreml_out.argmax(), torch_out.argmax())
"""

ENV_ONLY = """
    import sys
    assert "coremlrt" not in sys.modules, "the hook must not import coremlrt before coremltools"
    import numpy as np
    import coremltools as ct
    from coremltools.converters.mil import Builder as mb

    @mb.program(input_specs=[mb.TensorSpec(shape=(3,))])
    def prog(x):
        return mb.relu(x=x, name="y")

    model = ct.convert(prog, convert_to="mlprogram")
    y = model.predict({"x": np.array([-1.0, 0.5, 2.0], np.float32)})["y"]
    np.testing.assert_allclose(y, [0.0, 0.5, 2.0])
    assert sys.modules["coremltools.libcoremlpython"].__coremlrt__
    print("ok")
"""

# The acceptance scenario: one process converts and saves without loading the model...
SAVE = """
    import coremltools as ct
    import numpy as np
    import torch

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 4)).eval()
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    model = ct.convert(torch.jit.trace(net, torch.from_numpy(x)), convert_to="mlprogram",
                       inputs=[ct.TensorType(name="x", shape=x.shape)], skip_model_load=True)
    model.save("accept.mlpackage")
    np.save("x.npy", x)
    np.save("expected.npy", net(torch.from_numpy(x)).detach().numpy())
"""

# ...and other processes predict with the saved package.
PREDICT = """
    import coremltools as ct
    import numpy as np

    model = ct.models.MLModel("accept.mlpackage")
    y = list(model.predict({"x": np.load("x.npy")}).values())[0]
    np.testing.assert_allclose(y, np.load("expected.npy"), rtol=1e-2, atol=1e-2)
    print("predicted", y.shape)
"""


@needs_pth
def test_env_variable_scripts(tmp_path):
    """The docs example, an env-only script and the acceptance scenario, unchanged."""
    docs_out, env_out, _ = run_scripts([DOCS_EXAMPLE, ENV_ONLY, SAVE], True, str(tmp_path))
    assert "top class" in docs_out and env_out.strip() == "ok"
    assert os.path.isdir(tmp_path / "newmodel.mlpackage")
    for out in run_scripts([PREDICT, PREDICT], True, str(tmp_path)):
        assert "predicted (2, 4)" in out


def test_hook_module_without_pth(tmp_path):
    """The hook's lazy finder, installed by hand from the source tree (no .pth needed)."""
    script = f"""
        import importlib.util, sys
        sys.path.append({os.path.dirname(os.path.abspath(HOOK_SOURCE))!r})  # the hook's finder, beside it
        spec = importlib.util.spec_from_file_location("coremlrt_coremltools_hook", {HOOK_SOURCE!r})
        hook = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(hook)
        hook.install()
        assert "coremlrt" not in sys.modules
        import coremltools as ct
        assert ct.__spec__.loader.__class__.__name__ != "_RunAfterLoader"
        assert hook.FINDER not in sys.meta_path
        import numpy as np
        sys.path.insert(0, {os.path.dirname(os.path.dirname(os.path.abspath(__file__)))!r})
        import corpus
        name = "fixture_stateful_accumulator"
        case = corpus.load_case(name)
        model = ct.models.MLModel(corpus.model_path(name, case))
        state = model.make_state()
        for step in range(case["steps"]):
            inputs, expected = corpus.step_arrays(name, case, step)
            assert not corpus.mismatches(case, expected, model.predict(inputs, state=state))
        print("ok")
    """
    assert run_scripts([script], False, str(tmp_path))[0].strip() == "ok"


def test_failed_prediction_speaks_like_core_ml(tmp_path):
    """A prediction the engine refuses (here an out-of-range scatter index that the model asks
    to validate) raises RuntimeError opening with Core ML's words, then coremlrt's reason."""
    from coremltools.converters.mil.mil import types

    @mb.program(input_specs=[mb.TensorSpec(shape=(2, 3)), mb.TensorSpec(shape=(2,), dtype=types.int32)],
                opset_version=ct.target.iOS17)
    def prog(data, indices):
        return mb.scatter(data=data, indices=indices, updates=np.ones((2, 3), np.float32), validate_indices=True)

    model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS17,
                       compute_precision=ct.precision.FLOAT32)
    data = np.zeros((2, 3), np.float32)
    good = model.predict({"data": data, "indices": np.array([1, 0], np.int32)})
    np.testing.assert_array_equal(only_output(good), np.ones((2, 3), np.float32))
    with pytest.raises(RuntimeError, match=r"^Unable to compute the prediction using ML Program: .*"
                                           r"scatter index 10 is out of range for a dimension of size 2"):
        model.predict({"data": data, "indices": np.array([10, 0], np.int32)})
