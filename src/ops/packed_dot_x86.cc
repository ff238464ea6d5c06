// A decode step's products with a packed weight, the codes decoded in registers inside the dot
// products (packed_codes.h, dot_simd): one row of A against rows of W, where a panel would be
// decoded into memory only to be read once.
//
// - 4-bit codes (palettes of 16, affine or shift-scale per block): the group's sixteen values are
//   a table of floats in one register, so a code becomes its value by one vpermps, already
//   widened. Sixteen bytes hold 32 codes; their low nibbles are the even columns and their high
//   nibbles the odd ones, and `a_split` holds `a` reordered the same way, so no shuffle puts the
//   codes back in column order. Where the values are fp16 rounded once from fp16 scales (int4
//   and uint4 per block, the usual language-model form), a group's table is computed in
//   registers from its scale and offset, rounded by splitting (packed_codes_avx512.h,
//   fp16_rounded_groups and split_round_half16).
// - 8-bit codes: widened and mapped sixteen at a time, rounded to fp16 by splitting where exact.
// - sparse fp16 values: the mask's bits for 32 columns spread their values into place (a
//   permute or VBMI2's expand: spread_by_permute).
//
// Values are those of the decoders (packed_weight_test.cc compares them); the products are
// summed in another order than the panel path's, so results differ from the folded weight's
// by float rounding only (tests/python/ops/test_packed_weights.py).
#include <algorithm>
#include <cstring>
#include <vector>

#include "ops/packed_codes.h"
#include "ops/packed_codes_avx512.h"
#include "ops/packed_codes_x86.h"

namespace coremlrt::ops::packed {

#ifdef COREMLRT_PACKED_X86

namespace {

// How far ahead of the 4-bit codes being read the loop asks for more: with the hardware's own
// prefetch alone the decode step's loads waited on memory (docs/reports/performance.md, design
// choices). A row of 768 codes is 384 bytes, so this reaches rows to come.
constexpr int64_t kPrefetchBytes = 2048;

COREMLRT_AVX512 inline float sum16(__m512 v) { return _mm512_reduce_add_ps(v); }

// The scales and offsets of groups [g0, g0 + count), as floats, read at once: a row's groups, or
// a window of rows' (group_at's conversions, one group at a time, cost more than the products of
// a 32-column block). Not for palettes.
struct RowScales {
  int64_t g0 = 0;
  std::vector<float> scales, offsets;

  void read(const ir::PackedTensor& t, int64_t first, int64_t count) {
    g0 = first;
    scales.resize(static_cast<size_t>(count));
    offsets.resize(static_cast<size_t>(count));
    scales_and_offsets(t, first, count, scales.data(), offsets.data());
  }
  void read(const Run& run, int64_t count) { read(*run.tensor, run.g, count); }
  // Group g of the tensor, which must lie in what was read.
  Group group(const Group& shape, int64_t g) const {
    Group out = shape;
    out.scale = scales[static_cast<size_t>(g - g0)];
    out.offset = offsets[static_cast<size_t>(g - g0)];
    return out;
  }
};

// The sixteen values of each of a row's groups, as floats, one group after the other. Built
// before the products (a short loop with no branches for the usual block forms) so that the
// products' loop only loads a group's table. Rows whose tables are computed in registers (the
// usual fp16 block forms: ComputedTables) do not come here.
COREMLRT_AVX512 void nibble_tables(const Run& run, int64_t count, RowScales& row, float* tables) {
  const bool is_signed = run.tensor->codes.dtype == DType::Int4;
  if (run.shape.map == ir::CodeMap::kLut) {
    for (int64_t g = 0; g < count; ++g)
      _mm512_storeu_ps(tables + 16 * g, nibble_values16<true>(group_at(*run.tensor, run.shape, run.g + g), is_signed));
    return;
  }
  row.read(run, count);
  if (!rounded_once(run.shape)) {
    for (int64_t g = 0; g < count; ++g)
      _mm512_storeu_ps(tables + 16 * g, nibble_values16<true>(row.group(run.shape, run.g + g), is_signed));
    return;
  }
  const __m512 codes = is_signed ? _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, -8, -7, -6, -5, -4, -3, -2, -1)
                                 : _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const bool round = run.shape.half_values;
  const float* scales = row.scales.data();
  const float* offsets = row.offsets.data();
  for (int64_t g = 0; g < count; ++g) {
    // (code - offset) * scale is scale * (code - offset) (kAffine): the same rounded product.
    __m512 v = _mm512_mul_ps(_mm512_sub_ps(codes, _mm512_set1_ps(offsets[g])), _mm512_set1_ps(scales[g]));
    if (round) v = round_half16(v);
    _mm512_storeu_ps(tables + 16 * g, v);
  }
}

// The scales and offsets of a window's rows' groups for tables computed in registers
// (fp16_rounded_groups), read for all the rows at once: one row's 768 columns hold only 24
// groups, too few to pay for a call of their own.
struct RoundedGroups {
  int64_t g0 = 0;  // the first row's first group
  std::vector<float> scale, scale_8193, offset;

