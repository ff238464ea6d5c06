"""Core AI op name -> the function that translates it into MIL (the same idiom as
onnx_export/registry.py).

A translator takes the translator (``_translate.Translator``) and the MLIR operation, reads its
operands and attributes, and writes MIL ops or folds constants. It calls ``t.fail`` with the
reason when a use of the op has no MIL form. Each ``_ops_FAMILY.py`` module registers its
translators with ``@translates`` as it is imported.
"""

from typing import Any, Callable, Dict

from ..translator_registry import registrar

TRANSLATORS: Dict[str, Callable[[Any, Any], None]] = {}
translates = registrar(TRANSLATORS)
