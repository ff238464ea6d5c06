#include "ops/util.h"

#include <algorithm>
#include <cstring>

#include "ops/half_lanes.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(COREMLRT_GEMM_PORTABLE_ONLY)
#include <immintrin.h>
#endif

namespace coremlrt::ops {

// Bulk conversions in eight-lane blocks (half_lanes.h). On x86-64 (GCC) each is also built
// for x86-64-v3, whose F16C instructions convert eight lanes at once, and the version is
// picked at load time; elsewhere the portable lanes are used. COREMLRT_GEMM_PORTABLE_ONLY
// turns the run-time choice off (ThreadSanitizer builds need that: the ifunc resolvers that
// make the choice run before the sanitizer's runtime is up).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(COREMLRT_GEMM_PORTABLE_ONLY)
#define COREMLRT_CONVERSION_X86_V3 1
#endif

namespace {

// A tail shorter than eight lanes goes through a padded copy, so that every element is
// converted by the same code.
template <class Widen>
[[gnu::always_inline]] inline void widen_blocks(const half* src, float* dst, int64_t count, Widen widen) {
  int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes) widen(src + i, dst + i);
  if (i == count) return;
  half in[kLanes] = {};
  float out[kLanes];
  std::memcpy(in, src + i, (count - i) * sizeof(half));
  widen(in, out);
  std::memcpy(dst + i, out, (count - i) * sizeof(float));
}

template <class Narrow>
[[gnu::always_inline]] inline void narrow_blocks(const float* src, half* dst, int64_t count, Narrow narrow) {
  int64_t i = 0;
  for (; i + kLanes <= count; i += kLanes) narrow(src + i, dst + i);
  if (i == count) return;
  float in[kLanes] = {};
  half out[kLanes];
  std::memcpy(in, src + i, (count - i) * sizeof(float));
  narrow(in, out);
  std::memcpy(dst + i, out, (count - i) * sizeof(half));
}

[[gnu::always_inline]] inline void widen_portable(const half* src, float* dst) {
  Lanes v;
  widen_lanes_portable(src, v);
  std::memcpy(dst, &v, sizeof v);
}

[[gnu::always_inline]] inline void narrow_portable(const float* src, half* dst) {
  Lanes v;
  std::memcpy(&v, src, sizeof v);
  narrow_lanes_portable(v, dst);
}

#ifdef COREMLRT_CONVERSION_X86_V3
__attribute__((target("default"))) void widen(const half* src, float* dst, int64_t count) {
  widen_blocks(src, dst, count, widen_portable);
}
__attribute__((target("arch=x86-64-v3"))) void widen(const half* src, float* dst, int64_t count) {
  widen_blocks(src, dst, count, [](const half* s, float* d) __attribute__((target("arch=x86-64-v3"))) {
    _mm256_storeu_ps(d, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(s))));
  });
}
__attribute__((target("default"))) void narrow(const float* src, half* dst, int64_t count) {
  narrow_blocks(src, dst, count, narrow_portable);
}
__attribute__((target("arch=x86-64-v3"))) void narrow(const float* src, half* dst, int64_t count) {
  narrow_blocks(src, dst, count, [](const float* s, half* d) __attribute__((target("arch=x86-64-v3"))) {
    _mm_storeu_si128(reinterpret_cast<__m128i*>(d), _mm256_cvtps_ph(_mm256_loadu_ps(s), _MM_FROUND_TO_NEAREST_INT));
  });
}
#else
void widen(const half* src, float* dst, int64_t count) { widen_blocks(src, dst, count, widen_portable); }
void narrow(const float* src, half* dst, int64_t count) { narrow_blocks(src, dst, count, narrow_portable); }
#endif

}  // namespace

}  // namespace coremlrt::ops

// Public (coremlrt/float_formats.h): the binding converts outputs with them too.
void coremlrt::half_to_float(const half* src, float* dst, int64_t count) { ops::widen(src, dst, count); }

void coremlrt::float_to_half(const float* src, half* dst, int64_t count) { ops::narrow(src, dst, count); }

namespace coremlrt::ops {

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

std::vector<float> to_floats(const Tensor& t) {
  std::vector<float> out(static_cast<size_t>(t.numel()));
  switch (t.dtype) {
    case DType::Float32: std::copy_n(t.ptr<float>(), out.size(), out.data()); break;
    case DType::Float16: half_to_float(t.ptr<half>(), out.data(), t.numel()); break;
    case DType::Float64: std::copy_n(t.ptr<double>(), out.size(), out.data()); break;
    default: fail("expected a floating-point tensor, got ", dtype_name(t.dtype));
  }
  return out;
}

const float* read_floats(const Tensor& t, std::vector<float>& scratch) {
  if (t.dtype == DType::Float32) return t.ptr<float>();
  scratch = to_floats(t);
  return scratch.data();
}

float* float_output(Tensor& out, std::vector<float>& scratch) {
  if (out.dtype == DType::Float32) return out.ptr<float>();
  scratch.resize(static_cast<size_t>(out.numel()));
  return scratch.data();
}

void commit_float_output(Tensor& out, const float* data) {
  if (data == out.data) return;
  const int64_t n = out.numel();
  switch (out.dtype) {
    case DType::Float32: std::memcpy(out.data, data, n * sizeof(float)); break;
    case DType::Float16: float_to_half(data, out.ptr<half>(), n); break;
    default: fail("expected a floating-point output, got ", dtype_name(out.dtype));
  }
}

}  // namespace coremlrt::ops