  // The groups of rows [r0, r0 + nr). False, with nothing promised, where a group's values could
  // not be computed so (fp16_rounded_groups).
  bool read(const RowRuns& rows, int64_t r0, int64_t nr, bool is_signed) {
    const Run first = rows.run(r0), last = rows.run(r0 + nr - 1);
    g0 = first.g;
    const size_t count = static_cast<size_t>(last.g + group_count(last) - g0);
    scale.resize(count);
    scale_8193.resize(count);
    offset.resize(count);
    return fp16_rounded_groups(*rows.tensor, g0, static_cast<int64_t>(count), is_signed, scale.data(),
                               scale_8193.data(), offset.data(), rows.groups_checked);
  }
};

// Group tables as stored by nibble_tables.
struct StoredTables {
  static constexpr bool kFlipCodes = false;
  const float* tables;
  COREMLRT_AVX512_INLINE __m512 operator()(int64_t g) const { return _mm512_loadu_ps(tables + 16 * g); }
};

// Group tables computed in registers: the sixteen differences code - offset times the scale,
// rounded to fp16 by split_round_half16 (exact for the groups fp16_rounded_groups takes). For
// int4 codes the lanes hold codes -8..7 in order: code c is at lane c ^ 8, so the loop flips bit
// 3 of every code (kFlipCodes) rather than reorder the table. Pointers are at the run's first
// group; without offsets (kOffset false) the differences are the codes.
template <bool kSigned, bool kOffset>
struct ComputedTables {
  static constexpr bool kFlipCodes = kSigned;
  const float* scale;
  const float* scale_8193;
  const float* offset;
  COREMLRT_AVX512_INLINE __m512 operator()(int64_t g) const {
    const __m512 codes = kSigned ? _mm512_setr_ps(-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7)
                                 : _mm512_setr_ps(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    const __m512 d = kOffset ? _mm512_sub_ps(codes, _mm512_set1_ps(offset[g])) : codes;
    return split_round_half16(d, _mm512_set1_ps(scale[g]), _mm512_set1_ps(scale_8193[g]));
  }
};

// One row of 4-bit codes, each group's table given by `table_of(g)` (g counted from the run's
// first group).
// kBlock32: groups of 32 columns, the first one whole (block 32, first <= 32), so that each 32
// columns take the next group.
template <bool kBlock32, class Tables>
COREMLRT_AVX512_INLINE inline float dot_nibbles_row(const Run& run, const Tables& table_of, const float* a,
                                                    const float* a_split) {
  const uint8_t* bytes = run.tensor->codes.data.ptr<uint8_t>() + run.k / 2;
  // The group of each 32 columns: groups hold whole 32-column blocks (dot_simd's contract).
  int64_t g = kBlock32 ? -1 : 0;
  int64_t left = run.first;  // columns left in group g
  auto next_table = [&]() COREMLRT_AVX512_INLINE {
    if (kBlock32) return table_of(++g);
    if (left == 0) {
      ++g;
      left = run.block;
    }
    left -= 32;
    return table_of(g);
  };
  // Two pairs of sums, taken by turns, so that consecutive blocks do not wait on each other's
  // multiply-adds.
  __m512 even0 = _mm512_setzero_ps(), odd0 = _mm512_setzero_ps();
  __m512 even1 = _mm512_setzero_ps(), odd1 = _mm512_setzero_ps();
  const int64_t whole = run.n / 32 * 32;
  int64_t p = 0;
  auto codes16 = [&](int64_t at) COREMLRT_AVX512_INLINE {
    __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + at / 2));
    if (Tables::kFlipCodes) b = _mm_xor_si128(b, _mm_set1_epi8(static_cast<char>(0x88)));
    return _mm512_cvtepu8_epi32(b);
  };
  for (; p + 64 <= whole; p += 64) {
    _mm_prefetch(reinterpret_cast<const char*>(bytes + p / 2 + kPrefetchBytes), _MM_HINT_T0);
    const __m512 t0 = next_table();
    const __m512 t1 = next_table();
    const __m512i b0 = codes16(p), b1 = codes16(p + 32);
    even0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(b0, t0), _mm512_loadu_ps(a_split + p), even0);
    odd0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b0, 4), t0), _mm512_loadu_ps(a_split + p + 16), odd0);
    even1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(b1, t1), _mm512_loadu_ps(a_split + p + 32), even1);
    odd1 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b1, 4), t1), _mm512_loadu_ps(a_split + p + 48), odd1);
  }
  if (p < whole) {
    const __m512 t0 = next_table();
    const __m512i b = codes16(p);
    even0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(b, t0), _mm512_loadu_ps(a_split + p), even0);
    odd0 = _mm512_fmadd_ps(_mm512_permutexvar_ps(_mm512_srli_epi32(b, 4), t0), _mm512_loadu_ps(a_split + p + 16), odd0);
    p += 32;
  }
  float tail = 0;  // the row's last columns, fewer than 32, all in the last group
  if (p < run.n) {
    alignas(64) float last[16];
    _mm512_store_ps(last, table_of(group_count(run) - 1));
    const int flip = Tables::kFlipCodes ? 8 : 0;
    for (; p < run.n; ++p) tail += last[((bytes[p / 2] >> (4 * (p % 2))) & 15) ^ flip] * a[p];
  }
  return sum16(_mm512_add_ps(_mm512_add_ps(even0, odd0), _mm512_add_ps(even1, odd1))) + tail;
}

