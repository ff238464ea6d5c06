#pragma once
// The AVX-512 pieces that the decoders (packed_codes_x86.cc) and the decode step's dot products
// (packed_dot_x86.cc) share: one group's values sixteen lanes at a time, as packed::value_of
// computes them (packed_codes.h). Internal to src/ops; only for builds with the x86 loops.
#include <algorithm>
#include <cmath>
#include <cstdint>

#include "ops/packed_codes.h"

#if defined(__x86_64__) && defined(__GNUC__) && !defined(COREMLRT_GEMM_PORTABLE_ONLY)
#define COREMLRT_PACKED_X86 1
#include <immintrin.h>
// GCC 12's AVX-512 intrinsics that fill half a register start from an undefined value and draw
// false "may be used uninitialized" warnings (as in gemm_parts.h).
#if !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace coremlrt::ops::packed {

// Whether the CPU has AVX-512 VBMI2 (expand-loads of 16-bit lanes); asked only where AVX-512
// itself is usable.
bool has_vbmi2();
// Whether the CPU has AVX-512 BITALG (per-lane popcounts); asked only where AVX-512 is usable.
bool has_bitalg();
// Whether sparse fp16 values are put into place by spread_halves32 (BITALG's per-lane popcounts
// and a permute) rather than by VBMI2's expand instructions: on AMD CPUs with BITALG, where the
// expand is several times slower (Zen 4: docs/reports/performance.md, design choices), unless
// prefer_expand(true) turned it off. Elsewhere the expand, as measured before.
bool spread_by_permute();

// Mask bits [position, position + 64) of a sparse tensor (zeros past the mask's end).
uint64_t mask_bits(const SparseValues& s, int64_t position);

constexpr int kNearest = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;

#define COREMLRT_AVX512 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,f16c,fma,popcnt")))
// The per-group loops, inlined into the drivers that walk a run of groups.
#define COREMLRT_AVX512_INLINE __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,f16c,fma,popcnt"), always_inline))
#define COREMLRT_AVX512_VBMI2 __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi2,f16c,popcnt")))
// The decode step's sparse loop, which inlines either way of spreading values (VBMI2 and
// BITALG: every CPU with one has the other, Intel's since Ice Lake and AMD's since Zen 4, and
// the loop runs only where both are present).
#define COREMLRT_AVX512_SPARSE __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi2,avx512bitalg,f16c,fma,popcnt")))
#define COREMLRT_AVX512_SPARSE_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512vbmi2,avx512bitalg,f16c,fma,popcnt"), always_inline))
#define COREMLRT_AVX512_BITALG __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bitalg,f16c,fma,popcnt")))
#define COREMLRT_AVX512_BITALG_INLINE \
  __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,avx512bitalg,f16c,fma,popcnt"), always_inline))

COREMLRT_AVX512 inline __m512 round_half16(__m512 x) { return _mm512_cvtph_ps(_mm512_cvtps_ph(x, kNearest)); }

// Rounding to fp16 by splitting (Veltkamp's): with c = v * 8193, c - (c - v) is v rounded to its
// leading 11 bits, to nearest, ties to even: the same float as round_half16(v) for every v in
// fp16's normal range (|v| from 2^-14 to 65504), in three plain float operations instead of two
// conversions (faster: docs/reports/performance.md, design choices). Used where v = x * scale is an exact product (split_rounding_exact); there
// c = x * (scale * 8193) and c - v = fma(-x, scale, c), so v itself is never formed. The
// explicitly rounded forms keep GCC from fusing the multiply or the last subtraction into an
// fma, which would skip a rounding the split relies on.
COREMLRT_AVX512 inline __m512 split_round_half16(__m512 x, __m512 scale, __m512 scale_8193) {
  const __m512 c = _mm512_mul_round_ps(x, scale_8193, kNearest);
  return _mm512_sub_round_ps(c, _mm512_fnmadd_ps(x, scale, c), kNearest);
}

