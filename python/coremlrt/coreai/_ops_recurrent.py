"""coreai-torch's unrolled ``nn.LSTM`` layers, read back as one MIL ``lstm`` op each.

coreai-torch writes an LSTM layer out step by step (docs/design/coreai.md): the input
projection of every step at once, ``P = X @ W_ih^T (+ b_ih)`` with X ``[S, B, I]``, then per
step t a ``slice`` P[t], ``gates = (h @ W_hh^T (+ b_hh)) + P[t]``, a four-way ``split`` of the
gates (torch's order i, f, g, o), ``sigmoid``/``tanh`` of them, ``c = f * c + i * g``,
``h = o * tanh(c)``, and at the end a ``concat`` of the steps' h along axis 0. Translated op by
op, a 64-step layer is some 900 MIL ops whose matrix products each read the whole recurrent
weight for one row; MIL's ``lstm`` op runs the same recurrence in one kernel
(src/ops/recurrent.cc), with the input projection as one product and the gates activated
where they are computed.

``find_layers`` finds such chains in a function's own block by their structure (op names,
which value feeds which, and that no intermediate value is read outside the chain); the
translator skips their ops and, at the last of them, ``translate_layer`` checks what only
the constants tell (weights, biases, split sizes, slice bounds, concat axis) and writes the
``lstm`` op. Where a check fails, the chain's ops are translated one by one as before, so
a near miss costs speed, never correctness. Only forward fp32 chains of slices are taken;
bidirectional and reverse layers (their steps read P backwards) and one-step sequences (no
slice: P is added as it is) stay op by op.

Results equal the op-by-op translation's up to fp32 rounding: the kernel adds b_ih + b_hh
once, and sums x and h terms in its own order.
"""

import numpy as np

from ._common import Var, element_kind

_ADD = "coreai.decomposable.broadcasting_add"
_MUL = "coreai.decomposable.broadcasting_mul"
_MATMUL = "coreai.decomposable.broadcasting_batch_matmul"


def _producer(value):
    """The op computing ``value``, or None for a block argument."""
    owner = getattr(value.owner, "operation", value.owner)
    return owner if isinstance(getattr(owner, "name", None), str) else None


def _users(value):
    return [getattr(u.owner, "operation", u.owner) for u in value.uses]


def _only_user(value, name):
    """The one op reading ``value``, if there is exactly one and it is a ``name``."""
    users = _users(value)
    return users[0] if len(users) == 1 and users[0].name == name else None


def _other(op, value):
    """The operand of a two-operand op that is not ``value`` (None if neither or both are)."""
    a, b = op.operands
    if a == value and b != value:
        return b
    if b == value and a != value:
        return a
    return None


class _Step:
    """One step's ops and the values it reads and computes."""

    def __init__(self, split):
        self.split = split
        self.ok = False
        self.ops = [split]
        gates = split.operands[0]
        add = _producer(gates)
        if len(split.results) != 4 or add is None or add.name != _ADD or len(_users(gates)) != 1 \
                or element_kind(gates.type) != "f32":
            return
        a, b = add.operands
        slice_, recurrent = (a, b) if _producer(a) is not None and _producer(a).name == "coreai.slice" else (b, a)
        self.slice = _producer(slice_)
        if self.slice is None or self.slice.name != "coreai.slice" or len(_users(slice_)) != 1:
            return
        self.ops.append(add)
        inner = _producer(recurrent)
        if inner is None or len(_users(recurrent)) != 1:
            return
        self.hh_bias = None
        if inner.name == _ADD:
            self.ops.append(inner)
            for value in inner.operands:
                source = _producer(value)
                if source is not None and source.name == _MATMUL:
                    self.hh_bias = _other(inner, value)
                    inner = source
                    break
            else:
                return
            if self.hh_bias is None or len(_users(inner.results[0])) != 1:
                return
        if inner.name != _MATMUL:
            return
        self.matmul = inner
        self.ops.append(inner)
        self.h_prev, self.weight = inner.operands
        # The gates: sigmoid(i), sigmoid(f), tanh(g), sigmoid(o), each read once.
        acts = [_only_user(r, n) for r, n in zip(split.results, ("coreai.sigmoid", "coreai.sigmoid", "coreai.tanh",
                                                                   "coreai.sigmoid"))]
        if any(a is None for a in acts):
            return
        self.ops += acts
        i, f, g, o = (a.results[0] for a in acts)
        keep, new = _only_user(f, _MUL), _only_user(i, _MUL)
        if keep is None or new is None or keep == new or _other(new, i) != g or _only_user(g, _MUL) != new:
            return
        self.c_prev = _other(keep, f)
        cell = _only_user(keep.results[0], _ADD)
        if self.c_prev is None or cell is None or _only_user(new.results[0], _ADD) != cell:
            return
        self.c = cell.results[0]
        squash = [u for u in _users(self.c) if u.name == "coreai.tanh"]
        if len(squash) != 1:
            return
        out = _only_user(squash[0].results[0], _MUL)
        if out is None or _other(out, squash[0].results[0]) != o or _only_user(o, _MUL) != out:
            return
        self.ops += [keep, new, cell, squash[0], out]
        self.h = out.results[0]
        self.ok = True


