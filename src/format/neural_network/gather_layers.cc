// The indexing layers (NeuralNetwork.proto): gather, gatherND, gatherAlongAxis, scatter,
// scatterND, scatterAlongAxis (every ScatterMode), whereNonZero and whereBroadcastable. Index
// blobs arrive as fp32 and are cast to int32 for the ops (shape_values.h).
#include "format/neural_network/shape_values.h"
#include "nn_gather.pb.h"

namespace coremlrt::format::neural_network {
namespace {

Value indices_input(LayerContext& layer, int index) {
  return cast_to(layer, ranked_input(layer, index, 1), DType::Int32);
}

// x[:axis] + indices + x[axis+1:]
void gather(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(2, 2, 1);
  const Value& x = ranked_input(layer, 0, 1);
  const int64_t axis = positive_axis(layer.parse_params<nn::GatherLayerParams>().axis(), x.type.rank);
  const Value indices = indices_input(layer, 1);
  std::vector<int64_t> dims(x.type.dims.begin(), x.type.dims.begin() + axis);
  dims.insert(dims.end(), indices.type.dims.begin(), indices.type.dims.end());
  dims.insert(dims.end(), x.type.dims.begin() + axis + 1, x.type.dims.end());
  layer.set_output(0, layer.emit1("gather", {{"x", {x}}, {"indices", {indices}}, {"axis", {int_scalar(static_cast<int32_t>(axis))}}},
                                  tensor_type(x.type.dtype, dims)));
}

// indices [..., K] pick slices x[i0, ..., iK-1]: indices[:-1] + x[K:].
void gather_nd(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(2, 2, 1);
  layer.parse_params<nn::GatherNDLayerParams>();
  const Value& x = ranked_input(layer, 0, 1);
  const Value indices = indices_input(layer, 1);
  const int64_t k = indices.type.dims.back();
  require(k >= 1 && k <= x.type.rank, "indices ", indices.type.str(), " must end in a known size of 1 to ", x.type.rank);
  std::vector<int64_t> dims(indices.type.dims.begin(), indices.type.dims.end() - 1);
  dims.insert(dims.end(), x.type.dims.begin() + k, x.type.dims.end());
  require(!dims.empty(), "its output would have rank 0");
  layer.set_output(0, layer.emit1("gather_nd", {{"x", {x}}, {"indices", {indices}}}, tensor_type(x.type.dtype, dims)));
}

void gather_along_axis(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(2, 2, 1);
  const Value& x = ranked_input(layer, 0, 1);
  const int64_t axis = positive_axis(layer.parse_params<nn::GatherAlongAxisLayerParams>().axis(), x.type.rank);
  const Value indices = cast_to(layer, ranked_input(layer, 1, x.type.rank, x.type.rank), DType::Int32);
  layer.set_output(0, layer.emit1("gather_along_axis",
                                  {{"x", {x}}, {"indices", {indices}}, {"axis", {int_scalar(static_cast<int32_t>(axis))}}},
                                  tensor_type(x.type.dtype, indices.type.dims)));
}

Value scatter_mode(nn::ScatterMode mode) {
  switch (mode) {
    case nn::SCATTER_UPDATE: return string_scalar("update");
    case nn::SCATTER_ADD: return string_scalar("add");
    case nn::SCATTER_SUB: return string_scalar("sub");
    case nn::SCATTER_MUL: return string_scalar("mul");
    case nn::SCATTER_DIV: return string_scalar("div");
    case nn::SCATTER_MAX: return string_scalar("max");
    case nn::SCATTER_MIN: return string_scalar("min");
    default: refuse("unknown scatter mode ", static_cast<int>(mode));
  }
}

// Inputs: data, indices, updates; the output is data with the updates applied.
template <class Params>
void scatter_op(LayerContext& layer, const char* op, bool has_axis) {
  require_exact_layout(layer);
  layer.expect_io(3, 3, 1);
  const auto params = layer.parse_params<Params>();
  const Value& data = ranked_input(layer, 0, 1);
  OpInputs inputs{{"data", {data}}, {"indices", {indices_input(layer, 1)}}, {"updates", {ranked_input(layer, 2, 1)}},
                  {"mode", {scatter_mode(params.mode())}}};
  if (has_axis) {
    int64_t axis = 0;
    if constexpr (!std::is_same_v<Params, nn::ScatterNDLayerParams>) axis = params.axis();
    inputs.push_back({"axis", {int_scalar(static_cast<int32_t>(positive_axis(axis, data.type.rank)))}});
  }
  layer.set_output(0, layer.emit1(op, inputs, data.type));
}

void scatter(LayerContext& layer) { scatter_op<nn::ScatterLayerParams>(layer, "scatter", true); }
void scatter_nd(LayerContext& layer) { scatter_op<nn::ScatterNDLayerParams>(layer, "scatter_nd", false); }
void scatter_along_axis(LayerContext& layer) {
  scatter_op<nn::ScatterAlongAxisLayerParams>(layer, "scatter_along_axis", true);
}

// [N, rank] coordinates of the non-zero elements, as fp32.
void where_non_zero(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 1, 1);
  layer.parse_params<nn::WhereNonZeroLayerParams>();
  const Value& x = ranked_input(layer, 0, 1);
  const Value found = layer.emit1("non_zero", {{"x", {x}}}, tensor_type(DType::Int32, {-1, x.type.rank}));
  layer.set_output(0, cast_to(layer, found, DType::Float32));
}

// cond ? a : b elementwise, all three broadcast; a non-zero cond is true.
void where_broadcastable(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(3, 3, 1);
  layer.parse_params<nn::WhereBroadcastableLayerParams>();
  const Value& cond = ranked_input(layer, 0, 0);
  const Value& a = ranked_input(layer, 1, 0);
  const Value& b = ranked_input(layer, 2, 0);
  const std::vector<int64_t> dims = broadcast_dims(broadcast_dims(cond.type.dims, a.type.dims), b.type.dims);
  layer.set_output(0, layer.emit1("select", {{"cond", {cast_to(layer, cond, DType::Bool)}}, {"a", {a}}, {"b", {b}}},
                                  tensor_type(a.type.dtype, dims)));
}

}  // namespace

void register_gather_layers(LayerTable& table) {
  table[930] = gather;
  table[935] = scatter;
  table[940] = gather_nd;
  table[945] = scatter_nd;
  table[952] = gather_along_axis;
  table[954] = scatter_along_axis;
  table[1313] = where_non_zero;
  table[1330] = where_broadcastable;
}

}  // namespace coremlrt::format::neural_network
