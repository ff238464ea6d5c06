"""`import svm`: libsvm.svm under its old top-level name (see svmutil.py here)."""

import sys

import svmutil  # noqa: F401 - the shim beside this one: gives libsvm its __version__
import libsvm.svm

sys.modules[__name__] = libsvm.svm
