// The shared float GEMM (see gemm.h). Two forms, chosen by the layout of B:
//   - axpy form, B rows contiguous: tiles of C kept in registers while rows of B stream by;
//   - dot form, B = W^T with W rows contiguous: dot products of rows of A and W, so a weight
//     stored [N, K] (linear's layout) is read in place, never transposed.
// Operands that are not float rows (fp16, or strided) are widened or gathered block by
// block into per-call buffers whose size is bounded by the block sizes below; fp16 rows of
// W in the dot form are widened as they are loaded.
#include "ops/gemm.h"

#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/half_lanes.h"
#include "ops/thread_pool.h"
#include "ops/util.h"

// On x86-64 (GCC) the inner kernels are multiversioned: a default build and an x86-64-v3
// build (AVX2, FMA, F16C), picked at load time when the CPU has it; elsewhere the plain build
// is used. This is target_clones with a body per version, because the v3 one uses the F16C
// instruction and pins loads to registers (see X86V3Loads). The drivers stay single-version:
// they only move blocks around. (Defining COREMLRT_GEMM_PORTABLE_ONLY builds just the plain
// code, to test it on a machine that has x86-64-v3.)
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(COREMLRT_GEMM_PORTABLE_ONLY)
#define COREMLRT_GEMM_X86_V3 1
#include <immintrin.h>
// GCC 12's AVX-512 intrinsics that fill half a register (broadcasts, widening casts, fp16
// conversions) start from an undefined value and draw false "may be used uninitialized".
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

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

namespace {

// Block sizes. Axpy form (B rows contiguous): a [kBlockK, kBlockN] block of B stays in cache
// across the rows of A. Dot form (B = W^T): rows of A are taken kDotBlockM at a time, K in
// blocks of kDotK floats (twice that for fp16 W read in place), W in panels of kDotRows rows.
// A panel of W serves kDotBlockM rows of A (128 x 1024 floats of A, 512 KiB, stay in L2).
constexpr int64_t kBlockN = 256, kBlockK = 128, kBlockM = 64;
constexpr int64_t kDotK = kGemmDotBlockK, kDotRows = 32, kDotBlockM = 128;
// From this many rows of A on, fp16 rows of W are widened into a float panel once per block
// of A rather than as every group of four rows loads them, where K fits one block
// (widen_while_loading).
constexpr int64_t kWidenPanelRows = 32;

// True when the view's elements can be used as float rows in place.
bool float_rows(const MatrixView& m) { return !m.packed && !m.half_elements && m.col == 1; }

const float* float_at(const MatrixView& m, int64_t r, int64_t c) {
  return static_cast<const float*>(m.data) + r * m.row + c * m.col;
}

// How a kernel loads eight consecutive elements of W as float lanes (half_lanes.h):
// `Loads::load(p, out)` for p pointing at floats or at fp16 values. (Results go through a
// reference: these are inlined, and a by-value 32-byte vector would only draw ABI warnings in
// the default build.) PortableLoads is plain vector code for any target.
struct PortableLoads {
  [[gnu::always_inline]] static inline void load(const float* p, Lanes& out) {
    out = *reinterpret_cast<const LanesIn*>(p);
  }
  [[gnu::always_inline]] static inline void load(const half* p, Lanes& out) { widen_lanes_portable(p, out); }
  // A float in every lane. (Lanes{} + x adds the zero vector: one more instruction per element
  // of A in the axpy tiles' inner loop, which the x86 versions avoid with a broadcast; x + 0
  // differs from x only for x = -0, so sums differ at most in the sign of a zero.)
  [[gnu::always_inline]] static inline void splat(float x, Lanes& out) { out = Lanes{} + x; }
};

#ifdef COREMLRT_GEMM_X86_V3
// For the x86-64-v3 versions below (which are flattened, so these get inlined there). fp16 is
// widened by the F16C instruction, one instruction instead of about a dozen. A float load is
// pinned to a register by an empty asm: left alone, GCC folds the load into every
// multiply-add that uses the lanes, loading them MR times, and loads then bound the tile.
struct X86V3Loads {
  [[gnu::target("avx")]] static inline void load(const float* p, Lanes& out) {
    out = *reinterpret_cast<const LanesIn*>(p);
    __asm__("" : "+x"(out));
  }
  [[gnu::target("avx,f16c")]] static inline void load(const half* p, Lanes& out) {
    out = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
  }
  [[gnu::target("avx")]] static inline void splat(float x, Lanes& out) { out = _mm256_set1_ps(x); }
};
// The two versions of a multiversioned function. `flatten` inlines everything the v3 version
// calls into it, X86V3Loads included, which a default-target template could not inline.
#define COREMLRT_GEMM_DEFAULT __attribute__((target("default")))
#define COREMLRT_GEMM_V3 __attribute__((target("arch=x86-64-v3"), flatten))
// A third version for x86-64-v4 (AVX-512): the axpy form on sixteen lanes with taller tiles,
// the dot form on eight lanes (so that its sums stay in the same order as the v3 version's)
// with twice the tiles, which the 32 vector registers hold.
#define COREMLRT_GEMM_V4 __attribute__((target("arch=x86-64-v4"), flatten))

typedef float Lanes16 __attribute__((vector_size(64)));
constexpr int kLanes16 = 16;
struct X86V4Loads {
  [[gnu::target("avx512f")]] static inline void load(const float* p, Lanes16& out) {
    out = reinterpret_cast<Lanes16>(_mm512_loadu_ps(p));
    __asm__("" : "+v"(out));
  }
  [[gnu::target("avx512f")]] static inline void load(const half* p, Lanes16& out) {
    out = reinterpret_cast<Lanes16>(_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))));
  }
  [[gnu::target("avx512f")]] static inline void splat(float x, Lanes16& out) {
    out = reinterpret_cast<Lanes16>(_mm512_set1_ps(x));
  }
};
#endif

