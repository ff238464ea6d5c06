// A decode step's products with packed weights on CPUs with AVX2 but not AVX-512
// (packed_codes.h, dot_simd; packed_dot_x86.cc holds the AVX-512 loops): one row of A against
// rows of W, the codes decoded in registers, where a panel would be decoded into memory only to
// be read once.
//
// AVX2 has no sixteen-lane permute of floats, so a group's sixteen values are looked up as fp16
// bytes: the low bytes and the high bytes of its values are two tables (nibble_bytes), one
// vpshufb per table looks up 32 codes, and interleaving the two results gives the codes' fp16
// values, widened by vcvtph2ps (4-bit codes of fp32 values are left to the panel path). The 32
// codes of sixteen bytes are taken as their low nibbles (even columns) and high nibbles (odd
// columns), against `a_split`, `a` reordered the same way (packed_codes.h). Byte codes are
// widened and mapped eight at a time.
//
// A group's values are the AVX2 decoders' (packed_codes_avx2.cc): value_of's own float
// operations, rounded to fp16 by the conversion (to nearest, ties to even, as round_to_half), or
// the palette's fp16 values. The products are summed in another order than the panel path's, so
// results differ from the folded weight's by float rounding only (packed_weight_test.cc,
// DecodeStepDotProductsMatchTheValues).
#include <algorithm>
#include <vector>

#include "ops/packed_codes.h"
#include "ops/packed_codes_x86.h"

// The rounding by splitting (bytes_rounded_once) needs its products and differences apart; popped
// at the end, so that a build compiling several files as one unit keeps the others' options.
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")

namespace coremlrt::ops::packed {

#ifdef COREMLRT_PACKED_X86

// The loops' pieces, in a namespace of their own: builds that compile src/ops as one unit
// (CMake's unity build, as the wheel's) would otherwise join them with packed_dot_x86.cc's.
namespace {
namespace avx2 {

// How far ahead of the codes being read the loop asks for more (as packed_dot_x86.cc's
// kPrefetchBytes: the hardware's prefetch alone leaves the loads waiting on memory).
constexpr int64_t kPrefetchBytes = 2048;
// The groups whose scales and offsets one window of rows reads at once: 4 KiB of them.
constexpr int64_t kWindowGroups = 512;

COREMLRT_AVX2_INLINE inline float sum8(__m256 v) {
  __m128 sum = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  sum = _mm_add_ps(sum, _mm_movehl_ps(sum, sum));
  return _mm_cvtss_f32(_mm_add_ss(sum, _mm_movehdup_ps(sum)));
}

// The byte tables (packed_codes_x86.h, nibble_bytes) of the groups of a run: each group's values
// as the AVX2 decoders compute them (nibble_values8, value_of's operations), rounded to fp16 by
// the conversion, so the same values as theirs.
struct GroupTables {
  const ir::PackedTensor* tensor;
  Group shape;
  bool is_signed;

