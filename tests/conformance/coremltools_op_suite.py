"""pytest plugin: coremltools' own MIL op tests, with every prediction made by coremlrt.

coremltools ships its op tests in its wheel (``coremltools/converters/mil/mil/ops/tests``).
Each case builds a MIL program, converts it and, on macOS only, predicts with Core ML and
compares against the values the test computed. This plugin makes the same cases predict on
Linux through coremlrt and records what happened to each one. It changes coremltools only
in the two places where the test utilities decide whether prediction is possible:

* ``coremltools.converters.mil.testing_utils._IS_MACOS`` (compare_backend, compare_shapes),
* ``coremltools.models.utils._macos_version`` (the version checks of the test utilities,
  and the version skips test modules evaluate at import),

and installs ``coremlrt.coremltools_backend`` so that ``MLModel.predict`` reaches coremlrt.
The ``models`` mode (below) goes further, as a macOS host would answer: ``_is_macos()`` says
macOS, and the ``_macos_version`` coremltools' own modules bound by name gives the same
pretended version (_answer_macos_version_queries()); coremltools/test/utils.py's load_boston
reads a copy of its data set from this repository (offline_datasets.py); libsvm gets the
``__version__`` coremltools' libsvm converter reads (_name_the_libsvm_version()). Nothing else
of coremltools is touched; its test files are run as installed.

Loaded by scripts/coremltools_op_tests.py as ``-p coremltools_op_suite``; it writes one JSON
line per case to ``--coremlrt-results``.

``--coremlrt-mode`` says which cases run and how a model coremlrt refuses is counted:

* ``mlprogram`` (the op suite): neuralnetwork-backend cases are not run, and a case whose model
  coremlrt refuses by type or layer is "not applicable".
* ``neuralnetwork`` (the op suite's neuralnetwork-backend cases): only those cases run.
* ``models`` (coremltools/test/neural_network, sklearn_tests, xgboost_tests, pipeline): every
  case runs, and coremltools' own ``_is_macos()`` gate opens as well (these files ask it
  directly, e.g. ``if _is_macos() and _macos_version() >= (10, 13):`` before predicting in
  test/sklearn_tests/test_SVC.py).

In the ``models`` mode coremltools/test/utils.py's load_boston (the Boston housing data, which
it downloads) returns the copy in tests/conformance/data/ instead (offline_datasets.py). A case
whose data set download still fails for want of network access is recorded as "unavailable",
with the failed download as its detail: it neither passes nor counts as coremlrt's failure
(unavailable_download()).

In the last two modes a refused model fails its case, with the refusal as the cause
("refused layer: <kind>", "refused model type: <type>"), so that the report counts what is
missing.
"""

import json
import os
import re

import pytest

# Imported now, while sys.path is as the caller set it: the suite's conftest is loaded (before
# pytest_configure) with coremltools' package root, site-packages, put first on sys.path, which
# would otherwise shadow a coremlrt given on PYTHONPATH with the installed one.
import coremlrt  # noqa: F401

# The macOS the gates report: one whose Core ML runs every opset coremltools 9 targets (iOS18
# needs macOS 15) and has every fix the suite's version skips wait for (the newest is 15.2).
PRETENDED_MACOS_VERSION = (15, 5)

# How coremlrt refuses a model it cannot run as a whole: a model type other than mlProgram or
# neuralNetwork, or a neuralNetwork model with a layer or layout it does not translate.
_NEURALNETWORK_LOAD_ERRORS = ("this build runs ML programs (mlProgram)", "neuralNetwork layer '", "(neuralNetwork): ")


def _is_neuralnetwork_load_error(text):
    return any(marker in text for marker in _NEURALNETWORK_LOAD_ERRORS)


_MODEL_TYPE = re.compile(r"is of type '(\w+)'; this build runs ML programs")


def _other_model_cause(text):
    """The cause recorded for a case about a model type coremlrt does not run (another issue's
    work): "neuralnetwork model", or "<type> model" for pipelines and classic ML models."""
    match = _MODEL_TYPE.search(text)
    return f"{match.group(1)} model" if match else "neuralnetwork model"


def _is_other_model_cause(cause):
    return cause is not None and cause.endswith(" model")


_LAYER_REFUSAL = re.compile(r"neuralNetwork layer '[^']*' \((\w+)\): (.*)")
_NETWORK_REFUSAL = re.compile(r"\(neuralNetwork\): (.*)")