// The groups whose scales and offsets one window of dot_nibbles (or dot_bytes) reads at once:
// 6 KiB of them, still in L1 when the rows read them.
constexpr int64_t kWindowGroups = 512;

// Rows [w0, w0 + wn) of dot_nibbles with tables computed in registers from `groups`, for one
// form of codes and blocks (the same for every row of the window).
template <bool kSigned, bool kOffset, bool kBlock32>
COREMLRT_AVX512_INLINE inline void dot_nibbles_computed_as(const RowRuns& rows, int64_t w0, int64_t wn,
                                                           const RoundedGroups& groups, const float* a,
                                                           const float* a_split, float* c) {
  for (int64_t r = w0; r < w0 + wn; ++r) {
    const Run run = rows.run(rows.r0 + r);
    const size_t at = static_cast<size_t>(run.g - groups.g0);
    const ComputedTables<kSigned, kOffset> tables{groups.scale.data() + at, groups.scale_8193.data() + at,
                                                  groups.offset.data() + at};
    c[r] += dot_nibbles_row<kBlock32>(run, tables, a, a_split);
  }
}

COREMLRT_AVX512 void dot_nibbles_computed(const RowRuns& rows, int64_t w0, int64_t wn, const RoundedGroups& groups,
                                          bool is_signed, const float* a, const float* a_split, float* c) {
  const bool with_offsets = rows.tensor->offset.defined();
  // Every row's run starts at column c0 of its row, so each has the same first group's length.
  const Run first = rows.run(rows.r0 + w0);
  const bool block32 = first.block == 32 && first.first <= 32;
  const int form = (is_signed ? 4 : 0) | (with_offsets ? 2 : 0) | (block32 ? 1 : 0);
  switch (form) {
    case 0: return dot_nibbles_computed_as<false, false, false>(rows, w0, wn, groups, a, a_split, c);
    case 1: return dot_nibbles_computed_as<false, false, true>(rows, w0, wn, groups, a, a_split, c);
    case 2: return dot_nibbles_computed_as<false, true, false>(rows, w0, wn, groups, a, a_split, c);
    case 3: return dot_nibbles_computed_as<false, true, true>(rows, w0, wn, groups, a, a_split, c);
    case 4: return dot_nibbles_computed_as<true, false, false>(rows, w0, wn, groups, a, a_split, c);
    case 5: return dot_nibbles_computed_as<true, false, true>(rows, w0, wn, groups, a, a_split, c);
    case 6: return dot_nibbles_computed_as<true, true, false>(rows, w0, wn, groups, a, a_split, c);
    default: return dot_nibbles_computed_as<true, true, true>(rows, w0, wn, groups, a, a_split, c);
  }
}

