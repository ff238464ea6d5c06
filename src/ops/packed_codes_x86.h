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

// One group's values eight lanes at a time, as packed::value_of computes them (shared by the
// AVX2 decoders, packed_codes_avx2.cc, and the AVX2 decode step, packed_dot_avx2.cc).
COREMLRT_AVX2 inline __m256 round_half8(__m256 x) { return _mm256_cvtph_ps(_mm256_cvtps_ph(x, kNearest)); }

// kRound false leaves fp16 results unrounded for a caller that converts them to fp16 itself.
template <bool kRound = true>
COREMLRT_AVX2 inline __m256 map8(const Group& g, __m256 code) {
  const __m256 scale = _mm256_set1_ps(g.scale);
  if (g.map == ir::CodeMap::kShiftScale) {
    if (g.exact_difference) {
      const __m256 v = _mm256_mul_ps(_mm256_sub_ps(code, _mm256_set1_ps(g.offset)), scale);
      return kRound ? round_half8(v) : v;
    }
    if (g.half_scale) {
      const __m256 offset = _mm256_set1_ps(round_to_half(g.offset));
      const __m256 diff = round_half8(_mm256_sub_ps(round_half8(code), offset));
      const __m256 v = _mm256_mul_ps(diff, scale);
      return kRound ? round_half8(v) : v;
    }
    return _mm256_mul_ps(_mm256_sub_ps(code, _mm256_set1_ps(g.offset)), scale);
  }
  const __m256 v = _mm256_mul_ps(scale, _mm256_sub_ps(code, _mm256_set1_ps(g.offset)));
  return g.half_values && kRound ? round_half8(v) : v;
}

// The group's values for raw 4-bit codes 0..7 (low) and 8..15 (high).
template <bool kRound = true>
COREMLRT_AVX2 inline void nibble_values8(const Group& g, bool is_signed, __m256& low, __m256& high) {
  if (g.map == ir::CodeMap::kLut) {
    if (g.half_values) {
      const auto* table = static_cast<const __m128i*>(g.table);
      low = _mm256_cvtph_ps(_mm_loadu_si128(table));
      high = _mm256_cvtph_ps(_mm_loadu_si128(table + 1));
    } else {
      low = _mm256_loadu_ps(static_cast<const float*>(g.table));
      high = _mm256_loadu_ps(static_cast<const float*>(g.table) + 8);
    }
    return;
  }
  low = map8<kRound>(g, _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7));
  high = is_signed ? map8<kRound>(g, _mm256_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1))
                   : map8<kRound>(g, _mm256_setr_ps(8, 9, 10, 11, 12, 13, 14, 15));
}

// Eight byte codes from p, as floats.
COREMLRT_AVX2 inline __m256 byte_codes8(const uint8_t* p, bool is_signed) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b));
}

// A group's sixteen fp16 values (codes 0-7 in `low_halves`, 8-15 in `high_halves`) as two byte
// tables, the values' low bytes and their high bytes, each in both 128-bit lanes: one vpshufb
// per table looks up 32 codes (vpshufb looks up within each lane).
struct NibbleBytes {
  __m256i low, high;
};
COREMLRT_AVX2 inline NibbleBytes nibble_bytes(__m128i low_halves, __m128i high_halves) {
  const __m128i even_odd = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  const __m128i a = _mm_shuffle_epi8(low_halves, even_odd);
  const __m128i b = _mm_shuffle_epi8(high_halves, even_odd);
  return {_mm256_broadcastsi128_si256(_mm_unpacklo_epi64(a, b)), _mm256_broadcastsi128_si256(_mm_unpackhi_epi64(a, b))};
}

// The number of groups a run's columns touch.
inline int64_t group_count(const Run& run) { return run.n <= run.first ? 1 : 1 + (run.n - run.first + run.block - 1) / run.block; }

// Asks for the scales and offsets of the window after rows [w0, w0 + wn) while this one's
// products run: they are a stream of their own beside the codes, which the hardware's prefetch
// left waiting on memory when a window began (docs/reports/performance.md, design choices).
// Prefetches are SSE instructions: every x86-64 CPU has them.
inline void prefetch_next_groups(const RowRuns& rows, int64_t w0, int64_t wn, int64_t window) {
  const int64_t next = w0 + wn;
  if (next >= rows.nr) return;
  const Run first = rows.run(rows.r0 + next), last = rows.run(rows.r0 + std::min(rows.nr, next + window) - 1);
  const int64_t g0 = first.g, g1 = last.g + group_count(last);
  auto ask = [](const void* base, int64_t begin, int64_t end) {
    // A prefetch never faults, so the lines need not lie inside the array.
    const char* p = static_cast<const char*>(base);
    for (int64_t at = begin; at < end + 63; at += 64) _mm_prefetch(p + at, _MM_HINT_T0);
  };
  const ir::PackedTensor& t = *rows.tensor;
  const int64_t scale_size = static_cast<int64_t>(dtype_size(t.scale.dtype));
  ask(t.scale.data, g0 * scale_size, g1 * scale_size);
  if (!t.offset.defined()) return;
  if (t.offset.bits > 0) ask(t.offset.data.data, g0 * t.offset.bits / 8, g1 * t.offset.bits / 8);
  else {
    const int64_t offset_size = static_cast<int64_t>(dtype_size(t.offset.dtype));
    ask(t.offset.data.data, g0 * offset_size, g1 * offset_size);
  }
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

// The decode step's loops of packed_dot_avx2.cc, under dot_simd's contract (packed_codes.h), for
// the forms `takes` says: 4-bit codes of fp16 values, and int8 or uint8 codes.
bool dot_avx2_takes(const ir::PackedTensor& t);
COREMLRT_AVX2 void dot_avx2(const RowRuns& rows, const float* a, const float* a_split, float* c);

}  // namespace coremlrt::ops::packed

#endif