def refusal(text):
    """(cause, detail) for coremlrt's refusal of a model, or None: the refused layer kind, the
    refused model type, or the neuralNetwork framing problem (src/runtime/model.cc)."""
    match = _MODEL_TYPE.search(text)
    if match:
        return f"refused model type: {match.group(1)}", _last_line(text)
    match = _LAYER_REFUSAL.search(text)
    if match:
        return f"refused layer: {match.group(1)}", _last_line(match.group(2))
    match = _NETWORK_REFUSAL.search(text)
    if match:
        return "refused neuralNetwork framing", _last_line(match.group(1))
    return None


_mode = "mlprogram"
# refusal() of each model the current case loaded that coremlrt refused (modes other than mlprogram)
_refusals_in_current_case = []


_predictions_in_current_case = 0
# neuralnetwork models a case made (through assert_model_is_valid's default backend, say):
# coremltools keeps such a model without a proxy, so the case is about a format we do not run.
_neuralnetwork_loads_in_current_case = 0
_other_model_causes_in_current_case = []  # _other_model_cause() of each such load
# Load errors of the current case: coremltools catches the proxy's exception, warns, and keeps
# the model without a proxy, so the case fails later with "prediction is only supported on
# macOS"; the error kept here names the real cause.
_load_errors_in_current_case = []


def pytest_addoption(parser):
    group = parser.getgroup("coremlrt", "coremltools op suite on coremlrt")
    group.addoption("--coremlrt-results", required=True,
                    help="JSON-lines file that receives one record per case")
    group.addoption("--coremlrt-sample", type=int, default=1,
                    help="run every N-th applicable case of each file (sorted by node id)")
    group.addoption("--coremlrt-mode", choices=("mlprogram", "neuralnetwork", "models"), default="mlprogram",
                    help="which cases run and how refused models count (see the module text)")
    group.addoption("--coremlrt-skip-slow", action="store_true",
                    help="leave out the cases coremltools marks slow (its stress tests), each recorded "
                         "as \"slow_not_run\" so that a check can tell how many there were")
    group.addoption("--coremlrt-via", choices=("coremlrt", "onnx"), default="coremlrt",
                    help="onnx: export each model with coremlrt.export_onnx and predict with ONNX Runtime "
                         "(coremlrt.onnx_export.runner), the inputs and outputs converted as coremlrt does")
    group.addoption("--coremlrt-resume", action="store_true",
                    help="skip cases the results file already records (rerun after a crash)")


def _open_prediction_gates(mode):
    import coremltools.converters.mil.testing_utils as testing_utils
    import coremltools.models.utils as model_utils

    global _real_macos_version
    _real_macos_version = model_utils._macos_version
    if mode == "models":
        # The model test files bind `_is_macos` by name at import (after this runs) and ask it
        # before predicting and in class-level skips; coremltools' own modules imported it
        # earlier and keep the real one.
        model_utils._is_macos = lambda: True
    # In the other modes _is_macos stays False: coremltools' own modules bound the real
    # _macos_version at import, and it runs `sw_vers` when _is_macos() says macOS. Only the test
    # utilities' view changes.
    model_utils._macos_version = _pretended_macos_version
    testing_utils._IS_MACOS = True
    if mode == "models":
        _answer_macos_version_queries()


_real_macos_version = None


def _pretended_macos_version():
    return PRETENDED_MACOS_VERSION


def _answer_macos_version_queries():
    """In the models mode the real _macos_version, which coremltools' own modules bound by name
    (models/model.py, models/_compiled_model.py, models/neural_network/quantization_utils.py),
    would see the patched _is_macos() say macOS and run `sw_vers`, which Linux lacks: it raises
    "Unable to determine the macOS version" (quantize_weights asks it, e.g., in
    test/pipeline/test_model_updatable.py). Those modules get the answer a macOS host gives,
    the same version the test utilities see. Run at configure time and again after collection
    (test modules import more of coremltools)."""
    import sys

    for name, module in list(sys.modules.items()):
        if name.startswith("coremltools") and getattr(module, "_macos_version", None) is _real_macos_version:
            module._macos_version = _pretended_macos_version


def _name_the_libsvm_version():
    """coremltools' libsvm converter records `libsvm.__version__` in the model's metadata, an
    attribute libsvm-official's package does not define (tests/conformance/libsvm_toplevel/
    svmutil.py sets it for the sklearn suite's `import svmutil`; test/pipeline/test_pipeline.py
    imports `from libsvm import svmutil`). Set from the installed distribution's version."""
    import importlib.metadata

    try:
        import libsvm
    except ImportError:
        return
    if not hasattr(libsvm, "__version__"):
        libsvm.__version__ = importlib.metadata.version("libsvm-official")