COREMLRT_AVX512 void dot_nibbles(const RowRuns& rows, const float* a, const float* a_split, float* c) {
  thread_local RowScales row;
  thread_local RoundedGroups groups;
  thread_local std::vector<float> tables;
  const bool is_signed = rows.tensor->codes.dtype == DType::Int4;
  // fp16 values rounded once from fp16 scales: the tables are computed in registers for each
  // window of rows whose groups fp16_rounded_groups takes, else built by nibble_tables. Windows
  // are small so that the groups' scales and offsets stay in L1 between being written and read
  // (a thread's whole share of a large weight at once filled L2 with them).
  const bool rounded_form = rows.shape.map != ir::CodeMap::kLut && rounded_once(rows.shape) && rows.shape.half_values;
  const int64_t window = std::max<int64_t>(1, kWindowGroups / std::max<int64_t>(1, rows.nc / 32));
  for (int64_t w0 = 0; w0 < rows.nr; w0 += window) {
    const int64_t wn = std::min(window, rows.nr - w0);
    prefetch_next_groups(rows, w0, wn, window);
    if (rounded_form && groups.read(rows, rows.r0 + w0, wn, is_signed)) {
      dot_nibbles_computed(rows, w0, wn, groups, is_signed, a, a_split, c);
      continue;
    }
    for (int64_t r = w0; r < w0 + wn; ++r) {
      const Run run = rows.run(rows.r0 + r);
      const int64_t count = group_count(run);
      tables.resize(static_cast<size_t>(16 * count));
      nibble_tables(run, count, row, tables.data());
      c[r] += dot_nibbles_row<false>(run, StoredTables{tables.data()}, a, a_split);
    }
  }
}

// Byte codes whose values are round((code - offset) * scale) (rounded_once), 32 at a time with
// no branch on the form inside the loop.
template <bool kSigned, bool kRound, bool kOffset>
COREMLRT_AVX512_INLINE inline void bytes_rounded_once(const uint8_t* codes, const float* a, int64_t n, float scale,
                                                      float offset, __m512& sum0, __m512& sum1) {
  const __m512 s = _mm512_set1_ps(scale), o = _mm512_set1_ps(offset);
  auto value = [&](const uint8_t* p) __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,f16c"), always_inline)) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m512 code = _mm512_cvtepi32_ps(kSigned ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b));
    const __m512 v = _mm512_mul_ps(kOffset ? _mm512_sub_ps(code, o) : code, s);
    return kRound ? round_half16(v) : v;
  };
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    sum0 = _mm512_fmadd_ps(value(codes + i), _mm512_loadu_ps(a + i), sum0);
    sum1 = _mm512_fmadd_ps(value(codes + i + 16), _mm512_loadu_ps(a + i + 16), sum1);
  }
  if (i + 16 <= n) sum0 = _mm512_fmadd_ps(value(codes + i), _mm512_loadu_ps(a + i), sum0);
}