inline float element(const float* p) { return *p; }
inline float element(const half* p) { return static_cast<float>(*p); }

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

// ---- Axpy form: C[i, :] += sum_k A[i, k] * B[k, :], vectorized along the rows of B and C.

// C[0:MR, 0:8*NV] += A[0:MR, 0:K] * B[0:K, 0:8*NV], the tile of C held in registers
// throughout: per k, NV loads of B and MR broadcasts of A feed MR * NV multiply-adds. Each
// element of C still sums its products in k order, as a plain loop would.
template <int MR, int NV, class Loads, class BT>
[[gnu::always_inline]] inline void axpy_tile(int64_t K, const float* A, int64_t lda, const BT* B, int64_t ldb,
                                             float* C, int64_t ldc) {
  Lanes acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) PortableLoads::load(C + r * ldc + v * kLanes, acc[r][v]);
  for (int64_t k = 0; k < K; ++k) {
    Lanes b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) Loads::load(B + k * ldb + v * kLanes, b[v]);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      Lanes a;
      Loads::splat(A[r * lda + k], a);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] += a * b[v];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) std::memcpy(C + r * ldc + v * kLanes, &acc[r][v], sizeof(Lanes));
}

// C[0:M, 0:N] += A[0:M, 0:K] * B[0:K, 0:N]. Tiles of 4 rows x 16 columns (a column block of B
// stays in L1 while the rows of A pass); fewer than 4 rows get 1 x 32 tiles, whose four
// independent sums keep the multiply-adds busy (depthwise convolutions have M = 1, K = 9).
// Columns left over go one row at a time. B is fp32, or fp16 widened as it is loaded.
template <class Loads, class BT>
[[gnu::always_inline]] inline void axpy_tiles(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                                              const BT* B, int64_t ldb, float* C, int64_t ldc) {
  int64_t j = 0;
  if (M >= 4) {
    for (; j + 2 * kLanes <= N; j += 2 * kLanes) {
      int64_t i = 0;
      for (; i + 4 <= M; i += 4) axpy_tile<4, 2, Loads>(K, A + i * lda, lda, B + j, ldb, C + i * ldc + j, ldc);
      for (; i < M; ++i) axpy_tile<1, 2, Loads>(K, A + i * lda, lda, B + j, ldb, C + i * ldc + j, ldc);
    }
  } else {
    for (; j + 4 * kLanes <= N; j += 4 * kLanes)
      for (int64_t i = 0; i < M; ++i) axpy_tile<1, 4, Loads>(K, A + i * lda, lda, B + j, ldb, C + i * ldc + j, ldc);
  }
  if (j == N) return;
  for (int64_t i = 0; i < M; ++i) {
    float* __restrict c = C + i * ldc;
    const float* a = A + i * lda;
    for (int64_t k = 0; k < K; ++k) {
      const float av = a[k];
      const BT* __restrict b = B + k * ldb;
      for (int64_t jj = j; jj < N; ++jj) c[jj] += av * element(b + jj);
    }
  }
}