def _predict_via_onnx():
    """(export, predict): the proxy's predict with the model's ONNX export run by ONNX Runtime in
    place of coremlrt's engine. `export(proxy)` runs when the proxy is made, as Core ML compiles
    a model when it loads it (some cases delete the model file before predicting); an export
    that fails is reported by the first predict. Exports go to a temporary folder."""
    import tempfile

    from coremlrt.coremltools_backend import _as_core_ml_outputs
    from coremlrt.onnx_export import export_onnx
    from coremlrt.onnx_export.runner import ExportedModel

    folder = tempfile.mkdtemp(prefix="coremlrt-onnx-suite-")

    def export(self):
        try:
            path = os.path.join(folder, "model%d.onnx" % len(os.listdir(folder)))
            export_onnx(self._model, path, function=self._model.function_name)
            self._onnx_runner = ExportedModel(self._model, path)
        except Exception as exc:  # noqa: BLE001 - raised again by the first predict
            self._onnx_error = exc

    def predict(self, data, state=None):
        if getattr(self, "_onnx_error", None) is not None:
            raise self._onnx_error
        runner = self._onnx_runner
        if state is not None:
            # coremlrt's MLState is opaque to ONNX Runtime: the runner keeps its own state per
            # MLState object, starting from zeros as a new MLState does.
            states = getattr(self, "_onnx_states", None)
            if states is None:
                states = self._onnx_states = {}
            key = id(state)
            if key not in states:
                states[key] = (state, runner.make_state())
            outputs = runner.predict(data, states[key][1])
        else:
            outputs = runner.predict(data)
        return _as_core_ml_outputs(outputs, self._number_types, self._image_spaces)

    return export, predict


def _watch_the_proxy(via="coremlrt"):
    from coremlrt.coremltools_backend import _MLModelProxy

    original_init, original_predict = _MLModelProxy.__init__, _MLModelProxy.predict
    export = None
    if via == "onnx":
        export, original_predict = _predict_via_onnx()

    def __init__(self, *args, **kwargs):  # noqa: N807 - wraps the proxy's constructor
        global _neuralnetwork_loads_in_current_case
        try:
            original_init(self, *args, **kwargs)
        except Exception as exc:
            if _mode != "mlprogram" and refusal(str(exc)):
                _refusals_in_current_case.append(refusal(str(exc)))
            elif _is_neuralnetwork_load_error(str(exc)):
                _neuralnetwork_loads_in_current_case += 1
                _other_model_causes_in_current_case.append(_other_model_cause(str(exc)))
            else:
                _load_errors_in_current_case.append(_last_line(str(exc)))
            raise
        if export is not None:
            export(self)

    def predict(self, data, state=None):
        global _predictions_in_current_case
        _predictions_in_current_case += 1
        return original_predict(self, data, state)

    _MLModelProxy.__init__ = __init__
    _MLModelProxy.predict = predict


def pytest_configure(config):
    import coremlrt.coremltools_backend

    coremlrt.coremltools_backend.enable()
    global _mode
    _mode = config.getoption("--coremlrt-mode")
    _open_prediction_gates(_mode)
    if _mode == "models":
        # The model suites' data set comes from this repository, not the network.
        import offline_datasets

        offline_datasets.install()
        _name_the_libsvm_version()
    _watch_the_proxy(config.getoption("--coremlrt-via"))
    config._coremlrt_log = _ResultLog(config.getoption("--coremlrt-results"))


def _is_neuralnetwork_case(item):
    for value in getattr(getattr(item, "callspec", None), "params", {}).values():
        if getattr(value, "backend", None) == "neuralnetwork":  # BackendConfig
            return True
        if isinstance(value, tuple) and value[:1] == ("neuralnetwork",):  # ("neuralnetwork", "fp32")
            return True
        if isinstance(value, str) and value == "neuralnetwork":
            return True
    return False


