#pragma once
// The float matrix product behind linear, matmul, einsum, conv, conv_transpose, attention and
// the recurrent layers.
//
// Operands are read where they lie. A constant weight stays in its mapping of weight.bin (or
// its heap buffer), fp32 or fp16: fp16 blocks are widened into small buffers while the
// product runs, so loading a model never makes a float copy of a weight, and instances of
// different functions of one package keep sharing the one mapping. Products are accumulated
// in float.
#include <cstdint>
#include <utility>

#include "coremlrt/tensor.h"
#include "ops/packed_weight.h"
#include "ops/thread_pool.h"

namespace coremlrt::ops {

// A read-only matrix of fp32 or fp16 elements: element (r, c) lies at
// data + r * row + c * col (strides in elements, so a transposed view is just swapped strides).
// Or a packed weight (packed_weight.h): element (r, c) is packed(origin_row + r, origin_col + c),
// or packed(origin_row + c, origin_col + r) when packed_transposed; the product decodes it block
// by block as it goes, so the weight is never expanded whole.
struct MatrixView {
  const void* data = nullptr;
  bool half_elements = false;
  int64_t row = 0, col = 1;
  const PackedMatrix* packed = nullptr;
  int64_t origin_row = 0, origin_col = 0;
  bool packed_transposed = false;

  MatrixView() = default;
  MatrixView(const float* p, int64_t row_stride, int64_t col_stride = 1)
      : data(p), half_elements(false), row(row_stride), col(col_stride) {}
  MatrixView(const half* p, int64_t row_stride, int64_t col_stride = 1)
      : data(p), half_elements(true), row(row_stride), col(col_stride) {}
  explicit MatrixView(const PackedMatrix& m) : packed(&m) {}

  MatrixView transposed() const {
    MatrixView v = *this;
    std::swap(v.row, v.col);
    v.packed_transposed = !v.packed_transposed;
    return v;
  }
  // The view whose element (0, 0) is this one's (r, c).
  MatrixView at(int64_t r, int64_t c) const;
};

// A view of an fp32 or fp16 tensor's elements from `offset` on; throws for other dtypes.
MatrixView matrix_view(const Tensor& t, int64_t offset, int64_t row_stride, int64_t col_stride = 1);

// `t` itself when it is fp16 or fp32 (so it is read in place), else an fp32 copy (fp64
// constants, which are rare and small).
Tensor matrix_source(const Tensor& t);

// The dot form (B = W^T, below) sums each element of C over K in blocks this long for fp32 W:
// kernels that must give gemm's bits (ops/recurrent.cc, gate_dots) block K the same way.
constexpr int64_t kGemmDotBlockK = 1024;

// C[M,N] = (accumulate ? C : 0) + A[M,K] * B[K,N], with C row-major float of leading
// dimension ldc. Any strides work; the fast paths are
//   - B with contiguous rows (B.col == 1), e.g. conv's im2col columns or matmul's y, and
//   - B with contiguous columns (B.row == 1), i.e. B = W^T for a row-major W [N, K] such as
//     linear's weight, computed as dot products of rows of A and W without transposing W.
// Scratch memory is per call and bounded by the block sizes, not by the operands.
void gemm(int64_t M, int64_t N, int64_t K, const MatrixView& A, const MatrixView& B, float* C, int64_t ldc,
          bool accumulate);

// Runs products(begin, end) over [0, count): `count` independent products of macs_each
// multiply-adds each (a batched matmul's matrices, each one gemm call). Products too small for
// gemm to split among threads are spread over the threads whole, a range of them per thread;
// larger ones run in turn, each split by gemm itself. Either way every product is computed by
// one gemm call, so results do not depend on the number of threads.
void gemm_each(int64_t count, int64_t macs_each, RangeFunction products);

}  // namespace coremlrt::ops
