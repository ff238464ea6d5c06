"""`import svmutil` for coremltools' SVM tests (test/sklearn_tests/test_SVC.py and others), which
import libsvm's Python modules by their old top-level names; libsvm-official installs them as
`libsvm.svmutil` and `libsvm.svm`. This module *is* libsvm.svmutil under the top-level name
(the same module object, so its state and classes are shared with `from libsvm import svmutil`).
Put on the test processes' PYTHONPATH by scripts/coremltools_op_tests.py for the sklearn suite.

coremltools' libsvm converter also records `libsvm.__version__` in the model's metadata, an
attribute libsvm-official's package does not define; it is set here from the installed
distribution's version, so conversion gets the real number."""

import importlib.metadata
import sys

import libsvm
import libsvm.svmutil

if not hasattr(libsvm, "__version__"):
    libsvm.__version__ = importlib.metadata.version("libsvm-official")

sys.modules[__name__] = libsvm.svmutil
