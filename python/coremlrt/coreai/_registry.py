"""Core AI op name -> the function that translates it into MIL (the same idiom as
onnx_export/registry.py).

A translator takes the translator (``_translate.Translator``) and the MLIR operation, reads its
operands and attributes, and writes MIL ops or folds constants. It calls ``t.fail`` with the
reason when a use of the op has no MIL form. Each ``_ops_FAMILY.py`` module registers its
translators with ``@translates`` as it is imported.
"""

from typing import Any, Callable, Dict

TRANSLATORS: Dict[str, Callable[[Any, Any], None]] = {}


def translates(*op_names):
    def register(function):
        for op_name in op_names:
            # One translator per op: a second one would silently replace the first, whichever
            # module happened to be imported last.
            if op_name in TRANSLATORS:
                raise ValueError(f"{op_name} has two translators: {TRANSLATORS[op_name].__module__} and "
                                 f"{function.__module__}")
            TRANSLATORS[op_name] = function
        return function
    return register