#ifdef COREMLRT_GEMM_X86_V3
// The sixteen-lane tile for the v4 version: as axpy_tile, so every element of C still sums
// its products in k order with the same multiply-adds as the other versions.
template <int MR, int NV, class BT>
[[gnu::always_inline]] inline void axpy_tile16(int64_t K, const float* A, int64_t lda, const BT* B, int64_t ldb,
                                               float* C, int64_t ldc) {
  Lanes16 acc[MR][NV];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) std::memcpy(&acc[r][v], C + r * ldc + v * kLanes16, sizeof(Lanes16));
  for (int64_t k = 0; k < K; ++k) {
    Lanes16 b[NV];
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) X86V4Loads::load(B + k * ldb + v * kLanes16, b[v]);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      Lanes16 a;
      X86V4Loads::splat(A[r * lda + k], a);
#pragma GCC unroll 8
      for (int v = 0; v < NV; ++v) acc[r][v] += a * b[v];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int v = 0; v < NV; ++v) std::memcpy(C + r * ldc + v * kLanes16, &acc[r][v], sizeof(Lanes16));
}

// Rows [0, M) of one column strip of width 16 * NV: tiles of 8 rows (16 accumulators), then 4,
// then single rows.
template <int NV, class BT>
[[gnu::always_inline]] inline void axpy_strip16(int64_t M, int64_t K, const float* A, int64_t lda, const BT* B,
                                                int64_t ldb, float* C, int64_t ldc) {
  int64_t i = 0;
  for (; i + 8 <= M; i += 8) axpy_tile16<8, NV>(K, A + i * lda, lda, B, ldb, C + i * ldc, ldc);
  for (; i + 4 <= M; i += 4) axpy_tile16<4, NV>(K, A + i * lda, lda, B, ldb, C + i * ldc, ldc);
  for (; i < M; ++i) axpy_tile16<1, NV>(K, A + i * lda, lda, B, ldb, C + i * ldc, ldc);
}

template <class BT>
[[gnu::always_inline]] inline void axpy_tiles16(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                                                const BT* B, int64_t ldb, float* C, int64_t ldc) {
  int64_t j = 0;
  if (M >= 4) {
    for (; j + 2 * kLanes16 <= N; j += 2 * kLanes16) axpy_strip16<2>(M, K, A, lda, B + j, ldb, C + j, ldc);
  } else {
    for (; j + 4 * kLanes16 <= N; j += 4 * kLanes16)
      for (int64_t i = 0; i < M; ++i)
        axpy_tile16<1, 4>(K, A + i * lda, lda, B + j, ldb, C + i * ldc + j, ldc);
  }
  for (; j + kLanes16 <= N; j += kLanes16) axpy_strip16<1>(M, K, A, lda, B + j, ldb, C + j, ldc);
  if (j == N) return;
  for (int64_t i = 0; i < M; ++i) {
    float* __restrict c = C + i * ldc;
    const float* a = A + i * lda;
    for (int64_t k = 0; k < K; ++k) {
      const float av = a[k];
      const BT* __restrict b = B + k * ldb;
      for (int64_t jj = j; jj < N; ++jj) c[jj] += av * element(b + jj);
    }
  }
}

