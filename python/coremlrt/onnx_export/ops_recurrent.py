"""lstm and rnn as ONNX LSTM and RNN.

Layout facts (src/ops/recurrent.cc): MIL's LSTM gate blocks are [i, f, o, z], ONNX's are
[i, o, f, c]; MIL's `bias` is the sum of the input and hidden biases, ONNX takes both (the
hidden half is written as zeros); MIL's peephole is [i, f, o], ONNX's P is [i, o, f]. A
bidirectional layer aligns its backward half with input time in both; a "reverse" layer emits
its sequence in processing order in Core ML and in input time in ONNX, so its sequence is
reversed along time after the ONNX op. GRU: MIL's blocks are [r, o, z] (o the candidate),
ONNX's [z, r, h]; `input_bias` and the r and z halves of `bias` act together on the input side,
the o half of `bias` is ONNX's Rbh, and iOS18's reset_after is ONNX's linear_before_reset.
Not exported: LSTM `clip` (Core ML clips the cell state, ONNX clips the gates' inputs).
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
        raise Unsupported("clip (Core ML clips the cell state; ONNX clips the gates' inputs)")
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
