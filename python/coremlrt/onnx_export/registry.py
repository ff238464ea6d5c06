"""Program op type -> the function that writes its ONNX nodes.

A translator takes an ``OpView`` (graph.py), reads the op's compile-time parameters, adds nodes
through ``view.builder`` and names every output with ``view.output(i)``. It raises
``Unsupported`` with the reason when a use of the op has no ONNX form here.
"""

from typing import Any, Callable, Dict

from ..translator_registry import registrar

TRANSLATORS: Dict[str, Callable[[Any], None]] = {}
translates = registrar(TRANSLATORS)
