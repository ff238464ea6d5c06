// A decode step's products with 4-bit codes of fp16 values on CPUs with AVX2 but not AVX-512
// (packed_codes.h, dot_simd; packed_dot_x86.cc holds the AVX-512 loops): one row of A against
// rows of W, the codes decoded in registers, where a panel would be decoded into memory only to
// be read once.
//
// AVX2 has no sixteen-lane permute of floats, so a group's sixteen values are looked up as fp16
// bytes: the low bytes and the high bytes of its values are two tables (nibble_bytes), one
// vpshufb per table looks up 32 codes, and interleaving the two results gives the codes' fp16
// values, widened by vcvtph2ps. The 32 codes
// of sixteen bytes are taken as their low nibbles (even columns) and high nibbles (odd columns),
// against `a_split`, `a` reordered the same way (packed_codes.h).
//
// A group's values are the AVX2 decoders' (packed_codes_avx2.cc): value_of's own float
// operations, rounded to fp16 by the conversion (to nearest, ties to even, as round_to_half), or
// the palette's fp16 values. The products are summed in another order than the panel path's, so results differ from
// the folded weight's by float rounding only (packed_weight_test.cc, DecodeStepDotProducts...).
#include <algorithm>
#include <vector>

#include "ops/packed_codes.h"
#include "ops/packed_codes_x86.h"

namespace coremlrt::ops::packed {

#ifdef COREMLRT_PACKED_X86

namespace {

// How far ahead of the codes being read the loop asks for more (as packed_dot_x86.cc's
// kPrefetchBytes: the hardware's prefetch alone leaves the loads waiting on memory).
constexpr int64_t kPrefetchBytes = 2048;

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
COREMLRT_AVX2_INLINE inline float dot_nibbles_row(const Run& run, const GroupTables& tables, const float* a,
                                                  const float* a_split) {
  const uint8_t* bytes = run.tensor->codes.data.ptr<uint8_t>() + run.k / 2;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  int64_t g = run.g;
  int64_t left = run.first;  // columns left in group g
  NibbleBytes table = tables(g);
  __m256 even0 = _mm256_setzero_ps(), odd0 = _mm256_setzero_ps();
  __m256 even1 = _mm256_setzero_ps(), odd1 = _mm256_setzero_ps();
  const int64_t whole = run.n / 32 * 32;
  int64_t p = 0;
  for (; p < whole; p += 32) {
    if (left == 0) {
      table = tables(++g);
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
  __m256 sum = _mm256_add_ps(_mm256_add_ps(even0, odd0), _mm256_add_ps(even1, odd1));
  __m128 half_sum = _mm_add_ps(_mm256_castps256_ps128(sum), _mm256_extractf128_ps(sum, 1));
  half_sum = _mm_add_ps(half_sum, _mm_movehl_ps(half_sum, half_sum));
  half_sum = _mm_add_ss(half_sum, _mm_movehdup_ps(half_sum));
  float tail = 0;  // the row's last columns, fewer than 32, all in one group
  if (p < run.n) {
    if (left == 0) table = tables(++g);
    for (; p < run.n; ++p) tail += table_value(table, (bytes[p / 2] >> (4 * (p % 2))) & 15) * a[p];
  }
  return _mm_cvtss_f32(half_sum) + tail;
}

}  // namespace

bool dot_nibbles_avx2_takes(const ir::PackedTensor& t) {
  return t.codes.bits == 4 && t.dtype == DType::Float16 && !t.mask.defined() && t.map != ir::CodeMap::kIdentity &&
         (t.map != ir::CodeMap::kLut || t.palettes == 16);
}

COREMLRT_AVX2 void dot_nibbles_avx2(const RowRuns& rows, const float* a, const float* a_split, float* c) {
  const ir::PackedTensor& t = *rows.tensor;
  const bool is_signed = t.codes.dtype == DType::Int4;
  const GroupTables tables{&t, rows.shape, is_signed};
  for (int64_t r = 0; r < rows.nr; ++r) c[r] += dot_nibbles_row(rows.run(rows.r0 + r), tables, a, a_split);
}

#endif

}  // namespace coremlrt::ops::packed