def pytest_collection_modifyitems(session, config, items):
    if _mode == "models":
        _answer_macos_version_queries()
    log = config._coremlrt_log
    done = log.recorded_ids() if config.getoption("--coremlrt-resume") else set()
    applicable, drop = [], []
    mode = config.getoption("--coremlrt-mode")
    for item in items:
        if mode == "neuralnetwork":
            # The mlprogram cases of these files are counted by the op suite (mode mlprogram).
            (applicable if _is_neuralnetwork_case(item) else drop).append(item)
        elif mode == "mlprogram" and _is_neuralnetwork_case(item):
            # Not run at all: the whole case is about a model format coremlrt does not load.
            if item.nodeid not in done:
                log.write(_record(item, "not_applicable", cause="neuralnetwork backend"))
            drop.append(item)
        elif config.getoption("--coremlrt-skip-slow") and item.get_closest_marker("slow") is not None:
            if item.nodeid not in done:
                log.write(_record(item, "slow_not_run", cause="marked slow"))
            drop.append(item)
        else:
            applicable.append(item)
    every = config.getoption("--coremlrt-sample")
    if every > 1:
        # Every N-th case of each file by node id: the same cases whichever files share a
        # process, and the same after a restart (cases already recorded are dropped below).
        by_file = {}
        for item in sorted(applicable, key=lambda i: i.nodeid):
            by_file.setdefault(item.nodeid.split("::")[0], []).append(item)
        chosen = {id(i) for cases in by_file.values() for i in cases[::every]}
    else:
        chosen = {id(i) for i in applicable}
    items[:] = [i for i in applicable if id(i) in chosen and i.nodeid not in done]
    drop += [i for i in applicable if id(i) not in chosen or i.nodeid in done]
    if drop:
        config.hook.pytest_deselected(items=drop)


def pytest_runtest_logstart(nodeid, location):
    global _predictions_in_current_case, _neuralnetwork_loads_in_current_case
    _predictions_in_current_case = _neuralnetwork_loads_in_current_case = 0
    _other_model_causes_in_current_case.clear()
    _load_errors_in_current_case.clear()
    _refusals_in_current_case.clear()
    # A crash kills the process before any report: the runner reads this to name the case.
    with open(os.environ.get("COREMLRT_SUITE_CURRENT", os.devnull), "w") as f:
        f.write(nodeid)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if call.excinfo is not None and report.failed:
        try:
            report._coremlrt_unavailable = unavailable_download(call.excinfo)
            report._coremlrt_cause = classify_failure(call.excinfo)
        except Exception as exc:  # noqa: BLE001 - a classifier bug must not stop the run
            report._coremlrt_cause = ("error", f"(unclassified: {exc!r}) {_last_line(str(call.excinfo.value))}", {})


def pytest_runtest_logreport(report):
    # One record per case: its call, or the setup that skipped or failed it, or a failing
    # teardown of a case whose call passed (the log keeps the first record per case).
    if _current_log is not None and (report.when == "call" or report.failed or report.skipped):
        _current_log.finish(report)


class _ResultLog:
    def __init__(self, path):
        global _current_log
        self.path = path
        self._reported = set()
        _current_log = self

    def recorded_ids(self):
        if not os.path.exists(self.path):
            return set()
        with open(self.path) as f:
            return {json.loads(line)["nodeid"] for line in f if line.strip()}

    def write(self, record):
        with open(self.path, "a") as f:
            f.write(json.dumps(record) + "\n")

    def finish(self, report):
        if report.nodeid in self._reported:  # a teardown error after a recorded call
            return
        self._reported.add(report.nodeid)
        if _neuralnetwork_loads_in_current_case and not report.skipped:
            self.write(_record(report, "not_applicable", cause=_other_model_causes_in_current_case[0]))
        elif report.passed:
            self.write(_record(report, "passed"))
        elif report.skipped and hasattr(report, "wasxfail"):
            # coremltools marks the case as failing on Core ML as well: not run on macOS either.
            self.write(_record(report, "skipped", detail=f"xfail in coremltools: {report.wasxfail}"))
        elif report.skipped:
            reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
            self.write(_record(report, "skipped", detail=reason.removeprefix("Skipped: ")))
        elif getattr(report, "_coremlrt_unavailable", None) and _predictions_in_current_case == 0:
            # Could not run here (no network for its data set): neither a pass nor our failure.
            self.write(_record(report, "unavailable", cause="data set download unavailable",
                               detail=report._coremlrt_unavailable))
        else:
            default = ("error", _last_line(report.longreprtext), {})
            cause, detail, errors = getattr(report, "_coremlrt_cause", default)
            outcome = "not_applicable" if _mode == "mlprogram" and _is_other_model_cause(cause) else "failed"
            self.write(_record(report, outcome, cause=cause, detail=detail, **errors))


_current_log = None


