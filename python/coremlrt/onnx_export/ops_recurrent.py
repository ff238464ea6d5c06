"""lstm and rnn as ONNX LSTM and RNN.

Layout facts (src/ops/recurrent.cc): MIL's LSTM gate blocks are [i, f, o, z], ONNX's are
[i, o, f, c]; MIL's `bias` is the sum of the input and hidden biases, ONNX takes both (the
hidden half is written as zeros); MIL's peephole is [i, f, o], ONNX's P is [i, o, f]. A
bidirectional layer aligns its backward half with input time in both; a "reverse" layer emits
its sequence in processing order in Core ML and in input time in ONNX, so its sequence is
reversed along time after the ONNX op. GRU: MIL's blocks are [r, o, z] (o the candidate),
ONNX's [z, r, h]; `input_bias` and the r and z halves of `bias` act together on the input side,
the o half of `bias` is ONNX's Rbh, and iOS18's reset_after is ONNX's linear_before_reset.
An LSTM with `clip` (Core ML clips the cell state, ONNX's LSTM the gates' inputs) is written
out as a Loop over the steps (_lstm_loop, below).
"""

import numpy as np

from .graph import Unsupported
from .registry import translates

_LSTM_GATE_ORDER = [0, 2, 1, 3]  # ONNX block k takes MIL block _LSTM_GATE_ORDER[k]
_ACTIVATIONS = {"sigmoid": "Sigmoid", "tanh": "Tanh", "relu": "Relu", "linear": "Affine", "hard_sigmoid": "HardSigmoid",
                "sigmoid_hard": "HardSigmoid"}


def _reorder(array, blocks, order):
    parts = np.split(array, blocks, axis=0)
    return np.concatenate([parts[i] for i in order], axis=0)


def _activation(v, param, default):
    name = str(v.scalar(param, default)).lower()
    if name not in _ACTIVATIONS or name == "linear":
        raise Unsupported("%s '%s'" % (param, name))
    return _ACTIVATIONS[name]


def _direction_weights(v, suffix, gates, order):
    ih = v.constant("weight_ih" + suffix, required=True).array
    hh = v.constant("weight_hh" + suffix, required=True).array
    w = _reorder(ih, gates, order)
    r = _reorder(hh, gates, order)
    bias = v.constant("bias" + suffix)
    b = np.zeros(2 * ih.shape[0], dtype=ih.dtype)
    if bias is not None:
        b[:ih.shape[0]] = _reorder(bias.array, gates, order)
    return w, r, b


def _initial_state(v, param, directions, hidden):
    """[B, D*H] -> ONNX's [D, B, H]."""
    b = v.builder
    state = v.input(param)
    if directions == 1:
        return b.node("Unsqueeze", [state, b.const_int64([0], "axes")])
    split = b.node("Reshape", [state, b.const_int64([0, directions, hidden], "state_shape")])
    return b.node("Transpose", [split], perm=[1, 0, 2])


def _outputs(v, y, y_h, y_c, directions, hidden, output_sequence, reverse=False):
    """ONNX Y [T, D, B, H], Y_h/Y_c [D, B, H] -> MIL's output [T or 1, B, D*H], h and c [B, D*H]."""
    b = v.builder
    if reverse and output_sequence:
        y = b.node("Slice", [y, b.const_int64([-1], "starts"), b.const_int64([np.iinfo(np.int64).min], "ends"),
                             b.const_int64([0], "axes"), b.const_int64([-1], "steps")])

    def merge_directions(value, leading):  # [..., D, B, H] -> [..., B, D*H]
        perm = list(range(leading)) + [leading + 1, leading, leading + 2]
        moved = b.node("Transpose", [value], perm=perm)
        return b.node("Reshape", [moved, b.const_int64([0] * (leading + 1) + [directions * hidden], "merged")])

    if output_sequence:
        sequence = merge_directions(y, 1)
    else:
        sequence = b.node("Unsqueeze", [merge_directions(y_h, 0), b.const_int64([0], "axes")])
    b.node("Identity", [sequence], [v.output(0)])
    b.node("Identity", [merge_directions(y_h, 0)], [v.output(1)])
    if y_c is not None and len(v.outputs) > 2:
        b.node("Identity", [merge_directions(y_c, 0)], [v.output(2)])