// bytes_rounded_once with values rounded to fp16 by split_round_half16, for groups where
// split_rounding_exact holds.
template <bool kSigned, bool kOffset>
COREMLRT_AVX512_INLINE inline void bytes_split_rounded(const uint8_t* codes, const float* a, int64_t n, float scale,
                                                       float offset, __m512& sum0, __m512& sum1) {
  const __m512 s = _mm512_set1_ps(scale), s_8193 = _mm512_set1_ps(scale * 8193.0f), o = _mm512_set1_ps(offset);
  auto value = [&](const uint8_t* p) __attribute__((target("avx512f,avx512bw,avx512dq,avx512vl,fma"), always_inline)) {
    const __m128i b = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    const __m512 code = _mm512_cvtepi32_ps(kSigned ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b));
    return split_round_half16(kOffset ? _mm512_sub_ps(code, o) : code, s, s_8193);
  };
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    sum0 = _mm512_fmadd_ps(value(codes + i), _mm512_loadu_ps(a + i), sum0);
    sum1 = _mm512_fmadd_ps(value(codes + i + 16), _mm512_loadu_ps(a + i + 16), sum1);
  }
  if (i + 16 <= n) sum0 = _mm512_fmadd_ps(value(codes + i), _mm512_loadu_ps(a + i), sum0);
}

// bytes_rounded_once for the form at hand: whether codes are signed, values rounded to fp16,
// and an offset subtracted (none for symmetric codes).
COREMLRT_AVX512 void bytes_rounded_once_as(bool is_signed, bool round, bool offset, const uint8_t* codes,
                                           const float* a, int64_t n, float scale, float offset_value, __m512& sum0,
                                           __m512& sum1) {
  if (round && split_rounding_exact(scale, offset_value, is_signed)) {
    if (is_signed) {
      return offset ? bytes_split_rounded<true, true>(codes, a, n, scale, offset_value, sum0, sum1)
                    : bytes_split_rounded<true, false>(codes, a, n, scale, offset_value, sum0, sum1);
    }
    return offset ? bytes_split_rounded<false, true>(codes, a, n, scale, offset_value, sum0, sum1)
                  : bytes_split_rounded<false, false>(codes, a, n, scale, offset_value, sum0, sum1);
  }
  const int form = (is_signed ? 4 : 0) | (round ? 2 : 0) | (offset ? 1 : 0);
  switch (form) {
    case 0: return bytes_rounded_once<false, false, false>(codes, a, n, scale, offset_value, sum0, sum1);
    case 1: return bytes_rounded_once<false, false, true>(codes, a, n, scale, offset_value, sum0, sum1);
    case 2: return bytes_rounded_once<false, true, false>(codes, a, n, scale, offset_value, sum0, sum1);
    case 3: return bytes_rounded_once<false, true, true>(codes, a, n, scale, offset_value, sum0, sum1);
    case 4: return bytes_rounded_once<true, false, false>(codes, a, n, scale, offset_value, sum0, sum1);
    case 5: return bytes_rounded_once<true, false, true>(codes, a, n, scale, offset_value, sum0, sum1);
    case 6: return bytes_rounded_once<true, true, false>(codes, a, n, scale, offset_value, sum0, sum1);
    default: return bytes_rounded_once<true, true, true>(codes, a, n, scale, offset_value, sum0, sum1);
  }
}

