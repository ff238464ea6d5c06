// The AVX-512 decoders (F, BW, DQ, VL; VBMI2 or BITALG for fp16 sparse runs) that
// packed_codes_x86.cc chooses where the CPU has them; see there for what they compute.
#include <algorithm>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ops/packed_codes_x86.h"

#ifdef COREMLRT_PACKED_X86

namespace coremlrt::ops::packed {

namespace {


// n codes from `bytes` through a group's sixteen fp16 values (`table`'s low half): one vpermw
// per 32 codes.
COREMLRT_AVX512_INLINE inline void nibbles512_through(__m512i table, const uint8_t* bytes, int64_t n, half* out) {
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    __m128i first, second;
    split_nibbles(_mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + i / 2)), first, second);
    const __m512i idx = _mm512_cvtepu8_epi16(_mm256_set_m128i(second, first));
    _mm512_storeu_si512(out + i, _mm512_permutexvar_epi16(idx, table));
  }
  if (i < n) {
    alignas(64) half values[32];
    _mm512_store_si512(values, table);
    nibble_tail(values, bytes, i, n, out);
  }
}

COREMLRT_AVX512_INLINE inline void nibbles512(const Group& g, bool is_signed, const uint8_t* bytes, int64_t n, half* out) {
  nibbles512_through(_mm512_zextsi256_si512(_mm512_cvtps_ph(nibble_values16<false>(g, is_signed), kNearest)), bytes, n,
                     out);
}

COREMLRT_AVX512_INLINE inline void nibbles512(const Group& g, bool is_signed, const uint8_t* bytes, int64_t n, float* out) {
  const __m512 table = nibble_values16(g, is_signed);
  alignas(64) float values[16];
  _mm512_store_ps(values, table);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m128i first, second;
    split_nibbles(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + i / 2)), first, second);
    _mm512_storeu_ps(out + i, _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(first), table));
  }
  nibble_tail(values, bytes, i, n, out);
}


COREMLRT_AVX512_INLINE inline void bytes512(const Group& g, const uint8_t* codes, bool is_signed, int64_t k, int64_t n, half* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i),
                        _mm512_cvtps_ph(map16<false>(g, byte_codes16(codes + k + i, is_signed)), kNearest));
  byte_tail(g, codes, is_signed, k, i, n, out);
}

COREMLRT_AVX512_INLINE inline void bytes512(const Group& g, const uint8_t* codes, bool is_signed, int64_t k, int64_t n, float* out) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) _mm512_storeu_ps(out + i, map16(g, byte_codes16(codes + k + i, is_signed)));
  byte_tail(g, codes, is_signed, k, i, n, out);
}

// The 32 fp16 values of v at out: as they are, or widened to floats.
COREMLRT_AVX512_INLINE inline void store32(half* out, __m512i v) { _mm512_storeu_si512(out, v); }
COREMLRT_AVX512_INLINE inline void store32(float* out, __m512i v) {
  _mm512_storeu_ps(out, _mm512_cvtph_ps(_mm512_castsi512_si256(v)));
  _mm512_storeu_ps(out + 16, _mm512_cvtph_ps(_mm512_extracti64x4_epi64(v, 1)));
}

}  // namespace

// expand512 with spread_halves32 in place of the expand-loads (spread_by_permute).
template <class Out>
COREMLRT_AVX512_BITALG int64_t permute512(const SparseValues& t, int64_t p, int64_t k, int64_t n, Out* out) {
  const half* codes = static_cast<const half*>(t.values);
  const int64_t first = k;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const uint32_t m = static_cast<uint32_t>(mask_bits(t, p + i));
    store32(out + i, spread_halves32(m, codes + k, codes + t.count));
    k += __builtin_popcount(m);
  }
  return expand_tail(t, codes, p, k, i, n, out) - first;
}

COREMLRT_AVX512_VBMI2 int64_t expand512(const SparseValues& t, int64_t p, int64_t k, int64_t n, half* out) {
  const half* codes = static_cast<const half*>(t.values);
  const int64_t first = k;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const uint32_t m = static_cast<uint32_t>(mask_bits(t, p + i));
    _mm512_storeu_si512(out + i, _mm512_maskz_expandloadu_epi16(m, codes + k));
    k += __builtin_popcount(m);
  }
  return expand_tail(t, codes, p, k, i, n, out) - first;
}

