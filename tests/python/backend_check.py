"""Runs an op test's model on each execution backend and checks where its ops ran.

The op tests (tests/python/ops/) run once per backend of BACKENDS: "reference" (our kernels)
always, "openvino" when this build has it. tests/python/ops/conftest.py parametrizes them and
sets COREMLRT_BACKEND for the test; the tests load their models with `load` (or predict with
`predict`), which asks for that backend explicitly and checks the placements:

* on "reference", no op runs on OpenVINO;
* on "openvino", every op whose type OpenVINO lowers (LOWERED_OP_TYPES) runs there: backend
  "openvino" skips the cost rule of backend "auto" (src/backends/openvino/backend.cc,
  worth_running), so an op of a lowered type stays on our kernels only when the lowering itself
  refuses it (its check: an int32 input, an empty or dynamic-shape tensor, a parameter it does not
  lower, ...), and the placement's reason then says so. A cost-rule reason or a region OpenVINO
  could not compile fails the test.

Each test then compares the outputs with its own NumPy / torch reference at its own tolerance,
so the op's OpenVINO lowering is checked at the same tolerance as our kernel. (Known differences
of a backend's results are declared in tests/python/conftest.py, KNOWN_DIFFERENCES.)

check_all_backends runs one model on every backend against the reference backend's results:
tests/python/ops/test_openvino_lowerings.py uses it for one test of its own per lowering, and
tests/python/tools/test_op_completeness.py checks that LOWERED_OP_TYPES is the table the build
lowers.
"""

import os
import re

import coremlrt

BACKENDS = ["reference"] + (["openvino"] if "openvino" in coremlrt.available_backends() else [])

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
LOWERING_SOURCES = os.path.join(REPO, "src", "backends", "openvino")


def lowered_op_types():
    """The op types of OpenVINO's lowering table: the `t["op_type"] = {...}` entries of
    src/backends/openvino/*.cc (lowering.cc, lowerings(), gathers them). Empty without the sources."""
    types = set()
    if not os.path.isdir(LOWERING_SOURCES):
        return types
    for name in sorted(os.listdir(LOWERING_SOURCES)):
        if name.endswith(".cc"):
            with open(os.path.join(LOWERING_SOURCES, name)) as f:
                types.update(re.findall(r'\bt\["([a-z0-9_]+)"\]\s*=', f.read()))
    return types


LOWERED_OP_TYPES = lowered_op_types()

# Reasons that mean backend="openvino" did not force an op OpenVINO lowers: the cost rules of
# backend "auto" (their reasons end with 'backend="openvino" forces it') and a failed compile.
_NOT_FORCED = ('backend="openvino" forces it', "could not compile the region")


def current_backend(backend=None):
    return backend or os.environ.get("COREMLRT_BACKEND") or "auto"


def check_placements(model, backend, on_openvino=()):
    """Asserts where `model`'s ops run for `backend` (module docstring); returns the op types that
    ran on OpenVINO. `on_openvino`: op types that must run there (not only when not refused)."""
    placements = model.placements()
    ran = {p["op_type"] for p in placements if p["backend"] == "openvino"}
    if backend == "reference":
        assert not ran, f"ops placed on OpenVINO under backend='reference': {sorted(ran)}"
    elif backend == "openvino":
        for p in placements:
            if p["op_type"] not in LOWERED_OP_TYPES or p["backend"] == "openvino":
                continue
            assert not any(s in p["reason"] for s in _NOT_FORCED), (
                f"{p['op_type']} '{p['output']}' is not on OpenVINO under backend='openvino': {p['reason']}")
            assert p["op_type"] not in on_openvino, (
                f"{p['op_type']} '{p['output']}' is not on OpenVINO: {p['reason'] or p['backend']}")
        missing = set(on_openvino) - ran
        assert not missing, f"no op of type {sorted(missing)} ran on OpenVINO"
    return ran


def load(path, backend=None, on_openvino=(), **kwargs):
    """coremlrt.MLModel(path, backend=...) for the test's backend, its placements checked."""
    backend = current_backend(backend)
    model = coremlrt.MLModel(path, backend=backend, **kwargs)
    check_placements(model, backend, on_openvino)
    return model


def predict(path, inputs, backend=None, on_openvino=(), **kwargs):
    """One prediction of the model at `path` on the test's backend (placements checked by `load`)."""
    return load(path, backend, on_openvino, **kwargs).predict(inputs)


def check_all_backends(path, inputs, op_type, rtol, atol, **kwargs):
    """Predicts `inputs` with the model at `path` on "reference", then on every other backend of
    BACKENDS with `op_type` required to run there, and compares each output with the reference
    backend's at rtol/atol (NaN == NaN, exact for integer outputs). Returns the reference outputs."""
    import numpy as np

    expected = predict(path, inputs, "reference", **kwargs)
    for backend in BACKENDS:
        if backend == "reference":
            continue
        actual = predict(path, inputs, backend, on_openvino={op_type} if backend == "openvino" else (), **kwargs)
        assert sorted(actual) == sorted(expected), (backend, sorted(actual), sorted(expected))
        for name, want in expected.items():
            got = np.asarray(actual[name])
            assert got.shape == np.shape(want), (backend, name, got.shape, np.shape(want))
            if np.asarray(want).dtype.kind == "f":
                np.testing.assert_allclose(got.astype(np.float64), np.asarray(want, np.float64), rtol=rtol, atol=atol,
                                           equal_nan=True, err_msg=f"{op_type} on {backend}: output '{name}'")
            else:
                np.testing.assert_array_equal(got, want, err_msg=f"{op_type} on {backend}: output '{name}'")
    return expected