// One version per element type of B (and per target, on x86-64), as dot_block below.
COREMLRT_GEMM_V4 void axpy_block(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                                 int64_t ldb, float* C, int64_t ldc) {
  axpy_tiles16(M, N, K, A, lda, B, ldb, C, ldc);
}
COREMLRT_GEMM_V4 void axpy_block(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const half* B,
                                 int64_t ldb, float* C, int64_t ldc) {
  axpy_tiles16(M, N, K, A, lda, B, ldb, C, ldc);
}
COREMLRT_GEMM_DEFAULT void axpy_block(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                                      int64_t ldb, float* C, int64_t ldc) {
  axpy_tiles<PortableLoads>(M, N, K, A, lda, B, ldb, C, ldc);
}
COREMLRT_GEMM_DEFAULT void axpy_block(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const half* B,
                                      int64_t ldb, float* C, int64_t ldc) {
  axpy_tiles<PortableLoads>(M, N, K, A, lda, B, ldb, C, ldc);
}
COREMLRT_GEMM_V3 void axpy_block(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B,
                                 int64_t ldb, float* C, int64_t ldc) {
  axpy_tiles<X86V3Loads>(M, N, K, A, lda, B, ldb, C, ldc);
}
COREMLRT_GEMM_V3 void axpy_block(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const half* B,
                                 int64_t ldb, float* C, int64_t ldc) {
  axpy_tiles<X86V3Loads>(M, N, K, A, lda, B, ldb, C, ldc);
}
#else
template <class BT>
void axpy_block(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const BT* B, int64_t ldb, float* C,
                int64_t ldc) {
  axpy_tiles<PortableLoads>(M, N, K, A, lda, B, ldb, C, ldc);
}
#endif

// Whether fp16 rows of B are better widened as the axpy tiles load them than widened into a
// float block first (axpy form). For one row of A every element of B is widened once either
// way, and the block's stores and second reads are saved (attention's probabilities times the
// values in a decode step); with the F16C instruction a widening costs about a load, so up to
// three rows, whose 1 x 64 tiles each widen B again, still gain. Both ways give the same floats.
bool axpy_widens_while_loading(int64_t rows) {
#ifdef COREMLRT_GEMM_X86_V3
  static const bool f16c = __builtin_cpu_supports("x86-64-v3");
  if (f16c) return rows < 4;
#endif
  return rows == 1;
}

void gemm_axpy(int64_t M, int64_t N, int64_t K, const MatrixView& A, const MatrixView& B, float* C, int64_t ldc) {
  std::vector<float> a_scratch, b_scratch;
  const bool half_b_in_place = !B.packed && B.half_elements && B.col == 1 && axpy_widens_while_loading(M);
  for (int64_t n0 = 0; n0 < N; n0 += kBlockN) {
    const int64_t nn = std::min(kBlockN, N - n0);
    for (int64_t k0 = 0; k0 < K; k0 += kBlockK) {
      const int64_t kk = std::min(kBlockK, K - k0);
      int64_t ldb = 0;
      const float* b = half_b_in_place ? nullptr : float_block(B, k0, kk, n0, nn, b_scratch, ldb);
      for (int64_t i0 = 0; i0 < M; i0 += kBlockM) {
        const int64_t mm = std::min(kBlockM, M - i0);
        int64_t lda = 0;
        const float* a = float_block(A, i0, mm, k0, kk, a_scratch, lda);
        if (half_b_in_place) {
          const half* b_half = static_cast<const half*>(B.data) + k0 * B.row + n0;
          axpy_block(mm, nn, kk, a, lda, b_half, B.row, C + i0 * ldc + n0, ldc);
        } else {
          axpy_block(mm, nn, kk, a, lda, b, ldb, C + i0 * ldc + n0, ldc);
        }
      }
    }
  }
}

