"""Elementwise ops: unary functions, arithmetic, comparisons, logical ops, where and cast.

MIL's elementwise ops broadcast NumPy-style, as the ``broadcasting_*`` forms do; the plain forms
take equal shapes, a special case. Each MIL op takes the element types of its row in
docs/design/coreml-format.md ("Elementwise binary ops", "Elementwise unary ops and cast"); an
operand of another type is refused. Ops whose operands are all constants are folded with the
semantics of the dialect's docstrings.
"""

import numpy as np

from ._common import BOOL, COMPUTED, ELEMENT_TYPES, FLOAT, FLOAT_INT, Complex, Var
from ._ops_control_flow import write_through
from ._ops_shape import window_scatter
from ._registry import translates

# coreai unary op -> (MIL op, element types it takes). log and rsqrt get epsilon 0 below.
_UNARY = {
    "relu": ("relu", FLOAT), "sigmoid": ("sigmoid", FLOAT), "tanh": ("tanh", FLOAT), "exp": ("exp", FLOAT),
    "sqrt": ("sqrt", FLOAT), "abs": ("abs", FLOAT_INT), "sin": ("sin", FLOAT), "cos": ("cos", FLOAT),
    "tan": ("tan", FLOAT), "erf": ("erf", FLOAT), "silu": ("silu", FLOAT), "asin": ("asin", FLOAT),
    "acos": ("acos", FLOAT), "atan": ("atan", FLOAT), "atanh": ("atanh", FLOAT), "sinh": ("sinh", FLOAT),
    "cosh": ("cosh", FLOAT), "round": ("round", FLOAT), "not": ("logical_not", BOOL),
    # Not MIL ops: the engine's own kernels (src/ops/elementwise_unary.cc), std::asinh / std::acosh.
    "asinh": ("asinh", FLOAT), "acosh": ("acosh", FLOAT),
    "log": ("log", FLOAT), "rsqrt": ("rsqrt", FLOAT),
}

# Folding of constant operands, as the docstrings define the ops.
_UNARY_FOLD = {
    "relu": lambda x: np.maximum(x, 0), "sigmoid": lambda x: 1 / (1 + np.exp(-x)), "tanh": np.tanh,
    "exp": np.exp, "sqrt": np.sqrt, "abs": np.abs, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "atanh": np.arctanh, "sinh": np.sinh,
    "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "round": np.round, "not": np.logical_not,
    "log": np.log, "rsqrt": lambda x: 1 / np.sqrt(x), "silu": lambda x: x / (1 + np.exp(-x)),
}


def _truncating_divide(a, b):
    if np.issubdtype(a.dtype, np.integer):
        with np.errstate(divide="ignore", invalid="ignore"):
            q = np.abs(a.astype(np.int64)) // np.where(b == 0, 1, np.abs(b.astype(np.int64)))
        return np.where(b == 0, 0, q * np.sign(a) * np.sign(b))
    return np.divide(a, b)


def _floor_divide(a, b):
    if np.issubdtype(a.dtype, np.integer):
        return np.floor_divide(a, np.where(b == 0, 1, b)) * (b != 0)
    return np.floor(np.divide(a, b))  # floor(x / y), not Python's fmod-based //


# coreai binary op -> {element kind set: MIL op}, numpy fold (None: not folded).
_BINARY = {
    "add": ({FLOAT_INT: "add", BOOL: "logical_or"}, np.add),
    "sub": ({FLOAT_INT: "sub"}, np.subtract),
    "mul": ({FLOAT_INT: "mul", BOOL: "logical_and"}, np.multiply),
    # MIL's real_div truncates int32 quotients toward zero, as Core AI's divide does.
    "divide": ({FLOAT_INT: "real_div"}, _truncating_divide),
    "floor_divide": ({FLOAT_INT: "floor_div"}, _floor_divide),
    "maximum": ({FLOAT_INT: "maximum"}, np.maximum),
    "minimum": ({FLOAT_INT: "minimum"}, np.minimum),
    "pow": ({FLOAT_INT: "pow"}, None),
    "equal": ({FLOAT_INT: "equal"}, np.equal),
    "not_equal": ({FLOAT_INT: "not_equal", BOOL: "logical_xor"}, np.not_equal),
    "greater": ({FLOAT_INT: "greater"}, np.greater),
    "and": ({BOOL: "logical_and"}, np.logical_and),
    "or": ({BOOL: "logical_or"}, np.logical_or),
    "xor": ({BOOL: "logical_xor"}, np.logical_xor),
    # MIL has no bitwise ops; on bools they are the logical ones.
    "bitwise_and": ({BOOL: "logical_and"}, np.logical_and),
    "bitwise_or": ({BOOL: "logical_or"}, np.logical_or),
    "bitwise_xor": ({BOOL: "logical_xor"}, np.logical_xor),
}


def _short(op):
    return op.name.rsplit(".", 1)[-1].replace("broadcasting_", "")


def _check_kinds(t, op, kinds, values):
    for value in values:
        if t.kind(value) not in kinds:
            t.fail(f"{op.name}: operands of element type {t.kind(value)} are not supported (MIL's "
                   f"{'/'.join(kinds)} op)")


