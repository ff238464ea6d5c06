"""Program op type -> the function that writes its ONNX nodes.

A translator takes an ``OpView`` (graph.py), reads the op's compile-time parameters, adds nodes
through ``view.builder`` and names every output with ``view.output(i)``. It raises
``Unsupported`` with the reason when a use of the op has no ONNX form here.
"""

from typing import Any, Callable, Dict

TRANSLATORS: Dict[str, Callable[[Any], None]] = {}


def translates(*op_types):
    def register(function):
        for op_type in op_types:
            # One translator per op: a second one would silently replace the first, whichever
            # module happened to be imported last.
            if op_type in TRANSLATORS:
                raise ValueError(f"{op_type} has two translators: {TRANSLATORS[op_type].__module__} and "
                                 f"{function.__module__}")
            TRANSLATORS[op_type] = function
        return function
    return register
