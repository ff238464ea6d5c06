"""Compiled models (``.mlmodelc`` folders), the form apps ship.

:func:`compile_model` writes one from an ``.mlpackage`` or ``.mlmodel``:

* ``model.mil``: the ML program as text, in Core ML's own form (docs/design/mil-text.md);
* ``weights/``: the weight files, unchanged;
* ``metadata.json``: inputs, outputs, states and metadata, as Core ML writes them;
* ``coremlrt-source.mlmodel``: the source protobuf, which models that are not ML programs
  (neuralNetwork) load from; ML programs always load from ``model.mil``.

:class:`coremlrt.MLModel` loads such folders, and those written by Apple's compiler as far
as ``model.mil``, the weights and ``metadata.json`` describe them.
"""

import os
import shutil
import tempfile
from typing import Optional, Union

from . import _core


def compile_model(model: Union[str, "os.PathLike[str]"],
                  destination: Optional[Union[str, "os.PathLike[str]"]] = None) -> str:
    """Compiles the model at ``model`` (an ``.mlpackage`` folder or ``.mlmodel`` file) and
    returns the path of the ``.mlmodelc`` folder written.

    ``destination`` must end in ``.mlmodelc``; an existing folder there is replaced. Without
    it, the folder is made in a new temporary directory, which the caller owns.
    """
    source = os.path.abspath(os.path.expanduser(os.fspath(model)))
    if destination is None:
        name = os.path.splitext(os.path.basename(source.rstrip(os.sep)))[0] or "model"
        destination = os.path.join(tempfile.mkdtemp(prefix="coremlrt-compiled-"), name + ".mlmodelc")
    destination = os.path.abspath(os.path.expanduser(os.fspath(destination))).rstrip(os.sep)
    if not destination.endswith(".mlmodelc"):
        raise _core.Error(f"compiled model path '{destination}' must end in .mlmodelc")
    if os.path.isdir(destination):
        shutil.rmtree(destination)
    _core.compile_model(source, destination)
    return destination


__all__ = ["compile_model"]
