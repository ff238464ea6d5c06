// The AVX2 decoders (with FMA and F16C: x86-64-v3) that packed_codes_x86.cc chooses where the
// CPU has them and no AVX-512; see there for what they compute.
#include <algorithm>
#include <array>
#include <cstring>
#include <type_traits>

#include "ops/packed_codes_x86.h"

#ifdef COREMLRT_PACKED_X86

namespace coremlrt::ops::packed {

namespace {

template <class Out>
COREMLRT_AVX2_INLINE inline void nibbles256_affine(const Group& g, bool is_signed, const uint8_t* bytes, int64_t n,
                                                   Out* out) {
  const __m256 scale = _mm256_set1_ps(g.scale), offset = _mm256_set1_ps(g.offset);
  const __m128i low4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(is_signed ? 8 : 0);
  const bool round = g.half_values && !std::is_same_v<Out, half>;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + i / 2));
    const __m128i lo = _mm_and_si128(codes, low4), hi = _mm_and_si128(_mm_srli_epi16(codes, 4), low4);
    // Codes 0..15 and 16..31, one byte each; int4 ones sign-extended ((r ^ 8) - 8).
    const __m128i first = _mm_sub_epi8(_mm_xor_si128(_mm_unpacklo_epi8(lo, hi), eight), eight);
    const __m128i second = _mm_sub_epi8(_mm_xor_si128(_mm_unpackhi_epi8(lo, hi), eight), eight);
    const __m128i quarters[4] = {first, _mm_srli_si128(first, 8), second, _mm_srli_si128(second, 8)};
    for (int q = 0; q < 4; ++q) {
      const __m256 code = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(quarters[q]));
      __m256 v = _mm256_mul_ps(_mm256_sub_ps(code, offset), scale);
      if constexpr (std::is_same_v<Out, half>) {
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i + 8 * q), _mm256_cvtps_ph(v, kNearest));
      } else {
        if (round) v = round_half8(v);
        _mm256_storeu_ps(out + i + 8 * q, v);
      }
    }
  }
  for (; i < n; ++i) {
    const uint32_t raw = (bytes[i / 2] >> (4 * (i % 2))) & 15u;
    out[i] = static_cast<Out>(value_of(g, static_cast<float>(code_integer(raw, 4, is_signed)), raw));
  }
}

COREMLRT_AVX2_INLINE inline void nibbles256(const Group& g, bool is_signed, const uint8_t* bytes, int64_t n, half* out) {
  __m256 low, high;
  nibble_values8<false>(g, is_signed, low, high);
  const __m128i low_halves = _mm256_cvtps_ph(low, kNearest), high_halves = _mm256_cvtps_ph(high, kNearest);
  const NibbleBytes table = nibble_bytes(low_halves, high_halves);
  const __m128i low4 = _mm_set1_epi8(0x0f);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + i / 2));
    const __m128i lo = _mm_and_si128(codes, low4), hi = _mm_and_si128(_mm_srli_epi16(codes, 4), low4);
    // Lane 0 holds the indices of values 0..15, lane 1 those of 16..31.
    const __m256i idx = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
    const __m256i l = _mm256_shuffle_epi8(table.low, idx), h = _mm256_shuffle_epi8(table.high, idx);
    const __m256i r0 = _mm256_unpacklo_epi8(l, h);  // values 0..7 | 16..23
    const __m256i r1 = _mm256_unpackhi_epi8(l, h);  // values 8..15 | 24..31
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), _mm256_permute2x128_si256(r0, r1, 0x20));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i + 16), _mm256_permute2x128_si256(r0, r1, 0x31));
  }
  if (i == n) return;
  alignas(32) half values[16];
  _mm_store_si128(reinterpret_cast<__m128i*>(values), low_halves);
  _mm_store_si128(reinterpret_cast<__m128i*>(values) + 1, high_halves);
  nibble_tail(values, bytes, i, n, out);
}

COREMLRT_AVX2_INLINE inline void nibbles256(const Group& g, bool is_signed, const uint8_t* bytes, int64_t n, float* out) {
  __m256 low, high;
  nibble_values8(g, is_signed, low, high);
  const __m128i low4 = _mm_set1_epi8(0x0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    int32_t four;
    std::memcpy(&four, bytes + i / 2, sizeof four);
    const __m128i codes = _mm_cvtsi32_si128(four);
    const __m128i lo = _mm_and_si128(codes, low4), hi = _mm_and_si128(_mm_srli_epi16(codes, 4), low4);
    const __m256i idx = _mm256_cvtepu8_epi32(_mm_unpacklo_epi8(lo, hi));
    // Indices 8..15 pick from the high values: bit 3 moved to the sign bit drives the blend.
    const __m256 picked = _mm256_blendv_ps(_mm256_permutevar8x32_ps(low, idx), _mm256_permutevar8x32_ps(high, idx),
                                           _mm256_castsi256_ps(_mm256_slli_epi32(idx, 28)));
    _mm256_storeu_ps(out + i, picked);
  }
  if (i == n) return;
  alignas(32) float values[16];
  _mm256_store_ps(values, low);
  _mm256_store_ps(values + 8, high);
  nibble_tail(values, bytes, i, n, out);
}