// The 32 positions of a sparse run of fp16 values whose mask bits are m: lane j takes value
// number popcount(m & (2^j - 1)) of `values` where bit j is set, else 0 (as an expand-load
// gives them). Each lane's count of the mask bits below it comes from a per-lane popcount of
// the mask's half with bits at and above the lane cleared, plus, in the upper sixteen lanes, the
// lower half's count; then one permute. The values are read by a plain load of 32 where that
// stays before `end` (the tensor's last value), else by a masked load of only those used: AMD
// Zen 4's masked loads took most of the decode step's sparse loop (docs/reports/performance.md).
COREMLRT_AVX512_BITALG_INLINE inline __m512i spread_halves32(uint32_t m, const half* values, const half* end) {
  const __m512i below = _mm512_set_epi16(0x7fff, 0x3fff, 0x1fff, 0x0fff, 0x07ff, 0x03ff, 0x01ff, 0x00ff, 0x7f, 0x3f,
                                         0x1f, 0x0f, 0x07, 0x03, 0x01, 0x00, 0x7fff, 0x3fff, 0x1fff, 0x0fff, 0x07ff,
                                         0x03ff, 0x01ff, 0x00ff, 0x7f, 0x3f, 0x1f, 0x0f, 0x07, 0x03, 0x01, 0x00);
  constexpr __mmask32 kUpper = 0xffff0000u;
  const uint32_t low = m & 0xffffu;
  const __m512i halves = _mm512_mask_blend_epi16(kUpper, _mm512_set1_epi16(static_cast<short>(low)),
                                                 _mm512_set1_epi16(static_cast<short>(m >> 16)));
  __m512i index = _mm512_popcnt_epi16(_mm512_and_si512(halves, below));
  index = _mm512_mask_add_epi16(index, kUpper, index, _mm512_set1_epi16(static_cast<short>(__builtin_popcount(low))));
  __m512i packed;
  if (end - values >= 32) {
    packed = _mm512_loadu_si512(values);
  } else {
    const int used = __builtin_popcount(m);
    packed = _mm512_maskz_loadu_epi16(static_cast<__mmask32>(used == 32 ? ~0u : (1u << used) - 1u), values);
  }
  return _mm512_maskz_permutexvar_epi16(m, index, packed);
}

// Whether split_round_half16 gives round_to_half(x * scale) for every x = code - offset of byte
// codes (int8 when is_signed, else uint8): scale * 8193 is exact (scale has at most 11
// significant bits, as an fp16 scale has), so x * scale is exact for the integers x; the offset
// is an integer; and every nonzero value lies in fp16's normal range.
inline bool split_rounding_exact(float scale, float offset, bool is_signed) {
  const float scale_8193 = scale * 8193.0f;
  if (!std::isfinite(scale_8193) || std::fma(scale, 8193.0f, -scale_8193) != 0.0f) return false;
  if (offset != std::nearbyint(offset) || std::fabs(offset) > 256.0f) return false;
  const float lo = is_signed ? -128.0f : 0.0f, hi = is_signed ? 127.0f : 255.0f;
  const float widest = std::max(std::fabs(lo - offset), std::fabs(hi - offset));
  return std::fabs(scale) >= 0x1p-14f && std::fabs(scale) * widest <= 65504.0f;
}

// value_of for sixteen codes (as floats) of one group; kShiftScale and kAffine.
// kRound false leaves fp16 results unrounded for a caller that converts them to fp16 itself.
template <bool kRound = true>
COREMLRT_AVX512 inline __m512 map16(const Group& g, __m512 code) {
  const __m512 scale = _mm512_set1_ps(g.scale);
  if (g.map == ir::CodeMap::kShiftScale) {
    if (g.exact_difference) {
      const __m512 v = _mm512_mul_ps(_mm512_sub_ps(code, _mm512_set1_ps(g.offset)), scale);
      return kRound ? round_half16(v) : v;
    }
    if (g.half_scale) {
      const __m512 offset = _mm512_set1_ps(round_to_half(g.offset));
      const __m512 diff = round_half16(_mm512_sub_ps(round_half16(code), offset));
      const __m512 v = _mm512_mul_ps(diff, scale);
      return kRound ? round_half16(v) : v;
    }
    return _mm512_mul_ps(_mm512_sub_ps(code, _mm512_set1_ps(g.offset)), scale);
  }
  const __m512 v = _mm512_mul_ps(scale, _mm512_sub_ps(code, _mm512_set1_ps(g.offset)));
  return g.half_values && kRound ? round_half16(v) : v;
}

