"""The op tests run once per execution backend of backend_check.BACKENDS ("reference", and
"openvino" when this build has it): the `coremlrt_backend` fixture (tests/python/conftest.py)
sets COREMLRT_BACKEND for the test, and the tests load their models through backend_check, which
asks for that backend and checks where the ops ran."""

import os

from backend_check import BACKENDS

# Modules that choose their backends themselves.
_OWN_BACKENDS = {"test_packed_weights.py", "test_openvino_lowerings.py"}


def pytest_generate_tests(metafunc):
    if os.path.basename(metafunc.module.__file__) in _OWN_BACKENDS:
        return
    if "coremlrt_backend" in metafunc.fixturenames:
        metafunc.parametrize("coremlrt_backend", BACKENDS, indirect=True)
