// The axpy form of the float GEMM (gemm.h): C[i, :] += sum_k A[i, k] * B[k, :], vectorized along
// the rows of B and C, for B with contiguous rows (conv's im2col columns, matmul's y).
#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/gemm_parts.h"

namespace coremlrt::ops::gemm_parts {

namespace {

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

#endif

// One version per element type of B (and per target, on x86-64), as dot_block in gemm_dot.cc.
COREMLRT_GEMM_BLOCK_VERSIONS(axpy_block, axpy_tiles<PortableLoads>, axpy_tiles<X86V3Loads>, axpy_tiles16)

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

}  // namespace

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

}  // namespace coremlrt::ops::gemm_parts
