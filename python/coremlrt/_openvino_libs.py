"""Finds the openvino wheel's libraries for the extension when its RPATH cannot.

coremlrt's extension needs libopenvino (its name carries the release: libopenvino.so.2641) and
finds it through its RPATH, $ORIGIN/../openvino/libs: the openvino wheel installed in the same
site-packages, as pip installs a dependency. Where openvino lies in another folder of sys.path
(a virtual environment made with --system-site-packages, a --user or --target install), the
extension fails to load; then preload() loads that library from wherever `import openvino`
would find it, and the extension, loaded again, binds to the loaded copy by its name.
"""

import ctypes
import importlib.util
import os
import re


def preload(error: ImportError) -> bool:
    """Loads the OpenVINO library that ``error`` (the extension's failed import) names from
    the openvino package on sys.path; True when it did, so the import can be tried again."""
    missing = re.search(r"(libopenvino[\w.+-]*\.so[\d.]*): cannot open shared object file", str(error))
    if not missing:
        return False
    try:
        spec = importlib.util.find_spec("openvino")   # finds the package without importing it
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.origin:
        return False
    path = os.path.join(os.path.dirname(spec.origin), "libs", missing.group(1))
    if not os.path.exists(path):
        return False
    ctypes.CDLL(path)
    return True
