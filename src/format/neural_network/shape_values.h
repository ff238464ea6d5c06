#pragma once
// Helpers the data-movement layer families (shape_layers.cc, shape_nd_layers.cc,
// gather_layers.cc, fill_layers.cc) share: static shape arithmetic with -1 for a size known
// only at prediction, and the reshape/transpose ops most of their translations are made of.
#include <algorithm>
#include <vector>

#include "format/neural_network/layer_translator.h"

namespace coremlrt::format::neural_network {

inline int64_t product(const std::vector<int64_t>& dims) {
  int64_t out = 1;
  for (int64_t d : dims) {
    if (d < 0) return -1;
    out *= d;
  }
  return out;
}

// `axis` in [-rank, rank) made non-negative; refuses anything else.
inline int64_t positive_axis(int64_t axis, int64_t rank, const char* what = "axis") {
  require(axis >= -rank && axis < rank, what, " ", axis, " does not fit an input of rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

// reshape to `dims`; a -1 in `dims` (at most one) is inferred from x's size.
inline Value reshape_to(LayerContext& layer, const Value& x, const std::vector<int64_t>& dims) {
  require(std::count(dims.begin(), dims.end(), int64_t{-1}) <= 1, "its output ",
          tensor_type(x.type.dtype, dims).str(), " has more than one size unknown before prediction");
  return layer.emit1("reshape", {{"x", {x}}, {"shape", {int_vector(dims)}}}, tensor_type(x.type.dtype, dims));
}

inline Value bool_vector(const std::vector<bool>& bits) {
  auto out = std::make_shared<ir::ConstValue>();
  const auto n = static_cast<int64_t>(bits.size());
  out->type = tensor_type(DType::Bool, {n});
  out->tensor = Tensor::empty(DType::Bool, {n});
  for (int64_t i = 0; i < n; ++i) out->tensor.ptr<bool>()[i] = bits[i];
  return Value{"", out, out->type};
}

inline Value transpose(LayerContext& layer, const Value& x, const std::vector<int64_t>& perm) {
  std::vector<int64_t> dims;
  for (int64_t p : perm) dims.push_back(x.type.dims[p]);
  return layer.emit1("transpose", {{"x", {x}}, {"perm", {int_vector(perm)}}}, tensor_type(x.type.dtype, dims));
}

// The rank-N layers came with the exact-rank layout (Core ML 3); Core ML refuses a model that
// uses them with the legacy rank-5 mapping, and so does this build.
inline void require_exact_layout(const LayerContext& layer) {
  require(!layer.rank5_layout(), "is a rank-N layer, which needs the exact-rank array mapping "
          "(arrayInputShapeMapping = EXACT_ARRAY_MAPPING); this model uses the legacy rank-5 mapping");
}

// Refuses an input whose rank is not known at load.
inline const Value& ranked_input(LayerContext& layer, int index, int64_t min_rank, int64_t max_rank = 1 << 20) {
  const Value& x = layer.input(index);
  require(x.type.kind == ir::TypeKind::Tensor && x.type.rank >= min_rank && x.type.rank <= max_rank, "input ", index,
          " is ", x.type.str(), "; expected a tensor of rank ", min_rank,
          max_rank < (1 << 20) ? " to " + std::to_string(max_rank) : std::string(" or more"));
  return x;
}

// Numpy's broadcast of two static shapes (-1: unknown); refuses sizes that cannot broadcast.
inline std::vector<int64_t> broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<int64_t> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    const int64_t x = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    const int64_t y = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    if (x == 1) out[i] = y;
    else if (y == 1) out[i] = x;
    else if (x < 0 || y < 0) out[i] = x < 0 ? y : x;  // an unknown size must match the other
    else {
      require(x == y, "shapes ", tensor_type(DType::Float32, a).str(), " and ", tensor_type(DType::Float32, b).str(),
              " do not broadcast");
      out[i] = x;
    }
  }
  return out;
}

// The layer graph carries every blob as fp32; shapes and indices read from a blob are cast to
// int32 for the ops that take them, and int32 results are cast back.
inline Value cast_to(LayerContext& layer, const Value& x, DType dtype) {
  if (x.type.dtype == dtype) return x;
  ir::ValueType type = x.type;
  type.dtype = dtype;
  const char* name = dtype == DType::Int32 ? "int32" : dtype == DType::Bool ? "bool" : "fp32";
  return layer.emit1("cast", {{"x", {x}}, {"dtype", {string_scalar(name)}}}, type);
}

// The shape a rank-1 shape blob describes: its length must be known at load.
inline std::vector<int64_t> dims_of_shape_blob(const Value& shape) {
  require(shape.type.rank == 1 && shape.type.dims[0] >= 0, "its shape input is ", shape.type.str(),
          "; expected a vector of known length");
  return std::vector<int64_t>(shape.type.dims[0], -1);
}

}  // namespace coremlrt::format::neural_network
