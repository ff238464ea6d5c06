// Softmax: the legacy layer (along axis -3, the channel axis of [.., C, H, W] blobs) and
// softmaxND (any axis).
#include "format/neural_network/layer_translator.h"
#include "nn_softmax.pb.h"

namespace coremlrt::format::neural_network {
namespace {

void softmax_along(LayerContext& layer, int64_t axis, int64_t min_rank) {
  const Value& x = layer.input(0);
  require(x.type.rank >= min_rank && axis >= -x.type.rank && axis < x.type.rank, "axis ", axis,
          " does not fit an input of rank ", x.type.rank);
  layer.set_output(0, layer.emit1("softmax", {{"x", {x}}, {"axis", {int_scalar(static_cast<int32_t>(axis))}}}, x.type));
}

void softmax(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  layer.parse_params<nn::SoftmaxLayerParams>();
  softmax_along(layer, -3, 3);
}

void softmax_nd(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  softmax_along(layer, layer.parse_params<nn::SoftmaxNDLayerParams>().axis(), 1);
}

}  // namespace

void register_softmax_layers(LayerTable& table) {
  table[175] = softmax;
  table[950] = softmax_nd;
}

}  // namespace coremlrt::format::neural_network
