// The shared float GEMM (see gemm.h). Two forms, chosen by the layout of B:
//   - axpy form, B rows contiguous: tiles of C kept in registers while rows of B stream by;
//   - dot form, B = W^T with W rows contiguous: dot products of rows of A and W, so a weight
//     stored [N, K] (linear's layout) is read in place, never transposed.
// Operands that are not float rows (fp16, or strided) are widened or gathered block by
// block into per-call buffers whose size is bounded by the block sizes (gemm_parts.h); fp16 rows of
// W in the dot form are widened as they are loaded. The forms live in gemm_axpy.cc and gemm_dot.cc.
#include "ops/gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/gemm_parts.h"
#include "ops/thread_pool.h"
#include "ops/util.h"

namespace coremlrt::ops {

MatrixView matrix_view(const Tensor& t, int64_t offset, int64_t row_stride, int64_t col_stride) {
  switch (t.dtype) {
    case DType::Float32: return MatrixView(t.ptr<float>() + offset, row_stride, col_stride);
    case DType::Float16: return MatrixView(t.ptr<half>() + offset, row_stride, col_stride);
    default: fail("expected an fp16 or fp32 matrix, got ", dtype_name(t.dtype));
  }
}

MatrixView MatrixView::at(int64_t r, int64_t c) const {
  MatrixView v = *this;
  if (packed) {
    v.origin_row += packed_transposed ? c : r;
    v.origin_col += packed_transposed ? r : c;
    return v;
  }
  const int64_t offset = r * row + c * col;
  if (half_elements) v.data = static_cast<const half*>(data) + offset;
  else v.data = static_cast<const float*>(data) + offset;
  return v;
}

Tensor matrix_source(const Tensor& t) {
  if (t.dtype == DType::Float32 || t.dtype == DType::Float16) return t;
  Tensor copy = Tensor::empty(DType::Float32, t.shape);
  if (t.dtype == DType::Int32) {  // iOS17's mixed-dtype linear and matmul
    std::copy_n(t.ptr<int32_t>(), t.numel(), copy.ptr<float>());
    return copy;
  }
  const std::vector<float> values = to_floats(t);
  std::copy(values.begin(), values.end(), copy.ptr<float>());
  return copy;
}

namespace gemm_parts {

// fp16 -> fp32 of a contiguous run.
template <class Loads>
[[gnu::always_inline]] inline void widen_run(const half* src, float* dst, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Lanes v;
    Loads::load(src + i, v);
    std::memcpy(dst + i, &v, sizeof v);
  }
  for (; i < n; ++i) dst[i] = element(src + i);
}

#ifdef COREMLRT_GEMM_X86_V3
COREMLRT_GEMM_DEFAULT void widen_halves(const half* src, float* dst, int64_t n) {
  widen_run<PortableLoads>(src, dst, n);
}
COREMLRT_GEMM_V3 void widen_halves(const half* src, float* dst, int64_t n) { widen_run<X86V3Loads>(src, dst, n); }
#else
void widen_halves(const half* src, float* dst, int64_t n) { widen_run<PortableLoads>(src, dst, n); }
#endif

namespace {

// Copies m[r0 : r0+rows, c0 : c0+cols] as floats into dst, row-major with leading dimension
// cols. Contiguous runs (along a row, or along a column for a transposed view) are
// converted in bulk; only a view strided both ways is read element by element.
void pack(const MatrixView& m, int64_t r0, int64_t rows, int64_t c0, int64_t cols, float* dst) {
  if (m.packed) {
    if (!m.packed_transposed) {
      m.packed->decode(m.origin_row + r0, rows, m.origin_col + c0, cols, dst, cols);
      return;
    }
    // The view's block is the packed block [c0, c0 + cols) x [r0, r0 + rows), transposed.
    std::vector<float> block(static_cast<size_t>(rows * cols));
    m.packed->decode(m.origin_row + c0, cols, m.origin_col + r0, rows, block.data(), rows);
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = 0; r < rows; ++r) dst[r * cols + c] = block[c * rows + r];
    return;
  }
  const int64_t start = r0 * m.row + c0 * m.col;
  if (m.half_elements) {
    const half* p = static_cast<const half*>(m.data) + start;
    if (m.col == 1) {
      for (int64_t r = 0; r < rows; ++r) widen_halves(p + r * m.row, dst + r * cols, cols);
    } else if (m.row == 1) {
      std::vector<float> run(static_cast<size_t>(rows));
      for (int64_t c = 0; c < cols; ++c) {
        widen_halves(p + c * m.col, run.data(), rows);
        for (int64_t r = 0; r < rows; ++r) dst[r * cols + c] = run[r];
      }
    } else {
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = static_cast<float>(p[r * m.row + c * m.col]);
    }
    return;
  }
  const float* p = static_cast<const float*>(m.data) + start;
  if (m.col == 1) {
    for (int64_t r = 0; r < rows; ++r) std::memcpy(dst + r * cols, p + r * m.row, cols * sizeof(float));
  } else if (m.row == 1) {
    for (int64_t c = 0; c < cols; ++c)
      for (int64_t r = 0; r < rows; ++r) dst[r * cols + c] = p[c * m.col + r];
  } else {
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) dst[r * cols + c] = p[r * m.row + c * m.col];
  }
}

}  // namespace