// ---- Dot form: C[i, j] += dot(A[i, :], W[j, :]) for a row-major W, B = W^T.

// C[0:MR, 0:NR] += A[0:MR, 0:K] . W[0:NR, 0:K]^T. Each lane of an accumulator sums its own
// share of K, so the products vectorize without reassociating one running sum; the lanes are
// added at the end. MR * NR independent accumulators keep the multiply-add units busy, and
// every loaded lane of A is used NR times and of W MR times. The fixed loops are unrolled so
// that the accumulators live in registers. W is fp32, or fp16 widened as it is loaded.
template <int MR, int NR, class Loads, class WT>
[[gnu::always_inline]] inline void dot_tile(int64_t K, const float* A, int64_t lda, const WT* W, int64_t ldw, float* C,
                                            int64_t ldc) {
  Lanes acc[MR][NR];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) acc[r][j] = Lanes{};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    Lanes a[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) PortableLoads::load(A + r * lda + k, a[r]);
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      Lanes w;
      Loads::load(W + j * ldw + k, w);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) acc[r][j] += a[r] * w;
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int j = 0; j < NR; ++j) {
      float sum = 0.0f;
      for (int l = 0; l < kLanes; ++l) sum += acc[r][j][l];
      for (int64_t t = k; t < K; ++t) sum += A[r * lda + t] * element(W + j * ldw + t);
      C[r * ldc + j] += sum;
    }
}

// C[M, N] += A[M, K] . W[N, K]^T in tiles of 2 x 4. Four rows of W stay in L1 while every
// row of A passes by them.
// The v4 version takes 4 x 4 tiles first (its 32 registers hold 16 accumulators); how C is
// tiled does not change the order in which an element's products are summed.
template <class Loads, class WT, bool kTall = false>
[[gnu::always_inline]] inline void dot_tiles(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const WT* W,
                                             int64_t ldw, float* C, int64_t ldc) {
  int64_t j = 0;
  for (; j + 4 <= N; j += 4) {
    int64_t i = 0;
    if constexpr (kTall)
      for (; i + 4 <= M; i += 4) dot_tile<4, 4, Loads>(K, A + i * lda, lda, W + j * ldw, ldw, C + i * ldc + j, ldc);
    for (; i + 2 <= M; i += 2) dot_tile<2, 4, Loads>(K, A + i * lda, lda, W + j * ldw, ldw, C + i * ldc + j, ldc);
    if (i < M) dot_tile<1, 4, Loads>(K, A + i * lda, lda, W + j * ldw, ldw, C + i * ldc + j, ldc);
  }
  for (; j < N; ++j) {
    int64_t i = 0;
    for (; i + 2 <= M; i += 2) dot_tile<2, 1, Loads>(K, A + i * lda, lda, W + j * ldw, ldw, C + i * ldc + j, ldc);
    if (i < M) dot_tile<1, 1, Loads>(K, A + i * lda, lda, W + j * ldw, ldw, C + i * ldc + j, ldc);
  }
}

// One version per element type of W (and per target, on x86-64).
#ifdef COREMLRT_GEMM_X86_V3
// The v4 dot form: each sixteen-lane accumulator holds the eight-lane sums of two neighbouring
// rows of W (low half row j, high half row j + 1) against one row of A, broadcast to both
// halves. Every element of C is thus summed exactly as dot_tile sums it (its own eight lanes,
// then the lanes in order, then the tail), with half the multiply-add instructions.
[[gnu::target("avx512f,avx512dq")]] inline void load_row_pair(const float* p0, const float* p1, Lanes16& out) {
  const __m512 low = _mm512_zextps256_ps512(_mm256_loadu_ps(p0));
  out = reinterpret_cast<Lanes16>(_mm512_insertf32x8(low, _mm256_loadu_ps(p1), 1));
}
[[gnu::target("avx512f,avx512dq")]] inline void load_row_pair(const half* p0, const half* p1, Lanes16& out) {
  const __m128i first = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p0));
  const __m128i second = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p1));
  const __m256i both = _mm256_inserti128_si256(_mm256_zextsi128_si256(first), second, 1);
  out = reinterpret_cast<Lanes16>(_mm512_cvtph_ps(both));
}
[[gnu::target("avx512f,avx512dq")]] inline void broadcast_row(const float* p, Lanes16& out) {
  out = reinterpret_cast<Lanes16>(_mm512_broadcast_f32x8(_mm256_loadu_ps(p)));
}

