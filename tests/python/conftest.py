import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))  # mil_helpers

import coremlrt  # noqa: E402

# Compiled regions go to a cache of this run's own (tests/python/backends/test_backends.py tests the
# cache itself), not to the user's ~/.cache/coremlrt; subprocesses the tests start inherit it.
if "COREMLRT_CACHE_DIR" not in os.environ:
    import atexit
    import shutil
    import tempfile

    os.environ["COREMLRT_CACHE_DIR"] = tempfile.mkdtemp(prefix="coremlrt-test-cache-")
    atexit.register(shutil.rmtree, os.environ["COREMLRT_CACHE_DIR"], ignore_errors=True)

# Suites that run once per execution backend (docs/design/architecture.md, "Backends"). Every model
# they load takes its backend from COREMLRT_BACKEND, which the `coremlrt_backend` fixture sets
# for the whole module run (module-scoped fixtures that load models take `coremlrt_backend`
# so that they are made again for each backend); subprocesses inherit it. Other suites run
# with the default, "auto".
_ALL = [b for b in coremlrt.available_backends()]             # auto, reference, openvino, ...
_EXPLICIT = [b for b in _ALL if b != "auto"]                  # heavy suites: each backend once
PER_BACKEND_MODULES = {
    "test_corpus.py": _ALL, "test_lifetime.py": _ALL, "test_states.py": _ALL, "test_errors.py": _ALL,
    "test_torchvision.py": _EXPLICIT, "test_transformers.py": _EXPLICIT, "test_small_nets.py": _EXPLICIT,
}

# The op tests (tests/python/ops/, run on each backend) whose special values or fp16 rounding
# OpenVINO's lowerings treat differently from Core ML and our kernels. Their ordinary values are
# checked on OpenVINO by the same tests' other cases and by ops/test_openvino_lowerings.py.
_NAN_NOT_PROPAGATED = ("OpenVINO's CPU plugin does not propagate NaN and infinities as Core ML does "
                       "(measured: exp(NaN) = inf; reduce_max skips NaN and gives -FLT_MAX for a row of "
                       "-inf; softmax over a NaN differs)")
_OPENVINO_OP_DIFFERENCES = {
    "test_float_unary_and_activations[openvino-": _NAN_NOT_PROPAGATED,
    "test_unary_special_values[openvino-": _NAN_NOT_PROPAGATED,
    "test_reduction_stability_and_nan[openvino": _NAN_NOT_PROPAGATED,
    "test_reductions_with_nan_and_inf_over_negative_axes[openvino-": _NAN_NOT_PROPAGATED,
    "test_softmax_with_infinities_and_nan[openvino-": _NAN_NOT_PROPAGATED,
    "test_softmax_long_rows_with_nan[openvino-": _NAN_NOT_PROPAGATED,
    "test_softmax_down_columns_with_nan[openvino-": _NAN_NOT_PROPAGATED,
    "test_binary_special_values[openvino-":
        "OpenVINO's mod loses the sign of a zero result (mod(0, -1) is +0, Core ML's -0) and gives NaN "
        "for mod(x, +-inf), where Core ML gives x",
    "test_domain_restricted_unary[openvino-fp16]":
        "an fp16 program computes in fp32 on OpenVINO (src/backends/openvino/backend.cc, the cost "
        "rule): rsqrt's epsilon 1e-12 does not underflow to 0 as in fp16, so rsqrt(0) is 1e6, not inf",
}
# Declared differences of a backend from our reference kernels: test id substring -> why. A
# listed test must fail on that backend (strict xfail): an entry that no longer applies fails.
KNOWN_DIFFERENCES = {
    "reference": {},
    "openvino": _OPENVINO_OP_DIFFERENCES,
    # A function that shares its weights with another function of its package runs on our
    # kernels, under auto and forced onto OpenVINO alike (BackendOptions::shares_weights,
    # src/backends/backend.h).
    "auto": {},
}


def pytest_generate_tests(metafunc):
    backends = PER_BACKEND_MODULES.get(os.path.basename(metafunc.module.__file__))
    if backends and "coremlrt_backend" in metafunc.fixturenames:
        metafunc.parametrize("coremlrt_backend", backends, indirect=True, scope="module")


@pytest.fixture(autouse=True, scope="module")
def coremlrt_backend(request):
    backend = getattr(request, "param", None)
    if backend is None:
        yield None
        return
    saved = os.environ.get("COREMLRT_BACKEND")
    os.environ["COREMLRT_BACKEND"] = backend
    try:
        yield backend
    finally:
        if saved is None:
            os.environ.pop("COREMLRT_BACKEND", None)
        else:
            os.environ["COREMLRT_BACKEND"] = saved


@pytest.fixture(autouse=True)
def _known_backend_difference(request, coremlrt_backend):
    for fragment, why in KNOWN_DIFFERENCES.get(coremlrt_backend, {}).items():
        if fragment in request.node.nodeid:
            request.applymarker(pytest.mark.xfail(reason=f"{coremlrt_backend}: {why}", strict=True))
