#include "format/neural_network/spatial_frame.h"

#include <algorithm>

namespace coremlrt::format::neural_network {

namespace {

int64_t product_or_unknown(const std::vector<int64_t>& dims) {
  int64_t out = 1;
  for (int64_t d : dims) {
    if (d < 0) return -1;
    out *= d;
  }
  return out;
}

}  // namespace

SpatialFrame::SpatialFrame(LayerContext& layer, const Value& x, int spatial) : layer_(layer), x_(x), spatial_(spatial) {
  const ir::ValueType& t = x.type;
  require(t.rank >= spatial + 1, "input has rank ", t.rank, "; it needs at least ", spatial + 1,
          " axes ([C, ", spatial == 3 ? "D, H, W" : "H, W", "])");
  lead_.assign(t.dims.begin(), t.dims.end() - (spatial + 1));
  const std::vector<int64_t> image(t.dims.end() - (spatial + 1), t.dims.end());
  if (static_cast<int>(lead_.size()) == 1) {
    folded_ = x;
    return;
  }
  std::vector<int64_t> dims{product_or_unknown(lead_)};
  dims.insert(dims.end(), image.begin(), image.end());
  if (lead_.empty()) {
    folded_ = layer.emit1("expand_dims", {{"x", {x}}, {"axes", {int_vector({0})}}}, tensor_type(t.dtype, dims));
    return;
  }
  require(std::count(image.begin(), image.end(), -1) == 0 || std::count(lead_.begin(), lead_.end(), -1) == 0,
          "input ", t.str(), " has unknown sizes both before and among its last ", spatial + 1, " axes");
  std::vector<int64_t> shape = dims;
  if (dims[0] < 0) shape[0] = -1;
  folded_ = layer.emit1("reshape", {{"x", {x}}, {"shape", {int_vector(shape)}}}, tensor_type(t.dtype, dims));
}

ir::ValueType SpatialFrame::folded_type(const std::vector<int64_t>& dims) const {
  std::vector<int64_t> out{folded_.type.dims[0]};
  out.insert(out.end(), dims.begin(), dims.end());
  return tensor_type(x_.type.dtype, out);
}

Value SpatialFrame::unfold(const Value& y) const {
  if (static_cast<int>(lead_.size()) == 1) return y;
  const std::vector<int64_t> image(y.type.dims.begin() + 1, y.type.dims.end());
  std::vector<int64_t> dims = lead_;
  dims.insert(dims.end(), image.begin(), image.end());
  if (lead_.empty()) return layer_.emit1("squeeze", {{"x", {y}}, {"axes", {int_vector({0})}}}, tensor_type(y.type.dtype, dims));
  require(std::count(dims.begin(), dims.end(), -1) <= 1, "output ", tensor_type(y.type.dtype, dims).str(),
          " has more than one unknown size; this build cannot restore its leading axes");
  return layer_.emit1("reshape", {{"x", {y}}, {"shape", {int_vector(dims)}}}, tensor_type(y.type.dtype, dims));
}

}  // namespace coremlrt::format::neural_network