// C[0:8] += the sums of four pair accumulators of dot_tile_pairs (eight rows of W, eight lanes
// each), for a K with no tail. Each sum adds its eight lanes in order to zero, as the loop in
// dot_tile_pairs does, so the bits are the same; the eight sums just run side by side after the
// lanes are transposed (lane l of every row into one vector), not one lane at a time.
[[gnu::target("avx512f,avx512dq")]] inline void add_pair_sums(const Lanes16 (&acc)[4], float* C) {
  __m256 row[8];
  for (int p = 0; p < 4; ++p) {
    const __m512 both = reinterpret_cast<__m512>(acc[p]);
    row[2 * p] = _mm512_castps512_ps256(both);
    row[2 * p + 1] = _mm512_extractf32x8_ps(both, 1);
  }
  // Per 128-bit half: rows 0-3 (u) and 4-7 (v) of lanes l (low half) and l + 4 (high half).
  __m256 u[4], v[4];
  for (int q = 0; q < 2; ++q) {
    const __m256* r = row + 4 * q;
    const __m256 low01 = _mm256_unpacklo_ps(r[0], r[1]), high01 = _mm256_unpackhi_ps(r[0], r[1]);
    const __m256 low23 = _mm256_unpacklo_ps(r[2], r[3]), high23 = _mm256_unpackhi_ps(r[2], r[3]);
    __m256* out = q == 0 ? u : v;
    out[0] = _mm256_shuffle_ps(low01, low23, _MM_SHUFFLE(1, 0, 1, 0));
    out[1] = _mm256_shuffle_ps(low01, low23, _MM_SHUFFLE(3, 2, 3, 2));
    out[2] = _mm256_shuffle_ps(high01, high23, _MM_SHUFFLE(1, 0, 1, 0));
    out[3] = _mm256_shuffle_ps(high01, high23, _MM_SHUFFLE(3, 2, 3, 2));
  }
  __m256 lane[8];
  for (int l = 0; l < 4; ++l) {
    lane[l] = _mm256_permute2f128_ps(u[l], v[l], 0x20);
    lane[l + 4] = _mm256_permute2f128_ps(u[l], v[l], 0x31);
  }
  __m256 sum = _mm256_setzero_ps();
  for (int l = 0; l < 8; ++l) sum = _mm256_add_ps(sum, lane[l]);
  _mm256_storeu_ps(C, _mm256_add_ps(_mm256_loadu_ps(C), sum));
}

template <int MR, int NP, class WT>
[[gnu::always_inline]] inline void dot_tile_pairs(int64_t K, const float* A, int64_t lda, const WT* W, int64_t ldw,
                                                  float* C, int64_t ldc) {
  Lanes16 acc[MR][NP];
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p) acc[r][p] = Lanes16{};
  int64_t k = 0;
  for (; k + kLanes <= K; k += kLanes) {
    Lanes16 a[MR];
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) broadcast_row(A + r * lda + k, a[r]);
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p) {
      Lanes16 w;
      load_row_pair(W + 2 * p * ldw + k, W + (2 * p + 1) * ldw + k, w);
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) acc[r][p] += a[r] * w;
    }
  }
  if constexpr (NP == 4) {
    if (k == K) {
#pragma GCC unroll 8
      for (int r = 0; r < MR; ++r) add_pair_sums(acc[r], C + r * ldc);
      return;
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 8
    for (int p = 0; p < NP; ++p)
#pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const int j = 2 * p + h;
        float sum = 0.0f;
        for (int l = 0; l < kLanes; ++l) sum += acc[r][p][h * kLanes + l];
        for (int64_t t = k; t < K; ++t) sum += A[r * lda + t] * element(W + j * ldw + t);
        C[r * ldc + j] += sum;
      }
}

