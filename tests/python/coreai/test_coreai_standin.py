"""coremlrt's stand-in for coreai-core's runtime (coremlrt.coreai.runtime, COREMLRT_COREAI=1).

The same user code (USER_CODE: coreai.authoring.AIModelAsset + coreai.runtime, written against
coreai-core 1.0.0b3's API) runs in two processes, one with coreai-core's own runtime and one
with the switch on, on the same .aimodel files: an MLP, a CNN, a key/value cache written by
prefill and decode functions that share one state, an accumulator state beside a second
function, several awaits in flight, and the error cases. Outputs must agree within fp32
rounding, states after every step, and every error must be of the same type (and, where the
stand-in mirrors it, say the same words). Skipped without coreai-core, coreai-torch or torch.
docs/design/coreai-runtime-standin.md describes the stand-in.
"""

import asyncio
import json
import os
import pickle
import shutil
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("coreai.runtime")
with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # coreai-torch warns about torch versions newer than it was tested with
    coreai_torch = pytest.importorskip("coreai_torch")

import coremlrt  # noqa: E402
import coremlrt.coreai.runtime as standin  # noqa: E402
from coreai_helpers import convert as _convert  # noqa: E402
import coreai_oracle  # noqa: E402

PYTHON_DIR = os.path.join(os.path.dirname(__file__), "..", "..", "..", "python")
HOOK_SOURCE = os.path.abspath(os.path.join(PYTHON_DIR, "coremlrt_coreai_hook.py"))
PTH_SOURCE = os.path.abspath(os.path.join(PYTHON_DIR, "coremlrt_coreai.pth"))
FINDER_SOURCE = os.path.abspath(os.path.join(PYTHON_DIR, "coremlrt_import_hook.py"))

# Both sides compute in fp32; the differences are summation order only (coremlrt against
# coreai's runtime: at most 9e-8 on these models, docs/design/coreai.md).
RTOL, ATOL = 1e-5, 1e-6