COREMLRT_AVX512 float dot_bytes_row(const Run& run, const RowScales& row, const float* a) {
  const bool is_signed = run.tensor->codes.dtype == DType::Int8;
  const bool fast = rounded_once(run.shape);
  const bool round = run.shape.half_values;
  const uint8_t* codes = run.tensor->codes.data.ptr<uint8_t>() + run.k;
  __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
  float tail = 0;
  int64_t done = 0;
  for (int64_t g = 0, len = run.first; done < run.n; len = run.block, ++g) {
    len = std::min(len, run.n - done);
    const Group group = row.group(run.shape, run.g + g);
    const int64_t whole = len / 16 * 16;
    if (!fast) {
      for (int64_t i = 0; i < whole; i += 16)
        sum0 = _mm512_fmadd_ps(map16(group, byte_codes16(codes + done + i, is_signed)), _mm512_loadu_ps(a + done + i),
                               sum0);
    } else {
      bytes_rounded_once_as(is_signed, round, group.offset != 0, codes + done, a + done, len, group.scale, group.offset,
                            sum0, sum1);
    }
    for (int64_t i = whole; i < len; ++i) {
      const uint8_t raw = codes[done + i];
      tail += value_of(group, is_signed ? static_cast<int8_t>(raw) : raw, raw) * a[done + i];
    }
    done += len;
  }
  return sum16(_mm512_add_ps(sum0, sum1)) + tail;
}

COREMLRT_AVX512 void dot_bytes(const RowRuns& rows, const float* a, float* c) {
  // The scales and offsets of a window of rows read at once (a row per channel has one group,
  // too few to pay for a call of its own), windows small enough to stay in L1 as dot_nibbles'.
  thread_local RowScales groups;
  const int64_t window = std::max<int64_t>(1, kWindowGroups / group_count(rows.run(rows.r0)));
  for (int64_t w0 = 0; w0 < rows.nr; w0 += window) {
    const int64_t wn = std::min(window, rows.nr - w0);
    prefetch_next_groups(rows, w0, wn, window);
    const Run first = rows.run(rows.r0 + w0), last = rows.run(rows.r0 + w0 + wn - 1);
    groups.read(*rows.tensor, first.g, last.g + group_count(last) - first.g);
    for (int64_t r = w0; r < w0 + wn; ++r) c[r] += dot_bytes_row(rows.run(rows.r0 + r), groups, a);
  }
}

// The 32 positions of a sparse run whose mask bits are m, by VBMI2's expand: the run's values by
// a masked load (it touches no byte past them), then spread between registers, a little faster
// than the expand-load from memory (docs/reports/performance.md, "Measurements behind code choices").
struct ExpandSpread {
  COREMLRT_AVX512_SPARSE_INLINE __m512i operator()(uint32_t m, const half* values, const half*) const {
    const int used = __builtin_popcount(m);
    const __mmask32 first = static_cast<__mmask32>(used == 32 ? ~0u : (1u << used) - 1u);
    return _mm512_maskz_expand_epi16(m, _mm512_maskz_loadu_epi16(first, values));
  }
};

// The same by spread_halves32 (BITALG), where spread_by_permute.
struct PermuteSpread {
  COREMLRT_AVX512_SPARSE_INLINE __m512i operator()(uint32_t m, const half* values, const half* end) const {
    return spread_halves32(m, values, end);
  }
};

