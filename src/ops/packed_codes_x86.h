#pragma once
// The x86 decoders' pieces that packed_codes_x86.cc (which loop runs, per CPU), packed_codes_avx512.cc
// and packed_codes_avx2.cc (the loops) share. Internal to src/ops; only for builds with the x86 loops.
#include <algorithm>
#include <cstdint>

#include "ops/packed_codes_avx512.h"

#ifdef COREMLRT_PACKED_X86

namespace coremlrt::ops::packed {

#define COREMLRT_AVX2 __attribute__((target("avx2,fma,f16c,popcnt")))
#define COREMLRT_AVX2_INLINE __attribute__((target("avx2,fma,f16c,popcnt"), always_inline))

// The tails of every loop: element by element, as packed_weight.cc's portable loops.
template <class Out>
void nibble_tail(const Out* values16, const uint8_t* bytes, int64_t i, int64_t n, Out* out) {
  for (; i + 2 <= n; i += 2) {
    out[i] = values16[bytes[i / 2] & 15];
    out[i + 1] = values16[bytes[i / 2] >> 4];
  }
  if (i < n) out[i] = values16[bytes[i / 2] & 15];
}

template <class Out>
void byte_tail(const Group& g, const uint8_t* codes, bool is_signed, int64_t k, int64_t i, int64_t n, Out* out) {
  for (; i < n; ++i) {
    const uint8_t raw = codes[k + i];
    out[i] = static_cast<Out>(value_of(g, is_signed ? static_cast<int8_t>(raw) : raw, raw));
  }
}

template <class Out, class Code>
int64_t expand_tail(const SparseValues& t, const Code* codes, int64_t p, int64_t k, int64_t i, int64_t n, Out* out) {
  for (; i < n; ++i) out[i] = (mask_bits(t, p + i) & 1) ? static_cast<Out>(codes[k++]) : Out(0);
  return k;
}

// Each driver walks the groups of a run, one after the other (written out in each: a lambda
// would not share the function's target, and its per-group body would not be inlined).
#define COREMLRT_FOR_EACH_GROUP(run, body)                                       \
  for (int64_t done = 0, g = (run).g, len = (run).first; done < (run).n; len = (run).block, ++g) { \
    len = std::min(len, (run).n - done);                                         \
    const Group group = group_at(*(run).tensor, (run).shape, g);                 \
    body;                                                                        \
    done += len;                                                                 \
  }

// Affine 4-bit codes whose values need at most one rounding (shift-scale in fp32 or with an exact
// difference, iOS16 affine): computed lane by lane, (code - offset) * scale, 32 codes at a time.
// Without AVX-512's 16-lane permute, building a table of each block's sixteen values costs more
// than computing the values of its 32 codes.
inline bool affine_arithmetic(const Group& g) {
  return (g.map == ir::CodeMap::kShiftScale && (!g.half_scale || g.exact_difference)) || g.map == ir::CodeMap::kAffine;
}

// The loops of packed_codes_avx512.cc, each for fp16 and fp32 values (Out).
template <class Out>
COREMLRT_AVX512 void nibbles512(const Run& run, Out* out);
template <class Out>
COREMLRT_AVX512 void bytes512(const Run& run, Out* out);
// 4-bit codes into fp16 whose groups' values are rounded once (rounded_once), through tables.
COREMLRT_AVX512 void nibbles512_rounded(const Run& run, half* out);
// Sparse fp16 runs: expand-loads (VBMI2), or spread_halves32 (BITALG: spread_by_permute).
COREMLRT_AVX512_VBMI2 int64_t expand512(const SparseValues& t, int64_t p, int64_t k, int64_t n, half* out);
COREMLRT_AVX512_VBMI2 int64_t expand512(const SparseValues& t, int64_t p, int64_t k, int64_t n, float* out);
template <class Out>
COREMLRT_AVX512_BITALG int64_t permute512(const SparseValues& t, int64_t p, int64_t k, int64_t n, Out* out);
// Sparse fp32 runs.
COREMLRT_AVX512 int64_t expand512_fp32(const SparseValues& t, int64_t p, int64_t k, int64_t n, float* out);

// The loops of packed_codes_avx2.cc, each for fp16 and fp32 values (Out).
template <class Out>
COREMLRT_AVX2 void nibbles256(const Run& run, Out* out);
template <class Out>
COREMLRT_AVX2 void bytes256(const Run& run, Out* out);
template <class Out>
COREMLRT_AVX2 int64_t expand256(const SparseValues& t, int64_t p, int64_t k, int64_t n, Out* out);

}  // namespace coremlrt::ops::packed

#endif
