"""Every op type of the kernel registry (src/ops/, through coremlrt._core.supported_ops()) is
complete across the layers docs/guide/adding-an-op.md lists. Each test names the op types that
are not, and what they lack:

* a test: some test file of tests/python or tests/cpp (test_*.py, *_test.cc; this file aside)
  names the op type in quotes (a placement's op_type, a lowering case, a C++ op), as a MIL builder
  call (`mb.relu(`), or as words of a Python test's name (`def test_dict_vectorizer_...`). The
  mention is what can be checked here; that the test compares the op with a reference is the
  reviewer's part (adding-an-op.md, section 5);
* an ONNX translator (coremlrt.onnx_export's registry, or exporter.py's OWN_TRANSLATIONS for
  states and control flow), or the reason there is none (onnx_export/untranslated.py);
* an OpenVINO lowering, or the reason there is none (src/backends/openvino/unlowered.cc), as
  _core.backend_op_support("openvino") reports them; the lowered ones are the op types of the
  lowering table in the sources (backend_check.LOWERED_OP_TYPES).

Core AI has no check here: its translation maps the dialect's ops onto ours
(python/coremlrt/coreai/_ops_*.py), so an op the dialect lacks is no gap of this repository.
"""

import os
import re

import pytest

import backend_check
import coremlrt
from coremlrt import _core

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
TEST_ROOTS = [os.path.join(REPO, "tests", "python"), os.path.join(REPO, "tests", "cpp")]

_QUOTED = re.compile(r"""["']([a-z][a-z0-9_]*)["']""")
_BUILDER_CALL = re.compile(r"\bmb\.([a-z][a-z0-9_]*)\s*\(")
_TEST_NAME = re.compile(r"\bdef test_([a-z0-9_]+)\s*\(")


def kernel_op_types():
    return {op for op, *_ in _core.supported_ops()}


def files_of_tests():
    for root in TEST_ROOTS:
        for folder, _, names in os.walk(root):
            for name in sorted(names):
                path = os.path.join(folder, name)
                is_test = (name.startswith("test_") and name.endswith(".py")) or name.endswith("_test.cc")
                if is_test and os.path.abspath(path) != os.path.abspath(__file__):
                    yield path


def op_types_named_by_tests(op_types):
    """The op types of `op_types` that some test file names (module docstring)."""
    words, test_names = set(), []
    for path in files_of_tests():
        with open(path, encoding="utf-8") as f:
            text = f.read()
        words.update(_QUOTED.findall(text))
        words.update(_BUILDER_CALL.findall(text))
        test_names += ["_" + name + "_" for name in _TEST_NAME.findall(text)]
    return {op for op in op_types if op in words or any("_" + op + "_" in name for name in test_names)}


def test_every_op_has_a_test():
    ops = kernel_op_types()
    untested = sorted(ops - op_types_named_by_tests(ops))
    assert untested == [], (
        f"op types no test names: {untested}; add a test of the op against a numpy or torch reference "
        "(tests/python/ops/, or the folder of its model kind) that names it in quotes, as mb.<op>(...), "
        "or in the test's name")


def test_every_op_has_an_onnx_translator_or_a_reason():
    from coremlrt.onnx_export import exporter
    from coremlrt.onnx_export.registry import TRANSLATORS
    from coremlrt.onnx_export.untranslated import UNTRANSLATED

    ops = kernel_op_types()
    translated = set(TRANSLATORS) | set(exporter.OWN_TRANSLATIONS)
    missing = sorted(ops - translated - set(UNTRANSLATED))
    assert missing == [], (
        f"op types with neither an ONNX translator (@translates in python/coremlrt/onnx_export/ops_*.py) nor a "
        f"reason in python/coremlrt/onnx_export/untranslated.py: {missing}")
    both = sorted(translated & set(UNTRANSLATED))
    assert both == [], f"op types translated yet listed as untranslated in onnx_export/untranslated.py: {both}"
    stray = sorted(set(UNTRANSLATED) - ops)
    assert stray == [], f"onnx_export/untranslated.py lists op types that have no kernel: {stray}"
    empty = sorted(op for op, why in UNTRANSLATED.items() if not why.strip())
    assert empty == [], f"onnx_export/untranslated.py gives no reason for: {empty}"


def test_every_op_has_an_openvino_lowering_or_a_reason():
    if "openvino" not in coremlrt.available_backends():
        pytest.skip("this build has no OpenVINO backend")
    support = _core.backend_op_support("openvino")  # op type -> "" where lowered, else why not
    missing = sorted(kernel_op_types() - set(support))
    assert missing == [], (
        f"op types with neither an OpenVINO lowering (src/backends/openvino/FAMILY.cc) nor a reason in "
        f"src/backends/openvino/unlowered.cc: {missing}")
    if backend_check.LOWERED_OP_TYPES:
        lowered = {op for op, why in support.items() if not why}
        differ = sorted(lowered ^ set(backend_check.LOWERED_OP_TYPES))
        assert differ == [], f"lowered by the backend or in src/backends/openvino/*.cc's table, not both: {differ}"
