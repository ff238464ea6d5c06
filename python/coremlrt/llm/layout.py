"""Which inputs, outputs, states and functions of a Core ML package make a language model.

Two layouts are recognised from the model's description (docs/guide/language-models.md):

* **mask**: a function taking token ids (int32 [1, q]) and an additive causal mask (float
  [1, 1, q, end]), with key/value cache states, returning logits [1, q, vocab]. The position of
  the first query token is end - q. This is how coremltools' "Stateful Models" guide and Apple's
  converted LLaMA / Mistral examples write a stateful LLM (``inputIds``, ``causalMask``,
  ``keyCache``, ``valueCache``), usually with q and end flexible (``ct.RangeDim``).
* **position**: functions taking token ids (int32 [1, T]) and the position of the first one
  (int32 [1]; ``start``, ``position``, ...), building the mask inside; often a package with a
  ``prefill`` function (T > 1) and a ``decode`` function (T = 1) sharing the cache states.

Anything else can be given by name: :class:`Layout` with ``ids``, ``logits`` and ``position``
or ``mask`` (and ``prefill`` / ``decode`` function names, ``cache_length``).
"""

import dataclasses
from typing import Optional

from .._core import Error, inspect

_IDS_NAMES = ("inputids", "input_ids", "tokens", "token_ids", "ids", "input")
_POSITION_NAMES = ("start", "position", "pos", "positions", "cache_position", "start_pos", "offset", "past_length")
_LOGITS_NAMES = ("logits", "output_logits", "scores")


@dataclasses.dataclass
class Layout:
    """How to drive a stateful language model. Function names of ``None`` mean the package's
    default (or only) function; ``prefill`` runs a window of prompt tokens, ``decode`` one token
    (they may be the same function when its token count is flexible)."""

    ids: str
    logits: str
    position: Optional[str] = None
    mask: Optional[str] = None
    prefill: Optional[str] = None
    decode: Optional[str] = None
    cache_length: Optional[int] = None

    def __post_init__(self):
        if (self.position is None) == (self.mask is None):
            raise Error("a language-model layout takes either a position input or a causal-mask input "
                        f"(got position={self.position!r}, mask={self.mask!r})")

    @property
    def kind(self):
        return "mask" if self.mask else "position"


@dataclasses.dataclass
class FunctionShape:
    """What one function of the package takes: its name, its token window (``fixed`` tokens,
    or flexible up to ``max_tokens``) and the dtype of its mask input."""

    name: str
    fixed: Optional[int]
    max_tokens: int
    mask_dtype: Optional[str] = None
    mask_max_end: Optional[int] = None
    state_shapes: tuple = ()


def _pick(features, names, accept):
    """The feature whose name matches one of `names` (case-insensitive), else the only one
    that `accept` takes; None when ambiguous or absent."""
    candidates = [f for f in features if accept(f)]
    for name in names:
        for f in candidates:
            if f["name"].lower() == name:
                return f
    return candidates[0] if len(candidates) == 1 else None


def _is_ids(f):
    return f["kind"] == "multiArray" and f["dtype"] in ("int32",) and len(f["shape"]) == 2 and f["shape"][0] == 1


def _is_position(f):
    return f["kind"] == "multiArray" and f["dtype"] == "int32" and len(f["shape"]) == 1 and f["shape"][0] == 1 \
        and not f["shape_range"]


def _is_mask(f):
    return f["kind"] == "multiArray" and f["dtype"] in ("float16", "float32") and len(f["shape"]) == 4


def _is_logits(f):
    return f["kind"] == "multiArray" and f["dtype"] in ("float16", "float32")


def _token_window(feature, dim):
    """(fixed tokens or None, max tokens) of `feature`'s dim `dim`."""
    if feature["shape_range"]:
        lo, hi = feature["shape_range"][dim]
        if lo == hi:
            return lo, lo
        return None, hi
    if feature["enumerated_shapes"]:
        sizes = sorted({shape[dim] for shape in feature["enumerated_shapes"]})
        return (sizes[0], sizes[0]) if len(sizes) == 1 else (None, sizes[-1])
    return feature["shape"][dim], feature["shape"][dim]


def _describe_function(function, layout):
    inputs = {f["name"]: f for f in function["inputs"]}
    if layout.ids not in inputs:
        raise Error(f"function '{function['name']}' has no input '{layout.ids}'; its inputs: {sorted(inputs)}")
    for name in (layout.position, layout.mask):
        if name and name not in inputs:
            raise Error(f"function '{function['name']}' has no input '{name}'; its inputs: {sorted(inputs)}")
    if layout.logits not in {f["name"] for f in function["outputs"]}:
        raise Error(f"function '{function['name']}' has no output '{layout.logits}'; its outputs: "
                    f"{[f['name'] for f in function['outputs']]}")
    if not function["states"]:
        raise Error(f"function '{function['name']}' declares no states: a language model here keeps its key/value "
                    f"cache in states (coremltools' ct.StateType)")
    fixed, max_tokens = _token_window(inputs[layout.ids], 1)
    mask = inputs[layout.mask] if layout.mask else None
    mask_end = _token_window(mask, 3)[1] if mask else None
    return FunctionShape(function["name"], fixed, max_tokens, mask["dtype"] if mask else None, mask_end,
                         tuple(tuple(s["shape"]) for s in function["states"]))