@translates(*(f"coreai.{name}" for name in _UNARY))
def _unary(t, op):
    name = _short(op)
    mil_op, kinds = _UNARY[name]
    x = op.operands[0]
    _check_kinds(t, op, kinds + (("si32", "i32") if name == "relu" else ()), [x])
    source = t.constant(x)
    if source is not None:
        with np.errstate(all="ignore"):
            t.fold(op, _UNARY_FOLD[name](source))
        return
    if name == "relu" and t.kind(x) in ("si32", "i32"):  # MIL's relu takes floats: max(x, 0)
        t.emit(op, "maximum", {"x": t.operand(x), "y": t.param(0, "int32")})
        return
    arguments = {"x": t.operand(x)}
    if name in ("log", "rsqrt"):
        # MIL's log and rsqrt add an epsilon (default 1e-45 and 1e-12); Core AI's add none.
        arguments["epsilon"] = t.param(0.0, "fp32")
    t.emit(op, mil_op, arguments)


@translates("coreai.gelu")
def _gelu(t, op):
    _check_kinds(t, op, FLOAT, [op.operands[0]])
    mode = "none"
    if "approximate" in op.attributes:
        text = str(op.attributes["approximate"])
        mode = text[text.find("<") + 1:text.rfind(">")] if "<" in text else text.strip('"')
    mil_mode = {"none": "EXACT", "tanh": "TANH_APPROXIMATION", "sigmoid": "SIGMOID_APPROXIMATION"}.get(mode)
    if mil_mode is None:
        t.fail(f"coreai.gelu: approximation '{mode}' has no MIL counterpart")
    t.emit(op, "gelu", {"x": t.operand(op.operands[0]), "mode": t.param(mil_mode, "string")})


@translates(*(f"coreai.{name}" for name in _BINARY),
            *(f"coreai.decomposable.broadcasting_{name}" for name in _BINARY))
def _binary(t, op):
    name = _short(op)
    table, fold = _BINARY[name]
    x, y = op.operands
    kind = t.kind(x)
    mil_op = next((m for kinds, m in table.items() if kind in kinds), None)
    if mil_op is None or t.kind(y) != kind:
        t.fail(f"{op.name}: operands of element types {kind}, {t.kind(y)} are not supported (MIL has "
               f"{'no bitwise ops' if name.startswith('bitwise') else 'no such op for them'})")
    a, b = t.constant(x), t.constant(y)
    if a is not None and b is not None and fold is not None:
        with np.errstate(all="ignore"):
            t.fold(op, fold(a, b))
        return
    if name in ("maximum", "minimum") and _relu6(t, op, name, x, b):
        return
    if getattr(t.values[x], "floored", False):  # the maximum deferred by _relu6, written now
        held = t.values[x]
        t.values[x] = t.aux("maximum", {"x": held.name, "y": t.param(0, held.dtype)}, held.dtype, held.dims)
    t.emit(op, mil_op, {"x": t.operand(x), "y": t.operand(y)})


def _scalar(array, value):
    return array is not None and array.size == 1 and float(array.reshape(())) == value


def _relu6(t, op, name, x, b):
    """relu6 as one clip(alpha = 0, beta = 6), as the Core ML conversion of the same module has
    it, where coreai-torch writes maximum(x, 0) then minimum(., 6): the maximum whose
    one reader is a minimum is deferred (Var.floored), and that minimum by 6 writes the clip.
    Floats only, and only where the scalar constant does not broadcast x."""
    held = t.values[x]
    if not isinstance(held, Var) or t.kind(x) not in FLOAT or t.dims(op.results[0]) != held.dims:
        return False
    if name == "maximum":
        uses = list(op.results[0].uses)
        if not _scalar(b, 0) or held.floored or len(uses) != 1 or _use_name(uses[0]) != "minimum" \
                or uses[0].operand_number != 0:
            return False
        var = Var(held.name, held.dtype, held.dims)
        var.floored = True
        t.values[op.results[0]] = var
        return True
    if not held.floored or not _scalar(b, 6):
        return False
    t.emit(op, "clip", {"x": held.name, "alpha": t.param(0, held.dtype), "beta": t.param(6, held.dtype)})
    return True


def _use_name(use):
    return _short(use.owner) if use.owner.name.startswith("coreai.") else None


