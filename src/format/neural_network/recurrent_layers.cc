// Recurrent layers: simpleRecurrent, gru, uniDirectionalLSTM and biDirectionalLSTM, each as the
// MIL op of the same recurrence (rnn, gru, lstm: src/ops/recurrent.cc) between the rank-5 blob
// framing. A blob [Seq, Batch, C, 1, 1] becomes the op's x [Seq, Batch, C]; the op's sequence
// [Seq or 1, Batch, H] and states [Batch, H] become [Seq or 1, Batch, H, 1, 1] and
// [1, Batch, H, 1, 1] blobs.
//
// Where the layer and the op agree, and why that is exact:
// * Gate order. The ops take stacked matrices [i, f, o, z] (lstm) and [r, o, z] (gru); the
//   layer's separate matrices are stacked in that order. Biases are the layer's bias vectors.
// * Direction. reverseInput reads the sequence from its end and emits the outputs in the order
//   they were computed, as the ops' "reverse" direction does (src/ops/recurrent.cc; coremltools'
//   own references flip the input and keep the output order: converters/mil/mil/ops/tests/
//   iOS14/test_recurrent.py, TestRNN).
// * Activations. A recurrent layer takes only the kind of each activation: coremltools'
//   NeuralNetworkBuilder writes sigmoidHard, scaledTanh and linear without parameters
//   (_set_recurrent_activation in models/neural_network/builder.py) and its op tests, which run
//   through that builder, expect 0.2x + 0.5 clamped, tanh, and x: the defaults the ops use.
//   Parameters other than none or those defaults are refused rather than guessed.
// * Pre-activation clipping. The layers clip every gate's pre-activation to [-50, 50] before its
//   activation (the layer equations of the NeuralNetwork schema); the ops do not. For sigmoid,
//   tanh, scaled tanh and hard sigmoid that changes no fp32 result (tanh(50) rounds to 1,
//   sigmoid(-50) is 2e-22, hard sigmoid is flat beyond 2.5), so those map onto the ops. ReLU and
//   linear differ beyond 50: simpleRecurrent passes the clip to the rnn kernel
//   (preactivation_clip, src/ops/recurrent.cc); gru and lstm gates with them are refused. The
//   LSTM's third activation acts on the cell state, which is clipped by cellClipThreshold (the
//   op's clip), not by 50.
#include <cmath>
#include <string>

#include "format/neural_network/layer_translator.h"
#include "nn_recurrent.pb.h"