// Eight rows of W at a time (four pairs), against four rows of A (sixteen accumulators) or one;
// the last columns go through the eight-lane tiles.
template <class WT>
[[gnu::always_inline]] inline void dot_tiles_v4(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                                                const WT* W, int64_t ldw, float* C, int64_t ldc) {
  int64_t j = 0;
  for (; j + 8 <= N; j += 8) {
    int64_t i = 0;
    for (; i + 4 <= M; i += 4) dot_tile_pairs<4, 4>(K, A + i * lda, lda, W + j * ldw, ldw, C + i * ldc + j, ldc);
    for (; i < M; ++i) dot_tile_pairs<1, 4>(K, A + i * lda, lda, W + j * ldw, ldw, C + i * ldc + j, ldc);
  }
  if (j < N) dot_tiles<X86V3Loads, WT, true>(M, N - j, K, A, lda, W + j * ldw, ldw, C + j, ldc);
}

COREMLRT_GEMM_V4 void dot_block(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* W,
                                int64_t ldw, float* C, int64_t ldc) {
  dot_tiles_v4(M, N, K, A, lda, W, ldw, C, ldc);
}
COREMLRT_GEMM_V4 void dot_block(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const half* W,
                                int64_t ldw, float* C, int64_t ldc) {
  dot_tiles_v4(M, N, K, A, lda, W, ldw, C, ldc);
}
COREMLRT_GEMM_DEFAULT void dot_block(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* W,
                                     int64_t ldw, float* C, int64_t ldc) {
  dot_tiles<PortableLoads>(M, N, K, A, lda, W, ldw, C, ldc);
}
COREMLRT_GEMM_V3 void dot_block(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* W,
                                int64_t ldw, float* C, int64_t ldc) {
  dot_tiles<X86V3Loads>(M, N, K, A, lda, W, ldw, C, ldc);
}
COREMLRT_GEMM_DEFAULT void dot_block(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const half* W,
                                     int64_t ldw, float* C, int64_t ldc) {
  dot_tiles<PortableLoads>(M, N, K, A, lda, W, ldw, C, ldc);
}
COREMLRT_GEMM_V3 void dot_block(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const half* W,
                                int64_t ldw, float* C, int64_t ldc) {
  dot_tiles<X86V3Loads>(M, N, K, A, lda, W, ldw, C, ldc);
}
#else
template <class WT>
void dot_block(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const WT* W, int64_t ldw, float* C,
               int64_t ldc) {
  dot_tiles<PortableLoads>(M, N, K, A, lda, W, ldw, C, ldc);
}
#endif

// Whether fp16 rows of W are better widened as the dot products load them than widened into
// a float panel first. With the F16C instruction (x86-64-v3) widening costs about as much as a
// load: so for fewer than kWidenPanelRows rows of A, and for K longer than one block of the
// float panels (kDotK), whose K blocks would be half as long as fp16's read in place. (Measured
// on [128, 768] x [768, 32000]: 127 GFLOPS widened while loading, 149 with panels; [128, 3072]
// x [3072, 768]: 126 against 115; [16, 768] x [768, 3072]: 146 against 140.) With one K block,
// both ways sum each element of C in the same order. With the portable integer sequence,
// widening while loading pays only for very few rows of A, since every row pair of A widens
// the rows of W again, while a panel is widened once.
bool widen_while_loading(int64_t rows, int64_t K) {
#ifdef COREMLRT_GEMM_X86_V3
  static const bool f16c = __builtin_cpu_supports("x86-64-v3");
  if (f16c) return rows < kWidenPanelRows || K > kDotK;
#endif
  (void)K;
  return rows <= 2;
}