// One row of a sparse fp16 tensor: each 32 columns' mask bits spread that many values into their
// lanes (zeros elsewhere, as the folded weight holds them).
template <class Spread>
COREMLRT_AVX512_SPARSE_INLINE inline float dot_sparse_row(const SparseValues& s, int64_t position, int64_t k, int64_t n,
                                                   const float* a, Spread spread) {
  const half* values = static_cast<const half*>(s.values) + k;
  const half* end = static_cast<const half*>(s.values) + s.count;
  __m512 sum0 = _mm512_setzero_ps(), sum1 = _mm512_setzero_ps();
  auto add32 = [&](uint32_t m, int64_t i) COREMLRT_AVX512_SPARSE_INLINE {
    const __m512i v = spread(m, values, end);
    values += __builtin_popcount(m);
    sum0 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_castsi512_si256(v)), _mm512_loadu_ps(a + i), sum0);
    sum1 = _mm512_fmadd_ps(_mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1)), _mm512_loadu_ps(a + i + 16), sum1);
  };
  // Eight bytes of mask read as one word while they lie inside the mask (no call in the loop, so
  // the sums stay in registers); mask_bits near its end.
  int64_t i = 0;
  for (; i + 32 <= n && (position + i) / 8 + 8 <= s.mask_bytes; i += 32) {
    uint64_t word;
    std::memcpy(&word, s.mask + (position + i) / 8, sizeof word);
    add32(static_cast<uint32_t>(word >> ((position + i) % 8)), i);
  }
  for (; i + 32 <= n; i += 32) add32(static_cast<uint32_t>(mask_bits(s, position + i)), i);
  float tail = 0;
  for (; i < n; ++i)
    if (mask_bits(s, position + i) & 1) tail += static_cast<float>(*values++) * a[i];
  return sum16(_mm512_add_ps(sum0, sum1)) + tail;
}

template <class Spread>
COREMLRT_AVX512_SPARSE_INLINE inline void dot_sparse_rows(const RowRuns& rows, const float* a, float* c, Spread spread) {
  const SparseValues s = SparseValues::of(*rows.tensor);
  for (int64_t r = 0; r < rows.nr; ++r)
    c[r] += dot_sparse_row(s, (rows.r0 + r) * rows.cols + rows.c0, rows.first_code[r], rows.nc, a, spread);
}

COREMLRT_AVX512_SPARSE void dot_sparse(const RowRuns& rows, const float* a, float* c) {
  if (spread_by_permute()) dot_sparse_rows(rows, a, c, PermuteSpread{});
  else dot_sparse_rows(rows, a, c, ExpandSpread{});
}

// The values of `n` consecutive 4-bit codes from code index k on (of `bytes` bytes of codes),
// looked up in a palette of sixteen fp16 values, written to `out` as fp16 (exact: the palette's
// own values); `out` has room for 32 more, which the last block may fill with values of codes
// past the n. 32 codes at a time: their bytes widened to 16-bit lanes, low and high nibbles
// interleaved back into code order, each a lane index of the palette (vpermw).
COREMLRT_AVX512_SPARSE_INLINE inline void palette_values(const uint8_t* codes, int64_t bytes, int64_t k, int64_t n,
                                                         const half* palette, half* out) {
  auto scalar = [&](int64_t i) { return palette[(codes[i / 2] >> (4 * (i % 2))) & 15]; };
  int64_t i = 0;
  if (k % 2 && n > 0) out[i++] = scalar(k);
  const __m256i table = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(palette));
  const __m256i low4 = _mm256_set1_epi16(15);
  // Code k + i is even: its byte's low nibble. Whole blocks while their sixteen bytes lie in
  // the codes (the last may run past the n codes wanted).
  for (; i < n && (k + i) / 2 + 16 <= bytes; i += 32) {
    const __m256i pairs = _mm256_cvtepu8_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + (k + i) / 2)));
    const __m256i lo = _mm256_and_si256(pairs, low4), hi = _mm256_srli_epi16(pairs, 4);
    // Per 128-bit lane: unpacklo holds codes 0-7 (lane 0) and 16-23 (lane 1), unpackhi 8-15 and 24-31.
    const __m256i a = _mm256_unpacklo_epi16(lo, hi), b = _mm256_unpackhi_epi16(lo, hi);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm256_permutexvar_epi16(_mm256_permute2x128_si256(a, b, 0x20), table));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + 16),
                        _mm256_permutexvar_epi16(_mm256_permute2x128_si256(a, b, 0x31), table));
  }
  for (; i < n; ++i) out[i] = scalar(k + i);
}

