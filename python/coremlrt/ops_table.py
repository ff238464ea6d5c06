"""The ops this build runs, as text: op type, iOS opsets, accepted dtypes.

Shared by ``coremlrt ops`` and ``scripts/gen_ops_doc.py`` (which writes docs/reports/ops.md).
"""

from . import _core

# The engine names dtypes as numpy does; the MIL op tables call the float types fp16/fp32/fp64.
_MIL_NAMES = {"float16": "fp16", "float32": "fp32", "float64": "fp64"}

# max_ios of a kernel that serves every later opset as well.
_OPEN_ENDED_IOS = 99


def opsets_text(min_ios, max_ios):
    """'iOS15+', 'iOS15–iOS16' or 'iOS18'."""
    if max_ios >= _OPEN_ENDED_IOS:
        return f"iOS{min_ios}+"
    if min_ios == max_ios:
        return f"iOS{min_ios}"
    return f"iOS{min_ios}–iOS{max_ios}"


def dtypes_text(dtypes):
    """'fp16, fp32, int32' from the binding's names; 'any' stays 'any'."""
    return ", ".join(_MIL_NAMES.get(name, name) for name in dtypes)


def rows():
    """(op type, opsets, dtypes) per kernel registration, sorted by op type, then opset."""
    ops = sorted(_core.supported_ops(), key=lambda op: (op[0], op[1]))
    return [(op_type, opsets_text(lo, hi), dtypes_text(dtypes)) for op_type, lo, hi, dtypes, _family in ops]