COREMLRT_AVX512_VBMI2 int64_t expand512(const SparseValues& t, int64_t p, int64_t k, int64_t n, float* out) {
  const half* codes = static_cast<const half*>(t.values);
  const int64_t first = k;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const uint16_t m = static_cast<uint16_t>(mask_bits(t, p + i));
    _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_maskz_expandloadu_epi16(m, codes + k)));
    k += __builtin_popcount(m);
  }
  return expand_tail(t, codes, p, k, i, n, out) - first;
}

COREMLRT_AVX512 int64_t expand512_fp32(const SparseValues& t, int64_t p, int64_t k, int64_t n, float* out) {
  const float* codes = static_cast<const float*>(t.values);
  const int64_t first = k;
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const uint16_t m = static_cast<uint16_t>(mask_bits(t, p + i));
    _mm512_storeu_ps(out + i, _mm512_maskz_expandloadu_ps(m, codes + k));
    k += __builtin_popcount(m);
  }
  return expand_tail(t, codes, p, k, i, n, out) - first;
}
template int64_t permute512(const SparseValues&, int64_t, int64_t, int64_t, half*);
template int64_t permute512(const SparseValues&, int64_t, int64_t, int64_t, float*);

namespace {

// The first m (at most 16) elements at p: a plain load where all sixteen lie in range, else a
// masked one. The scales and offsets of a decode step's groups are read sixteen at a time, and
// AMD Zen 4's masked loads and stores cost several times a plain one (docs/reports/performance.md,
// design choices).
COREMLRT_AVX512_INLINE inline __m128i load_bytes16(const uint8_t* p, int64_t m) {
  return m == 16 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(p))
                 : _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << m) - 1u), p);
}
COREMLRT_AVX512_INLINE inline __m256i load_halves16(const void* p, int64_t m) {
  return m == 16 ? _mm256_loadu_si256(static_cast<const __m256i*>(p))
                 : _mm256_maskz_loadu_epi16(static_cast<__mmask16>((1u << m) - 1u), p);
}
COREMLRT_AVX512_INLINE inline __m512 load_floats16(const float* p, int64_t m) {
  return m == 16 ? _mm512_loadu_ps(p) : _mm512_maskz_loadu_ps(static_cast<__mmask16>((1u << m) - 1u), p);
}
COREMLRT_AVX512_INLINE inline void store_floats16(float* p, int64_t m, __m512 v) {
  if (m == 16) _mm512_storeu_ps(p, v);
  else _mm512_mask_storeu_ps(p, static_cast<__mmask16>((1u << m) - 1u), v);
}

// Offsets [g, g + m) (m <= 16) of 4-bit offsets, two per byte, low nibble first, from an even g.
COREMLRT_AVX512_INLINE inline __m512i nibble_offsets16(const uint8_t* bytes, bool is_signed, int64_t g, int64_t m) {
  __m128i codes, unused;
  const int64_t count = (m + 1) / 2;
  split_nibbles(count == 8 ? _mm_loadl_epi64(reinterpret_cast<const __m128i*>(bytes + g / 2))
                           : _mm_maskz_loadu_epi8(static_cast<__mmask16>((1u << count) - 1u), bytes + g / 2),
                codes, unused);
  if (is_signed) codes = _mm_sub_epi8(_mm_xor_si128(codes, _mm_set1_epi8(8)), _mm_set1_epi8(8));
  return _mm512_cvtepi8_epi32(codes);
}

// Offsets [g, g + m) (m <= 16) of 8-bit offsets.
COREMLRT_AVX512_INLINE inline __m512i byte_offsets16(const uint8_t* bytes, bool is_signed, int64_t g, int64_t m) {
  const __m128i b = load_bytes16(bytes + g, m);
  return is_signed ? _mm512_cvtepi8_epi32(b) : _mm512_cvtepu8_epi32(b);
}

// The offsets of groups [g, g + m) of `t` (m <= 16) as floats, zeros where it has none.
COREMLRT_AVX512 __m512 offsets16(const ir::PackedTensor& t, int64_t g, int64_t m) {
  const ir::PackedArray& offset = t.offset;
  const __mmask16 lanes = static_cast<__mmask16>((1u << m) - 1u);
  if (!offset.defined()) return _mm512_setzero_ps();
  if (offset.bits == 4 && g % 2 == 0)
    return _mm512_maskz_cvtepi32_ps(lanes, nibble_offsets16(offset.data.ptr<uint8_t>(), offset.dtype == DType::Int4, g, m));
  if (offset.bits == 0 && (offset.dtype == DType::Int8 || offset.dtype == DType::UInt8))
    return _mm512_cvtepi32_ps(byte_offsets16(offset.data.ptr<uint8_t>(), offset.dtype == DType::Int8, g, m));
  alignas(64) float values[16] = {};
  for (int64_t l = 0; l < m; ++l) values[l] = array_element(offset, g + l);
  return _mm512_load_ps(values);
}

}  // namespace

