#include "ir/packed.h"

#include <sstream>

namespace coremlrt::ir {

size_t PackedTensor::stored_bytes() const {
  size_t bytes = codes.stored_bytes() + offset.stored_bytes();
  for (const Tensor* t : {&mask, &table, &scale})
    if (t->defined()) bytes += t->nbytes();
  return bytes;
}

namespace {

// "per tensor", "per channel" (one group per slice of dim 0), or "per block [1, 32]" (the
// block's shape).
std::string grouping(const PackedTensor& t) {
  if (t.group_count() <= 1) return "per tensor";
  Shape block;
  bool per_channel = !t.shape.empty() && t.groups.size() == t.shape.size() && t.groups[0] == t.shape[0];
  for (size_t d = 0; d < t.shape.size() && d < t.groups.size(); ++d) {
    block.push_back(t.groups[d] ? t.shape[d] / t.groups[d] : 0);
    per_channel = per_channel && (d == 0 || t.groups[d] == 1);
  }
  return per_channel ? "per channel" : "per block " + shape_str(block);
}

}  // namespace

std::string PackedTensor::form() const {
  std::ostringstream out;
  if (mask.defined() && !shape.empty()) {
    const int64_t dense = shape_numel(shape);
    out << (dense ? 100 * (dense - nonzero) / dense : 0) << " % sparse, ";
  }
  switch (map) {
    case CodeMap::kIdentity: out << dtype_name(codes.dtype); break;
    case CodeMap::kLut:
      out << dtype_name(codes.dtype) << " palette of " << palettes << " " << dtype_name(dtype) << " values "
          << grouping(*this);
      break;
    case CodeMap::kShiftScale:
    case CodeMap::kAffine:
      out << dtype_name(codes.dtype) << ", " << dtype_name(scale.dtype) << " scale " << grouping(*this)
          << (offset.defined() ? ", offset" : "");
      break;
  }
  return out.str();
}

}  // namespace coremlrt::ir
