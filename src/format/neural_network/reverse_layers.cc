// The reversing layers of the exact-rank layout (NeuralNetwork.proto): reverse flips the axes
// its reverseDim flags name (reverse op); reverseSeq reverses, along sequenceAxis, the first
// lengths[b] entries of each slice b of batchAxis and leaves the rest (reverse_sequence op;
// both kernels in src/ops/shape.cc).
#include "format/neural_network/shape_values.h"
#include "nn_shape_nd.pb.h"

namespace coremlrt::format::neural_network {
namespace {

// reverseDim holds one flag per axis of the input.
void reverse(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::ReverseLayerParams>();
  const Value& x = ranked_input(layer, 0, 1);
  require(params.reversedim_size() == x.type.rank, "reverseDim has ", params.reversedim_size(),
          " entries for an input of rank ", x.type.rank);
  std::vector<int64_t> axes;
  for (int64_t i = 0; i < x.type.rank; ++i)
    if (params.reversedim(static_cast<int>(i))) axes.push_back(i);
  if (axes.empty()) {
    layer.set_output(0, x);
    return;
  }
  layer.set_output(0, layer.emit1("reverse", {{"x", {x}}, {"axes", {int_vector(axes)}}}, x.type));
}

// Inputs: x (rank >= 2) and lengths (one entry per slice of batchAxis; fp32 whole numbers).
// Axes may be negative (counted from the end); the two must differ.
void reverse_seq(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(2, 2, 1);
  const auto params = layer.parse_params<nn::ReverseSeqLayerParams>();
  const Value& x = ranked_input(layer, 0, 2);
  const int64_t batch_axis = positive_axis(params.batchaxis(), x.type.rank, "batchAxis");
  const int64_t seq_axis = positive_axis(params.sequenceaxis(), x.type.rank, "sequenceAxis");
  require(batch_axis != seq_axis, "batchAxis and sequenceAxis are both axis ", batch_axis);
  const Value lengths = int_vector_input(layer, 1, x.type.dims[batch_axis], "lengths");
  layer.set_output(0, layer.emit1("reverse_sequence",
                                  {{"x", {x}}, {"lengths", {lengths}},
                                   {"seq_axis", {int_scalar(static_cast<int32_t>(seq_axis))}},
                                   {"batch_axis", {int_scalar(static_cast<int32_t>(batch_axis))}}},
                                  x.type));
}

}  // namespace

void register_reverse_layers(LayerTable& table) {
  table[960] = reverse;
  table[965] = reverse_seq;
}

}  // namespace coremlrt::format::neural_network
