// The NonMaximumSuppression layer (NeuralNetworkLayer field 1400): boxes [B, N, 4] (centre x,
// centre y, width, height) and scores [B, N, C] in; out the kept boxes [B, maxBoxes, 4], their
// scores [B, maxBoxes, C], their indices [B, maxBoxes] (-1 past the kept ones) and how many
// were kept [B]. It is the ML program op non_maximum_suppression in its iOS15 form
// (src/ops/detection.cc), which coremltools also lowers to this layer: one kernel serves both.
// Inputs 3, 4 and 5, when the layer has them, replace iouThreshold, scoreThreshold and maxBoxes
// at run time (with a run-time maxBoxes the outputs' second axis is known only then). Indices
// and counts leave as the fp32 blobs the layer graph carries.
#include <cstdint>
#include <limits>

#include "format/neural_network/layer_translator.h"
#include "nn_detection.pb.h"

namespace coremlrt::format::neural_network {
namespace {

void non_maximum_suppression(LayerContext& layer) {
  layer.expect_io(2, 5, 4);
  const auto params = layer.parse_params<nn::NonMaximumSuppressionLayerParams>();
  const Value& boxes = layer.input(0);
  const Value& scores = layer.input(1);
  require(boxes.type.rank == 3 && scores.type.rank == 3, "boxes (rank ", boxes.type.rank, ") and scores (rank ",
          scores.type.rank, ") must be [B, N, 4] and [B, N, C]");
  require(boxes.type.dims[2] < 0 || boxes.type.dims[2] == 4, "boxes hold ", boxes.type.dims[2],
          " numbers per box; 4 expected");
  const bool dynamic_max = layer.input_count() >= 5;
  require(params.maxboxes() <= static_cast<uint64_t>(std::numeric_limits<int32_t>::max()), "maxBoxes ",
          params.maxboxes(), " does not fit 32 bits");
  const int64_t max_boxes = dynamic_max ? -1 : static_cast<int64_t>(params.maxboxes());
  auto input_or = [&](int index, const Value& fallback) {
    return layer.input_count() > index ? layer.input(index) : fallback;
  };
  const int64_t batch = boxes.type.dims[0], classes = scores.type.dims[2];
  const std::vector<Value> out = layer.emit(
      "non_maximum_suppression",
      {{"boxes", {boxes}},
       {"scores", {scores}},
       {"iou_threshold", {input_or(2, float_scalar(params.iouthreshold()))}},
       {"score_threshold", {input_or(3, float_scalar(params.scorethreshold()))}},
       {"max_boxes", {input_or(4, int_scalar(static_cast<int32_t>(params.maxboxes())))}},
       {"per_class_suppression", {bool_scalar(params.perclasssuppression())}}},
      {tensor_type(boxes.type.dtype, {batch, max_boxes, 4}),
       tensor_type(scores.type.dtype, {batch, max_boxes, classes}), tensor_type(DType::Int32, {batch, max_boxes}),
       tensor_type(DType::Int32, {batch})});
  layer.set_output(0, out[0]);
  layer.set_output(1, out[1]);
  layer.set_output(2, as_float_blob(layer, out[2]));
  layer.set_output(3, as_float_blob(layer, out[3]));
}

}  // namespace

void register_detection_layers(LayerTable& table) { table[1400] = non_maximum_suppression; }

}  // namespace coremlrt::format::neural_network
