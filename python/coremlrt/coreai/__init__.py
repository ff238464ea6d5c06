"""Core AI models (``.aimodel`` folders) on coremlrt.

``coremlrt.MLModel("m.aimodel")`` (or :func:`load`) reads ``main.mlirb`` with coreai-core's
MLIR bindings, translates the program to MIL and writes a compiled-model folder
(``model.mil``, ``metadata.json``, ``weights/``) into a cache keyed by ``main.hash``; that folder
is what loads. Weights the translation keeps as main.mlirb holds them are read in place from
the model's own file (hard-linked into the folder where the file system allows); the others
(transposed, regrouped, sub-byte) are written to ``weights/weight.bin``. coreai-core is needed
only for the translation (``pip install coremlrt[coreai]``). docs/design/coreai.md describes the
format, the op mapping and what is refused.
"""

import os

from .compiler import DIALECT, DIALECT_VERSION, TRANSLATOR_VERSION, compile_aimodel  # noqa: F401

__all__ = ["load", "compile_aimodel", "DIALECT", "DIALECT_VERSION"]


def load(path, **options):
    """Loads a ``.aimodel`` folder as a :class:`coremlrt.MLModel` (options as MLModel takes them)."""
    from ..model import MLModel

    return MLModel(os.fspath(path), **options)