COREMLRT_AVX2_INLINE inline void bytes256(const Group& g, const uint8_t* codes, bool is_signed, int64_t k, int64_t n, half* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(map8<false>(g, byte_codes8(codes + k + i, is_signed)), kNearest));
  byte_tail(g, codes, is_signed, k, i, n, out);
}

COREMLRT_AVX2_INLINE inline void bytes256(const Group& g, const uint8_t* codes, bool is_signed, int64_t k, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(out + i, map8(g, byte_codes8(codes + k + i, is_signed)));
  byte_tail(g, codes, is_signed, k, i, n, out);
}

// For each byte of mask bits: the byte shuffle that spreads the next fp16 codes (two bytes
// each) over the 8 positions whose bits are set, with zero bytes (0x80) at the clear ones.
struct ExpandTable {
  alignas(16) std::array<std::array<uint8_t, 16>, 256> shuffles{};
  ExpandTable() {
    for (unsigned m = 0; m < 256; ++m) {
      unsigned rank = 0;
      for (unsigned j = 0; j < 8; ++j) {
        const bool set = (m >> j) & 1u;
        shuffles[m][2 * j] = set ? static_cast<uint8_t>(2 * rank) : 0x80;
        shuffles[m][2 * j + 1] = set ? static_cast<uint8_t>(2 * rank + 1) : 0x80;
        rank += set;
      }
    }
  }
};
const ExpandTable& expand_table() {
  static const ExpandTable table;
  return table;
}

}  // namespace

// A sparse run of fp16 codes: 8 positions at a time, the codes they take moved into place by one
// byte shuffle. (fp32 codes, rarer, take the tail loop.)
template <class Out>
COREMLRT_AVX2 int64_t expand256(const SparseValues& t, int64_t p, int64_t k, int64_t n, Out* out) {
  const half* codes = static_cast<const half*>(t.values);
  const int64_t first = k, count = t.count;
  const ExpandTable& table = expand_table();
  int64_t i = 0;
  while (i + 8 <= n && k + 8 <= count) {
    uint64_t bits = mask_bits(t, p + i);
    for (int byte = 0; byte < 8 && i + 8 <= n && k + 8 <= count; ++byte, i += 8, bits >>= 8) {
      const unsigned m = static_cast<unsigned>(bits & 0xffu);
      const __m128i spread = _mm_shuffle_epi8(_mm_loadu_si128(reinterpret_cast<const __m128i*>(codes + k)),
                                              _mm_load_si128(reinterpret_cast<const __m128i*>(table.shuffles[m].data())));
      if constexpr (std::is_same_v<Out, half>) _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), spread);
      else _mm256_storeu_ps(out + i, _mm256_cvtph_ps(spread));
      k += __builtin_popcount(m);
    }
  }
  return expand_tail(t, codes, p, k, i, n, out) - first;
}
template int64_t expand256(const SparseValues&, int64_t, int64_t, int64_t, half*);
template int64_t expand256(const SparseValues&, int64_t, int64_t, int64_t, float*);

template <class Out>
COREMLRT_AVX2 void nibbles256(const Run& run, Out* out) {
  const bool is_signed = run.tensor->codes.dtype == DType::Int4;
  const uint8_t* bytes = run.tensor->codes.data.ptr<uint8_t>() + run.k / 2;
  if (affine_arithmetic(run.shape)) {
    COREMLRT_FOR_EACH_GROUP(run, nibbles256_affine(group, is_signed, bytes + done / 2, len, out + done))
    return;
  }
  COREMLRT_FOR_EACH_GROUP(run, nibbles256(group, is_signed, bytes + done / 2, len, out + done))
}
template void nibbles256(const Run&, half*);
template void nibbles256(const Run&, float*);

template <class Out>
COREMLRT_AVX2 void bytes256(const Run& run, Out* out) {
  const bool is_signed = run.tensor->codes.dtype == DType::Int8;
  const uint8_t* codes = run.tensor->codes.data.ptr<uint8_t>();
  COREMLRT_FOR_EACH_GROUP(run, bytes256(group, codes, is_signed, run.k + done, len, out + done))
}
template void bytes256(const Run&, half*);
template void bytes256(const Run&, float*);

}  // namespace coremlrt::ops::packed

#endif