// Sparse 4-bit palette codes (constexpr_lut_to_sparse read densely), one fp16 palette per row:
// each row's codes become their values first (palette_values, into a buffer that stays in L1),
// which dot_sparse_row then spreads into place as it does a sparse tensor's fp16 values.
template <class Spread>
COREMLRT_AVX512_SPARSE_INLINE inline void dot_sparse_palette_rows(const RowRuns& rows, const float* a, float* c,
                                                                  Spread spread) {
  thread_local std::vector<half> values;
  const ir::PackedTensor& t = *rows.tensor;
  const uint8_t* codes = t.codes.data.ptr<uint8_t>();
  const int64_t bytes = static_cast<int64_t>(t.codes.data.nbytes());
  for (int64_t r = 0; r < rows.nr; ++r) {
    const int64_t used = rows.code_count[r];
    // 32 values of room past the row's own, so that spreading its last columns reads them with
    // a plain load: a masked one at the end of every row cost more than the rest of the row
    // (packed_codes_avx512.h, spread_halves32).
    values.resize(static_cast<size_t>(used + 32));
    const half* palette = static_cast<const half*>(group_at(t, rows.shape, rows.run(rows.r0 + r).g).table);
    palette_values(codes, bytes, rows.first_code[r], used, palette, values.data());
    std::fill(values.begin() + used, values.end(), half{});
    const SparseValues row{t.mask.ptr<uint8_t>(), t.mask.numel(), values.data(), DType::Float16, used + 32};
    c[r] += dot_sparse_row(row, (rows.r0 + r) * rows.cols + rows.c0, 0, rows.nc, a, spread);
  }
}

COREMLRT_AVX512_SPARSE void dot_sparse_palette(const RowRuns& rows, const float* a, float* c) {
  if (spread_by_permute()) dot_sparse_palette_rows(rows, a, c, PermuteSpread{});
  else dot_sparse_palette_rows(rows, a, c, ExpandSpread{});
}

}  // namespace

bool dot_simd_available(const ir::PackedTensor& t, bool sparse) {
  switch (simd_level()) {
    case SimdLevel::kAvx512: return !sparse || (has_vbmi2() && has_bitalg());
    case SimdLevel::kAvx2: return !sparse && dot_avx2_takes(t);
    default: return false;
  }
}

bool rounded_groups_everywhere(const ir::PackedTensor& t, const Group& shape) {
  return simd_level() == SimdLevel::kAvx512 && t.codes.bits == 4 && !t.mask.defined() && shape.map != ir::CodeMap::kLut &&
         rounded_once(shape) && shape.half_values && fp16_rounded_everywhere(t, t.codes.dtype == DType::Int4);
}

bool dot_simd(const RowRuns& rows, const float* a, const float* a_split, float* c) {
  if (!dot_simd_available(*rows.tensor, rows.tensor->mask.defined())) return false;
  if (simd_level() == SimdLevel::kAvx2) {
    dot_avx2(rows, a, a_split, c);
    return true;
  }
  if (rows.tensor->mask.defined()) {
    if (rows.tensor->map == ir::CodeMap::kLut) dot_sparse_palette(rows, a, c);
    else dot_sparse(rows, a, c);
  } else if (rows.tensor->codes.bits == 4) dot_nibbles(rows, a, a_split, c);
  else dot_bytes(rows, a, c);
  return true;
}

#else

bool dot_simd_available(const ir::PackedTensor&, bool) { return false; }
bool rounded_groups_everywhere(const ir::PackedTensor&, const Group&) { return false; }
bool dot_simd(const RowRuns&, const float*, const float*, float*) { return false; }

#endif

}  // namespace coremlrt::ops::packed
