#pragma once
// The parts of the float GEMM (gemm.h) that its two forms share: gemm.cc (the driver, packing),
// gemm_axpy.cc (B rows contiguous) and gemm_dot.cc (B = W^T). Only those files include it.
#include <cstdint>
#include <cstring>
#include <vector>

#include "ops/gemm.h"
#include "ops/half_lanes.h"

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

namespace coremlrt::ops::gemm_parts {

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
inline bool float_rows(const MatrixView& m) { return !m.packed && !m.half_elements && m.col == 1; }

inline const float* float_at(const MatrixView& m, int64_t r, int64_t c) {
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

// Defines `name(M, N, K, A, lda, B, ldb, C, ldc)`, C[M, N] += A[M, K] (float rows) times a block
// of B read through `B` (float or fp16 elements), once per element type of B and, on x86-64, once
// per version: `portable`, `v3` and `v4` name the tile loops each version runs (templates taking
// those nine arguments). Elsewhere the portable loops alone make the function.
#ifdef COREMLRT_GEMM_X86_V3
#define COREMLRT_GEMM_BLOCK_VERSION(version, name, BT, tiles)                                                     \
  version void name(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const BT* B, int64_t ldb,      \
                    float* C, int64_t ldc) {                                                                     \
    tiles(M, N, K, A, lda, B, ldb, C, ldc);                                                                      \
  }
#define COREMLRT_GEMM_BLOCK_VERSIONS(name, portable, v3, v4)                 \
  COREMLRT_GEMM_BLOCK_VERSION(COREMLRT_GEMM_V4, name, float, v4)             \
  COREMLRT_GEMM_BLOCK_VERSION(COREMLRT_GEMM_V4, name, half, v4)              \
  COREMLRT_GEMM_BLOCK_VERSION(COREMLRT_GEMM_DEFAULT, name, float, portable)  \
  COREMLRT_GEMM_BLOCK_VERSION(COREMLRT_GEMM_DEFAULT, name, half, portable)   \
  COREMLRT_GEMM_BLOCK_VERSION(COREMLRT_GEMM_V3, name, float, v3)             \
  COREMLRT_GEMM_BLOCK_VERSION(COREMLRT_GEMM_V3, name, half, v3)
#else
#define COREMLRT_GEMM_BLOCK_VERSIONS(name, portable, v3, v4)                                                   \
  template <class BT>                                                                                         \
  void name(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const BT* B, int64_t ldb, float* C, \
            int64_t ldc) {                                                                                    \
    portable(M, N, K, A, lda, B, ldb, C, ldc);                                                                \
  }
#endif

// fp16 -> fp32 of a contiguous run (the x86-64-v3 version where the CPU has it).
void widen_halves(const half* src, float* dst, int64_t n);

// A block of m as float rows: in place when it already is one, else packed into `scratch`.
// Returns the block's first element and sets `ld` to its leading dimension.
const float* float_block(const MatrixView& m, int64_t r0, int64_t rows, int64_t c0, int64_t cols,
                         std::vector<float>& scratch, int64_t& ld);

// The axpy form (gemm_axpy.cc): C[M, N] += A[M, K] * B[K, N] for B with contiguous rows.
void gemm_axpy(int64_t M, int64_t N, int64_t K, const MatrixView& A, const MatrixView& B, float* C, int64_t ldc);

// The dot form (gemm_dot.cc): C[M, N] += A[M, K] . W[N, K]^T; `fused` reads fp16 rows of W in
// place, widened as they are loaded (chosen once per product by widen_while_loading).
void gemm_dot(int64_t M, int64_t N, int64_t K, const MatrixView& A, const MatrixView& W, float* C, int64_t ldc,
              bool fused);
bool widen_while_loading(int64_t rows, int64_t K);

}  // namespace coremlrt::ops::gemm_parts