def _record(item_or_report, outcome, **fields):
    nodeid = item_or_report.nodeid
    record = {"nodeid": nodeid, "file": nodeid.split("::")[0], "op": op_of(nodeid), "outcome": outcome}
    duration = getattr(item_or_report, "duration", None)
    if duration is not None:  # a report of a case that ran (not one dropped at collection)
        record["predictions"] = _predictions_in_current_case
        record["seconds"] = round(duration, 3)
    record.update({k: v for k, v in fields.items() if v is not None})
    return record


def op_of(nodeid):
    """What a case tests: its test class (each covers one op: TestSliceByIndex, TestConv)."""
    parts = nodeid.split("::")
    return parts[1] if len(parts) >= 3 else parts[-1].split("[")[0]


_MAX_ABS = re.compile(r"Max absolute difference(?: among violations)?: *([-+0-9.eEinfa]+)")
_MAX_REL = re.compile(r"Max relative difference(?: among violations)?: *([-+0-9.eEinfa]+)")


def _network_error_types():
    import socket
    import urllib.error

    types = [urllib.error.URLError, socket.gaierror, socket.timeout, ConnectionError]
    try:
        import requests

        types.append(requests.exceptions.RequestException)
    except ImportError:
        pass
    return tuple(types)


def unavailable_download(excinfo):
    """The reason a case could not run because a download failed, or None. Several of the
    suite's test classes download their data set when set up (coremltools/test/utils.py's
    load_boston fetches the Boston housing data with requests.get); on a machine without
    network access that fails with a connection error before any model exists, which says
    nothing about coremlrt. Only an error of the network itself counts (URLError and HTTPError,
    requests' errors, name resolution, refused connections), raised or chained."""
    types = _network_error_types()
    error, seen = excinfo.value, set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, types):
            frames = [entry.frame.code.raw.co_name for entry in excinfo.traceback]
            where = next((name for name in frames if "load" in name or "download" in name or "fetch" in name),
                         frames[-1] if frames else "?")
            return f"download failed in {where}: {type(error).__name__}: {_last_line(str(error))[:200]}"
        error = error.__cause__ or error.__context__
    return None


def classify_failure(excinfo):
    """(cause, short detail, error figures) for a failed case."""
    text = str(excinfo.value)
    frames = [(entry.frame.code.raw.co_filename, entry.frame.code.raw.co_name) for entry in excinfo.traceback]
    in_proxy = [name for path, name in frames if path.endswith("coremltools_backend.py")]
    if _mode != "mlprogram":
        # A refusal reaches the test directly, or (coremltools catches it at load and keeps
        # the model without a proxy) as "prediction is only supported on macOS" later.
        if refusal(text):
            return refusal(text) + ({},)
        if _refusals_in_current_case:
            return _refusals_in_current_case[0] + ({},)
    elif _is_neuralnetwork_load_error(text):
        return _other_model_cause(text), None, {}
    # A load error usually reaches the test only as coremltools' "prediction is only supported
    # on macOS" (it keeps the model without a proxy), so the load errors seen count too.
    for message in [text] + _load_errors_in_current_case:
        if "unsupported op" in message:
            match = re.search(r"no kernel for op type '([^']+)' in opset (\w+)", message)
            return "missing op", f"{match.group(1)} (opset {match.group(2)})" if match else message[:200], {}
    if isinstance(excinfo.value, AssertionError) and "Not equal to tolerance" in text:
        errors = {}
        for key, pattern in (("max_abs_error", _MAX_ABS), ("max_rel_error", _MAX_REL)):
            match = pattern.search(text)
            if match:
                errors[key] = float(match.group(1))
        mismatch = re.search(r"Mismatched elements: ([^\n]+)", text)
        return "wrong numbers", mismatch.group(1).strip() if mismatch else None, errors
    if "__init__" in in_proxy:
        return "load error", _last_line(text), {}
    if _load_errors_in_current_case:
        return "load error", _load_errors_in_current_case[0], {}
    if "predict" in in_proxy:
        return "predict error", _last_line(text), {}
    if isinstance(excinfo.value, AssertionError):
        # The first line is the test's own message (pytest appends its diff below it).
        first = text.strip().splitlines()[0][:300] if text.strip() else ""
        return "wrong result", first or _where(excinfo), {}
    if _predictions_in_current_case == 0:
        return "fails before prediction", f"{excinfo.typename}: {_last_line(text)}", {}
    return "other error", f"{excinfo.typename}: {_last_line(text)}", {}


def _last_line(text):
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _where(excinfo):
    entry = excinfo.traceback[-1]
    return f"{os.path.basename(entry.frame.code.raw.co_filename)}:{entry.lineno + 1}"
