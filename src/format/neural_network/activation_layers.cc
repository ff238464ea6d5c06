// Element-wise nonlinearities: activation (every nonlinearity without per-channel weights)
// and gelu, each one op of the same meaning.
#include <optional>

#include "format/neural_network/layer_translator.h"
#include "nn_activation.pb.h"

namespace coremlrt::format::neural_network {
namespace {

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
    case P::kPReLU:
    case P::kParametricSoftplus:
      refuse("per-channel activations (PReLU, parametricSoftplus) are not supported by this build");
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

}  // namespace

void register_activation_layers(LayerTable& table) {
  table[130] = activation;
  table[795] = gelu;
}

}  // namespace coremlrt::format::neural_network
