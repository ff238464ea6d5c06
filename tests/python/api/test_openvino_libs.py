"""coremlrt finds the openvino wheel's libraries when the extension's RPATH
($ORIGIN/../openvino/libs) misses them: python/coremlrt/_openvino_libs.py. The installed case
(openvino in another site-packages folder) is run by scripts/test_wheel.sh."""

import os

import pytest

import coremlrt
from coremlrt._openvino_libs import preload


def test_preload_loads_the_library_the_error_names():
    if "openvino" not in coremlrt.available_backends():
        pytest.skip("this build has no OpenVINO backend")
    import openvino

    libs = os.path.join(os.path.dirname(openvino.__file__), "libs")
    name = next(n for n in sorted(os.listdir(libs)) if n.startswith("libopenvino.so."))
    error = ImportError(f"{name}: cannot open shared object file: No such file or directory")
    assert preload(error)


@pytest.mark.parametrize("message", [
    "libfoo.so.1: cannot open shared object file: No such file or directory",      # not OpenVINO's
    "libopenvino.so.1: cannot open shared object file: No such file or directory",  # not in the wheel
    "/x/_core.so: undefined symbol: _ZN3fooEv",                                     # another failure
])
def test_preload_leaves_other_failures_alone(message):
    assert not preload(ImportError(message))