namespace coremlrt::format::neural_network {
namespace {

struct Activation {
  std::string mil;   // the op's name for it
  bool saturating;   // bounded, so the layer's [-50, 50] pre-activation clip changes nothing
};

Activation recurrent_activation(const nn::ActivationParams& a, const char* role) {
  using P = nn::ActivationParams;
  auto defaults = [&](float alpha, float beta, float default_alpha, float default_beta, const char* name) {
    require((alpha == 0 && beta == 0) || (alpha == default_alpha && beta == default_beta), "its ", role, " activation ",
            name, " has alpha ", alpha, " and beta ", beta, "; recurrent layers compute ", name, " with alpha ",
            default_alpha, " and beta ", default_beta, " only");
  };
  switch (a.NonlinearityType_case()) {
    case P::kSigmoid: return {"sigmoid", true};
    case P::kTanh: return {"tanh", true};
    case P::kReLU: return {"relu", false};
    case P::kSigmoidHard:
      defaults(a.sigmoidhard().alpha(), a.sigmoidhard().beta(), 0.2f, 0.5f, "sigmoidHard");
      return {"hard_sigmoid", true};
    case P::kScaledTanh:
      defaults(a.scaledtanh().alpha(), a.scaledtanh().beta(), 1.0f, 1.0f, "scaledTanh");
      return {"scaled_tanh", true};
    case P::kLinear:
      defaults(a.linear().alpha(), a.linear().beta(), 1.0f, 0.0f, "linear");
      return {"linear", false};
    case P::NONLINEARITYTYPE_NOT_SET: refuse("its ", role, " activation is not set");
    default:
      refuse("its ", role, " activation is not one of sigmoid, tanh, ReLU, sigmoidHard, scaledTanh, linear",
             " (the activations recurrent layers take)");
  }
}

// An activation applied to a clipped pre-activation (see the top of this file).
std::string gate_activation(const nn::ActivationParams& a, const char* role) {
  const Activation act = recurrent_activation(a, role);
  require(act.saturating, "its ", role, " activation is ", act.mil,
          "; the layer clips that gate's input to [-50, 50], which this build computes for bounded activations",
          " (sigmoid, tanh, sigmoidHard, scaledTanh) only");
  return act.mil;
}

void append(std::vector<float>& out, const nn::WeightParams& weights, uint64_t count, const char* what) {
  const std::vector<float> values = read_weights(weights, count, what);
  out.insert(out.end(), values.begin(), values.end());
}

struct Sequence {
  Value x;        // [Seq, Batch, I]
  int64_t seq;    // -1 when unknown
  int64_t batch;  // -1 when unknown
};

// Input 0 as the ops' x: a rank-5 [Seq, Batch, inputVectorSize, 1, 1] blob without its last axes.
Sequence sequence_input(LayerContext& layer, uint64_t input_size) {
  require(input_size > 0, "has inputVectorSize 0");
  const Value& x = layer.input(0);
  const auto& d = x.type.dims;
  require(x.type.rank == 5, "input '", layer.layer().input(0), "' is ", x.type.str(),
          "; recurrent layers read rank-5 [Seq, Batch, C, 1, 1] blobs");
  require(x.type.dtype == DType::Float32, "input '", layer.layer().input(0), "' is ", x.type.str(), ", not fp32");
  require((d[2] < 0 || static_cast<uint64_t>(d[2]) == input_size) && d[3] <= 1 && d[4] <= 1, "input '",
          layer.layer().input(0), "' is ", x.type.str(), "; the layer reads [Seq, Batch, ", input_size, ", 1, 1]");
  const ir::ValueType type = tensor_type(DType::Float32, {d[0], d[1], static_cast<int64_t>(input_size)});
  Value squeezed = layer.emit1("squeeze", {{"x", {x}}, {"axes", {int_vector({3, 4})}}}, type);
  return {squeezed, d[0], d[1]};
}

// The state a layer starts from: input `index` read as [Batch, H] (the layer reads the blob's
// values in order, whatever its framing: [1, Batch, H, 1, 1] as the schema describes it, or
// [Batch, H, 1, 1, 1] as coremltools' MIL-to-layers conversion of rnn frames it in
// converters/mil/backend/nn/op_mapping.py), or zeros when the layer has no such input.
Value initial_state(LayerContext& layer, int index, const Sequence& s, int64_t hidden, const char* what) {
  if (index < layer.input_count()) {
    const Value& v = layer.input(index);
    require(v.type.dtype == DType::Float32, "its initial ", what, " '", layer.layer().input(index), "' is not fp32");
    int64_t count = 1;
    for (int64_t dim : v.type.dims) count = dim < 0 || count < 0 ? -1 : count * dim;
    require(count < 0 || s.batch < 0 || count == s.batch * hidden, "its initial ", what, " '", layer.layer().input(index),
            "' is ", v.type.str(), "; it needs Batch x ", hidden, " = ", s.batch * hidden, " values");
    return layer.emit1("reshape", {{"x", {v}}, {"shape", {int_vector({s.batch < 0 ? -1 : s.batch, hidden})}}},
                       tensor_type(DType::Float32, {s.batch, hidden}));
  }
  require(s.batch >= 0, "has no initial ", what, " input and its batch size is not known before prediction");
  return float_tensor(std::vector<float>(static_cast<size_t>(s.batch * hidden), 0.0f), {s.batch, hidden});
}

ir::ValueType sequence_type(const Sequence& s, bool sequence_output, int64_t hidden) {
  return tensor_type(DType::Float32, {sequence_output ? s.seq : 1, s.batch, hidden});
}
ir::ValueType state_type(const Sequence& s, int64_t hidden) { return tensor_type(DType::Float32, {s.batch, hidden}); }

// [Seq or 1, Batch, H] -> output blob [Seq or 1, Batch, H, 1, 1].
void set_sequence_output(LayerContext& layer, int index, const Value& y) {
  const auto& d = y.type.dims;
  layer.set_output(index, layer.emit1("expand_dims", {{"x", {y}}, {"axes", {int_vector({3, 4})}}},
                                      tensor_type(DType::Float32, {d[0], d[1], d[2], 1, 1})));
}

// [Batch, H] -> output blob [1, Batch, H, 1, 1].
void set_state_output(LayerContext& layer, int index, const Value& state) {
  const auto& d = state.type.dims;
  layer.set_output(index, layer.emit1("expand_dims", {{"x", {state}}, {"axes", {int_vector({0, 3, 4})}}},
                                      tensor_type(DType::Float32, {1, d[0], d[1], 1, 1})));
}

int64_t hidden_size(uint64_t output_size) {
  require(output_size > 0, "has outputVectorSize 0");
  return static_cast<int64_t>(output_size);
}

void simple_recurrent(LayerContext& layer) {
  require(layer.input_count() >= 1 && layer.input_count() <= 2 && layer.output_count() >= 1 && layer.output_count() <= 2,
          "has ", layer.input_count(), " inputs and ", layer.output_count(), " outputs; simpleRecurrent takes x and an",
          " optional initial state, and gives the output and an optional final state");
  const auto params = layer.parse_params<nn::SimpleRecurrentLayerParams>();
  const uint64_t in = params.inputvectorsize();
  const int64_t hidden = hidden_size(params.outputvectorsize());
  const Sequence s = sequence_input(layer, in);
  const uint64_t H = static_cast<uint64_t>(hidden);
  const Activation activation = recurrent_activation(params.activation(), "simpleRecurrent");
  OpInputs inputs{
      {"x", {s.x}},
      {"initial_h", {initial_state(layer, 1, s, hidden, "state")}},
      {"weight_ih", {float_tensor(read_weights(params.weightmatrix(), H * in, "weightMatrix"), {hidden, static_cast<int64_t>(in)})}},
      {"weight_hh", {float_tensor(read_weights(params.recursionmatrix(), H * H, "recursionMatrix"), {hidden, hidden})}},
      {"direction", {string_scalar(params.reverseinput() ? "reverse" : "forward")}},
      {"output_sequence", {bool_scalar(params.sequenceoutput())}},
      {"activation", {string_scalar(activation.mil)}}};
  if (!activation.saturating) inputs.push_back({"preactivation_clip", {float_scalar(50.0f)}});
  if (params.hasbiasvector())
    inputs.push_back({"bias", {float_tensor(read_weights(params.biasvector(), H, "biasVector"), {hidden})}});
  const auto out = layer.emit("rnn", inputs, {sequence_type(s, params.sequenceoutput(), hidden), state_type(s, hidden)});
  set_sequence_output(layer, 0, out[0]);
  if (layer.output_count() > 1) set_state_output(layer, 1, out[1]);
}

void gru(LayerContext& layer) {
  require(layer.input_count() >= 1 && layer.input_count() <= 2 && layer.output_count() >= 1 && layer.output_count() <= 2,
          "has ", layer.input_count(), " inputs and ", layer.output_count(), " outputs; gru takes x and an optional",
          " initial state, and gives the output and an optional final state");
  const auto params = layer.parse_params<nn::GRULayerParams>();
  require(params.activations_size() == 2, "has ", params.activations_size(), " activations; gru takes 2");
  const uint64_t in = params.inputvectorsize();
  const int64_t hidden = hidden_size(params.outputvectorsize());
  const Sequence s = sequence_input(layer, in);
  const uint64_t H = static_cast<uint64_t>(hidden);
  // The op's gate order is [r, o, z] (reset, output, update).
  std::vector<float> w_ih, w_hh, bias;
  append(w_ih, params.resetgateweightmatrix(), H * in, "resetGateWeightMatrix");
  append(w_ih, params.outputgateweightmatrix(), H * in, "outputGateWeightMatrix");
  append(w_ih, params.updategateweightmatrix(), H * in, "updateGateWeightMatrix");
  append(w_hh, params.resetgaterecursionmatrix(), H * H, "resetGateRecursionMatrix");
  append(w_hh, params.outputgaterecursionmatrix(), H * H, "outputGateRecursionMatrix");
  append(w_hh, params.updategaterecursionmatrix(), H * H, "updateGateRecursionMatrix");
  OpInputs inputs{{"x", {s.x}},
                  {"initial_h", {initial_state(layer, 1, s, hidden, "state")}},
                  {"weight_ih", {float_tensor(std::move(w_ih), {3 * hidden, static_cast<int64_t>(in)})}},
                  {"weight_hh", {float_tensor(std::move(w_hh), {3 * hidden, hidden})}},
                  {"direction", {string_scalar(params.reverseinput() ? "reverse" : "forward")}},
                  {"output_sequence", {bool_scalar(params.sequenceoutput())}},
                  {"recurrent_activation", {string_scalar(gate_activation(params.activations(0), "update and reset gate"))}},
                  {"activation", {string_scalar(gate_activation(params.activations(1), "output gate"))}}};
  if (params.hasbiasvectors()) {
    append(bias, params.resetgatebiasvector(), H, "resetGateBiasVector");
    append(bias, params.outputgatebiasvector(), H, "outputGateBiasVector");
    append(bias, params.updategatebiasvector(), H, "updateGateBiasVector");
    inputs.push_back({"bias", {float_tensor(std::move(bias), {3 * hidden})}});
  }
  const auto out = layer.emit("gru", inputs, {sequence_type(s, params.sequenceoutput(), hidden), state_type(s, hidden)});
  set_sequence_output(layer, 0, out[0]);
  if (layer.output_count() > 1) set_state_output(layer, 1, out[1]);
}

// One direction of an LSTM as an lstm op; returns its sequence (or final h), final h, final c.
std::vector<Value> lstm_direction(LayerContext& layer, const Sequence& s, uint64_t in, int64_t hidden,
                                  const nn::LSTMParams& params, const nn::LSTMWeightParams& w,
                                  const google::protobuf::RepeatedPtrField<nn::ActivationParams>& activations,
                                  bool reverse, const Value& h0, const Value& c0) {
  require(activations.size() == 3, "has ", activations.size(), " activations per direction; an LSTM takes 3");
  require(!params.coupledinputandforgetgate(), "couples its input and forget gates, which this build does not compute");
  const float clip = params.cellclipthreshold();
  require(clip > 0 && std::isfinite(clip), "has cellClipThreshold ", clip, "; this build needs a positive finite one");
  const uint64_t H = static_cast<uint64_t>(hidden);
  // The op's gate order is [i, f, o, z]; its peepholes are [i, f, o].
  std::vector<float> w_ih, w_hh;
  append(w_ih, w.inputgateweightmatrix(), H * in, "inputGateWeightMatrix");
  append(w_ih, w.forgetgateweightmatrix(), H * in, "forgetGateWeightMatrix");
  append(w_ih, w.outputgateweightmatrix(), H * in, "outputGateWeightMatrix");
  append(w_ih, w.blockinputweightmatrix(), H * in, "blockInputWeightMatrix");
  append(w_hh, w.inputgaterecursionmatrix(), H * H, "inputGateRecursionMatrix");
  append(w_hh, w.forgetgaterecursionmatrix(), H * H, "forgetGateRecursionMatrix");
  append(w_hh, w.outputgaterecursionmatrix(), H * H, "outputGateRecursionMatrix");
  append(w_hh, w.blockinputrecursionmatrix(), H * H, "blockInputRecursionMatrix");
  OpInputs inputs{{"x", {s.x}},
                  {"initial_h", {h0}},
                  {"initial_c", {c0}},
                  {"weight_ih", {float_tensor(std::move(w_ih), {4 * hidden, static_cast<int64_t>(in)})}},
                  {"weight_hh", {float_tensor(std::move(w_hh), {4 * hidden, hidden})}},
                  {"direction", {string_scalar(reverse ? "reverse" : "forward")}},
                  {"output_sequence", {bool_scalar(params.sequenceoutput())}},
                  {"recurrent_activation", {string_scalar(gate_activation(activations[0], "input, forget and output gate"))}},
                  {"cell_activation", {string_scalar(gate_activation(activations[1], "block input"))}},
                  {"activation", {string_scalar(recurrent_activation(activations[2], "cell output").mil)}},
                  {"clip", {float_scalar(clip)}}};
  if (params.hasbiasvectors() || params.forgetbias()) {
    std::vector<float> bias;
    if (params.hasbiasvectors()) {
      append(bias, w.inputgatebiasvector(), H, "inputGateBiasVector");
      append(bias, w.forgetgatebiasvector(), H, "forgetGateBiasVector");
      append(bias, w.outputgatebiasvector(), H, "outputGateBiasVector");
      append(bias, w.blockinputbiasvector(), H, "blockInputBiasVector");
    } else {
      bias.assign(4 * H, 0.0f);
    }
    // forgetBias adds 1 to every forget-gate bias (the LSTMParams field's meaning).
    if (params.forgetbias())
      for (uint64_t u = H; u < 2 * H; ++u) bias[u] += 1.0f;
    inputs.push_back({"bias", {float_tensor(std::move(bias), {4 * hidden})}});
  }
  if (params.haspeepholevectors()) {
    std::vector<float> peephole;
    append(peephole, w.inputgatepeepholevector(), H, "inputGatePeepholeVector");
    append(peephole, w.forgetgatepeepholevector(), H, "forgetGatePeepholeVector");
    append(peephole, w.outputgatepeepholevector(), H, "outputGatePeepholeVector");
    inputs.push_back({"peephole", {float_tensor(std::move(peephole), {3 * hidden})}});
  }
  return layer.emit("lstm", inputs,
                    {sequence_type(s, params.sequenceoutput(), hidden), state_type(s, hidden), state_type(s, hidden)});
}

void unidirectional_lstm(LayerContext& layer) {
  require((layer.input_count() == 1 || layer.input_count() == 3) && layer.output_count() >= 1 && layer.output_count() <= 3,
          "has ", layer.input_count(), " inputs and ", layer.output_count(), " outputs; uniDirectionalLSTM takes x",
          " (and optionally the initial h and c), and gives the output (and optionally the final h and c)");
  const auto params = layer.parse_params<nn::UniDirectionalLSTMLayerParams>();
  const uint64_t in = params.inputvectorsize();
  const int64_t hidden = hidden_size(params.outputvectorsize());
  const Sequence s = sequence_input(layer, in);
  const Value h0 = initial_state(layer, 1, s, hidden, "h");
  const Value c0 = initial_state(layer, 2, s, hidden, "c");
  const auto out = lstm_direction(layer, s, in, hidden, params.params(), params.weightparams(), params.activations(),
                                  params.reverseinput(), h0, c0);
  set_sequence_output(layer, 0, out[0]);
  for (int i = 1; i < layer.output_count(); ++i) set_state_output(layer, i, out[i]);
}

// Two lstm ops, forward and reverse. The output puts the forward half first in the channel
// axis; with sequenceOutput the backward half is aligned with input time (its step t holds the
// state after reading x[t]), so the reverse op's sequence, which is in processing order, is
// reversed back (coremltools' bidirectional reference, test_recurrent_stress_tests.py, and the
// lstm op's own bidirectional layout agree on this).
void bidirectional_lstm(LayerContext& layer) {
  require((layer.input_count() == 1 || layer.input_count() == 5) && layer.output_count() >= 1 && layer.output_count() <= 5,
          "has ", layer.input_count(), " inputs and ", layer.output_count(), " outputs; biDirectionalLSTM takes x",
          " (and optionally the initial h and c of each direction), and gives the output (and optionally the final",
          " h and c of each direction)");
  const auto params = layer.parse_params<nn::BiDirectionalLSTMLayerParams>();
  require(params.weightparams_size() == 2, "has ", params.weightparams_size(), " sets of weights; it takes 2");
  const uint64_t in = params.inputvectorsize();
  const int64_t hidden = hidden_size(params.outputvectorsize());
  const Sequence s = sequence_input(layer, in);
  const auto forward = lstm_direction(layer, s, in, hidden, params.params(), params.weightparams(0),
                                      params.activationsforwardlstm(), false, initial_state(layer, 1, s, hidden, "h"),
                                      initial_state(layer, 2, s, hidden, "c"));
  const auto backward = lstm_direction(layer, s, in, hidden, params.params(), params.weightparams(1),
                                       params.activationsbackwardlstm(), true, initial_state(layer, 3, s, hidden, "h"),
                                       initial_state(layer, 4, s, hidden, "c"));
  Value back = backward[0];
  if (params.params().sequenceoutput())
    back = layer.emit1("reverse", {{"x", {back}}, {"axes", {int_vector({0})}}}, back.type);
  ir::ValueType both = forward[0].type;
  both.dims[2] = 2 * hidden;
  const Value y = layer.emit1("concat", {{"values", {forward[0], back}}, {"axis", {int_scalar(2)}},
                                         {"interleave", {bool_scalar(false)}}}, both);
  set_sequence_output(layer, 0, y);
  const Value states[] = {forward[1], forward[2], backward[1], backward[2]};
  for (int i = 1; i < layer.output_count(); ++i) set_state_output(layer, i, states[i - 1]);
}

}  // namespace

void register_recurrent_layers(LayerTable& table) {
  table[400] = simple_recurrent;
  table[410] = gru;
  table[420] = unidirectional_lstm;
  table[430] = bidirectional_lstm;
}

}  // namespace coremlrt::format::neural_network
