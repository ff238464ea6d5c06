// The x86 dot products of the recurrent layers (recurrent_parts.h): C[r, j] += dot(A[r, :], W[j, :])
// for rows of a row-major W whose length K is a multiple of 8, with each element summed exactly as
// gemm's x86-64-v3 and v4 dot forms sum it (dot_tile and dot_tile_pairs in ops/gemm_dot.cc): eight
// lanes, each a chain of fused multiply-adds over its share of a block of kGemmDotBlockK, the lanes
// then added in order to 0, and that sum added to C, block after block. So their results are those
// of the gemm call they replace; they differ in adding the lanes of eight elements at once, after a
// transposition, where gemm adds them one element at a time.
#include <algorithm>

#include "ops/gemm.h"
#include "ops/recurrent_parts.h"

#ifdef COREMLRT_RECURRENT_DOTS

namespace coremlrt::ops::recurrent_parts {

namespace {

// out += the lane sums of acc[0..8), lane j of the result summing acc[j].
[[gnu::target("avx"), gnu::always_inline]] inline void add_lane_sums(const __m256 (&acc)[8], __m256& out) {
  const __m256 t0 = _mm256_unpacklo_ps(acc[0], acc[1]), t1 = _mm256_unpackhi_ps(acc[0], acc[1]);
  const __m256 t2 = _mm256_unpacklo_ps(acc[2], acc[3]), t3 = _mm256_unpackhi_ps(acc[2], acc[3]);
  const __m256 t4 = _mm256_unpacklo_ps(acc[4], acc[5]), t5 = _mm256_unpackhi_ps(acc[4], acc[5]);
  const __m256 t6 = _mm256_unpacklo_ps(acc[6], acc[7]), t7 = _mm256_unpackhi_ps(acc[6], acc[7]);
  const __m256 u0 = _mm256_shuffle_ps(t0, t2, 0x44), u1 = _mm256_shuffle_ps(t0, t2, 0xee);
  const __m256 u2 = _mm256_shuffle_ps(t1, t3, 0x44), u3 = _mm256_shuffle_ps(t1, t3, 0xee);
  const __m256 u4 = _mm256_shuffle_ps(t4, t6, 0x44), u5 = _mm256_shuffle_ps(t4, t6, 0xee);
  const __m256 u6 = _mm256_shuffle_ps(t5, t7, 0x44), u7 = _mm256_shuffle_ps(t5, t7, 0xee);
  __m256 sum = _mm256_add_ps(_mm256_setzero_ps(), _mm256_permute2f128_ps(u0, u4, 0x20));
  sum = _mm256_add_ps(sum, _mm256_permute2f128_ps(u1, u5, 0x20));
  sum = _mm256_add_ps(sum, _mm256_permute2f128_ps(u2, u6, 0x20));
  sum = _mm256_add_ps(sum, _mm256_permute2f128_ps(u3, u7, 0x20));
  sum = _mm256_add_ps(sum, _mm256_permute2f128_ps(u0, u4, 0x31));
  sum = _mm256_add_ps(sum, _mm256_permute2f128_ps(u1, u5, 0x31));
  sum = _mm256_add_ps(sum, _mm256_permute2f128_ps(u2, u6, 0x31));
  sum = _mm256_add_ps(sum, _mm256_permute2f128_ps(u3, u7, 0x31));
  out = _mm256_add_ps(out, sum);
}

// C[r, 0:8] += A[r, k0:k1] . W[0:8, k0:k1]^T for r < MR: each sixteen-lane accumulator holds
// two rows of W (as dot_tile_pairs does), so that CPUs with two 512-bit multiply-add units
// use both. (Halves are joined and split with __builtin_shufflevector: GCC 12's intrinsics for
// that start from an undefined register and draw -Wmaybe-uninitialized, ops/gemm_parts.h.)
template <int MR>
[[gnu::target("arch=x86-64-v4"), gnu::always_inline]] inline void project_tile(int64_t k0, int64_t k1, const float* A,
                                                                             int64_t lda, const float* W, int64_t ldw,
                                                                             float* C, int64_t ldc) {
  __m512 acc[MR][4];
  for (int r = 0; r < MR; ++r)
    for (int p = 0; p < 4; ++p) acc[r][p] = _mm512_setzero_ps();
  for (int64_t k = k0; k < k1; k += 8) {
    __m512 w[4];
    for (int p = 0; p < 4; ++p) {
      const __m256 low = _mm256_loadu_ps(W + 2 * p * ldw + k), high = _mm256_loadu_ps(W + (2 * p + 1) * ldw + k);
      w[p] = __builtin_shufflevector(low, high, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    }
    for (int r = 0; r < MR; ++r) {
      const __m256 row = _mm256_loadu_ps(A + r * lda + k);
      const __m512 a = __builtin_shufflevector(row, row, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7);
      for (int p = 0; p < 4; ++p) acc[r][p] = _mm512_fmadd_ps(a, w[p], acc[r][p]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    __m256 halves[8];
    for (int p = 0; p < 4; ++p) {
      halves[2 * p] = __builtin_shufflevector(acc[r][p], acc[r][p], 0, 1, 2, 3, 4, 5, 6, 7);
      halves[2 * p + 1] = __builtin_shufflevector(acc[r][p], acc[r][p], 8, 9, 10, 11, 12, 13, 14, 15);
    }
    __m256 out = _mm256_loadu_ps(C + r * ldc);
    add_lane_sums(halves, out);
    _mm256_storeu_ps(C + r * ldc, out);
  }
}

// Prefetches the cache lines [first, last) from p on, into L1 (locality 3) or L2 (2).
template <int Locality>
[[gnu::always_inline]] inline void prefetch_lines(const char* p, int64_t first, int64_t last) {
  for (int64_t l = first; l < last; ++l) __builtin_prefetch(p + l * 64, 0, Locality);
}

}  // namespace

// The recurrent product of one block of hidden units for a single row of h:
// g[q*n + i] = x[q*H + i] + dot(h, w[(q*H + i) * H ...]) for the gates q < `gates` and units
// i < n (n and H multiples of 8), w pointing at the block's first row. One pass over all gates'
// rows instead of a gemm call per gate, whose set-up costs about as much as these small
// products. Reading W_hh is what bounds it, so eight lanes suffice.
__attribute__((target("arch=x86-64-v3"))) void gate_dots(const float* h, const float* w, int64_t H, int64_t n,
                                                        int64_t gates, const float* x, float* g) {
  for (int64_t q = 0; q < gates; ++q)
    for (int64_t i0 = 0; i0 < n; i0 += 8) {
      const float* rows = w + (q * H + i0) * H;
      __m256 out = _mm256_loadu_ps(x + q * H + i0);
      for (int64_t k0 = 0; k0 < H; k0 += kGemmDotBlockK) {
        const int64_t k1 = std::min(H, k0 + kGemmDotBlockK);
        __m256 acc[8];
        for (int r = 0; r < 8; ++r) acc[r] = _mm256_setzero_ps();
        for (int64_t k = k0; k < k1; k += 8) {
          const __m256 a = _mm256_loadu_ps(h + k);
          for (int r = 0; r < 8; ++r) acc[r] = _mm256_fmadd_ps(a, _mm256_loadu_ps(rows + r * H + k), acc[r]);
        }
        add_lane_sums(acc, out);
      }
      _mm256_storeu_ps(g + q * n + i0, out);
    }
}
// C[M, N] += A[M, K] . W[N, K]^T for N and K multiples of 8 and ldw == K (the input projection
// of all steps), in panels of eight rows of W. While a panel is used, the next one is fetched,
// and `ahead_bytes` from `ahead` on are fetched towards L2 (the recurrent weight that the steps
// read next): the products keep the core busy while memory delivers both. Without it, the
// first pass over each weight waits on memory, which costs about as much as five later steps.
__attribute__((target("arch=x86-64-v4"))) void project_dots(int64_t M, int64_t N, int64_t K, const float* A,
                                                           int64_t lda, const float* W, float* C, int64_t ldc,
                                                           const char* ahead, int64_t ahead_bytes) {
  const int64_t panels = N / 8, panel_lines = 8 * K * 4 / 64, ahead_lines = ahead_bytes / 64;
  const int64_t tiles = (M + 3) / 4;
  for (int64_t p = 0; p < panels; ++p) {
    const float* w = W + p * 8 * K;
    const char* next = reinterpret_cast<const char*>(w + 8 * K);
    const int64_t a0 = p * ahead_lines / panels, a1 = (p + 1) * ahead_lines / panels;
    for (int64_t k0 = 0; k0 < K; k0 += kGemmDotBlockK) {
      const int64_t k1 = std::min(K, k0 + kGemmDotBlockK);
      for (int64_t t = 0; t < tiles; ++t) {
        if (k0 == 0) {  // a share of the prefetches before each tile
          if (p + 1 < panels) prefetch_lines<3>(next, t * panel_lines / tiles, (t + 1) * panel_lines / tiles);
          prefetch_lines<2>(ahead, a0 + t * (a1 - a0) / tiles, a0 + (t + 1) * (a1 - a0) / tiles);
        }
        const int64_t i = 4 * t;
        if (i + 4 <= M) {
          project_tile<4>(k0, k1, A + i * lda, lda, w, K, C + i * ldc + p * 8, ldc);
        } else {
          for (int64_t r = i; r < M; ++r) project_tile<1>(k0, k1, A + r * lda, lda, w, K, C + r * ldc + p * 8, ldc);
        }
      }
    }
  }
}

// Whether gemm takes its fused multiply-add versions on this CPU, which the kernels above
// reproduce; project_dots also needs x86-64-v4.
bool have_gate_dots() {
  static const bool v3 = __builtin_cpu_supports("x86-64-v3");
  return v3;
}
bool have_project_dots() {
  static const bool v4 = __builtin_cpu_supports("x86-64-v4");
  return v4;
}

}  // namespace coremlrt::ops::recurrent_parts

#endif
