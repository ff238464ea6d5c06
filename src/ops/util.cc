#include "ops/util.h"

namespace coremlrt::ops {

// On x86-64 the loops are also compiled for x86-64-v3 (F16C, AVX2), picked at load time
// when the CPU has it; elsewhere the plain loop is used.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define COREMLRT_CONVERSION_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define COREMLRT_CONVERSION_CLONES
#endif

COREMLRT_CONVERSION_CLONES
void half_to_float(const half* src, float* dst, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<float>(src[i]);
}

COREMLRT_CONVERSION_CLONES
void float_to_half(const float* src, half* dst, int64_t count) {
  for (int64_t i = 0; i < count; ++i) dst[i] = static_cast<half>(src[i]);
}

Shape broadcast_shapes(const Shape& a, const Shape& b) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t i = 0; i < rank; ++i) {
    int64_t da = i < rank - a.size() ? 1 : a[i - (rank - a.size())];
    int64_t db = i < rank - b.size() ? 1 : b[i - (rank - b.size())];
    COREMLRT_CHECK(da == db || da == 1 || db == 1, "shapes ", shape_str(a), " and ", shape_str(b),
                   " do not broadcast");
    out[i] = da == 1 ? db : da;
  }
  return out;
}

std::vector<int64_t> contiguous_strides(const Shape& shape) {
  std::vector<int64_t> strides(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) strides[i - 1] = strides[i] * shape[i];
  return strides;
}

std::vector<int64_t> broadcast_strides(const Shape& input, const Shape& output) {
  std::vector<int64_t> own = contiguous_strides(input);
  std::vector<int64_t> out(output.size(), 0);
  const size_t offset = output.size() - input.size();
  for (size_t i = 0; i < input.size(); ++i) out[offset + i] = input[i] == 1 ? 0 : own[i];
  return out;
}

int64_t normalize_axis(int64_t axis, int64_t rank) {
  COREMLRT_CHECK(axis >= -rank && axis < std::max<int64_t>(rank, 1), "axis ", axis,
                 " is out of range for rank ", rank);
  return axis < 0 ? axis + rank : axis;
}

}  // namespace coremlrt::ops
