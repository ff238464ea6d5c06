// The layers that make tensors (NeuralNetwork.proto): rangeStatic/Dynamic, loadConstantND,
// fillLike/Static/Dynamic and broadcastToLike/Static/Dynamic. A broadcast is x * ones of the
// target shape, which leaves every value (signed zeros, NaNs, infinities) as it is.
#include <cmath>

#include "format/neural_network/shape_values.h"
#include "nn_fill.pb.h"

namespace coremlrt::format::neural_network {
namespace {

std::vector<int64_t> static_shape(const google::protobuf::RepeatedField<uint64_t>& shape, const char* what) {
  require(shape.size() > 0, what, " is empty");
  std::vector<int64_t> dims;
  for (uint64_t d : shape) {
    require(d < (uint64_t{1} << 31), what, " entry ", d, " is out of range");
    dims.push_back(static_cast<int64_t>(d));
  }
  return dims;
}

// A blob of one value as the scalar range_1d takes.
Value scalar_of(LayerContext& layer, int index) {
  const Value& x = ranked_input(layer, index, 0);
  require(product(x.type.dims) < 0 || product(x.type.dims) == 1, "input ", index, " is ", x.type.str(), "; expected one value");
  return layer.emit1("reshape", {{"x", {x}}, {"shape", {int_tensor({}, {0})}}}, tensor_type(x.type.dtype, {}));
}

Value range(LayerContext& layer, const Value& end, const Value& start, const Value& step, int64_t count) {
  return layer.emit1("range_1d", {{"end", {end}}, {"start", {start}}, {"step", {step}}}, tensor_type(DType::Float32, {count}));
}

// [start, end) by step; the count is ceil((end - start) / step), as range_1d computes it.
void range_static(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(0, 0, 1);
  const auto params = layer.parse_params<nn::RangeStaticLayerParams>();
  const double start = params.startvalue(), end = params.endvalue(), step = params.stepsizevalue();
  require(step != 0, "stepSizeValue is 0");
  const double n = std::ceil((end - start) / step);
  require(n < 1e9, "the range holds too many values");
  layer.set_output(0, range(layer, float_scalar(params.endvalue()), float_scalar(params.startvalue()),
                            float_scalar(params.stepsizevalue()), n > 0 ? static_cast<int64_t>(n) : 0));
}

// Inputs: end, and optionally start and step (else the parameters').
void range_dynamic(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 3, 1);
  const auto params = layer.parse_params<nn::RangeDynamicLayerParams>();
  const Value end = scalar_of(layer, 0);
  const Value start = layer.input_count() > 1 ? scalar_of(layer, 1) : float_scalar(params.startvalue());
  const Value step = layer.input_count() > 2 ? scalar_of(layer, 2) : float_scalar(params.stepsizevalue());
  layer.set_output(0, range(layer, end, start, step, -1));
}

void load_constant_nd(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(0, 0, 1);
  const auto params = layer.parse_params<nn::LoadConstantNDLayerParams>();
  const std::vector<int64_t> dims = static_shape(params.shape(), "shape");
  layer.set_output(0, float_tensor(read_weights(params.data(), product(dims), "constant values"), dims));
}

Value fill(LayerContext& layer, const Value& shape, float value, const std::vector<int64_t>& dims) {
  return layer.emit1("fill", {{"shape", {shape}}, {"value", {float_scalar(value)}}}, tensor_type(DType::Float32, dims));
}

Value shape_of(LayerContext& layer, const Value& x) {
  return layer.emit1("shape", {{"x", {x}}}, tensor_type(DType::Int32, {x.type.rank}));
}

void fill_like(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 1, 1);
  const Value& x = ranked_input(layer, 0, 0);
  layer.set_output(0, fill(layer, shape_of(layer, x), layer.parse_params<nn::FillLikeLayerParams>().value(), x.type.dims));
}

void fill_static(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(0, 0, 1);
  const auto params = layer.parse_params<nn::FillStaticLayerParams>();
  const std::vector<int64_t> dims = static_shape(params.targetshape(), "targetShape");
  layer.set_output(0, fill(layer, int_vector(dims), params.value(), dims));
}

void fill_dynamic(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 1, 1);
  const ShapeInput shape = shape_input(layer, 0);
  layer.set_output(0, fill(layer, shape.sizes, layer.parse_params<nn::FillDynamicLayerParams>().value(), shape.dims));
}

// x broadcast to `target` (numpy's broadcast_to): every known size of x is 1 or the target's.
void broadcast_to(LayerContext& layer, const Value& x, const Value& shape, const std::vector<int64_t>& target) {
  require(x.type.rank <= static_cast<int64_t>(target.size()), "input ", x.type.str(), " has more axes than the target shape");
  const size_t offset = target.size() - x.type.rank;
  for (size_t i = 0; i < x.type.dims.size(); ++i) {
    const int64_t d = x.type.dims[i], t = target[offset + i];
    require(d < 0 || t < 0 || d == 1 || d == t, "input ", x.type.str(), " does not broadcast to ",
            tensor_type(x.type.dtype, target).str());
  }
  std::vector<int64_t> dims = target;
  for (size_t i = 0; i < x.type.dims.size(); ++i)
    if (dims[offset + i] < 0 && x.type.dims[i] > 1) dims[offset + i] = x.type.dims[i];
  const Value ones = fill(layer, shape, 1.0f, target);
  layer.set_output(0, layer.emit1("mul", {{"x", {x}}, {"y", {ones}}}, tensor_type(x.type.dtype, dims)));
}

void broadcast_to_like(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(2, 2, 1);
  layer.parse_params<nn::BroadcastToLikeLayerParams>();
  const Value& like = ranked_input(layer, 1, 0);
  broadcast_to(layer, ranked_input(layer, 0, 0), shape_of(layer, like), like.type.dims);
}

void broadcast_to_static(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(1, 1, 1);
  const std::vector<int64_t> dims =
      static_shape(layer.parse_params<nn::BroadcastToStaticLayerParams>().targetshape(), "targetShape");
  broadcast_to(layer, ranked_input(layer, 0, 0), int_vector(dims), dims);
}

void broadcast_to_dynamic(LayerContext& layer) {
  require_exact_layout(layer);
  layer.expect_io(2, 2, 1);
  layer.parse_params<nn::BroadcastToDynamicLayerParams>();
  const ShapeInput shape = shape_input(layer, 1);
  broadcast_to(layer, ranked_input(layer, 0, 0), shape.sizes, shape.dims);
}

}  // namespace

void register_fill_layers(LayerTable& table) {
  table[635] = range_static;
  table[640] = range_dynamic;
  table[1070] = load_constant_nd;
  table[1080] = fill_like;
  table[1085] = fill_static;
  table[1090] = fill_dynamic;
  table[1100] = broadcast_to_like;
  table[1105] = broadcast_to_static;
  table[1110] = broadcast_to_dynamic;
}

}  // namespace coremlrt::format::neural_network