@translates("coreai.modulo", "coreai.decomposable.broadcasting_modulo")
def _modulo(t, op):
    """The remainder of truncated division (C's fmod, %), with the sign of x. MIL's mod takes
    the sign of y (Python's %); on non-negative operands the two agree exactly, so the
    remainder of |x| by |y| gets x's sign back."""
    x, y = op.operands
    _check_kinds(t, op, FLOAT_INT, [x, y])
    a, b = t.constant(x), t.constant(y)
    if a is not None and b is not None:
        with np.errstate(all="ignore"):
            t.fold(op, np.fmod(a, b) if np.issubdtype(a.dtype, np.floating) else
                   np.where(b == 0, 0, np.fmod(a, np.where(b == 0, 1, b))))
        return
    dtype = COMPUTED[t.kind(x)]
    dims = t.dims(op.results[0])
    xs, ys = t.as_var(x), t.as_var(y)
    ax = t.aux("abs", {"x": xs.name}, dtype, xs.dims)
    ay = t.aux("abs", {"x": ys.name}, dtype, ys.dims)
    r = t.aux("mod", {"x": ax.name, "y": ay.name}, dtype, dims)
    negative = t.aux("less", {"x": xs.name, "y": t.param(0, dtype)}, "bool", xs.dims)
    flipped = t.aux("mul", {"x": r.name, "y": t.param(-1, dtype)}, dtype, dims)
    t.emit(op, "select", {"cond": negative.name, "a": flipped.name, "b": r.name})


@translates("coreai.where", "coreai.decomposable.broadcasting_where")
def _where(t, op):
    condition, a, b = op.operands
    if t.all_constant(op.operands):
        t.fold(op, np.where(t.constant(condition), t.constant(a), t.constant(b)))
        return
    tiled = getattr(t.values[a], "tiled", None)
    if tiled is not None:
        box = _selected_box(t, op, tiled)
        if box is not None:
            if window_scatter(t, op, box):
                return
            begin, end = box
            t.emit(op, "slice_update", {"x": t.operand(b), "update": tiled[0].name,
                                        "begin": t.param(begin, "int32"), "end": t.param(end, "int32"),
                                        "stride": t.param([1] * len(begin), "int32"),
                                        "end_mask": t.param([False] * len(begin), "bool")})
            write_through(t, op, b)
            return
        source, reps = tiled
        a_name = t.aux("tile", {"x": source.name, "reps": t.param(reps, "int32")}, source.dtype,
                       t.values[a].dims).name
    else:
        a_name = t.operand(a)
    t.emit(op, "select", {"cond": t.operand(condition), "a": a_name, "b": t.operand(b)})


def _selected_box(t, op, tiled):
    """(begin, end) when where(cond, tile(source, reps), b) is b with the source written into one
    box: cond a constant true on exactly that box, which is the source's shape, whole along the
    dims not tiled and one wide along the tiled ones. coreai-torch writes index_copy_ into one
    layer of a stacked cache state this way (the layer tiled to the whole cache, selected by a
    constant layer mask); as slice_update it is one copy of the layer, not tile + select over
    the whole cache, and a lone one between read_state and write_state is updated in place
    (src/runtime/state_update.h)."""
    source, reps = tiled
    dims = t.dims(op.results[0])
    mask = t.constant(op.operands[0])
    if mask is None or None in dims or t.dims(op.operands[2]) != dims or list(t.values[op.operands[1]].dims) != dims:
        return None
    try:
        mask = np.broadcast_to(mask.astype(bool), dims)
    except ValueError:
        return None
    where = np.nonzero(mask)
    if not where[0].size:
        return None
    begin = [int(w.min()) for w in where]
    end = [int(w.max()) + 1 for w in where]
    extent = [e - b for b, e in zip(begin, end)]
    if where[0].size != int(np.prod(extent)) or extent != list(source.dims):
        return None
    for d, repeat in enumerate(reps):
        if repeat != 1 and extent[d] != 1 or repeat == 1 and (begin[d], end[d]) != (0, dims[d]):
            return None
    return begin, end


@translates("coreai.cast")
def _cast(t, op):
    source = op.operands[0]
    result = op.results[0]
    held = t.constant(source)
    if held is not None:
        target = np.dtype(ELEMENT_TYPES[t.kind(result)][1])
        if target == np.bool_:
            folded = held != 0
        elif np.issubdtype(held.dtype, np.floating) and not np.issubdtype(target, np.floating):
            with np.errstate(invalid="ignore"):
                folded = np.trunc(held).astype(target)  # toward zero
        else:
            folded = held.astype(target)
        t.fold(op, folded)
        return
    var = t.values[source]
    target_kind = t.kind(result)
    dtype = COMPUTED.get(target_kind)
    if dtype is None:
        t.fail(f"coreai.cast to {target_kind} of a computed value is not supported")
    if dtype == var.dtype:
        # The same element type (a cast refining dims), or si32 <-> ui32, both held as int32.
        dims = [r if r is not None else v for r, v in zip(t.dims(result), var.dims)]
        t.values[result] = Var(var.name, var.dtype, dims, var.compressed)
        return
    # MIL's cast truncates float -> integer toward zero and maps nonzero (NaN too) to true.
    t.emit(op, "cast", {"x": var.name, "dtype": t.param(dtype, "string")}, dims=[var.dims])


@translates("coreai.create_complex")
def _create_complex(t, op):
    t.values[op.results[0]] = Complex(t.values[op.operands[0]], t.values[op.operands[1]])


@translates("coreai.real_part", "coreai.imaginary_part")
def _part(t, op):
    held = t.values[op.operands[0]]
    if not isinstance(held, Complex):
        t.fail(f"{op.name} of a complex value not made by create_complex")
    t.values[op.results[0]] = held.real if op.name == "coreai.real_part" else held.imaginary