COREMLRT_AVX512 void scales_and_offsets(const ir::PackedTensor& t, int64_t g0, int64_t n, float* scales, float* offsets) {
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t m = std::min<int64_t>(16, n - i);
    const __m512 s = t.scale.dtype == DType::Float16 ? _mm512_cvtph_ps(load_halves16(t.scale.ptr<half>() + g0 + i, m))
                                                     : load_floats16(t.scale.ptr<float>() + g0 + i, m);
    store_floats16(scales + i, m, s);
    store_floats16(offsets + i, m, offsets16(t, g0 + i, m));
  }
}

namespace {

// fp16_rounded_groups for one form of offsets: `offsets(g, m, integral)` gives the offsets of
// groups [g, g + m) as integers, and clears the lanes of `integral` whose offset is not one.
// kCheck false: the groups are known to pass (fp16_rounded_groups' `checked`), only converted.
template <bool kCheck, class Offsets>
COREMLRT_AVX512_INLINE inline bool rounded_groups(const uint16_t* scale_bits, int64_t g0, int64_t n, bool is_signed,
                                                  const Offsets& offsets, float* scale, float* scale_8193,
                                                  float* offset) {
  // Codes 0..15 less offsets 0..16, or int4 codes -8..7 less offsets -8..8: differences within 16.
  const int base = is_signed ? 8 : 16;
  const __m512i lowest = _mm512_set1_epi32(base - 16), highest = _mm512_set1_epi32(base);
  __mmask16 all = 0xffff;  // checked once at the end: no branch waits on each block's loads
  for (int64_t i = 0; i < n; i += 16) {
    const int64_t m = std::min<int64_t>(16, n - i);
    const __mmask16 lanes = static_cast<__mmask16>((1u << m) - 1u);
    const __m256i bits = load_halves16(scale_bits + g0 + i, m);
    __mmask16 ok = lanes;
    const __m512i whole = offsets(g0 + i, m, ok);
    if (kCheck) {
      // Normal scales up to 2^11 (exponent field 1..26), offsets in range.
      const __m512i exponent =
          _mm512_and_si512(_mm512_srli_epi32(_mm512_cvtepu16_epi32(bits), 10), _mm512_set1_epi32(31));
      ok &= _mm512_cmpge_epi32_mask(exponent, _mm512_set1_epi32(1)) &
            _mm512_cmple_epi32_mask(exponent, _mm512_set1_epi32(26)) & _mm512_cmpge_epi32_mask(whole, lowest) &
            _mm512_cmple_epi32_mask(whole, highest);
      all &= static_cast<__mmask16>(ok | ~lanes);
    }
    const __m512 s = _mm512_cvtph_ps(bits);
    store_floats16(scale + i, m, s);
    store_floats16(scale_8193 + i, m, _mm512_mul_ps(s, _mm512_set1_ps(8193.0f)));  // exact: 11 bits
    store_floats16(offset + i, m, _mm512_cvtepi32_ps(whole));
  }
  return all == 0xffff;
}

}  // namespace

namespace {

template <bool kCheck>
COREMLRT_AVX512_INLINE inline bool fp16_rounded_groups_as(const ir::PackedTensor& t, int64_t g0, int64_t n,
                                                          bool is_signed, float* scale, float* scale_8193,
                                                          float* offset_out) {
  if (t.scale.dtype != DType::Float16) return false;
  const uint16_t* scales = t.scale.ptr<uint16_t>();
  const ir::PackedArray& offset = t.offset;
  if (!offset.defined()) {
    // Capturing, so that no conversion to a function pointer (built without AVX-512) exists.
    auto none = [&](int64_t, int64_t, __mmask16&) COREMLRT_AVX512_INLINE {
      return _mm512_setzero_si512();
    };
    return rounded_groups<kCheck>(scales, g0, n, is_signed, none, scale, scale_8193, offset_out);
  }
  const uint8_t* bytes = offset.data.ptr<uint8_t>();
  if (offset.bits == 4 && g0 % 2 == 0) {
    const bool signed_offsets = offset.dtype == DType::Int4;
    auto nibbles = [&](int64_t g, int64_t m, __mmask16&) COREMLRT_AVX512_INLINE {
      return nibble_offsets16(bytes, signed_offsets, g, m);
    };
    return rounded_groups<kCheck>(scales, g0, n, is_signed, nibbles, scale, scale_8193, offset_out);
  }
  if (offset.bits == 0 && (offset.dtype == DType::Int8 || offset.dtype == DType::UInt8)) {
    const bool signed_offsets = offset.dtype == DType::Int8;
    auto whole_bytes = [&](int64_t g, int64_t m, __mmask16&) COREMLRT_AVX512_INLINE {
      return byte_offsets16(bytes, signed_offsets, g, m);
    };
    return rounded_groups<kCheck>(scales, g0, n, is_signed, whole_bytes, scale, scale_8193, offset_out);
  }
  auto floats = [&](int64_t g, int64_t m, __mmask16& integral)
                    COREMLRT_AVX512_INLINE {
    const __m512 v = offsets16(t, g, m);
    const __m512i whole = _mm512_cvttps_epi32(v);
    integral &= _mm512_cmpeq_ps_mask(_mm512_cvtepi32_ps(whole), v);
    return whole;
  };
  return rounded_groups<kCheck>(scales, g0, n, is_signed, floats, scale, scale_8193, offset_out);
}

}  // namespace

