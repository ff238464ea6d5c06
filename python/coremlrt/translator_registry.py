"""The ``@translates`` decorator that the ONNX exporter (onnx_export/registry.py) and the Core AI
translator (coreai/_registry.py) register their translators with: one function per op name."""

from typing import Callable, Dict


def registrar(table: Dict[str, Callable]) -> Callable:
    """A ``translates(*op_names)`` decorator that enters its function in ``table`` under each name."""

    def translates(*op_names):
        def register(function):
            for op_name in op_names:
                # One translator per op: a second one would silently replace the first, whichever
                # module happened to be imported last.
                if op_name in table:
                    raise ValueError(f"{op_name} has two translators: {table[op_name].__module__} and "
                                     f"{function.__module__}")
                table[op_name] = function
            return function
        return register

    return translates
