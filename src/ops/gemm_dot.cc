// The dot form of the float GEMM (gemm.h): C[i, j] += dot(A[i, :], W[j, :]) for a row-major W,
// B = W^T (linear's weight [N, K], read in place, never transposed).
#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/gemm_parts.h"

namespace coremlrt::ops::gemm_parts {

namespace {

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
#endif

// One version per element type of W (and per target, on x86-64).
COREMLRT_GEMM_BLOCK_VERSIONS(dot_block, dot_tiles<PortableLoads>, dot_tiles<X86V3Loads>, dot_tiles_v4)

}  // namespace

// Whether fp16 rows of W are better widened as the dot products load them than widened into
// a float panel first. With the F16C instruction (x86-64-v3) widening costs about as much as a
// load: so for fewer than kWidenPanelRows rows of A, and for K longer than one block of the
// float panels (kDotK), whose K blocks would be half as long as fp16's read in place
// (docs/reports/performance.md, "Measurements behind code choices"). With one K block,
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

}  // namespace coremlrt::ops::gemm_parts
