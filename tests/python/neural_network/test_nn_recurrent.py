"""Recurrent neuralNetwork layers (simpleRecurrent, gru, uniDirectionalLSTM, biDirectionalLSTM)
built with coremltools' NeuralNetworkBuilder, run by coremlrt and compared with numpy
references written from the layer equations of the NeuralNetwork schema (every gate's input
clipped to [-50, 50]; the LSTM's cell state clipped to cellClipThreshold)."""

import itertools

import numpy as np
import pytest
from coremltools.models import datatypes
from coremltools.models.neural_network import NeuralNetworkBuilder
from coremltools.models.utils import save_spec
from coremltools.proto.FeatureTypes_pb2 import ArrayFeatureType

import coremlrt

RTOL, ATOL = 1e-5, 1e-5
S, B, I, H = 4, 2, 3, 5


def act(name, v):
    name = name.upper()
    if name == "SIGMOID":
        return 1.0 / (1.0 + np.exp(-v))
    if name in ("TANH", "SCALED_TANH"):  # recurrent layers use scaled tanh's alpha = beta = 1
        return np.tanh(v)
    if name == "SIGMOID_HARD":  # with alpha 0.2 and beta 0.5
        return np.clip(0.2 * v + 0.5, 0.0, 1.0)
    if name == "RELU":
        return np.maximum(v, 0.0)
    if name == "LINEAR":
        return v
    raise ValueError(name)


def clip50(v):
    return np.clip(v, -50.0, 50.0)


def steps(x, reverse):
    return range(len(x) - 1, -1, -1) if reverse else range(len(x))


def rnn_ref(x, W, R, b, activation, reverse, h):
    out = []
    for t in steps(x, reverse):
        h = act(activation, clip50(x[t] @ W.T + h @ R.T + b))
        out.append(h)
    return np.stack(out), h


def gru_ref(x, W, R, b, inner, activation, reverse, h):
    (Wz, Wr, Wo), (Rz, Rr, Ro), (bz, br, bo) = W, R, b
    out = []
    for t in steps(x, reverse):
        z = act(inner, clip50(x[t] @ Wz.T + h @ Rz.T + bz))
        r = act(inner, clip50(x[t] @ Wr.T + h @ Rr.T + br))
        o = act(activation, clip50(x[t] @ Wo.T + (h * r) @ Ro.T + bo))
        h = (1 - z) * o + z * h
        out.append(h)
    return np.stack(out), h


def lstm_ref(x, W, R, b, p, acts, clip, reverse, h, c):
    (Wi, Wf, Wo, Wz), (Ri, Rf, Ro, Rz), (bi, bf, bo, bz), (pi, pf, po) = W, R, b, p
    f_act, g_act, h_act = acts
    out = []
    for t in steps(x, reverse):
        i = act(f_act, clip50(x[t] @ Wi.T + h @ Ri.T + bi + pi * c))
        f = act(f_act, clip50(x[t] @ Wf.T + h @ Rf.T + bf + pf * c))
        z = act(g_act, clip50(x[t] @ Wz.T + h @ Rz.T + bz))
        c = np.clip(f * c + i * z, -clip, clip)
        o = act(f_act, clip50(x[t] @ Wo.T + h @ Ro.T + bo + po * c))
        h = o * act(h_act, c)
        out.append(h)
    return np.stack(out), h, c


def mats(rng, count, rows, cols, scale=1.0):
    return [(scale * rng.standard_normal((rows, cols))).astype(np.float32) for _ in range(count)]


def vecs(rng, count, scale=1.0):
    return [(scale * rng.standard_normal(H)).astype(np.float32) for _ in range(count)]


def exact_builder(inputs, outputs):
    """A builder whose arrays keep their own shapes (EXACT_ARRAY_MAPPING): x is given as the
    layer's rank-5 [Seq, Batch, C, 1, 1] blob itself."""
    return NeuralNetworkBuilder([(n, datatypes.Array(*s)) for n, s in inputs],
                                [(n, datatypes.Array(*s)) for n, s in outputs], disable_rank5_shape_mapping=True)