@translates("lstm")
def lstm(v):
    b = v.builder
    direction = v.scalar("direction", "forward")
    if direction not in ("forward", "reverse", "bidirectional"):
        raise Unsupported("direction '%s'" % direction)
    if v.has("clip"):
        # Core ML clips the cell state, ONNX's LSTM the gates' inputs: the cell is written out.
        _lstm_loop(v, direction)
        return
    directions = 2 if direction == "bidirectional" else 1
    weights = [_direction_weights(v, s, 4, _LSTM_GATE_ORDER) for s in ([""] if directions == 1 else ["", "_back"])]
    hidden = weights[0][1].shape[1]
    dtype = weights[0][0].dtype
    w = b.initializer(np.stack([x[0] for x in weights]), "lstm_w")
    r = b.initializer(np.stack([x[1] for x in weights]), "lstm_r")
    bias = b.initializer(np.stack([x[2] for x in weights]), "lstm_b")
    peepholes = []
    for suffix in ([""] if directions == 1 else ["", "_back"]):
        peep = v.constant("peephole" + suffix)
        if peep is not None:
            p = peep.array.reshape(3, hidden)
            peepholes.append(np.concatenate([p[0], p[2], p[1]]))
    peephole = b.initializer(np.stack(peepholes).astype(dtype), "lstm_p") if peepholes else ""
    activations = [_activation(v, "recurrent_activation", "sigmoid"), _activation(v, "cell_activation", "tanh"),
                   _activation(v, "activation", "tanh")] * directions
    y, y_h, y_c = b.node("LSTM", [v.input("x"), w, r, bias, "", _initial_state(v, "initial_h", directions, hidden),
                                  _initial_state(v, "initial_c", directions, hidden), peephole], 3,
                         hidden_size=hidden, direction=direction, activations=activations)
    _outputs(v, y, y_h, y_c, directions, hidden, bool(v.scalar("output_sequence", False)), direction == "reverse")


@translates("rnn")
def rnn(v):
    b = v.builder
    direction = v.scalar("direction", "forward")
    if direction not in ("forward", "reverse"):
        raise Unsupported("direction '%s'" % direction)
    w, r, bias = _direction_weights(v, "", 1, [0])
    hidden = r.shape[1]
    y, y_h = b.node("RNN", [v.input("x"), b.initializer(w[None], "rnn_w"), b.initializer(r[None], "rnn_r"),
                            b.initializer(bias[None], "rnn_b"), "", _initial_state(v, "initial_h", 1, hidden)], 2,
                    hidden_size=hidden, direction=direction, activations=[_activation(v, "activation", "tanh")])
    _outputs(v, y, y_h, None, 1, hidden, bool(v.scalar("output_sequence", False)), direction == "reverse")


@translates("gru")
def gru(v):
    b = v.builder
    direction = v.scalar("direction", "forward")
    if direction not in ("forward", "reverse"):
        raise Unsupported("direction '%s'" % direction)
    order = [2, 0, 1]  # ONNX [z, r, h] from MIL [r, o, z]
    ih = v.constant("weight_ih", required=True).array
    hh = v.constant("weight_hh", required=True).array
    hidden = hh.shape[1]
    bias = v.constant("bias")
    bias = np.zeros(3 * hidden, np.float32) if bias is None else bias.array.astype(np.float32)
    input_bias = v.constant("input_bias")
    input_bias = np.zeros(3 * hidden, np.float32) if input_bias is None else input_bias.array.astype(np.float32)
    r, o, z = (slice(i * hidden, (i + 1) * hidden) for i in range(3))
    wb = np.concatenate([bias[z] + input_bias[z], bias[r] + input_bias[r], input_bias[o]])
    rb = np.concatenate([np.zeros(2 * hidden, np.float32), bias[o]])
    dtype = ih.dtype
    y, y_h = b.node("GRU", [v.input("x"), b.initializer(_reorder(ih, 3, order)[None], "gru_w"),
                            b.initializer(_reorder(hh, 3, order)[None], "gru_r"),
                            b.initializer(np.concatenate([wb, rb]).astype(dtype)[None], "gru_b"), "",
                            _initial_state(v, "initial_h", 1, hidden)], 2,
                    hidden_size=hidden, direction=direction,
                    linear_before_reset=int(bool(v.scalar("reset_after", False))),
                    activations=[_activation(v, "recurrent_activation", "sigmoid"), _activation(v, "activation", "tanh")])
    _outputs(v, y, y_h, None, 1, hidden, bool(v.scalar("output_sequence", False)), direction == "reverse")


# LSTM with `clip`: the cell written out step by step in a Loop, in fp32 with the state kept in
# fp32, as our kernel computes it (src/ops/recurrent.cc): gates [i, f, o, z]; peephole terms on
# i and f from the previous cell state, on o from the new one; the new cell state clipped to
# [-clip, clip]. A "reverse" layer's sequence is in processing order (the Loop's own order), a
# bidirectional layer's backward half in input time (flipped).
_CELL_ACTIVATIONS = {"sigmoid": ("Sigmoid", {}), "tanh": ("Tanh", {}), "scaled_tanh": ("Tanh", {}),
                     "relu": ("Relu", {}), "linear": ("Identity", {}),
                     "hard_sigmoid": ("HardSigmoid", {"alpha": 0.2, "beta": 0.5}),
                     "sigmoid_hard": ("HardSigmoid", {"alpha": 0.2, "beta": 0.5})}


def _cell_activation(v, param, default):
    name = str(v.scalar(param, default)).lower()
    if name not in _CELL_ACTIVATIONS:
        raise Unsupported("%s '%s'" % (param, name))
    op, attributes = _CELL_ACTIVATIONS[name]
    return lambda b, x: b.node(op, [x], **attributes)