class Layer:
    """An unrolled LSTM layer found in a block: its steps in order and the values around them."""

    def __init__(self, steps, projection, concat, absorbed, anchor):
        self.steps = steps
        self.projection = projection  # (matmul, bias add or None)
        self.concat = concat          # the concat of every step's h, or None
        self.ops = absorbed           # every op the lstm op replaces, in block order
        self.members = set(absorbed)
        self.anchor = anchor          # the last of them: where the lstm op is written


def _weight_source(value, chain_ops):
    """The transpose whose only readers are chain ops (absorbed with them), or None."""
    op = _producer(value)
    if op is not None and op.name == "coreai.transpose" and all(u in chain_ops for u in _users(value)):
        return op
    return None


def _layer(steps, position):
    """The Layer of a chain of linked steps, or None where its structure rules the lstm op out."""
    first, last = steps[0], steps[-1]
    projected = first.slice.operands[0]
    if any(s.slice.operands[0] != projected or s.weight != first.weight or
           (s.hh_bias is None) != (first.hh_bias is None) or (s.hh_bias is not None and s.hh_bias != first.hh_bias)
           for s in steps):
        return None
    if len(_users(projected)) != len(steps):
        return None
    source = _producer(projected)
    if source is None:
        return None
    bias_add = None
    if source.name == _ADD:
        bias_add = source
        matmul = next((_producer(v) for v in source.operands
                       if _producer(v) is not None and _producer(v).name == _MATMUL), None)
        if matmul is None or len(_users(matmul.results[0])) != 1:
            return None
    elif source.name == _MATMUL:
        matmul = source
    else:
        return None
    ops = [op for s in steps for op in s.ops] + [s.slice for s in steps] + [matmul] + ([bias_add] if bias_add else [])
    # Every step's h feeds the next step's product and, optionally, one concat of them all.
    concat = None
    concat_users = [u for u in _users(first.h) if u.name == "coreai.concat"]
    if concat_users:
        concat = concat_users[0]
        if [v for v in concat.operands][1:] != [s.h for s in steps]:
            return None
        ops.append(concat)
    chain = set(ops)
    for k, s in enumerate(steps[:-1]):
        nxt = steps[k + 1]
        if set(_users(s.h)) - {nxt.matmul} - ({concat} if concat else set()) or \
                len(_users(s.h)) != 1 + (concat is not None):
            return None
        if any(u not in chain for u in _users(s.c)):
            return None
    for weight in (first.weight, matmul.operands[1]):
        transpose = _weight_source(weight, chain)
        if transpose is not None:
            ops.append(transpose)
            chain.add(transpose)
    ops.sort(key=position.__getitem__)
    anchor = ops[-1]
    # What the block reads of the layer (the last h and c, the concat) is read after the anchor,
    # where the lstm op defines it.
    for value in (last.h, last.c) + ((concat.results[0],) if concat else ()):
        if any(u not in chain and position.get(u, -1) <= position[anchor] for u in _users(value)):
            return None
    return Layer(steps, (matmul, bias_add), concat, ops, anchor)


def find_layers(operations):
    """The unrolled LSTM layers among a block's ops: {op: Layer} for every op they absorb."""
    position = {op: i for i, op in enumerate(operations)}
    steps = [s for s in (_Step(op) for op in operations if op.name == "coreai.split") if s.ok]
    by_h = {s.h_prev: s for s in steps}
    computed = {s.h for s in steps}
    starts = [s for s in steps if s.h_prev not in computed]
    found = {}
    for start in starts:
        chain = [start]
        while chain[-1].h in by_h:
            step = by_h[chain[-1].h]
            if step.c_prev != chain[-1].c:
                break
            chain.append(step)
        layer = _layer(chain, position)
        if layer is not None and not any(op in found for op in layer.ops):
            for op in layer.ops:
                found[op] = layer
    return found


def _transposed_weight(t, value, layer):
    """W [4H, K] of a value that is W^T: an absorbed transpose's constant source, a constant
    [K, 4H], or one repeated along a batch axis ([n, K, 4H]); None if it is none of these."""
    op = _producer(value)
    if op in layer.members and op.name == "coreai.transpose":
        source = t.constant(op.operands[0])
        perm = t.constant(op.operands[1])
        if source is None or perm is None or source.ndim != 2 or list(perm.reshape(-1)) != [1, 0]:
            return None
        return source
    array = t.constant(value)
    if array is None:
        return None
    if array.ndim == 3 and all(np.array_equal(array[0], a) for a in array[1:]):
        array = array[0]
    return array.T if array.ndim == 2 else None