def save(builder, tmp_path):
    """Saves the model with fp32 arrays (datatypes.Array declares fp64 ones)."""
    description = builder.spec.description
    for feature in list(description.input) + list(description.output):
        feature.type.multiArrayType.dataType = ArrayFeatureType.FLOAT32
    path = str(tmp_path / "model.mlmodel")
    save_spec(builder.spec, path)
    return path


def run(builder, feeds, tmp_path):
    path = save(builder, tmp_path)
    return coremlrt.MLModel(path).predict(feeds)


def x5(x):
    return x.reshape(S, B, I, 1, 1)


def state_inputs(names):
    return [(n, (B, H)) for n in names]


def outputs(seq_output, states, channels=H):
    return [("y", (S if seq_output else 1, B, channels, 1, 1))] + [(n, (1, B, H, 1, 1)) for n in states]


@pytest.mark.parametrize("activation,reverse,seq_output,with_state,has_bias",
                         list(itertools.product(["TANH", "SIGMOID", "SIGMOID_HARD", "SCALED_TANH"], [False, True],
                                                [False, True], [False, True], [True]))
                         + [("TANH", False, True, True, False)])
def test_simple_recurrent(tmp_path, activation, reverse, seq_output, with_state, has_bias):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((S, B, I)).astype(np.float32)
    h0 = rng.standard_normal((B, H)).astype(np.float32) if with_state else np.zeros((B, H), np.float32)
    (W,), (R,), (b,) = mats(rng, 1, H, I), mats(rng, 1, H, H, 0.5), vecs(rng, 1)
    builder = exact_builder([("x", (S, B, I, 1, 1))] + state_inputs(["h0"] if with_state else []),
                            outputs(seq_output, ["h"]))
    builder.add_simple_rnn("rnn", R, W, b if has_bias else None, H, I, activation,
                           ["x", "h0"] if with_state else ["x"], ["y", "h"], output_all=seq_output, reverse_input=reverse)
    feeds = {"x": x5(x), **({"h0": h0} if with_state else {})}
    got = run(builder, feeds, tmp_path)
    ys, h = rnn_ref(x, W, R, b if has_bias else 0, activation, reverse, h0)
    y = ys if seq_output else ys[-1:]
    np.testing.assert_allclose(got["y"], y.reshape(-1, B, H, 1, 1), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got["h"], h.reshape(1, B, H, 1, 1), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("inner,activation,reverse,seq_output,with_state,has_bias",
                         [(a, g, r, s, w, True) for (a, g), r, s, w in itertools.product(
                             [("SIGMOID", "TANH"), ("SIGMOID_HARD", "TANH"), ("TANH", "SIGMOID"),
                              ("SIGMOID", "SCALED_TANH")], [False, True], [False, True], [False, True])]
                         + [("SIGMOID", "TANH", True, True, True, False)])
def test_gru(tmp_path, inner, activation, reverse, seq_output, with_state, has_bias):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((S, B, I)).astype(np.float32)
    h0 = rng.standard_normal((B, H)).astype(np.float32) if with_state else np.zeros((B, H), np.float32)
    W, R, b = mats(rng, 3, H, I), mats(rng, 3, H, H, 0.5), vecs(rng, 3)
    builder = exact_builder([("x", (S, B, I, 1, 1))] + state_inputs(["h0"] if with_state else []),
                            outputs(seq_output, ["h"]))
    builder.add_gru("gru", R, W, b if has_bias else None, H, I, ["x", "h0"] if with_state else ["x"], ["y", "h"],
                    activation=activation, inner_activation=inner, output_all=seq_output, reverse_input=reverse)
    feeds = {"x": x5(x), **({"h0": h0} if with_state else {})}
    got = run(builder, feeds, tmp_path)
    ys, h = gru_ref(x, W, R, b if has_bias else [0, 0, 0], inner, activation, reverse, h0)
    y = ys if seq_output else ys[-1:]
    np.testing.assert_allclose(got["y"], y.reshape(-1, B, H, 1, 1), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got["h"], h.reshape(1, B, H, 1, 1), rtol=RTOL, atol=ATOL)


LSTM_ACTIVATIONS = [
    ("SIGMOID", "TANH", "TANH"),
    ("SIGMOID_HARD", "TANH", "RELU"),
    ("TANH", "SIGMOID", "LINEAR"),
    ("SIGMOID", "SCALED_TANH", "SIGMOID_HARD"),
    ("SIGMOID", "TANH", "SCALED_TANH"),
]


def lstm_weights(rng):
    W, R, b, p = mats(rng, 4, H, I), mats(rng, 4, H, H, 0.5), vecs(rng, 4), vecs(rng, 3, 0.5)
    return W, R, b, p


@pytest.mark.parametrize("acts,peephole,has_bias,forget_bias,clip,reverse,seq_output,with_state",
                         [(a, True, True, False, 50000.0, False, True, True) for a in LSTM_ACTIVATIONS]
                         + [(LSTM_ACTIVATIONS[0], p, hb, fb, cl, r, s, w) for p, hb, fb, cl, r, s, w in itertools.product(
                             [False, True], [False, True], [False, True], [50000.0, 0.3], [False, True], [False, True],
                             [False, True]) if not (hb and fb and not p)])
def test_unidirectional_lstm(tmp_path, acts, peephole, has_bias, forget_bias, clip, reverse, seq_output, with_state):
    rng = np.random.default_rng(3)
    x = rng.standard_normal((S, B, I)).astype(np.float32)
    h0, c0 = (rng.standard_normal((2, B, H)).astype(np.float32) if with_state else np.zeros((2, B, H), np.float32))
    W, R, b, p = lstm_weights(rng)
    ins = ["x", "h0", "c0"] if with_state else ["x"]
    builder = exact_builder([("x", (S, B, I, 1, 1))] + state_inputs(ins[1:]), outputs(seq_output, ["h", "c"]))
    builder.add_unilstm("lstm", R, W, b if has_bias else None, H, I, ins, ["y", "h", "c"], inner_activation=acts[0],
                        cell_state_update_activation=acts[1], output_activation=acts[2],
                        peep=p if peephole else None, output_all=seq_output, forget_bias=forget_bias,
                        cell_clip_threshold=clip, reverse_input=reverse)
    got = run(builder, {"x": x5(x), **({"h0": h0, "c0": c0} if with_state else {})}, tmp_path)
    bias = [v.copy() for v in b] if has_bias else [np.zeros(H, np.float32) for _ in range(4)]
    if forget_bias:
        bias[1] += 1
    ys, h, c = lstm_ref(x, W, R, bias, p if peephole else [0, 0, 0], acts, clip, reverse, h0, c0)
    y = ys if seq_output else ys[-1:]
    np.testing.assert_allclose(got["y"], y.reshape(-1, B, H, 1, 1), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got["h"], h.reshape(1, B, H, 1, 1), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got["c"], c.reshape(1, B, H, 1, 1), rtol=RTOL, atol=ATOL)


def test_unidirectional_lstm_clip_bounds_the_cell_state(tmp_path):
    # Large weights push the cell state past the threshold at every step.
    rng = np.random.default_rng(4)
    x = rng.standard_normal((S, B, I)).astype(np.float32)
    W, R, b, p = lstm_weights(rng)
    W = [5 * w for w in W]
    builder = exact_builder([("x", (S, B, I, 1, 1))], outputs(True, ["h", "c"]))
    builder.add_unilstm("lstm", R, W, b, H, I, ["x"], ["y", "h", "c"], output_activation="LINEAR", output_all=True,
                        cell_clip_threshold=0.25)
    got = run(builder, {"x": x5(x)}, tmp_path)
    zeros = np.zeros((B, H), np.float32)
    ys, h, c = lstm_ref(x, W, R, b, [0, 0, 0], ("SIGMOID", "TANH", "LINEAR"), 0.25, False, zeros, zeros)
    assert np.abs(got["c"]).max() == pytest.approx(0.25)
    np.testing.assert_allclose(got["y"], ys.reshape(S, B, H, 1, 1), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got["c"], c.reshape(1, B, H, 1, 1), rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("seq_output,with_state,peephole", itertools.product([False, True], [False, True], [False, True]))
def test_bidirectional_lstm(tmp_path, seq_output, with_state, peephole):
    rng = np.random.default_rng(5)
    x = rng.standard_normal((S, B, I)).astype(np.float32)
    states = (rng.standard_normal((4, B, H)).astype(np.float32) if with_state else np.zeros((4, B, H), np.float32))
    Wf, Rf, bf, pf = lstm_weights(rng)
    Wb, Rb, bb, pb = lstm_weights(rng)
    state_names = ["hf", "cf", "hb", "cb"]
    ins = ["x"] + ([n + "0" for n in state_names] if with_state else [])
    builder = exact_builder([("x", (S, B, I, 1, 1))] + state_inputs(ins[1:]),
                            outputs(seq_output, state_names, channels=2 * H))
    builder.add_bidirlstm("bilstm", Rf, Wf, bf, Rb, Wb, bb, H, I, ins, ["y"] + state_names,
                          inner_activation="SIGMOID_HARD", output_activation="RELU",
                          peep=pf if peephole else None, peep_back=pb if peephole else None, output_all=seq_output,
                          cell_clip_threshold=2.0)
    feeds = {"x": x5(x), **({n + "0": states[k] for k, n in enumerate(state_names)} if with_state else {})}
    got = run(builder, feeds, tmp_path)
    acts = ("SIGMOID_HARD", "TANH", "RELU")
    zero_p = [0, 0, 0]
    yf, hf, cf = lstm_ref(x, Wf, Rf, bf, pf if peephole else zero_p, acts, 2.0, False, states[0], states[1])
    yb, hb, cb = lstm_ref(x, Wb, Rb, bb, pb if peephole else zero_p, acts, 2.0, True, states[2], states[3])
    # The backward half is aligned with input time: its step t is the state after reading x[t].
    y = np.concatenate([yf, yb[::-1]], axis=-1) if seq_output else np.concatenate([hf, hb], axis=-1)[None]
    np.testing.assert_allclose(got["y"], y.reshape(-1, B, 2 * H, 1, 1), rtol=RTOL, atol=ATOL)
    for name, value in zip(state_names, [hf, cf, hb, cb]):
        np.testing.assert_allclose(got[name], value.reshape(1, B, H, 1, 1), rtol=RTOL, atol=ATOL)


def test_rank5_layout_lstm_with_state_vectors(tmp_path):
    # The default builder frames [C] arrays as [1, 1, C, 1, 1] blobs: one step of one sequence,
    # states given and returned as [H] vectors.
    rng = np.random.default_rng(6)
    x = rng.standard_normal(I).astype(np.float32)
    h0, c0 = rng.standard_normal((2, H)).astype(np.float32)
    W, R, b, p = lstm_weights(rng)
    builder = NeuralNetworkBuilder([("x", datatypes.Array(I)), ("h0", datatypes.Array(H)), ("c0", datatypes.Array(H))],
                                   [("y", datatypes.Array(H)), ("h", datatypes.Array(H)), ("c", datatypes.Array(H))])
    builder.add_unilstm("lstm", R, W, b, H, I, ["x", "h0", "c0"], ["y", "h", "c"], peep=p)
    got = run(builder, {"x": x, "h0": h0, "c0": c0}, tmp_path)
    ys, h, c = lstm_ref(x[None, None], W, R, b, p, ("SIGMOID", "TANH", "TANH"), 50000.0, False, h0[None], c0[None])
    np.testing.assert_allclose(got["y"], ys[-1, 0], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got["h"], h[0], rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got["c"], c[0], rtol=RTOL, atol=ATOL)


@pytest.mark.parametrize("activation", ["RELU", "LINEAR"])
def test_simple_recurrent_with_an_unbounded_activation_clips_its_pre_activation(tmp_path, activation):
    """ReLU and linear see the layer's [-50, 50] pre-activation clip: inputs large enough that
    it bites at several steps, in both directions."""
    rng = np.random.default_rng(5)
    x = (rng.standard_normal((S, B, I)) * 40).astype(np.float32)
    (W,), (R,), (b,) = mats(rng, 1, H, I), mats(rng, 1, H, H, 0.5), vecs(rng, 1)
    builder = exact_builder([("x", (S, B, I, 1, 1))], outputs(True, ["h"]))
    builder.add_simple_rnn("rnn", R, W, b, H, I, activation, ["x"], ["y", "h"], output_all=True)
    got = run(builder, {"x": x5(x)}, tmp_path)
    ys, h = rnn_ref(x, W, R, b, activation, False, np.zeros((B, H), np.float32))
    assert (np.abs(ys) >= 50).sum() >= 4 and (np.abs(ys) < 50).sum() >= 4, "the clip must bite, and not everywhere"
    np.testing.assert_allclose(got["y"], ys.reshape(-1, B, H, 1, 1), rtol=RTOL, atol=ATOL)
    np.testing.assert_allclose(got["h"], h.reshape(1, B, H, 1, 1), rtol=RTOL, atol=ATOL)


def refusal(builder, tmp_path):
    path = save(builder, tmp_path)
    with pytest.raises(coremlrt.Error) as info:
        coremlrt.MLModel(path)
    return str(info.value)


@pytest.mark.parametrize("kind", ["gru", "lstm"])
def test_unbounded_gate_activation_is_refused(tmp_path, kind):
    # The layers clip gate inputs to [-50, 50]; the gru and lstm kernels do not compute it.
    rng = np.random.default_rng(7)
    builder = exact_builder([("x", (S, B, I, 1, 1))], outputs(True, []))
    if kind == "gru":
        builder.add_gru("layer", mats(rng, 3, H, H), mats(rng, 3, H, I), None, H, I, ["x"], ["y"], activation="LINEAR",
                        output_all=True)
    else:
        builder.add_unilstm("layer", mats(rng, 4, H, H), mats(rng, 4, H, I), None, H, I, ["x"], ["y"],
                            cell_state_update_activation="RELU", output_all=True)
    message = refusal(builder, tmp_path)
    assert "'layer'" in message and "[-50, 50]" in message


def test_coupled_input_and_forget_gate_is_refused(tmp_path):
    rng = np.random.default_rng(8)
    builder = exact_builder([("x", (S, B, I, 1, 1))], outputs(True, []))
    builder.add_unilstm("coupled", mats(rng, 4, H, H), mats(rng, 4, H, I), None, H, I, ["x"], ["y"], output_all=True,
                        coupled_input_forget_gate=True)
    assert "couples its input and forget gates" in refusal(builder, tmp_path)


def test_custom_layer_is_refused_by_class_name(tmp_path):
    builder = exact_builder([("x", (S, B, I, 1, 1))], [("y", (S, B, I, 1, 1))])
    layer = builder.spec.neuralNetwork.layers.add()
    layer.name = "mine"
    layer.input.append("x")
    layer.output.append("y")
    layer.custom.className = "MyAppSwishLayer"
    message = refusal(builder, tmp_path)
    assert "'mine'" in message and "MyAppSwishLayer" in message

