// Every layer kind this build translates, by its field number in NeuralNetworkLayer. Each
// family file adds its own kinds; a kind missing here is refused at load by name.
#include "format/neural_network/layer_translator.h"

namespace coremlrt::format::neural_network {

const LayerTable& layer_table() {
  static const LayerTable table = [] {
    LayerTable out;
    register_activation_layers(out);
    register_linear_layers(out);
    register_recurrent_layers(out);
    register_softmax_layers(out);
    register_conv_layers(out);
    register_pooling_layers(out);
    register_normalization_layers(out);
    register_resize_layers(out);
    register_shape_layers(out);
    register_shape_nd_layers(out);
    register_reverse_layers(out);
    register_gather_layers(out);
    register_fill_layers(out);
    register_elementwise_layers(out);
    register_reduction_layers(out);
    register_matrix_layers(out);
    register_control_flow_layers(out);
    register_random_layers(out);
    register_detection_layers(out);
    return out;
  }();
  return table;
}

const LayerTable& refusal_table() {
  static const LayerTable table = [] {
    LayerTable out;
    register_control_flow_refusals(out);
    return out;
  }();
  return table;
}

}  // namespace coremlrt::format::neural_network