def _recognise(function):
    """A Layout for one function, or a string saying why not."""
    ids = _pick(function["inputs"], _IDS_NAMES, _is_ids)
    if ids is None:
        return "no token-id input (int32 [1, T])"
    rest = [f for f in function["inputs"] if f["name"] != ids["name"]]
    mask = _pick(rest, ("causalmask", "causal_mask", "attention_mask", "mask"), _is_mask)
    position = _pick(rest, _POSITION_NAMES, _is_position)
    logits = _pick(function["outputs"], _LOGITS_NAMES, _is_logits)
    if logits is None:
        return "no logits output"
    if not function["states"]:
        return "no states (a key/value cache)"
    others = [f["name"] for f in rest if f is not mask and f is not position and not f.get("optional")]
    if mask and not position and not others:
        return Layout(ids=ids["name"], logits=logits["name"], mask=mask["name"])
    if position and not mask and not others:
        return Layout(ids=ids["name"], logits=logits["name"], position=position["name"])
    return f"inputs {[f['name'] for f in function['inputs']]} are not token ids with a position or a causal mask"


@dataclasses.dataclass
class Plan:
    """A recognised model: its layout and the functions that run a prompt window and one token."""

    layout: Layout
    prefill: FunctionShape
    decode: FunctionShape
    cache_length: int


def plan(path, layout=None):
    """Recognises the package at `path` (or applies `layout`) and returns a :class:`Plan`."""
    description = inspect(str(path))["description"]
    functions = {f["name"]: f for f in description["functions"]}
    default = description["default_function"] or next(iter(functions))
    if layout is None:
        found, reasons = {}, {}
        for name, function in functions.items():
            result = _recognise(function)
            (found if isinstance(result, Layout) else reasons)[name] = result
        if not found:
            raise Error(f"{path} is not a language model coremlrt recognises: " +
                        "; ".join(f"function '{n}': {r}" for n, r in reasons.items()) +
                        ". Give the names with coremlrt.llm.Layout(ids=..., logits=..., position=... or mask=...)")
        kinds = {(lay.ids, lay.logits, lay.position, lay.mask) for lay in found.values()}
        if len(kinds) > 1:
            raise Error(f"{path}: functions {sorted(found)} name their inputs differently; give a "
                        f"coremlrt.llm.Layout")
        layout = next(iter(found.values()))
        candidates = list(found)
    else:
        candidates = [n for n in (layout.prefill, layout.decode) if n] or list(functions)
        for name in candidates:
            if name not in functions:
                raise Error(f"{path} has no function '{name}'; its functions: {sorted(functions)}")
    shapes, problems = {}, []
    for name in candidates:
        try:
            shapes[name] = _describe_function(functions[name], layout)
        except Error as exc:
            if layout.prefill or layout.decode or len(candidates) == 1:
                raise
            problems.append(str(exc))
    if not shapes:
        raise Error(f"{path}: no function takes what the layout names: " + "; ".join(problems))
    prefill = _choose(shapes, layout.prefill, default, prefer="prefill", many=True)
    decode = _choose(shapes, layout.decode, default, prefer="decode", many=False)
    states = {s for fs in shapes.values() for s in fs.state_shapes}
    if len({prefill.state_shapes, decode.state_shapes}) > 1:
        raise Error(f"{path}: functions '{prefill.name}' and '{decode.name}' declare different states; a sequence "
                    f"runs both on one state")
    cache_length = layout.cache_length or _cache_length(prefill, states)
    return Plan(layout, prefill, decode, cache_length)


def _choose(shapes, named, default, prefer, many):
    if named:
        return shapes[named]
    if prefer in shapes:
        return shapes[prefer]
    flexible = [s for s in shapes.values() if s.fixed is None]
    if flexible:
        return shapes[default] if default in shapes and shapes[default].fixed is None else flexible[0]
    ordered = sorted(shapes.values(), key=lambda s: s.fixed)
    return ordered[-1] if many else ordered[0]


def _cache_length(shape, states):
    """The positions the cache holds: the mask's largest end, else the state dim before the
    head dim (caches are [..., positions, head dim] in both layouts)."""
    if shape.mask_max_end:
        return shape.mask_max_end
    lengths = {s[-2] for s in states if len(s) >= 2}
    if len(lengths) != 1:
        raise Error(f"cannot tell the cache length from the state shapes {sorted(states)}; give "
                    f"coremlrt.llm.Layout(cache_length=...)")
    return lengths.pop()