// A block of m as float rows: in place when it already is one, else packed into `scratch`.
// Returns the block's first element and sets `ld` to its leading dimension.
const float* float_block(const MatrixView& m, int64_t r0, int64_t rows, int64_t c0, int64_t cols,
                         std::vector<float>& scratch, int64_t& ld) {
  if (float_rows(m)) {
    ld = m.row;
    return float_at(m, r0, c0);
  }
  scratch.resize(static_cast<size_t>(rows * cols));
  pack(m, r0, rows, c0, cols, scratch.data());
  ld = cols;
  return scratch.data();
}

}  // namespace gemm_parts

namespace {

// The least work (multiply-adds) worth a range of its own on another thread: waking a pool
// thread costs a few microseconds.
constexpr int64_t kMinParallelMacs = int64_t{1} << 17;
// The same for a range of whole small products (gemm_each), which gemm cannot block well: an
// attention head of a decode step, [1, 64] x [64, 256] in fp16, takes about a microsecond.
constexpr int64_t kBatchRangeMacs = int64_t{1} << 14;

}  // namespace

void gemm(int64_t M, int64_t N, int64_t K, const MatrixView& A, const MatrixView& B, float* C, int64_t ldc,
          bool accumulate) {
  if (!accumulate)
    for (int64_t i = 0; i < M; ++i) std::fill(C + i * ldc, C + i * ldc + N, 0.0f);
  if (M == 0 || N == 0 || K == 0) return;
  // B with contiguous columns is the transpose of a row-major W [N, K]: use dot products of
  // rows so that W is read in place. (N == 1 or K == 1 makes both layouts contiguous; the
  // axpy form is then as good.)
  // A packed B read transposed is a packed W [N, K] read by rows: the dot form.
  const bool dot = (B.packed ? B.packed_transposed : B.row == 1 && B.col != 1) && N > 1;
  const MatrixView W = B.transposed();
  // Decided once for the whole product: it sets the K blocking, so every part of C must
  // follow the same choice for results not to depend on how C is split. A packed fp16 W
  // follows the fp16 choice, so that its results are those of the same values stored dense.
  const bool half_w = W.packed ? W.packed->dtype() == DType::Float16 : W.half_elements && W.col == 1;
  const bool fused = dot && half_w && gemm_parts::widen_while_loading(M, K);
  auto product = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    if (dot)
      gemm_parts::gemm_dot(i1 - i0, j1 - j0, K, A.at(i0, 0), W.at(j0, 0), C + i0 * ldc + j0, ldc, fused);
    else
      gemm_parts::gemm_axpy(i1 - i0, j1 - j0, K, A.at(i0, 0), B.at(0, j0), C + i0 * ldc + j0, ldc);
  };
  // Threads split C into panels of whole tiles, by columns when there are enough of them,
  // else by rows. Each element of C is still computed by one thread in the same order, so
  // results do not depend on the number of threads. (Never split along K.)
  const int64_t col_unit = dot ? gemm_parts::kDotRows : 4 * kLanes, row_unit = dot ? 2 : 4;
  const int64_t col_units = (N + col_unit - 1) / col_unit, row_units = (M + row_unit - 1) / row_unit;
  const int64_t macs = M * N * K;
  if (macs < 2 * kMinParallelMacs || available_threads() <= 1) {
    product(0, M, 0, N);
    return;
  }
  const bool by_columns = col_units >= 2 * available_threads() || col_units >= row_units;
  const int64_t units = by_columns ? col_units : row_units;
  const int64_t grain = std::max<int64_t>(1, kMinParallelMacs / std::max<int64_t>(1, macs / units));
  parallel_for(units, grain, [&](int64_t begin, int64_t end) {
    if (by_columns) product(0, M, begin * col_unit, std::min(N, end * col_unit));
    else product(begin * row_unit, std::min(M, end * row_unit), 0, N);
  });
}

void gemm_each(int64_t count, int64_t macs_each, RangeFunction products) {
  if (count <= 1 || macs_each >= 2 * kMinParallelMacs) {
    products(0, count);
    return;
  }
  const int64_t grain = std::max<int64_t>(1, kBatchRangeMacs / std::max<int64_t>(1, macs_each));
  parallel_for(count, grain, products);
}

}  // namespace coremlrt::ops