// The group's sixteen values, for raw 4-bit codes 0..15.
template <bool kRound = true>
COREMLRT_AVX512 inline __m512 nibble_values16(const Group& g, bool is_signed) {
  if (g.map == ir::CodeMap::kLut)
    return g.half_values ? _mm512_cvtph_ps(_mm256_loadu_si256(static_cast<const __m256i*>(g.table)))
                         : _mm512_loadu_ps(static_cast<const float*>(g.table));
  __m512i raw = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  if (is_signed) raw = _mm512_sub_epi32(_mm512_xor_si512(raw, _mm512_set1_epi32(8)), _mm512_set1_epi32(8));
  return map16<kRound>(g, _mm512_cvtepi32_ps(raw));
}

// Indices of 2m codes from m bytes (low nibble first): lanes [lo0, hi0, lo1, hi1, ...].
COREMLRT_AVX512 inline void split_nibbles(__m128i bytes, __m128i& first, __m128i& second) {
  const __m128i low4 = _mm_set1_epi8(0x0f);
  const __m128i lo = _mm_and_si128(bytes, low4);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), low4);
  first = _mm_unpacklo_epi8(lo, hi);
  second = _mm_unpackhi_epi8(lo, hi);
}

COREMLRT_AVX512 inline __m512 byte_codes16(const uint8_t* p, bool is_signed) {
  const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return _mm512_cvtepi32_ps(is_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b));
}

// Whether every value of `shape`'s groups is round((code - offset) * scale), rounded once (to
// fp16): what map16 computes for iOS16 affine codes, shift-scale in fp32 and shift-scale in fp16
// with an exact difference. The dot loops then build each block's table from its scale and
// offset alone.
inline bool rounded_once(const Group& shape) {
  return shape.map == ir::CodeMap::kAffine ||
         (shape.map == ir::CodeMap::kShiftScale && (!shape.half_scale || shape.exact_difference));
}

// The fp16 values of 4-bit codes 0..15 (int4 ones sign-extended) in a group whose values are
// round((code - offset) * scale).
COREMLRT_AVX512 inline __m256i rounded_values16(float scale, float offset, bool is_signed) {
  const __m512 codes = is_signed ? _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1)
                                 : _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  return _mm512_cvtps_ph(_mm512_mul_ps(_mm512_sub_ps(codes, _mm512_set1_ps(offset)), _mm512_set1_ps(scale)), kNearest);
}

// Scales and offsets of groups [g0, g0 + n) of `t` as floats, sixteen at a time where they are
// fp16 or fp32 scales and 4- or 8-bit offsets (group_at's conversions, one group at a time, cost
// more than the products of a 32-column block).
COREMLRT_AVX512 void scales_and_offsets(const ir::PackedTensor& t, int64_t g0, int64_t n, float* scales, float* offsets);

// For groups [g0, g0 + n) of `t` (4-bit codes, rounded_once, fp16 values): each group's scale
// s, s * 8193 and offset as floats, for tables of sixteen values computed by
// split_round_half16 (packed_dot_x86.cc). False where the scales are not fp16, or a group's
// scale is subnormal or at least 2^12, or its offset is not an integer within 16 of every code.
// Where true, each difference d = code - offset is an integer with |d| <= 16, s d is exact in
// fp32 and, when not 0, lies in fp16's normal range (2^-14 <= |s d| <= 4094 * 16 = 65504), so
// the split rounds it as the conversion to fp16 would. Computed in registers, the tables cost
// the decode step less than reading them from a table of rounded products (128 KiB, half of L2,
// and a dependent load per group: docs/reports/performance.md, design choices).
// `checked`: fp16_rounded_everywhere(t) holds, so the groups are only converted, not checked
// again on every decode step (docs/reports/performance.md, design choices).
bool fp16_rounded_groups(const ir::PackedTensor& t, int64_t g0, int64_t n, bool is_signed, float* scale,
                         float* scale_8193, float* offset, bool checked = false);
// Whether fp16_rounded_groups holds for every group of `t`.
bool fp16_rounded_everywhere(const ir::PackedTensor& t, bool is_signed);

}  // namespace coremlrt::ops::packed

#endif