class _MLP(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(8, 16)
        self.l2 = torch.nn.Linear(16, 4)

    def forward(self, x, y):
        return torch.softmax(self.l2(torch.relu(self.l1(x))) + y, -1)


class _CNN(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn = torch.nn.BatchNorm2d(8)
        self.fc = torch.nn.Linear(8 * 4 * 4, 10)

    def forward(self, x):
        h = torch.nn.functional.max_pool2d(torch.relu(self.bn(self.c1(x))), 2)
        return self.fc(torch.flatten(torch.nn.functional.adaptive_avg_pool2d(h, (4, 4)), 1))


class _CacheStep(torch.nn.Module):
    """Attention over a key/value-like cache that the step writes at the given positions (a state
    updated in place): prefill writes 4 rows, decode one."""

    def __init__(self, q):
        super().__init__()
        self.register_buffer("cache", torch.zeros(1, 8, 4))
        self.q = q

    def forward(self, x, pos):
        self.cache.index_copy_(1, pos, x)
        return torch.softmax(self.q(x) @ self.cache.transpose(1, 2), -1) @ self.cache


class _Accumulate(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("acc", torch.zeros(1, 4))
        self.l = torch.nn.Linear(4, 4)

    def forward(self, x):
        self.acc.add_(x)
        return self.l(self.acc) * 2


class _Triple(torch.nn.Module):
    def forward(self, x):
        return x * 3 - 1


def _program(path, entries):
    """An .aimodel with several functions: entries of (module, args, inputs, outputs, states, name)."""
    import pathlib

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converter = coreai_torch.TorchConverter(mode=coreai_torch.TorchConverter.Mode.RELEASE)
        for module, args, inputs, outputs, states, name in entries:
            export = (lambda a: lambda m: torch.export.export(m, args=a).run_decompositions(
                coreai_torch.get_decomp_table()))(args)
            extra = {"state_names": states} if states else {}
            converter.add_pytorch_module(module, export_fn=export, input_names=inputs, output_names=outputs,
                                         entrypoint_name=name, **extra)
        converter.to_coreai().save_asset(pathlib.Path(path))
    return str(path)


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    torch.manual_seed(0)
    root = tmp_path_factory.mktemp("standin")
    cnn = _CNN().eval()
    with torch.no_grad():
        cnn.bn.running_mean.uniform_(-0.5, 0.5)
        cnn.bn.running_var.uniform_(0.5, 2.0)
    q = torch.nn.Linear(4, 4)
    return {
        "mlp": _convert(_MLP().eval(), (torch.randn(2, 8), torch.randn(2, 4)), ["x", "y"], ["probs"],
                        root / "mlp.aimodel"),
        "cnn": _convert(cnn, (torch.randn(1, 3, 16, 16),), ["image"], ["logits"], root / "cnn.aimodel"),
        "kv": _program(root / "kv.aimodel", [
            (_CacheStep(q).eval(), (torch.randn(1, 4, 4), torch.arange(4)), ["x", "pos"], ["y"], ["cache"], "prefill"),
            (_CacheStep(q).eval(), (torch.randn(1, 1, 4), torch.tensor([4])), ["x", "pos"], ["y"], ["cache"],
             "decode")]),
        "multi": _program(root / "multi.aimodel", [
            (_Accumulate().eval(), (torch.randn(1, 4),), ["x"], ["y"], ["acc"], "main"),
            (_Triple().eval(), (torch.randn(1, 4),), ["x"], ["z"], None, "triple")]),
    }


# Code written for coreai-core's runtime, run unchanged on both: argv[1] holds the model paths
# (JSON), argv[2] the file the results are pickled to. Every number it computes and every error
# it catches goes into the results.
USER_CODE = r'''
import asyncio, inspect, json, pickle, sys
import numpy as np
import coreai.runtime
from coreai.authoring import AIModelAsset
from coreai.runtime import AIModel, InferenceFunction, NDArray, StorageKind

paths = json.loads(sys.argv[1])
results, errors = {}, {}


def caught(case, exc):
    clause = next(k.__name__ for k in (KeyError, TypeError, RuntimeError, AttributeError, Exception)
                  if isinstance(exc, k))
    errors[case] = (clause, type(exc).__name__, str(exc.args[0]) if exc.args else "")


async def expect_error(case, make):
    try:
        value = make()
        if inspect.isawaitable(value):
            await value
    except Exception as exc:
        caught(case, exc)
    else:
        errors[case] = ("no error", "", "")


def arrays(outputs):
    return {name: (value.numpy(), value.dtype, value.shape, value.strides, str(value),
                   type(value) is coreai.runtime.NDArray) for name, value in outputs.items()}


def describe(model, function):
    d = function.desc
    features = lambda kind, names: [(n, getattr(d, kind + "_descriptor")(n).shape,
                                     getattr(d, kind + "_descriptor")(n).dtype,
                                     str(getattr(d, kind + "_descriptor")(n))) for n in names]
    return (model.function_names, str(model), str(function), d.name, d.input_names, d.output_names,
            d.state_names, features("input", d.input_names), features("output", d.output_names),
            features("state", d.state_names), model.specialization_options)


def ndarray_semantics():
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    nd = NDArray(a)
    a[0, 0] = 100  # NDArray copied it
    view = nd.numpy()
    view[0, 1] = 55  # numpy() is a copy on coreai-core's Linux runtime
    t = NDArray(a.T)
    results["ndarray"] = (nd.numpy(), nd.dtype, nd.shape, nd.strides, str(nd), t.shape, t.strides, t.numpy(),
                          str(NDArray(np.array(3.0, np.float32))), NDArray(np.array(3.0, np.float32)).shape,
                          NDArray([[1, 2], [3, 4]]).dtype, NDArray([1.0, 2.0]).dtype, NDArray([True]).dtype,
                          [NDArray(np.zeros(2, t_)).dtype for t_ in (np.float16, np.float64, np.int8, np.uint8,
                                                                     np.int16, np.int32, np.int64, np.uint32,
                                                                     np.bool_, np.complex64)],
                          NDArray(np.zeros((2, 3), np.float32), StorageKind.BYTES).shape)


async def mlp(rng):
    async with AIModelAsset.load(paths["mlp"]).executable() as model:
        f = model.load_function("main")
        results["mlp.describe"] = describe(model, f)
        x = NDArray(rng.standard_normal((2, 8), dtype=np.float32))
        y = NDArray(rng.standard_normal((2, 4), dtype=np.float32))
        for step in range(3):
            call = f({"x": NDArray(rng.standard_normal((2, 8), dtype=np.float32)), "y": y})
            results["mlp.is_coroutine"] = inspect.iscoroutine(call)
            results[f"mlp.{step}"] = arrays(await call)
        results["mlp.keywords"] = arrays(await f(inputs={"x": x, "y": y}, state=None))
        results["mlp.new_wrapper"] = model.load_function("main") is f
        await expect_error("missing input", lambda: f({"x": x}))
        await expect_error("no inputs", lambda: f())
        await expect_error("extra input", lambda: f({"x": x, "y": y, "z": y}))
        await expect_error("wrong shape", lambda: f({"x": NDArray(np.zeros((3, 8), np.float32)), "y": y}))
        await expect_error("wrong rank", lambda: f({"x": NDArray(np.zeros(16, np.float32)), "y": y}))
        await expect_error("wrong dtype", lambda: f({"x": NDArray(np.zeros((2, 8))), "y": y}))
        await expect_error("float16 for float32", lambda: f({"x": NDArray(np.zeros((2, 8), np.float16)), "y": y}))
        await expect_error("dtype before shape", lambda: f({"x": NDArray(np.zeros((3, 8))), "y": y}))
        await expect_error("numpy input", lambda: f({"x": np.zeros((2, 8), np.float32), "y": y}))
        await expect_error("list of inputs", lambda: f([x, y]))
        await expect_error("state on a function without", lambda: f({"x": x, "y": y}, state={"s": x}))
        await expect_error("unknown function", lambda: model.load_function("nope"))
        await expect_error("function name not a str", lambda: model.load_function(3))
        await expect_error("unknown input descriptor", lambda: f.desc.input_descriptor("nope"))
        await expect_error("unknown output descriptor", lambda: f.desc.output_descriptor("x"))
        await expect_error("unknown state descriptor", lambda: f.desc.state_descriptor("x"))
    await expect_error("AIModel()", lambda: AIModel())
    await expect_error("InferenceFunction()", lambda: InferenceFunction())
    await expect_error("NDArray(str)", lambda: NDArray("abc"))
    await expect_error("NDArray(scalar)", lambda: NDArray(3))
    await expect_error("NDArray(tuple)", lambda: NDArray((1, 2)))
    await expect_error("NDArray(backing str)", lambda: NDArray(np.zeros(2), "bytes"))
    await expect_error("NDArray(METAL)", lambda: NDArray(np.zeros(2), StorageKind.METAL))
    await expect_error("NDArray(str array)", lambda: NDArray(np.array(["a"])))


async def cnn_and_concurrency(rng):
    async with AIModelAsset.load(paths["cnn"]).executable() as cnn, \
            AIModelAsset.load(paths["mlp"]).executable() as mlp:
        f, g = cnn.load_function("main"), mlp.load_function("main")
        results["cnn.describe"] = describe(cnn, f)
        images = [NDArray(rng.standard_normal((1, 3, 16, 16), dtype=np.float32)) for _ in range(6)]
        for i, image in enumerate(images[:2]):
            results[f"cnn.{i}"] = arrays(await f({"image": image}))
        # Several awaits in flight, on two models at once.
        y = NDArray(rng.standard_normal((2, 4), dtype=np.float32))
        xs = [NDArray(rng.standard_normal((2, 8), dtype=np.float32)) for _ in range(6)]
        outs = await asyncio.gather(*[f({"image": image}) for image in images],
                                    *[g({"x": x, "y": y}) for x in xs])
        results["gather"] = [arrays(o) for o in outs]
        tasks = [asyncio.create_task(f({"image": image})) for image in images]
        results["tasks"] = [arrays(await t) for t in tasks]


async def kv_cache(rng):
    async with AIModelAsset.load(paths["kv"]).executable() as model:
        prefill, decode = model.load_function("prefill"), model.load_function("decode")
        results["kv.describe"] = (describe(model, prefill), describe(model, decode))
        made = NDArray.from_descriptor(prefill.desc.state_descriptor("cache"))
        results["kv.from_descriptor"] = (made.shape, made.dtype, made.strides)
        cache = NDArray(np.zeros((1, 8, 4), np.float32))
        x = NDArray(rng.standard_normal((1, 4, 4), dtype=np.float32))
        results["kv.prefill"] = arrays(await prefill({"x": x, "pos": NDArray(np.arange(4, dtype=np.int32))},
                                                     state={"cache": cache}))
        results["kv.state.prefill"] = cache.numpy()
        for p in range(4, 7):
            step = {"x": NDArray(rng.standard_normal((1, 1, 4), dtype=np.float32)),
                    "pos": NDArray(np.array([p], np.int32))}
            results[f"kv.decode.{p}"] = arrays(await decode(step, state={"cache": cache}))
            results[f"kv.state.{p}"] = cache.numpy()
        one = {"x": NDArray(np.ones((1, 1, 4), np.float32)), "pos": NDArray(np.array([1], np.int32))}
        await expect_error("missing state", lambda: decode(one))
        await expect_error("missing input with state", lambda: decode({"x": one["x"]}, state={"cache": cache}))
        await expect_error("extra state", lambda: decode(one, state={"cache": cache, "other": cache}))
        await expect_error("state wrong shape",
                           lambda: decode(one, state={"cache": NDArray(np.zeros((1, 9, 4), np.float32))}))
        await expect_error("state wrong dtype", lambda: decode(one, state={"cache": NDArray(np.zeros((1, 8, 4)))}))
        await expect_error("state not an NDArray",
                           lambda: decode(one, state={"cache": np.zeros((1, 8, 4), np.float32)}))
        await expect_error("pos int64",
                           lambda: decode({"x": one["x"], "pos": NDArray(np.array([1]))}, state={"cache": cache}))
        results["kv.state.after_errors"] = cache.numpy()
        # The caller rewinds: a new state array made from the read-back value, then more steps.
        rewound = NDArray(cache.numpy() * 0.5)
        for p in (7, 2):
            step = {"x": NDArray(rng.standard_normal((1, 1, 4), dtype=np.float32)),
                    "pos": NDArray(np.array([p], np.int32))}
            results[f"kv.rewound.{p}"] = arrays(await decode(step, state={"cache": rewound}))
            results[f"kv.state.rewound.{p}"] = rewound.numpy()
        results["kv.state.untouched"] = cache.numpy()


async def functions_and_shared_state(rng):
    async with AIModelAsset.load(paths["multi"]).executable() as model:
        main, triple = model.load_function("main"), model.load_function("triple")
        results["multi.describe"] = (describe(model, main), describe(model, triple))
        acc = NDArray(np.zeros((1, 4), np.float32))
        for step in range(3):
            results[f"multi.{step}"] = arrays(await main({"x": NDArray(rng.standard_normal((1, 4), dtype=np.float32))},
                                                         state={"acc": acc}))
            results[f"multi.state.{step}"] = acc.numpy()
        results["multi.triple(state)"] = arrays(await triple({"x": acc}))
        # Awaits in flight, each with a state of its own, then several sharing one state.
        states = [NDArray(np.full((1, 4), i, np.float32)) for i in range(5)]
        outs = await asyncio.gather(*[main({"x": NDArray(np.full((1, 4), i + 1, np.float32))}, state={"acc": s})
                                      for i, s in enumerate(states)])
        results["multi.gather"] = [arrays(o) for o in outs]
        results["multi.gather.states"] = [s.numpy() for s in states]
        await asyncio.gather(*[main({"x": NDArray(np.full((1, 4), i + 1, np.float32))}, state={"acc": acc})
                               for i in range(5)])
        results["multi.shared.state"] = acc.numpy()


async def main():
    rng = np.random.default_rng(0)
    ndarray_semantics()
    await mlp(rng)
    await cnn_and_concurrency(rng)
    await kv_cache(rng)
    await functions_and_shared_state(rng)


asyncio.run(main())
with open(sys.argv[2], "wb") as out:
    pickle.dump({"results": results, "errors": errors,
                 "runtime": coreai.runtime.AIModel.__module__}, out)
'''

# What COREMLRT_COREAI=1 does through coremlrt_coreai.pth, done by hand from the source tree
# (test_pth_file checks the .pth itself).
# The hook imports its finder (coremlrt_import_hook.py), which lies beside it as in site-packages;
# python/ is appended to the path, so coremlrt itself still comes from the build or the install.
HOOK_PRELUDE = f"""
import importlib.util, sys
sys.path.append({os.path.dirname(HOOK_SOURCE)!r})
spec = importlib.util.spec_from_file_location("coremlrt_coreai_hook", {HOOK_SOURCE!r})
hook = importlib.util.module_from_spec(spec)
spec.loader.exec_module(hook)
sys.modules["coremlrt_coreai_hook"] = hook
hook.install()
"""


def _run(code, args, cwd, env=None):
    path = os.path.join(cwd, f"script_{len(os.listdir(cwd))}.py")
    with open(path, "w") as f:
        f.write(code)
    return subprocess.Popen([sys.executable, path, *args], cwd=cwd, env=env or os.environ.copy(), text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(proc):
    out, err = proc.communicate(timeout=600)
    # coreai-core's runtime may abort as the process exits, after the results were written
    # (coreai_oracle.finished_cleanly); a failure before that leaves no results to load.
    assert coreai_oracle.finished_cleanly(proc.returncode, err), f"script failed:\n{out}\n{err}"
    return out


@pytest.fixture(scope="module")
def both(models, tmp_path_factory):
    """USER_CODE's results with coreai-core's runtime and with the stand-in (run side by side)."""
    root = tmp_path_factory.mktemp("runs")
    args = lambda name: [json.dumps(models), str(root / name)]  # noqa: E731
    env = {k: v for k, v in os.environ.items() if k != standin.ENV_VAR}
    procs = [_run(USER_CODE, args("apple.pkl"), str(root), env),
             _run(HOOK_PRELUDE + USER_CODE, args("standin.pkl"), str(root), env)]
    for proc in procs:
        _finish(proc)
    loaded = [pickle.load(open(root / name, "rb")) for name in ("apple.pkl", "standin.pkl")]
    assert loaded[0]["runtime"].startswith("coreai.runtime")
    assert loaded[1]["runtime"] == "coremlrt.coreai.runtime"
    return loaded


def _compare(apple, ours, where):
    if isinstance(apple, np.ndarray):
        assert isinstance(ours, np.ndarray) and ours.dtype == apple.dtype and ours.shape == apple.shape, where
        np.testing.assert_allclose(ours, apple, rtol=RTOL, atol=ATOL, err_msg=where)
    elif isinstance(apple, dict):
        # coreai-core's output dicts come in no fixed order (measured: it varies from call to
        # call); the stand-in's follow output_names.
        assert sorted(ours) == sorted(apple), where
        for key in apple:
            _compare(apple[key], ours[key], f"{where}[{key!r}]")
    elif isinstance(apple, (list, tuple)):
        assert type(ours) is type(apple) and len(ours) == len(apple), where
        for i, (a, b) in enumerate(zip(apple, ours)):
            _compare(a, b, f"{where}[{i}]")
    else:
        assert ours == apple, f"{where}: {ours!r} != {apple!r}"


@pytest.mark.parametrize("prefix", ["ndarray", "mlp", "cnn", "gather", "tasks", "kv", "multi"])
def test_same_results(both, prefix):
    """Outputs, output types (NDArray: dtype, shape, strides, str), descriptors and states agree."""
    apple, ours = (run["results"] for run in both)
    keys = [k for k in apple if k.split(".")[0] == prefix]
    assert keys and [k for k in ours if k.split(".")[0] == prefix] == keys
    for key in keys:
        _compare(apple[key], ours[key], key)


def test_states_after_each_step(both):
    """The state arrays hold the same values after every step (a cache written by index_copy_
    is copied values: equal exactly), and a failed call leaves the state as it was."""
    apple, ours = (run["results"] for run in both)
    keys = [k for k in apple if ".state" in k]
    assert len(keys) >= 10
    for key in keys:
        values = apple[key] if isinstance(apple[key], list) else [apple[key]]
        for i, (a, b) in enumerate(zip(values, ours[key] if isinstance(ours[key], list) else [ours[key]])):
            if key.startswith("kv."):
                np.testing.assert_array_equal(b, a, err_msg=f"{key}[{i}]")
            else:
                np.testing.assert_allclose(b, a, rtol=RTOL, atol=ATOL, err_msg=f"{key}[{i}]")
    np.testing.assert_array_equal(ours["kv.state.after_errors"], ours["kv.state.6"])
    assert ours["multi.shared.state"][0, 0] == ours["multi.state.2"][0, 0] + 15  # 1 + 2 + ... + 5, in any order


def test_same_errors(both):
    """Each error is caught by the same except clause, has the same type, and the same words."""
    apple, ours = (run["errors"] for run in both)
    assert list(ours) == list(apple) and len(apple) >= 30
    for case in apple:
        assert ours[case][:2] == apple[case][:2], f"{case}: {ours[case]} != {apple[case]}"
        assert ours[case][2] == apple[case][2], f"{case}: message {ours[case][2]!r} != {apple[case][2]!r}"
    assert apple["missing state"][0] == "RuntimeError" and apple["unknown function"][0] == "KeyError"


def test_pth_file(models, tmp_path):
    """COREMLRT_COREAI=1 through the .pth file, laid out as an install puts it (site-packages);
    without the variable nothing is imported."""
    site_dir = tmp_path / "site"
    site_dir.mkdir()
    shutil.copy(PTH_SOURCE, site_dir)
    shutil.copy(HOOK_SOURCE, site_dir)
    shutil.copy(FINDER_SOURCE, site_dir)
    script = f"""
        import site, sys
        site.addsitedir({str(site_dir)!r})
        assert "coremlrt" not in sys.modules and "coreai" not in sys.modules
        import numpy as np
        import coreai.runtime
        print(coreai.runtime.AIModel.__module__, "coremlrt_coreai_hook" in sys.modules)
    """
    env = {k: v for k, v in os.environ.items() if k != standin.ENV_VAR}
    off = _finish(_run(textwrap.dedent(script), [], str(tmp_path), env))
    on = _finish(_run(textwrap.dedent(script), [], str(tmp_path), dict(env, COREMLRT_COREAI="1")))
    assert off.split()[-2:] == ["coreai.runtime._aimodel", "False"]
    assert on.split()[-2:] == ["coremlrt.coreai.runtime", "True"]


def test_enable_and_disable_in_process(models):
    """enable() switches an already imported coreai.runtime (and AIModelAsset.executable);
    disable() gives coreai-core's classes back."""
    import coreai.runtime
    from coreai.authoring import AIModelAsset

    apple = {name: getattr(coreai.runtime, name) for name in standin._MIRRORED}
    apple_executable = AIModelAsset.__dict__["executable"]
    standin.enable()
    try:
        assert standin.enabled()
        assert all(getattr(coreai.runtime, name) is ours for name, ours in standin._MIRRORED.items())
        assert sys.modules["coreai.authoring.asset"].AIModel is standin.AIModel

        async def run():
            async with AIModelAsset.load(models["multi"]).executable() as model:
                assert type(model) is standin.AIModel
                out = await model.load_function("triple")({"x": coreai.runtime.NDArray(np.ones((1, 4), np.float32))})
                return out["z"].numpy()

        np.testing.assert_array_equal(asyncio.run(run()), np.full((1, 4), 2, np.float32))
    finally:
        standin.disable()
    assert not standin.enabled()
    assert all(getattr(coreai.runtime, name) is cls for name, cls in apple.items())
    assert AIModelAsset.__dict__["executable"] is apple_executable
    assert sys.modules["coreai.authoring.asset"].AIModel is apple["AIModel"]


def test_used_directly_without_the_switch(models):
    """The classes work imported from coremlrt.coreai.runtime, with either path type."""
    import pathlib

    async def run():
        model = await standin.AIModel.load(pathlib.Path(models["mlp"]))
        f = model.load_function("main")
        x, y = np.ones((2, 8), np.float32), np.zeros((2, 4), np.float32)
        out = await f({"x": standin.NDArray(x), "y": standin.NDArray(y)})
        expected = coremlrt.MLModel(models["mlp"]).predict({"x": x, "y": y})["probs"]
        return out["probs"].numpy(), expected

    got, expected = asyncio.run(run())
    np.testing.assert_array_equal(got, expected)


def test_inline_and_worker_paths_agree_and_the_loop_keeps_running(models, monkeypatch):
    """Short calls run on the loop's thread and still yield to other tasks; long ones on worker
    threads. Both give the same outputs and states."""

    async def decode_loop(limit):
        monkeypatch.setattr(standin, "INLINE_LIMIT_S", limit)
        model = await standin.AIModel.load(models["kv"])
        decode = model.load_function("decode")
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0)

        task = asyncio.create_task(ticker())
        cache = standin.NDArray(np.zeros((1, 8, 4), np.float32))
        outs = []
        for step in range(40):
            x = standin.NDArray(np.full((1, 1, 4), step, np.float32))
            outs.append((await decode({"x": x, "pos": standin.NDArray(np.array([step % 8], np.int32))},
                                      state={"cache": cache}))["y"].numpy())
        task.cancel()
        return np.stack(outs), cache.numpy(), ticks, decode._function._seconds

    inline = asyncio.run(decode_loop(10.0))
    worker = asyncio.run(decode_loop(0.0))
    np.testing.assert_array_equal(inline[0], worker[0])
    np.testing.assert_array_equal(inline[1], worker[1])
    assert inline[2] >= 39 and worker[2] >= 39  # the ticker ran between the steps either way
    assert inline[3] is not None and worker[3] is not None


def test_state_value_lives_in_the_engine_between_calls(models):
    """A decode loop passing the same state array copies nothing into or out of it per step; the
    value is read back on numpy(), and a copy the caller changes does not change the state."""

    async def run():
        model = await standin.AIModel.load(models["kv"])
        decode = model.load_function("decode")
        cache = standin.NDArray(np.zeros((1, 8, 4), np.float32))
        engines = set()
        for step in range(8):
            x = standin.NDArray(np.full((1, 1, 4), step + 1, np.float32))
            await decode({"x": x, "pos": standin.NDArray(np.array([step], np.int32))}, state={"cache": cache})
            engines.add(id(cache._binding[0]))
        value = cache.numpy()
        value[:] = -1
        return engines, cache.numpy()

    engines, value = asyncio.run(run())
    assert len(engines) == 1  # one engine state, made at the first step and used as it is after
    np.testing.assert_array_equal(value[0, :, 0], np.arange(1, 9, dtype=np.float32))


def test_what_is_not_mirrored_says_so(models, tmp_path):
    import coreai.runtime

    async def run():
        model = await standin.AIModel.load(models["mlp"])
        with pytest.raises(NotImplementedError, match=r"profiler=.*COREMLRT_COREAI"):
            model.load_function("main", profiler=coreai.runtime.Profiler())
        with pytest.raises(NotImplementedError, match="intermediate_logger"):
            model.load_function("main", intermediate_logger=object())
        with pytest.raises(NotImplementedError, match="_debug_infos"):
            model._debug_infos  # noqa: B018
        with pytest.raises(RuntimeError, match="dynamic dimensions"):
            standin.NDArray.from_descriptor(standin.NDArrayDescriptor._make([-1, 8], "float32"))
        odix = tmp_path / "m.aimodelx"
        odix.mkdir()
        (odix / "main-universal.odix").write_bytes(b"")
        with pytest.raises(coremlrt.Error, match=r"\.odix.*main\.mlirb"):
            await standin.AIModel.load(odix)
        with pytest.raises(RuntimeError):  # coreai-core says "No such file or directory" here
            await standin.AIModel.load(tmp_path / "missing.aimodel")

    asyncio.run(run())


def test_an_ndarray_of_coreai_core_is_taken_as_input(models):
    import coreai.runtime

    assert not standin.enabled()
    apple_array = coreai.runtime.NDArray(np.full((1, 4), 2, np.float32))

    async def run():
        model = await standin.AIModel.load(models["multi"])
        return (await model.load_function("triple")({"x": apple_array}))["z"].numpy()

    np.testing.assert_array_equal(asyncio.run(run()), np.full((1, 4), 5, np.float32))


def test_dynamic_shapes(tmp_path):
    """A batch dimension left dynamic by torch.export: coreai's runtime reports it as -1 (inputs
    and outputs) and runs any size; so does the stand-in, with the same outputs. With a
    translation that keeps only static shapes, loading says why instead (a RuntimeError, as
    coreai's load errors are)."""

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l = torch.nn.Linear(8, 4)

        def forward(self, x):
            return torch.relu(self.l(x))

    batch = torch.export.Dim("batch", min=1, max=64)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        converter = coreai_torch.TorchConverter(mode=coreai_torch.TorchConverter.Mode.RELEASE)
        converter.add_pytorch_module(Net().eval(), export_fn=lambda m: torch.export.export(
            m, args=(torch.randn(2, 8),), dynamic_shapes={"x": {0: batch}}).run_decompositions(
            coreai_torch.get_decomp_table()), input_names=["x"], output_names=["y"])
        converter.to_coreai().save_asset(tmp_path / "dynamic.aimodel")
    sizes = (1, 5, 70)  # 70: coreai records no bound, whatever torch.export was told
    feeds = [np.random.default_rng(n).standard_normal((n, 8), dtype=np.float32) for n in sizes]

    async def run(load, ndarray):
        model = await load()
        f = model.load_function("main")
        shapes = (f.desc.input_descriptor("x").shape, f.desc.output_descriptor("y").shape)
        return shapes, [(await f({"x": ndarray(x)}))["y"].numpy() for x in feeds]

    assert not standin.enabled()
    (_, inputs, outputs), results = coreai_oracle.call("reference_describe_and_predict",
                                                       str(tmp_path / "dynamic.aimodel"), [{"x": x} for x in feeds])
    expected = ((inputs["x"], outputs["y"]), [r[1]["y"][1] for r in results])
    assert expected[0] == ([-1, 8], [-1, 4])
    try:
        got = asyncio.run(run(lambda: standin.AIModel.load(tmp_path / "dynamic.aimodel"), standin.NDArray))
    except RuntimeError as exc:
        assert "dynamic" in str(exc) and "dynamic.aimodel" in str(exc)
        return
    assert got[0] == expected[0]
    for a, b in zip(expected[1], got[1]):
        np.testing.assert_allclose(b, a, rtol=RTOL, atol=ATOL)

    async def wrong_shape():  # coreai-core's runtime aborts the process here
        model = await standin.AIModel.load(tmp_path / "dynamic.aimodel")
        with pytest.raises(RuntimeError, match=r"x has an invalid shape: \[3, 9\], expected: \[-1, 8\]"):
            await model.load_function("main")({"x": standin.NDArray(np.zeros((3, 9), np.float32))})

    asyncio.run(wrong_shape())


def test_float16_and_int32(tmp_path):
    """A float16 model with an int32 input: outputs come back as float16 and int32 NDArrays, as
    coreai's runtime returns them (the engine widens float16 outputs to float32: narrowed back),
    in output_names order."""

    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.l = torch.nn.Linear(8, 4)

        def forward(self, x, ids):
            return torch.relu(self.l(x)), ids * 2

    torch.manual_seed(0)
    path = _convert(Net().eval().half(), (torch.randn(2, 8).half(), torch.tensor([1, 2, 3], dtype=torch.int32)),
                    ["x", "ids"], ["y", "ids2"], tmp_path / "half.aimodel")
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float16)
    ids = np.array([1, -2, 3], np.int32)

    async def run(model, ndarray):
        f = model.load_function("main")
        out = await f({"x": ndarray(x), "ids": ndarray(ids)})
        return str(f.desc), {k: (v.dtype, v.numpy()) for k, v in out.items()}, list(out)

    async def ours():
        return await run(await standin.AIModel.load(path), standin.NDArray)

    (desc, _, _), [(names, outputs)] = coreai_oracle.call("reference_describe_and_predict", str(path),
                                                          [{"x": x, "ids": ids}])
    expected = (desc, outputs, names)
    got = asyncio.run(ours())
    assert got[0] == expected[0] and got[2] == ["y", "ids2"]
    assert {k: v[0] for k, v in got[1].items()} == {"y": "float16", "ids2": "int32"} == {
        k: v[0] for k, v in expected[1].items()}
    np.testing.assert_array_equal(got[1]["ids2"][1], expected[1]["ids2"][1])
    # float16 results: the two runtimes may round intermediate values differently (at most one
    # float16 step apart on this model).
    np.testing.assert_allclose(got[1]["y"][1].astype(np.float32), expected[1]["y"][1].astype(np.float32),
                               rtol=2e-3, atol=2e-3)


def test_flexible_shapes_map_to_descriptors_and_checks(tmp_path):
    """How the stand-in reads a function whose input is flexible (a range, as the engine describes
    it): -1 in the descriptor, any size in range accepted, others refused as coreai refuses a
    shape. Checked on a Core ML program with a RangeDim input, through the same function class."""
    ct = pytest.importorskip("coremltools")
    from coremltools.converters.mil import Builder as mb
    from coremltools.converters.mil.mil import get_new_symbol

    @mb.program(input_specs=[mb.TensorSpec(shape=(get_new_symbol(), 8))], opset_version=ct.target.iOS18)
    def prog(x):
        return mb.relu(x=x, name="y")

    model = ct.convert(prog, convert_to="mlprogram", minimum_deployment_target=ct.target.iOS18,
                       inputs=[ct.TensorType(name="x", shape=(ct.RangeDim(1, 16, default=2), 8))],
                       compute_precision=ct.precision.FLOAT32, skip_model_load=True)
    path = str(tmp_path / "flexible.mlpackage")
    model.save(path)
    function = standin.InferenceFunction._wrap(standin._Function(coremlrt.MLModel(path)))
    assert function.desc.input_descriptor("x").shape == [-1, 8]

    async def run():
        outs = [(await function({"x": standin.NDArray(np.full((n, 8), -1.0 + n, np.float32))}))["y"] for n in (1, 5)]
        with pytest.raises(RuntimeError, match=r"x has an invalid shape: \[17, 8\], expected: \[-1, 8\]"):
            await function({"x": standin.NDArray(np.zeros((17, 8), np.float32))})
        return outs

    outs = asyncio.run(run())
    assert [o.shape for o in outs] == [(1, 8), (5, 8)]
    np.testing.assert_array_equal(outs[1].numpy(), np.full((5, 8), 4.0, np.float32))