  COREMLRT_AVX2_INLINE NibbleBytes operator()(int64_t g) const {
    __m256 low, high;
    nibble_values8<false>(group_at(*tensor, shape, g), is_signed, low, high);
    return nibble_bytes(_mm256_cvtps_ph(low, kNearest), _mm256_cvtps_ph(high, kNearest));
  }
};

// The scales and offsets of groups [g0, g0 + n) of `t`, as floats (offsets 0 where it has none):
// fp16 scales eight at a time, read for a window of rows at once (group_at's conversions, one
// group at a time, cost more than the products of a 32-column block).
COREMLRT_AVX2_INLINE inline void read_scales(const ir::PackedTensor& t, int64_t g0, int64_t n, float* scales,
                                             float* offsets) {
  int64_t i = 0;
  if (t.scale.dtype == DType::Float16) {
    const half* from = t.scale.ptr<half>() + g0;
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(scales + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(from + i))));
    for (; i < n; ++i) scales[i] = static_cast<float>(from[i]);
  } else {
    std::copy(t.scale.ptr<float>() + g0, t.scale.ptr<float>() + g0 + n, scales);
  }
  const ir::PackedArray& offset = t.offset;
  if (!offset.defined()) {
    std::fill(offsets, offsets + n, 0.0f);
  } else if (offset.bits == 4) {
    // Two per byte, low nibble first; int4 ones sign-extended ((r ^ 8) - 8).
    const uint8_t* bytes = offset.data.ptr<uint8_t>();
    const int flip = offset.dtype == DType::Int4 ? 8 : 0;
    auto one = [&](int64_t g) { return static_cast<float>((((bytes[g / 2] >> (4 * (g % 2))) & 15) ^ flip) - flip); };
    i = 0;
    if (g0 % 2 && n > 0) offsets[i++] = one(g0);
    // Sixteen from eight bytes at a time.
    const __m128i low4 = _mm_set1_epi8(0x0f), flip8 = _mm_set1_epi8(static_cast<char>(flip));
    for (; i + 16 <= n; i += 16) {
      const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + (g0 + i) / 2));
      __m128i codes = _mm_unpacklo_epi8(_mm_and_si128(b, low4), _mm_and_si128(_mm_srli_epi16(b, 4), low4));
      codes = _mm_sub_epi8(_mm_xor_si128(codes, flip8), flip8);
      _mm256_storeu_ps(offsets + i, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(codes)));
      _mm256_storeu_ps(offsets + i + 8, _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(codes, 8))));
    }
    for (; i < n; ++i) offsets[i] = one(g0 + i);
  } else if (offset.bits == 0 && offset.dtype == DType::Int8) {
    std::copy(offset.data.ptr<int8_t>() + g0, offset.data.ptr<int8_t>() + g0 + n, offsets);
  } else if (offset.bits == 0 && offset.dtype == DType::UInt8) {
    std::copy(offset.data.ptr<uint8_t>() + g0, offset.data.ptr<uint8_t>() + g0 + n, offsets);
  } else {
    for (i = 0; i < n; ++i) offsets[i] = array_element(offset, g0 + i);
  }
}

// The byte tables of groups whose values are rounded once, round((code - offset) * scale)
// (rounded_once, fp16 values), from their scales and offsets as read by read_scales: map8's
// operations for those forms without its branches (a product of floats is the same either
// way round), so the same values. Indexed by the group's place in what was read.
struct ComputedTables {
  const float* scales;
  const float* offsets;
  bool is_signed;

  COREMLRT_AVX2_INLINE NibbleBytes operator()(int64_t i) const {
    const __m256 first = _mm256_setr_ps(0, 1, 2, 3, 4, 5, 6, 7);
    const __m256 second = is_signed ? _mm256_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1)
                                    : _mm256_setr_ps(8, 9, 10, 11, 12, 13, 14, 15);
    const __m256 scale = _mm256_broadcast_ss(scales + i), offset = _mm256_broadcast_ss(offsets + i);
    return nibble_bytes(_mm256_cvtps_ph(_mm256_mul_ps(_mm256_sub_ps(first, offset), scale), kNearest),
                        _mm256_cvtps_ph(_mm256_mul_ps(_mm256_sub_ps(second, offset), scale), kNearest));
  }
};

// The value of raw code `raw` in `table`.
COREMLRT_AVX2_INLINE inline float table_value(const NibbleBytes& table, uint32_t raw) {
  alignas(32) uint8_t low[32], high[32];
  _mm256_store_si256(reinterpret_cast<__m256i*>(low), table.low);
  _mm256_store_si256(reinterpret_cast<__m256i*>(high), table.high);
  const uint16_t bits = static_cast<uint16_t>(low[raw] | (high[raw] << 8));
  return _cvtsh_ss(bits);
}

