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

// Sizes and indices read from a blob (a target shape, tile reps, pad amounts, slice bounds,
// sequence lengths): the layer graph carries them as fp32 whole numbers and the ops take int32,
// so each translator that reads one goes through here.
//
// Input `index` as an int32 vector of `count` entries (-1: any count; a length unknown at load
// is checked at prediction by the op that reads it). `what` names it in refusals.
inline Value int_vector_input(LayerContext& layer, int index, int64_t count, const char* what) {
  const Value& v = ranked_input(layer, index, 1, 1);
  require(count < 0 || v.type.dims[0] < 0 || v.type.dims[0] == count, "its ", what, " input ", v.type.str(), " needs ",
          count, " entries");
  return cast_to(layer, v, DType::Int32);
}

// A target shape read from input `index`: the int32 sizes, and the output's dims as known at
// load (as many -1s as the blob has entries). The specification gives the shape as a vector;
// a blob of higher rank whose axes all have size 1 but one ([10, 1], say: coremltools' own
// tests feed such a blob to broadcastToDynamic) holds the same values in the same order, and is
// read as that vector. The number of entries is the output's rank, so it must be known at load.
struct ShapeInput {
  Value sizes;                // int32 [rank]
  std::vector<int64_t> dims;  // -1 for each size known only at prediction
};

inline ShapeInput shape_input(LayerContext& layer, int index) {
  const Value& v = ranked_input(layer, index, 1);
  const int64_t length = product(v.type.dims);
  const auto non_unit = std::count_if(v.type.dims.begin(), v.type.dims.end(), [](int64_t d) { return d != 1; });
  require(length >= 0 && (v.type.rank == 1 || non_unit <= 1), "its shape input is ", v.type.str(),
          "; expected a vector whose length is known at load");
  const Value vector = v.type.rank == 1 ? v : reshape_to(layer, v, {length});
  return {cast_to(layer, vector, DType::Int32), std::vector<int64_t>(length, -1)};
}

}  // namespace coremlrt::format::neural_network