COREMLRT_AVX512 bool fp16_rounded_groups(const ir::PackedTensor& t, int64_t g0, int64_t n, bool is_signed,
                                         float* scale, float* scale_8193, float* offset, bool checked) {
  return checked ? fp16_rounded_groups_as<false>(t, g0, n, is_signed, scale, scale_8193, offset)
                 : fp16_rounded_groups_as<true>(t, g0, n, is_signed, scale, scale_8193, offset);
}

COREMLRT_AVX512 bool fp16_rounded_everywhere(const ir::PackedTensor& t, bool is_signed) {
  constexpr int64_t kChunk = 4096;
  std::vector<float> scale(kChunk), scale_8193(kChunk), offset(kChunk);
  const int64_t groups = t.group_count();
  for (int64_t g = 0; g < groups; g += kChunk)
    if (!fp16_rounded_groups(t, g, std::min(kChunk, groups - g), is_signed, scale.data(), scale_8193.data(),
                             offset.data(), false))
      return false;
  return true;
}


// A run of 4-bit codes into fp16 whose groups' values are rounded once (rounded_once): each
// group's table of sixteen values comes from its scale and offset, read for the whole run at
// once (group_at's conversions, one group at a time, cost more than a block of 32 codes), then
// through nibbles512_through, as a palette's codes.
COREMLRT_AVX512 void nibbles512_rounded(const Run& run, half* out) {
  const ir::PackedTensor& t = *run.tensor;
  const bool is_signed = t.codes.dtype == DType::Int4;
  const uint8_t* bytes = t.codes.data.ptr<uint8_t>() + run.k / 2;
  const int64_t groups = run.n <= run.first ? 1 : 1 + (run.n - run.first + run.block - 1) / run.block;
  thread_local std::vector<float> scales, offsets;
  scales.resize(static_cast<size_t>(groups));
  offsets.resize(static_cast<size_t>(groups));
  scales_and_offsets(t, run.g, groups, scales.data(), offsets.data());
  int64_t done = 0;
  for (int64_t g = 0, len = run.first; done < run.n; len = run.block, ++g) {
    len = std::min(len, run.n - done);
    nibbles512_through(_mm512_zextsi256_si512(rounded_values16(scales[g], offsets[g], is_signed)), bytes + done / 2,
                       len, out + done);
    done += len;
  }
}

template <class Out>
COREMLRT_AVX512 void nibbles512(const Run& run, Out* out) {
  const bool is_signed = run.tensor->codes.dtype == DType::Int4;
  const uint8_t* bytes = run.tensor->codes.data.ptr<uint8_t>() + run.k / 2;
  COREMLRT_FOR_EACH_GROUP(run, nibbles512(group, is_signed, bytes + done / 2, len, out + done))
}
template void nibbles512(const Run&, half*);
template void nibbles512(const Run&, float*);

template <class Out>
COREMLRT_AVX512 void bytes512(const Run& run, Out* out) {
  const bool is_signed = run.tensor->codes.dtype == DType::Int8;
  const uint8_t* codes = run.tensor->codes.data.ptr<uint8_t>();
  COREMLRT_FOR_EACH_GROUP(run, bytes512(group, codes, is_signed, run.k + done, len, out + done))
}
template void bytes512(const Run&, half*);
template void bytes512(const Run&, float*);

}  // namespace coremlrt::ops::packed

#endif