// One row's products: the run's groups hold whole 32-column blocks (dot_simd's contract), the
// first of `run.first` columns, then each of `run.block`.
// `table_of(g)` gives group g's tables, g counted as `table_of` counts them from `g0`, the run's
// first group.
template <class Tables>
COREMLRT_AVX2_INLINE inline float dot_nibbles_row(const Run& run, const Tables& table_of, int64_t g0, const float* a,
                                                  const float* a_split) {
  const uint8_t* bytes = run.tensor->codes.data.ptr<uint8_t>() + run.k / 2;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  int64_t g = g0;
  int64_t left = run.first;  // columns left in group g
  NibbleBytes table = table_of(g);
  __m256 even0 = _mm256_setzero_ps(), odd0 = _mm256_setzero_ps();
  __m256 even1 = _mm256_setzero_ps(), odd1 = _mm256_setzero_ps();
  const int64_t whole = run.n / 32 * 32;
  int64_t p = 0;
  for (; p < whole; p += 32) {
    if (left == 0) {
      table = table_of(++g);
      left = run.block;
    }
    left -= 32;
    _mm_prefetch(reinterpret_cast<const char*>(bytes + p / 2 + kPrefetchBytes), _MM_HINT_T0);
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + p / 2));
    // Low nibbles (even columns) in the lower half, high nibbles (odd columns) in the upper.
    const __m256i codes = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(b, 4), b), low4);
    const __m256i lo = _mm256_shuffle_epi8(table.low, codes), hi = _mm256_shuffle_epi8(table.high, codes);
    // Per half: columns 0-7 of its parity (unpacklo), then 8-15 (unpackhi), as fp16 values.
    const __m256i first = _mm256_unpacklo_epi8(lo, hi), second = _mm256_unpackhi_epi8(lo, hi);
    even0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(first)), _mm256_loadu_ps(a_split + p), even0);
    even1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(second)), _mm256_loadu_ps(a_split + p + 8), even1);
    odd0 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(first, 1)), _mm256_loadu_ps(a_split + p + 16), odd0);
    odd1 = _mm256_fmadd_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(second, 1)), _mm256_loadu_ps(a_split + p + 24), odd1);
  }
  float tail = 0;  // the row's last columns, fewer than 32, all in one group
  if (p < run.n) {
    if (left == 0) table = table_of(++g);
    for (; p < run.n; ++p) tail += table_value(table, (bytes[p / 2] >> (4 * (p % 2))) & 15) * a[p];
  }
  return sum8(_mm256_add_ps(_mm256_add_ps(even0, odd0), _mm256_add_ps(even1, odd1))) + tail;
}

// Byte codes whose values are round((code - offset) * scale) (rounded_once; kHalf: rounded to
// fp16), eight at a time with no branch on the form inside the loop: rounded by the conversions,
// or, where split_rounding_exact holds (kSplit), by splitting as packed_codes_avx512.h's
// split_round_half16 does, in three plain float operations (the file's fp-contract=off keeps
// the compiler from fusing them).
template <bool kSigned, bool kHalf, bool kSplit>
COREMLRT_AVX2_INLINE inline void bytes_rounded_once(const uint8_t* p, const float* x, int64_t n, float scale,
                                                    float offset, __m256& sum0, __m256& sum1) {
  const __m256 s = _mm256_set1_ps(scale), s_8193 = _mm256_set1_ps(scale * 8193.0f), o = _mm256_set1_ps(offset);
  auto value = [&](int64_t i) COREMLRT_AVX2_INLINE {
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p + i));
    const __m256 d = _mm256_sub_ps(_mm256_cvtepi32_ps(kSigned ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b)), o);
    if constexpr (kSplit) {
      const __m256 c = _mm256_mul_ps(d, s_8193);
      return _mm256_sub_ps(c, _mm256_fnmadd_ps(d, s, c));
    }
    const __m256 v = _mm256_mul_ps(d, s);
    return kHalf ? round_half8(v) : v;
  };
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    _mm_prefetch(reinterpret_cast<const char*>(p + i + kPrefetchBytes), _MM_HINT_T0);
    sum0 = _mm256_fmadd_ps(value(i), _mm256_loadu_ps(x + i), sum0);
    sum1 = _mm256_fmadd_ps(value(i + 8), _mm256_loadu_ps(x + i + 8), sum1);
  }
  if (i + 8 <= n) sum0 = _mm256_fmadd_ps(value(i), _mm256_loadu_ps(x + i), sum0);
}

// The other byte forms (kShiftScale in fp16 without an exact difference): map8's values.
COREMLRT_AVX2_INLINE inline void bytes_mapped(const Group& group, bool is_signed, const uint8_t* p, const float* x,
                                              int64_t n, __m256& sum0) {
  for (int64_t i = 0; i + 8 <= n; i += 8)
    sum0 = _mm256_fmadd_ps(round_half8(map8<false>(group, byte_codes8(p + i, is_signed))), _mm256_loadu_ps(x + i), sum0);
}

// One group's whole blocks of eight byte codes, for its form.
COREMLRT_AVX2_INLINE inline void bytes_group(const Group& group, bool is_signed, const uint8_t* p, const float* x,
                                             int64_t n, __m256& sum0, __m256& sum1) {
  const bool half = group.half_values;
  if (!rounded_once(group)) return bytes_mapped(group, is_signed, p, x, n, sum0);
  const float scale = group.scale, offset = group.offset;
  const int form = (is_signed ? 4 : 0) | (half ? 2 : 0) | (half && split_rounding_exact(scale, offset, is_signed) ? 1 : 0);
  switch (form) {
    case 0: return bytes_rounded_once<false, false, false>(p, x, n, scale, offset, sum0, sum1);
    case 2: return bytes_rounded_once<false, true, false>(p, x, n, scale, offset, sum0, sum1);
    case 3: return bytes_rounded_once<false, true, true>(p, x, n, scale, offset, sum0, sum1);
    case 4: return bytes_rounded_once<true, false, false>(p, x, n, scale, offset, sum0, sum1);
    case 6: return bytes_rounded_once<true, true, false>(p, x, n, scale, offset, sum0, sum1);
    default: return bytes_rounded_once<true, true, true>(p, x, n, scale, offset, sum0, sum1);
  }
}