void gemm_dot(int64_t M, int64_t N, int64_t K, const MatrixView& A, const MatrixView& W, float* C, int64_t ldc,
              bool fused) {
  std::vector<float> a_scratch, w_scratch;
  std::vector<half> w_halves;
  // One row of A (a decode step) against a packed W: its codes decoded in registers inside the
  // dot products, where this CPU and W's form allow (packed_weight.h, dot_rows), since a decoded
  // panel would be read only once.
  if (W.packed && M == 1) {
    int64_t lda = 0;
    const float* a = float_block(A, 0, 1, 0, K, a_scratch, lda);
    if (W.packed->dot_rows(W.origin_row, N, W.origin_col, K, a, C)) return;
  }
  // Four rows of W, kk long, are what stays in L1 while the rows of A pass (16 KiB).
  const int64_t block_k = fused ? 2 * kDotK : kDotK;
  // A packed W is decoded a panel at a time; for a few rows of A (a decode step) panels of 8
  // rows keep the decoded panel in L1. How W is cut into panels does not change the order in
  // which an element of C sums its products.
  const int64_t panel = W.packed && M <= 4 ? 8 : kDotRows;
  for (int64_t k0 = 0; k0 < K; k0 += block_k) {
    const int64_t kk = std::min(block_k, K - k0);
    for (int64_t i0 = 0; i0 < M; i0 += kDotBlockM) {
      const int64_t mm = std::min(kDotBlockM, M - i0);
      int64_t lda = 0;
      const float* a = float_block(A, i0, mm, k0, kk, a_scratch, lda);
      for (int64_t j0 = 0; j0 < N; j0 += panel) {
        const int64_t nn = std::min(panel, N - j0);
        if (fused && W.packed) {
          // fp16 values decoded into fp16: the same operands as an fp16 W read in place.
          w_halves.resize(static_cast<size_t>(nn * kk));
          W.packed->decode(W.origin_row + j0, nn, W.origin_col + k0, kk, w_halves.data(), kk);
          dot_block(mm, nn, kk, a, lda, w_halves.data(), kk, C + i0 * ldc + j0, ldc);
        } else if (fused) {
          const half* w = static_cast<const half*>(W.data) + j0 * W.row + k0;
          dot_block(mm, nn, kk, a, lda, w, W.row, C + i0 * ldc + j0, ldc);
        } else if (W.packed && W.packed->dtype() == DType::Float16) {
          // fp16 values decoded into fp16, then widened: the same floats as decoding into
          // floats, whose per-value conversions are slower for some forms (sparse palettized
          // weights took twice the prefill time).
          w_halves.resize(static_cast<size_t>(nn * kk));
          w_scratch.resize(static_cast<size_t>(nn * kk));
          W.packed->decode(W.origin_row + j0, nn, W.origin_col + k0, kk, w_halves.data(), kk);
          widen_halves(w_halves.data(), w_scratch.data(), nn * kk);
          dot_block(mm, nn, kk, a, lda, w_scratch.data(), kk, C + i0 * ldc + j0, ldc);
        } else {
          int64_t ldw = 0;
          const float* w = float_block(W, j0, nn, k0, kk, w_scratch, ldw);
          dot_block(mm, nn, kk, a, lda, w, ldw, C + i0 * ldc + j0, ldc);
        }
      }
    }
  }
}

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
  const bool fused = dot && half_w && widen_while_loading(M, K);
  auto product = [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    if (dot)
      gemm_dot(i1 - i0, j1 - j0, K, A.at(i0, 0), W.at(j0, 0), C + i0 * ldc + j0, ldc, fused);
    else
      gemm_axpy(i1 - i0, j1 - j0, K, A.at(i0, 0), B.at(0, j0), C + i0 * ldc + j0, ldc);
  };
  // Threads split C into panels of whole tiles, by columns when there are enough of them,
  // else by rows. Each element of C is still computed by one thread in the same order, so
  // results do not depend on the number of threads. (Never split along K.)
  const int64_t col_unit = dot ? kDotRows : 4 * kLanes, row_unit = dot ? 2 : 4;
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
