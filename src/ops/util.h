#pragma once
// Small tools shared by kernels: dtype dispatch, broadcasting, axes.
#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "coremlrt/error.h"
#include "coremlrt/float_formats.h"  // half_to_float, float_to_half
#include "coremlrt/tensor.h"
#include "ops/thread_pool.h"

namespace coremlrt::ops {

// The type arithmetic on T is done in: float for half, T otherwise.
template <class T>
using compute_t = std::conditional_t<std::is_same_v<T, half>, float, T>;

template <class T>
struct TypeTag {
  using type = T;
};

// Calls fn(TypeTag<T>{}) for the C++ type of `dtype`; `what` names the caller in errors.
template <class Fn>
void dispatch_float(DType dtype, const char* what, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: fn(TypeTag<float>{}); return;
    case DType::Float16: fn(TypeTag<half>{}); return;
    default: fail(what, ": unsupported dtype ", dtype_name(dtype), " (expected fp16 or fp32)");
  }
}

// fp16, fp32 and int32: the "FI" type set of the MIL op tables.
template <class Fn>
void dispatch_float_int(DType dtype, const char* what, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: fn(TypeTag<float>{}); return;
    case DType::Float16: fn(TypeTag<half>{}); return;
    case DType::Int32: fn(TypeTag<int32_t>{}); return;
    default: fail(what, ": unsupported dtype ", dtype_name(dtype), " (expected fp16, fp32 or int32)");
  }
}

// Every plain dtype (no sub-byte, no string). Bool is dispatched as uint8_t storage.
template <class Fn>
void dispatch_all(DType dtype, const char* what, Fn&& fn) {
  switch (dtype) {
    case DType::Float32: fn(TypeTag<float>{}); return;
    case DType::Float16: fn(TypeTag<half>{}); return;
    case DType::Float64: fn(TypeTag<double>{}); return;
    case DType::Int32: fn(TypeTag<int32_t>{}); return;
    case DType::Int64: fn(TypeTag<int64_t>{}); return;
    case DType::Int16: fn(TypeTag<int16_t>{}); return;
    case DType::UInt16: fn(TypeTag<uint16_t>{}); return;
    case DType::Int8: fn(TypeTag<int8_t>{}); return;
    case DType::UInt8:
    case DType::Bool: fn(TypeTag<uint8_t>{}); return;
    case DType::UInt32: fn(TypeTag<uint32_t>{}); return;
    case DType::UInt64: fn(TypeTag<uint64_t>{}); return;
    default: fail(what, ": unsupported dtype ", dtype_name(dtype));
  }
}

// NumPy broadcasting of two shapes; throws naming both when they are incompatible.
Shape broadcast_shapes(const Shape& a, const Shape& b);

// Row-major strides in elements.
std::vector<int64_t> contiguous_strides(const Shape& shape);

// Strides for reading `input` as if broadcast to `output` (0 where a dim is stretched).
std::vector<int64_t> broadcast_strides(const Shape& input, const Shape& output);

// Maps axis in [-rank, rank) to [0, rank); throws otherwise.
int64_t normalize_axis(int64_t axis, int64_t rank);

// Visits every output element of a broadcast: fn(out_index, offset_a, offset_b).
template <class Fn>
void for_each_broadcast(const Shape& out, const std::vector<int64_t>& stride_a,
                        const std::vector<int64_t>& stride_b, Fn&& fn) {
  const int64_t total = shape_numel(out);
  const size_t rank = out.size();
  if (total == 0) return;
  std::vector<int64_t> index(rank, 0);
  int64_t a = 0, b = 0;
  for (int64_t i = 0; i < total; ++i) {
    fn(i, a, b);
    for (size_t d = rank; d-- > 0;) {
      if (++index[d] < out[d]) {
        a += stride_a[d];
        b += stride_b[d];
        break;
      }
      a -= stride_a[d] * (out[d] - 1);
      b -= stride_b[d] * (out[d] - 1);
      index[d] = 0;
    }
  }
}