// One row of byte codes (int8 or uint8, kShiftScale or kAffine), group by group.
COREMLRT_AVX2_INLINE inline float dot_bytes_row(const Run& run, const float* a) {
  const bool is_signed = run.tensor->codes.dtype == DType::Int8;
  const bool half_values = run.shape.half_values;
  const uint8_t* codes = run.tensor->codes.data.ptr<uint8_t>() + run.k;
  __m256 sum0 = _mm256_setzero_ps(), sum1 = _mm256_setzero_ps();
  float tail = 0;
  COREMLRT_FOR_EACH_GROUP(run, {
    const uint8_t* p = codes + done;
    const float* x = a + done;
    bytes_group(group, is_signed, p, x, len, sum0, sum1);
    for (int64_t i = len / 8 * 8; i < len; ++i) {
      const float v = value_of(group, is_signed ? static_cast<int8_t>(p[i]) : p[i], p[i]);
      tail += (half_values ? round_to_half(v) : v) * x[i];
    }
  })
  return sum8(_mm256_add_ps(sum0, sum1)) + tail;
}

}  // namespace avx2
}  // namespace

bool dot_avx2_takes(const ir::PackedTensor& t) {
  if (t.mask.defined()) return false;
  if (t.codes.bits == 4)
    return t.dtype == DType::Float16 && t.map != ir::CodeMap::kIdentity && (t.map != ir::CodeMap::kLut || t.palettes == 16);
  return t.codes.bits == 0 && (t.codes.dtype == DType::Int8 || t.codes.dtype == DType::UInt8) &&
         (t.map == ir::CodeMap::kShiftScale || t.map == ir::CodeMap::kAffine);
}

COREMLRT_AVX2 void dot_avx2(const RowRuns& rows, const float* a, const float* a_split, float* c) {
  const ir::PackedTensor& t = *rows.tensor;
  const bool is_signed = t.codes.dtype == DType::Int4;
  if (t.codes.bits == 4 && !(rows.shape.map != ir::CodeMap::kLut && rounded_once(rows.shape))) {
    const avx2::GroupTables tables{&t, rows.shape, is_signed};
    for (int64_t r = 0; r < rows.nr; ++r) {
      const Run run = rows.run(rows.r0 + r);
      c[r] += avx2::dot_nibbles_row(run, tables, run.g, a, a_split);
    }
    return;
  }
  if (t.codes.bits == 4) {
    // Windows of rows whose scales and offsets fill a few KiB, read at once and still in L1 when
    // the rows read them.
    thread_local std::vector<float> scales, offsets;
    const int64_t window = std::max<int64_t>(1, avx2::kWindowGroups / group_count(rows.run(rows.r0)));
    for (int64_t w0 = 0; w0 < rows.nr; w0 += window) {
      const int64_t wn = std::min(window, rows.nr - w0);
      prefetch_next_groups(rows, w0, wn, window);
      const int64_t g_first = rows.run(rows.r0 + w0).g;
      const Run last = rows.run(rows.r0 + w0 + wn - 1);
      const int64_t count = last.g + group_count(last) - g_first;
      scales.resize(static_cast<size_t>(count));
      offsets.resize(static_cast<size_t>(count));
      avx2::read_scales(t, g_first, count, scales.data(), offsets.data());
      const avx2::ComputedTables tables{scales.data(), offsets.data(), is_signed};
      for (int64_t r = w0; r < w0 + wn; ++r) {
        const Run run = rows.run(rows.r0 + r);
        c[r] += avx2::dot_nibbles_row(run, tables, run.g - g_first, a, a_split);
      }
    }
    return;
  }
  for (int64_t r = 0; r < rows.nr; ++r) c[r] += avx2::dot_bytes_row(rows.run(rows.r0 + r), a);
}

#endif

}  // namespace coremlrt::ops::packed

#pragma GCC pop_options
