// The reduction and sorting family: the rank-5 era reduce (over [C, H, W] axes, keeping them
// as 1), the axis reductions reduceSum ... reduceLogSumExp, argMax, argMin, topK, argSort and
// cumSum, lowered onto the reduce_*, topk, argsort and cumsum ops (src/ops/reduction.cc,
// tensor_ops.cc). Indices come out as fp32 blobs, as every blob of the layer graph is fp32.
// The layer graph has no rank-0 blobs: a reduction of every axis without keepDims gives [1].
#include <algorithm>

#include "format/neural_network/layer_translator.h"
#include "nn_reduction.pb.h"

namespace coremlrt::format::neural_network {
namespace {

int64_t normalized_axis(int64_t axis, int64_t rank) {
  require(axis >= -rank && axis < rank, "axis ", axis, " is out of range for an input of rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

// The type of x reduced over `axes` (non-negative).
ir::ValueType reduced_type(const ir::ValueType& x, const std::vector<int64_t>& axes, bool keep_dims) {
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < x.rank; ++i) {
    const bool reduced = std::find(axes.begin(), axes.end(), i) != axes.end();
    if (!reduced) dims.push_back(x.dims[i]);
    else if (keep_dims) dims.push_back(1);
  }
  return tensor_type(x.dtype, dims);
}

// y as the layer graph's blob: rank 0 becomes [1].
Value at_least_rank1(LayerContext& layer, const Value& y) {
  if (y.type.rank > 0) return y;
  return layer.emit1("expand_dims", {{"x", {y}}, {"axes", {int_vector({0})}}}, tensor_type(y.type.dtype, {1}));
}

Value reduce(LayerContext& layer, const char* op, const Value& x, const std::vector<int64_t>& axes, bool keep_dims) {
  return layer.emit1(op, {{"x", {x}}, {"axes", {int_vector(axes)}}, {"keep_dims", {bool_scalar(keep_dims)}}},
                     reduced_type(x.type, axes, keep_dims));
}

void legacy_reduce(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::ReduceLayerParams>();
  const Value& x = layer.input(0);
  using R = nn::ReduceLayerParams;
  std::vector<int64_t> last;  // offsets from the end
  switch (params.axis()) {
    case R::CHW: last = {3, 2, 1}; break;
    case R::HW: last = {2, 1}; break;
    case R::C: last = {3}; break;
    case R::H: last = {2}; break;
    case R::W: last = {1}; break;
    default: refuse("unknown reduce axis ", static_cast<int>(params.axis()));
  }
  require(x.type.rank >= 3, "input has rank ", x.type.rank, "; reduce works on the [C, H, W] axes");
  std::vector<int64_t> axes;
  for (int64_t back : last) axes.push_back(x.type.rank - back);
  const char* op = nullptr;
  switch (params.mode()) {
    case R::SUM: op = "reduce_sum"; break;
    case R::AVG: op = "reduce_mean"; break;
    case R::PROD: op = "reduce_prod"; break;
    case R::SUMSQUARE: op = "reduce_sum_square"; break;
    case R::L1: op = "reduce_l1_norm"; break;
    case R::L2: op = "reduce_l2_norm"; break;
    case R::MAX: op = "reduce_max"; break;
    case R::MIN: op = "reduce_min"; break;
    case R::LOGSUM: {
      // sum(log(x + epsilon)); epsilon 0 means the schema's default 1e-6.
      const float eps = params.epsilon() != 0 ? params.epsilon() : 1e-6f;
      const Value logs = layer.emit1("log", {{"x", {x}}, {"epsilon", {float_scalar(eps)}}}, x.type);
      layer.set_output(0, reduce(layer, "reduce_sum", logs, axes, true));
      return;
    }
    case R::ARGMAX: {
      // Over one axis the index is that axis's; over several the specification does not say
      // how the index is numbered (coremltools' own tests leave CHW and HW out for ARGMAX).
      require(axes.size() == 1, "ARGMAX over several axes (CHW, HW): the specification does not say how the index",
              " over several axes is numbered, so this build runs ARGMAX over one axis (C, H or W) only");
      ir::ValueType type = reduced_type(x.type, axes, true);
      type.dtype = DType::Int32;
      const Value idx = layer.emit1("reduce_argmax", {{"x", {x}}, {"axis", {int_scalar(static_cast<int32_t>(axes[0]))}},
                                                      {"keep_dims", {bool_scalar(true)}}}, type);
      layer.set_output(0, as_float_blob(layer, idx));
      return;
    }
    default: refuse("unknown reduce mode ", static_cast<int>(params.mode()));
  }
  layer.set_output(0, reduce(layer, op, x, axes, true));
}

template <const char* kOp>
void axis_reduce(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::ReduceAxesLayerParams>();
  const Value& x = layer.input(0);
  std::vector<int64_t> axes;
  if (params.reduceall()) {
    for (int64_t i = 0; i < x.type.rank; ++i) axes.push_back(i);
  } else {
    require(params.axes_size() > 0, "names no axes and does not reduce all");
    for (int64_t a : params.axes()) {
      const int64_t n = normalized_axis(a, x.type.rank);
      require(std::find(axes.begin(), axes.end(), n) == axes.end(), "names axis ", a, " twice");
      axes.push_back(n);
    }
  }
  layer.set_output(0, at_least_rank1(layer, reduce(layer, kOp, x, axes, params.keepdims())));
}

constexpr char kL1[] = "reduce_l1_norm", kL2[] = "reduce_l2_norm", kMax[] = "reduce_max", kMin[] = "reduce_min",
               kSum[] = "reduce_sum", kProd[] = "reduce_prod", kMean[] = "reduce_mean", kLogSum[] = "reduce_log_sum",
               kSumSquare[] = "reduce_sum_square", kLogSumExp[] = "reduce_log_sum_exp";

template <const char* kOp>
void arg_reduce(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::ArgReduceLayerParams>();
  const Value& x = layer.input(0);
  const int64_t axis = normalized_axis(params.axis(), x.type.rank);
  ir::ValueType type = reduced_type(x.type, {axis}, !params.removedim());
  type.dtype = DType::Int32;
  const Value idx = layer.emit1(kOp, {{"x", {x}}, {"axis", {int_scalar(static_cast<int32_t>(axis))}},
                                      {"keep_dims", {bool_scalar(!params.removedim())}}}, type);
  layer.set_output(0, at_least_rank1(layer, as_float_blob(layer, idx)));
}

constexpr char kArgMax[] = "reduce_argmax", kArgMin[] = "reduce_argmin";

// The K largest (or smallest) values along axis, sorted, and their indices. K comes from the
// parameters or, with a second input, from that input's value at run time.
void top_k(LayerContext& layer) {
  layer.expect_io(1, 2, 2);
  const auto params = layer.parse_params<nn::TopKLayerParams>();
  const Value& x = layer.input(0);
  const int64_t axis = normalized_axis(params.axis(), x.type.rank);
  ir::ValueType values = x.type;
  Value k;
  if (layer.input_count() == 2) {
    ir::ValueType k_type = layer.input(1).type;
    k_type.dtype = DType::Int32;
    k = layer.emit1("cast", {{"x", {layer.input(1)}}, {"dtype", {string_scalar("int32")}}}, k_type);
    values.dims[axis] = -1;
  } else {
    const int64_t count = static_cast<int64_t>(params.k());
    require(count >= 1, "K is ", count);
    const int64_t size = x.type.dims[axis];
    require(size < 0 || count <= size, "K = ", count, " exceeds the axis size ", size);
    k = int_scalar(static_cast<int32_t>(count));
    values.dims[axis] = count;
  }
  ir::ValueType indices = values;
  indices.dtype = DType::Int32;
  const auto out = layer.emit("topk",
                              {{"x", {x}},
                               {"k", {k}},
                               {"axis", {int_scalar(static_cast<int32_t>(axis))}},
                               {"ascending", {bool_scalar(params.usebottomk())}}},
                              {values, indices});
  layer.set_output(0, out[0]);
  layer.set_output(1, as_float_blob(layer, out[1]));
}

void arg_sort(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::ArgSortLayerParams>();
  const Value& x = layer.input(0);
  const int64_t axis = normalized_axis(params.axis(), x.type.rank);
  ir::ValueType type = x.type;
  type.dtype = DType::Int32;
  const Value idx = layer.emit1("argsort", {{"x", {x}}, {"axis", {int_scalar(static_cast<int32_t>(axis))}},
                                            {"ascending", {bool_scalar(!params.descending())}}}, type);
  layer.set_output(0, as_float_blob(layer, idx));
}

void cum_sum(LayerContext& layer) {
  layer.expect_io(1, 1, 1);
  const auto params = layer.parse_params<nn::CumSumLayerParams>();
  const Value& x = layer.input(0);
  const int64_t axis = normalized_axis(params.axis(), x.type.rank);
  layer.set_output(0, layer.emit1("cumsum", {{"x", {x}},
                                             {"axis", {int_scalar(static_cast<int32_t>(axis))}},
                                             {"exclusive", {bool_scalar(params.excludefinalsum())}},
                                             {"reverse", {bool_scalar(params.reverse())}}},
                                  x.type));
}

}  // namespace

void register_reduction_layers(LayerTable& table) {
  table[280] = legacy_reduce;
  table[1250] = axis_reduce<kL1>;
  table[1255] = axis_reduce<kL2>;
  table[1260] = axis_reduce<kMax>;
  table[1265] = axis_reduce<kMin>;
  table[1270] = axis_reduce<kSum>;
  table[1275] = axis_reduce<kProd>;
  table[1280] = axis_reduce<kMean>;
  table[1285] = axis_reduce<kLogSum>;
  table[1290] = axis_reduce<kSumSquare>;
  table[1295] = axis_reduce<kLogSumExp>;
  table[1015] = top_k;
  table[1020] = arg_reduce<kArgMin>;
  table[1025] = arg_reduce<kArgMax>;
  table[1455] = cum_sum;
  table[1461] = arg_sort;
}

}  // namespace coremlrt::format::neural_network
