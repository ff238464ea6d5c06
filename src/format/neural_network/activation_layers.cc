// Element-wise nonlinearities: activation, gelu and clampedReLU, each one op of the same
// meaning.
#include <optional>

#include "format/neural_network/layer_translator.h"
#include "format/neural_network/spatial_frame.h"
#include "nn_activation.pb.h"

namespace coremlrt::format::neural_network {
namespace {

// PReLU and parametricSoftplus: one parameter value per channel (axis -3), or one for all.
// Their ops (src/ops/activation.cc) take [N, C, H, W] with a [C] parameter, so the input is
// folded by spatial_frame.h and a single value is repeated over the channels.
void per_channel(LayerContext& layer, const char* op,
                 const std::vector<std::pair<const char*, const nn::WeightParams*>>& weights) {
  SpatialFrame frame(layer, layer.input(0), 2);
  const int64_t channels = frame.folded_dims()[1];
  OpInputs inputs{{"x", {frame.folded()}}};
  for (const auto& [name, w] : weights) {
    const size_t stored = w->floatvalue_size() > 0 ? static_cast<size_t>(w->floatvalue_size())
                                                    : w->float16value().size() / sizeof(half);
    std::vector<float> values;
    if (stored == 1 && channels != 1) {
      require(channels > 0, "the input's channel count is unknown; a single ", name, " value needs it");
      values.assign(static_cast<size_t>(channels), read_weights(*w, 1, name).front());
    } else {
      require(channels < 0 || static_cast<int64_t>(stored) == channels, name, " has ", stored,
              " values for an input of ", channels, " channels");
      values = read_weights(*w, stored, name);
    }
    inputs.push_back({name, {float_tensor(values, {static_cast<int64_t>(values.size())})}});
  }
  layer.set_output(0, frame.unfold(layer.emit1(op, inputs, frame.folded().type)));
}

void activation(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::ActivationParams>();
  const Value& x = layer.input(0);
  auto set = [&](const char* type, std::optional<float> alpha = {}, std::optional<float> beta = {}) {
    OpInputs inputs{{"x", {x}}};
    if (alpha) inputs.push_back({"alpha", {float_scalar(*alpha)}});
    if (beta) inputs.push_back({"beta", {float_scalar(*beta)}});
    layer.set_output(0, layer.emit1(type, inputs, x.type));
  };
  using P = nn::ActivationParams;
  switch (params.NonlinearityType_case()) {
    case P::kReLU: return set("relu");
    case P::kTanh: return set("tanh");
    case P::kSigmoid: return set("sigmoid");
    case P::kSoftsign: return set("softsign");
    case P::kSoftplus: return set("softplus");
    case P::kLeakyReLU: return set("leaky_relu", params.leakyrelu().alpha());
    case P::kThresholdedReLU: return set("thresholded_relu", params.thresholdedrelu().alpha());
    case P::kELU: return set("elu", params.elu().alpha());
    case P::kLinear: return set("linear_activation", params.linear().alpha(), params.linear().beta());
    case P::kScaledTanh: return set("scaled_tanh", params.scaledtanh().alpha(), params.scaledtanh().beta());
    case P::kSigmoidHard: return set("sigmoid_hard", params.sigmoidhard().alpha(), params.sigmoidhard().beta());
    case P::kPReLU: return per_channel(layer, "prelu", {{"alpha", &params.prelu().alpha()}});
    case P::kParametricSoftplus:
      return per_channel(layer, "softplus_parametric",
                         {{"alpha", &params.parametricsoftplus().alpha()}, {"beta", &params.parametricsoftplus().beta()}});
    default: refuse("activation has no nonlinearity this build knows");
  }
}

void gelu(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::GeluLayerParams>();
  const char* mode = nullptr;
  switch (params.mode()) {
    case nn::GeluLayerParams::EXACT: mode = "EXACT"; break;
    case nn::GeluLayerParams::TANH_APPROXIMATION: mode = "TANH_APPROXIMATION"; break;
    case nn::GeluLayerParams::SIGMOID_APPROXIMATION: mode = "SIGMOID_APPROXIMATION"; break;
    default: refuse("unknown gelu mode ", static_cast<int>(params.mode()));
  }
  const Value& x = layer.input(0);
  layer.set_output(0, layer.emit1("gelu", {{"x", {x}}, {"mode", {string_scalar(mode)}}}, x.type));
}

void clamped_relu(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::ClampedReLULayerParams>();
  const Value& x = layer.input(0);
  layer.set_output(0, layer.emit1("clamped_relu", {{"x", {x}}, {"alpha", {float_scalar(params.alpha())}},
                                                   {"beta", {float_scalar(params.beta())}}},
                                  x.type));
}

}  // namespace

void register_activation_layers(LayerTable& table) {
  table[130] = activation;
  table[795] = gelu;
  table[1460] = clamped_relu;
}

}  // namespace coremlrt::format::neural_network