def _lstm_loop(v, direction):
    from onnx import TensorProto

    b = v.builder
    rec = _cell_activation(v, "recurrent_activation", "sigmoid")
    cell = _cell_activation(v, "cell_activation", "tanh")
    act = _cell_activation(v, "activation", "tanh")
    clip = float(v.scalar("clip")) if v.has("clip") else None
    suffixes = [""] if direction != "bidirectional" else ["", "_back"]
    x = b.node("Cast", [v.input("x")], to=TensorProto.FLOAT)
    h0 = b.node("Cast", [v.input("initial_h")], to=TensorProto.FLOAT)
    c0 = b.node("Cast", [v.input("initial_c")], to=TensorProto.FLOAT)
    steps = b.node("Gather", [b.node("Shape", [x]), b.const_int64(0, "time_axis")], axis=0)
    last = b.node("Sub", [steps, b.const_int64(1, "one")])
    sequences, finals_h, finals_c = [], [], []
    for d, suffix in enumerate(suffixes):
        ih = v.constant("weight_ih" + suffix, required=True).array.astype(np.float32)
        hh = v.constant("weight_hh" + suffix, required=True).array.astype(np.float32)
        hidden = hh.shape[1]
        bias = v.constant("bias" + suffix)
        bias = np.zeros(4 * hidden, np.float32) if bias is None else bias.array.astype(np.float32)
        peep = v.constant("peephole" + suffix)
        peep = None if peep is None else peep.array.astype(np.float32).reshape(3, hidden)
        w_t = b.initializer(np.ascontiguousarray(ih.T), "lstm_w_t")
        r_t = b.initializer(np.ascontiguousarray(hh.T), "lstm_r_t")
        bias_name = b.initializer(bias, "lstm_bias")
        peeps = [b.initializer(p, "lstm_peephole") for p in peep] if peep is not None else None
        width = b.const_int64([d * hidden], "start"), b.const_int64([(d + 1) * hidden], "end")
        axis1 = b.const_int64([1], "axis")
        h_start = b.node("Slice", [h0, width[0], width[1], axis1])
        c_start = b.node("Slice", [c0, width[0], width[1], axis1])
        back = direction == "reverse" or d == 1
        iteration, cond_in = b.fresh("step"), b.fresh("cond_in")
        h_in, c_in = b.fresh("h"), b.fresh("c")

        def body():
            t = b.node("Sub", [last, iteration]) if back else iteration
            x_t = b.node("Gather", [x, t], axis=0)
            gates = b.node("Add", [b.node("Add", [b.node("MatMul", [x_t, w_t]), b.node("MatMul", [h_in, r_t])]),
                                   bias_name])
            i, f, o, z = b.node("Split", [gates], 4, axis=1, num_outputs=4)
            if peeps:
                i = b.node("Add", [i, b.node("Mul", [peeps[0], c_in])])
                f = b.node("Add", [f, b.node("Mul", [peeps[1], c_in])])
            c_new = b.node("Add", [b.node("Mul", [rec(b, f), c_in]), b.node("Mul", [rec(b, i), cell(b, z)])])
            if clip is not None:
                c_new = b.node("Clip", [c_new, b.const_like(-clip, "float32", "clip_low"),
                                        b.const_like(clip, "float32", "clip_high")])
            if peeps:
                o = b.node("Add", [o, b.node("Mul", [peeps[2], c_new])])
            h_new = b.node("Mul", [rec(b, o), act(b, c_new)])
            keep_going = b.const_like(True, "bool", "true")
            return [(keep_going, TensorProto.BOOL), (h_new, TensorProto.FLOAT), (c_new, TensorProto.FLOAT),
                    (h_new, TensorProto.FLOAT)]

        graph = b.subgraph("lstm_step", [(iteration, TensorProto.INT64, []), (cond_in, TensorProto.BOOL, []),
                                         (h_in, TensorProto.FLOAT, ["batch", hidden]),
                                         (c_in, TensorProto.FLOAT, ["batch", hidden])], body)
        h_final, c_final, sequence = b.node("Loop", [steps, "", h_start, c_start], 3, body=graph)
        if d == 1:  # the backward half of a bidirectional layer, in input time
            sequence = b.node("Slice", [sequence, b.const_int64([-1], "starts"),
                                        b.const_int64([np.iinfo(np.int64).min], "ends"), b.const_int64([0], "axes"),
                                        b.const_int64([-1], "steps")])
        sequences.append(sequence)
        finals_h.append(h_final)
        finals_c.append(c_final)
    dtype = b.onnx_type(v.output_dtype())

    def joined(values, axis):
        return values[0] if len(values) == 1 else b.node("Concat", values, axis=axis)

    if bool(v.scalar("output_sequence", False)):
        out = joined(sequences, 2)
    else:
        out = b.node("Unsqueeze", [joined(finals_h, 1), b.const_int64([0], "axes")])
    b.node("Cast", [out], [v.output(0)], to=dtype)
    b.node("Cast", [joined(finals_h, 1)], [v.output(1)], to=dtype)
    if len(v.outputs) > 2:
        b.node("Cast", [joined(finals_c, 1)], [v.output(2)], to=dtype)