// True for the float dtypes the matrix kernels compute in (fp32, and fp16 widened to fp32).
// Calls fn(p, g) for every flat position p of `shape`, with g the flat index of its block in
// a tensor of shape `groups`: block size along d is shape[d] / groups[d] ("repeat" expansion).
template <class Fn>
void for_each_grouped(const Shape& shape, const Shape& groups, Fn&& fn) {
  const int64_t total = shape_numel(shape);
  if (total == 0) return;
  const size_t rank = shape.size();
  const std::vector<int64_t> gstrides = contiguous_strides(groups);
  std::vector<std::vector<int64_t>> table(rank);  // group offset of each coordinate
  for (size_t d = 0; d < rank; ++d) {
    const int64_t block = shape[d] / groups[d];
    for (int64_t i = 0; i < shape[d]; ++i) table[d].push_back(i / block * gstrides[d]);
  }
  std::vector<int64_t> idx(rank, 0);
  int64_t g = 0;
  for (int64_t p = 0; p < total; ++p) {
    fn(p, g);
    for (size_t d = rank; d-- > 0;) {
      g -= table[d][idx[d]];
      if (++idx[d] < shape[d]) {
        g += table[d][idx[d]];
        break;
      }
      idx[d] = 0;
      g += table[d][0];
    }
  }
}

inline bool is_fp32_or_fp16(DType d) { return d == DType::Float32 || d == DType::Float16; }

// ---- Float staging for kernels that compute in float whatever the storage type: fp16
// operands are widened (in bulk), results are rounded to fp16 once, on store.

// A copy of a floating-point tensor (fp16, fp32 or fp64) as floats. For small constants
// (biases, scales) at load and for per-call staging; large weights are read in place instead
// (see gemm.h).
std::vector<float> to_floats(const Tensor& t);

// The elements of t as floats: t's own memory when fp32, else a converted copy in scratch.
const float* read_floats(const Tensor& t, std::vector<float>& scratch);

// Where to compute float results for `out`: its own memory when fp32, else scratch.
float* float_output(Tensor& out, std::vector<float>& scratch);

// Stores results computed in float_output's buffer into `out` (one rounding for fp16).
void commit_float_output(Tensor& out, const float* data);

// ---- Elementwise loops in float over fp16 or fp32 storage. fp16 operands are widened
// block by block into a stack buffer (vectorized, half_to_float) instead of one element at a
// time, and results narrowed once on store; fp32 operands are used in place.

// Elements per block: small enough for a stack buffer that stays in L1.
constexpr int64_t kFloatBlock = 512;
// The least number of elements an elementwise loop gives one thread (parallel_for's grain):
// below about this, waking a pool thread costs more than it saves.
constexpr int64_t kElementwiseGrain = 32768;

// n elements of src as floats: src itself, or widened into buf (kFloatBlock floats).
inline const float* float_block_in(const float* src, int64_t, float*) { return src; }
inline const float* float_block_in(const half* src, int64_t n, float* buf) {
  half_to_float(src, buf, n);
  return buf;
}
// Where to compute n float results meant for dst: dst itself, or buf.
inline float* float_block_out(float* dst, float*) { return dst; }
inline float* float_block_out(half*, float* buf) { return buf; }
// Stores the results computed where float_block_out said.
inline void float_block_store(float*, const float*, int64_t) {}
inline void float_block_store(half* dst, const float* results, int64_t n) { float_to_half(results, dst, n); }

// dst[i] = f(src[i]) for T = half or float, computed in float by
// block(const float* x, float* y, int64_t n), over the pool's threads when n is large.
// x and y may be the same memory (an fp32 dst aliasing src is fine).
template <class T, class Block>
void map_float_blocks(const T* src, T* dst, int64_t n, Block&& block) {
  parallel_for(n, kElementwiseGrain, [&](int64_t begin, int64_t end) {
    float in[kFloatBlock], out[kFloatBlock];
    for (int64_t i = begin; i < end; i += kFloatBlock) {
      const int64_t m = std::min(kFloatBlock, end - i);
      float* y = float_block_out(dst + i, out);
      block(float_block_in(src + i, m, in), y, m);
      float_block_store(dst + i, y, m);
    }
  });
}

}  // namespace coremlrt::ops