def _state_fits(t, value, dims):
    """Whether an initial h or c is an fp32 [B, H] or [1, B, H] value (or a constant of B * H)."""
    held = t.values.get(value)
    if isinstance(held, np.ndarray):
        return held.size == int(np.prod(dims))
    return isinstance(held, Var) and held.dtype == "fp32" and held.dims in (dims, [1] + dims)


def _state(t, value, dims, base):
    """An initial h or c that _state_fits, as the name of a [B, H] MIL value."""
    held = t.values[value]
    if isinstance(held, np.ndarray):
        return t.const(np.ascontiguousarray(held.reshape(dims).astype(np.float32)), "fp32", base)
    if held.dims == dims:
        return held.name
    return t.aux("reshape", {"x": held.name, "shape": t.param(dims, "int32")}, "fp32", dims, base).name


def translate_layer(t, layer):
    """Writes ``layer`` as one MIL lstm op; False (nothing written) where a constant rules it out."""
    first, last = layer.steps[0], layer.steps[-1]
    matmul, bias_add = layer.projection
    x = t.values.get(matmul.operands[0])
    if not isinstance(x, Var) or x.dtype != "fp32" or len(x.dims) != 3 or None in x.dims or x.transposed \
            or x.spatial_pad is not None:
        return False
    seq, batch, inputs = x.dims
    hidden = t.dims(first.split.results[0])[-1]
    if seq != len(layer.steps) or hidden is None:
        return False
    gates = 4 * hidden
    w_ih, w_hh = _transposed_weight(t, matmul.operands[1], layer), _transposed_weight(t, first.weight, layer)
    if w_ih is None or w_hh is None or w_ih.shape != (gates, inputs) or w_hh.shape != (gates, hidden):
        return False
    biases = []
    for value in ((_other(bias_add, matmul.results[0]) if bias_add else None), first.hh_bias):
        array = np.zeros(gates, np.float32) if value is None else t.constant(value)
        if array is None or array.size != gates:
            return False
        biases.append(array.reshape(-1))
    for k, s in enumerate(layer.steps):
        sizes, axis = (t.constant(v) for v in s.split.operands[1:])
        rank = len(t.dims(s.split.operands[0]))
        if sizes is None or axis is None or list(sizes.reshape(-1)) != [hidden] * 4 or \
                int(axis.reshape(-1)[0]) % rank != rank - 1 or rank != 3:
            return False
        begin, end, stride = (t.constant(v) for v in s.slice.operands[1:])
        if begin is None or end is None or stride is None or list(begin.reshape(-1)) != [k, 0, 0] or \
                list(stride.reshape(-1)) != [1, 1, 1] or list(end.reshape(-1))[0] != k + 1 or \
                any(e < d for e, d in zip(list(end.reshape(-1))[1:], (batch, gates))):
            return False
    if layer.concat is not None:
        axis = t.constant(layer.concat.operands[0])
        if axis is None or int(axis.reshape(-1)[0]) != 0:
            return False
    if not (_state_fits(t, first.h_prev, [batch, hidden]) and _state_fits(t, first.c_prev, [batch, hidden])):
        return False
    # Every check passed: nothing is written before this point.
    h0 = _state(t, first.h_prev, [batch, hidden], "initial_h")
    c0 = _state(t, first.c_prev, [batch, hidden], "initial_c")
    # torch's gate order is i, f, g, o; MIL's lstm takes i, f, o, g (z).
    order = np.concatenate([np.arange(0, 2 * hidden), np.arange(3 * hidden, gates), np.arange(2 * hidden, 3 * hidden)])
    weight = lambda a: t.const(np.ascontiguousarray(a[order].astype(np.float32)), "fp32", "lstm_weight")  # noqa: E731
    sequence = t.output_name(layer.concat.results[0]) if layer.concat is not None else None
    outputs = t.aux_many("lstm", {
        "x": x.name, "initial_h": h0, "initial_c": c0,
        "weight_ih": weight(w_ih), "weight_hh": weight(w_hh),
        "bias": t.const(np.ascontiguousarray((biases[0] + biases[1])[order].astype(np.float32)), "fp32", "lstm_bias"),
        "direction": t.param("forward", "string"), "output_sequence": t.param(layer.concat is not None, "bool"),
        "recurrent_activation": t.param("sigmoid", "string"), "cell_activation": t.param("tanh", "string"),
        "activation": t.param("tanh", "string")},
        [("fp32", [seq if layer.concat is not None else 1, batch, hidden]), ("fp32", [batch, hidden]),
         ("fp32", [batch, hidden])], names=[sequence, None, None])
    if layer.concat is not None:
        t.values[layer.concat.results[0]] = outputs[0]
    # The last step's h and c, [1, B, H], where anything outside the layer reads them.
    for value, var in ((last.h, outputs[1]), (last.c, outputs[2])):
        if any(u not in layer.members for u in _users(value)):
            t.values[value] = t.aux("expand_dims", {"x": var.name, "axes": t.param([0], "int32")}, "fp32",
                                    [1, batch, hidden], name=t.output_name(value))
    return True
