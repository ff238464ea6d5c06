// x86 versions of the decoders' hot loops (packed_codes.h), chosen at run time: AVX-512 (F, BW,
// DQ, VL; VBMI2 for fp16 sparse runs) where the CPU has it, else AVX2 with FMA and F16C
// (x86-64-v3). They compute the same operations as packed::value_of, lane by lane: conversions
// to fp16 round to nearest even as static_cast does, so their values are bit for bit the portable
// loops' (tests/cpp/ops/packed_weight_test.cc runs every level this machine has).
//
// - 4-bit codes: the group's sixteen values are computed once in registers, then the codes
//   become indices of table lookups: one vpermw (AVX-512) or two vpshufb on the values' low and
//   high bytes (AVX2) per 32 fp16 values; vpermps per 8 or 16 fp32 values.
// - 8-bit codes: widened to float 8 or 16 at a time and mapped.
// - sparse fp16/fp32 runs: the mask's bits drive expand-loads (AVX-512) or a permutation chosen
//   by 8 mask bits (AVX2).
#include "ops/packed_codes.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ops/packed_codes_avx512.h"
#ifdef COREMLRT_PACKED_X86
#include <cpuid.h>
#endif

namespace coremlrt::ops::packed {

namespace {
std::atomic<int> level_limit{static_cast<int>(SimdLevel::kAvx512)};
}  // namespace

void limit_simd(SimdLevel level) { level_limit.store(static_cast<int>(level), std::memory_order_relaxed); }

#ifdef COREMLRT_PACKED_X86

namespace {

SimdLevel cpu_level() {
  static const SimdLevel level = [] {
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vl"))
      return SimdLevel::kAvx512;
    // F16C: CPUID leaf 1, ECX bit 29 (clang 16 has no __builtin_cpu_supports name for it).
    unsigned a = 0, b = 0, c = 0, d = 0;
    const bool f16c = __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29)) != 0;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && f16c) return SimdLevel::kAvx2;
    return SimdLevel::kPortable;
  }();
  return level;
}

}  // namespace

// CPUID leaf 7, ECX bit 6 (clang 16 has no __builtin_cpu_supports name for it); only asked where
// AVX-512 itself is usable, which cpu_level() checked with the OS's support included.
bool has_vbmi2() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c & (1u << 6)) != 0;
  }();
  return yes;
}

// CPUID leaf 7, ECX bit 12, as has_vbmi2.
bool has_bitalg() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    return __get_cpuid_count(7, 0, &a, &b, &c, &d) && (c & (1u << 12)) != 0;
  }();
  return yes;
}

namespace {
std::atomic<bool> expand_preferred{false};

bool is_amd() {
  static const bool yes = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid(0, &a, &b, &c, &d)) return false;
    char vendor[13] = {};
    std::memcpy(vendor, &b, 4);
    std::memcpy(vendor + 4, &d, 4);
    std::memcpy(vendor + 8, &c, 4);
    return std::strcmp(vendor, "AuthenticAMD") == 0;
  }();
  return yes;
}
}  // namespace

void prefer_expand(bool expand) { expand_preferred.store(expand, std::memory_order_relaxed); }
bool spread_by_permute() { return is_amd() && has_bitalg() && !expand_preferred.load(std::memory_order_relaxed); }

// Mask bits [position, position + 64) (zeros past the mask's end).
uint64_t mask_bits(const SparseValues& s, int64_t position) {
  const uint8_t* mask = s.mask;
  const int64_t size = s.mask_bytes, byte = position / 8;
  if (position % 8 == 0 && byte + 8 <= size) {
    uint64_t bits;
    std::memcpy(&bits, mask + byte, sizeof bits);
    return bits;
  }
  uint8_t window[9] = {};
  const int64_t available = std::min<int64_t>(9, size - byte);
  if (available > 0) std::memcpy(window, mask + byte, static_cast<size_t>(available));
  uint64_t low;
  std::memcpy(&low, window, sizeof low);
  const unsigned shift = position % 8;
  return shift ? (low >> shift) | (static_cast<uint64_t>(window[8]) << (64 - shift)) : low;
}

namespace {

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

// ---------------------------------------------------------------- AVX-512




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


}  // namespace

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

namespace {


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

// ---------------------------------------------------------------- AVX2

#define COREMLRT_AVX2 __attribute__((target("avx2,fma,f16c,popcnt")))
#define COREMLRT_AVX2_INLINE __attribute__((target("avx2,fma,f16c,popcnt"), always_inline))

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

// Affine 4-bit codes whose values need at most one rounding (shift-scale in fp32 or with an exact
// difference, iOS16 affine): computed lane by lane, (code - offset) * scale, 32 codes at a time.
// Without AVX-512's 16-lane permute, building a table of each block's sixteen values costs more
// than computing the values of its 32 codes.
bool affine_arithmetic(const Group& g) {
  return (g.map == ir::CodeMap::kShiftScale && (!g.half_scale || g.exact_difference)) || g.map == ir::CodeMap::kAffine;
}

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
  // The sixteen fp16 values as two byte tables (low bytes, high bytes), in both 128-bit lanes.
  const __m128i even_odd = _mm_setr_epi8(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  const __m128i a = _mm_shuffle_epi8(low_halves, even_odd);
  const __m128i b = _mm_shuffle_epi8(high_halves, even_odd);
  const __m256i low_bytes = _mm256_broadcastsi128_si256(_mm_unpacklo_epi64(a, b));
  const __m256i high_bytes = _mm256_broadcastsi128_si256(_mm_unpackhi_epi64(a, b));
  const __m128i low4 = _mm_set1_epi8(0x0f);
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    const __m128i codes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(bytes + i / 2));
    const __m128i lo = _mm_and_si128(codes, low4), hi = _mm_and_si128(_mm_srli_epi16(codes, 4), low4);
    // Lane 0 holds the indices of values 0..15, lane 1 those of 16..31.
    const __m256i idx = _mm256_set_m128i(_mm_unpackhi_epi8(lo, hi), _mm_unpacklo_epi8(lo, hi));
    const __m256i l = _mm256_shuffle_epi8(low_bytes, idx), h = _mm256_shuffle_epi8(high_bytes, idx);
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

COREMLRT_AVX2 inline __m256 byte_codes8(const uint8_t* p, bool is_signed) {
  const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
  return _mm256_cvtepi32_ps(is_signed ? _mm256_cvtepi8_epi32(b) : _mm256_cvtepu8_epi32(b));
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

// Each driver walks the groups of a run, one after the other (written out in each: a lambda
// would not share the function's target, and its per-group body would not be inlined).
#define COREMLRT_FOR_EACH_GROUP(run, body)                                       \
  for (int64_t done = 0, g = (run).g, len = (run).first; done < (run).n; len = (run).block, ++g) { \
    len = std::min(len, (run).n - done);                                         \
    const Group group = group_at(*(run).tensor, (run).shape, g);                 \
    body;                                                                        \
    done += len;                                                                 \
  }

template <class Out>
COREMLRT_AVX512 void nibbles512(const Run& run, Out* out) {
  const bool is_signed = run.tensor->codes.dtype == DType::Int4;
  const uint8_t* bytes = run.tensor->codes.data.ptr<uint8_t>() + run.k / 2;
  COREMLRT_FOR_EACH_GROUP(run, nibbles512(group, is_signed, bytes + done / 2, len, out + done))
}

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

template <class Out>
COREMLRT_AVX512 void bytes512(const Run& run, Out* out) {
  const bool is_signed = run.tensor->codes.dtype == DType::Int8;
  const uint8_t* codes = run.tensor->codes.data.ptr<uint8_t>();
  COREMLRT_FOR_EACH_GROUP(run, bytes512(group, codes, is_signed, run.k + done, len, out + done))
}

template <class Out>
COREMLRT_AVX2 void bytes256(const Run& run, Out* out) {
  const bool is_signed = run.tensor->codes.dtype == DType::Int8;
  const uint8_t* codes = run.tensor->codes.data.ptr<uint8_t>();
  COREMLRT_FOR_EACH_GROUP(run, bytes256(group, codes, is_signed, run.k + done, len, out + done))
}

#undef COREMLRT_FOR_EACH_GROUP

SimdLevel level() {
  return static_cast<SimdLevel>(std::min(static_cast<int>(cpu_level()), level_limit.load(std::memory_order_relaxed)));
}

}  // namespace

SimdLevel simd_level() { return level(); }

template <class Out>
bool nibbles_at_level(const Run& run, Out* out) {
  switch (level()) {
    case SimdLevel::kAvx512:
      // 4-bit codes rounded once to fp16 (int4/uint4 per block): each block's table from its
      // scale and offset, read in bulk (benchmarks/bench_compressed.py, lm6 int4 decode on our
      // kernels: 2.2x the fp16 model's time with the arithmetic decode below, about 0.9x so).
      if constexpr (std::is_same_v<Out, half>) {
        if (rounded_once(run.shape) && run.tensor->dtype == DType::Float16) {
          nibbles512_rounded(run, out);
          return true;
        }
      }
      // Other affine 4-bit codes with a scale per small block: the arithmetic decode (AVX2
      // lanes) beats building a 16-entry table per block with group_at's conversions.
      if (affine_arithmetic(run.shape)) {
        nibbles256(run, out);
        return true;
      }
      nibbles512(run, out);
      return true;
    case SimdLevel::kAvx2: nibbles256(run, out); return true;
    default: return false;
  }
}

template <class Out>
bool bytes_at_level(const Run& run, Out* out) {
  switch (level()) {
    case SimdLevel::kAvx512: bytes512(run, out); return true;
    case SimdLevel::kAvx2: bytes256(run, out); return true;
    default: return false;
  }
}

bool nibbles_simd(const Run& run, half* out) { return nibbles_at_level(run, out); }
bool nibbles_simd(const Run& run, float* out) { return nibbles_at_level(run, out); }
bool bytes_simd(const Run& run, half* out) { return bytes_at_level(run, out); }
bool bytes_simd(const Run& run, float* out) { return bytes_at_level(run, out); }

int64_t expand_simd(const SparseValues& t, int64_t position, int64_t k, int64_t n, half* out) {
  if (t.dtype != DType::Float16) return -1;
  const SimdLevel l = level();
  if (l == SimdLevel::kAvx512 && spread_by_permute()) return permute512(t, position, k, n, out);
  if (l == SimdLevel::kAvx512 && has_vbmi2()) return expand512(t, position, k, n, out);
  if (l >= SimdLevel::kAvx2) return expand256(t, position, k, n, out);
  return -1;
}

int64_t expand_simd(const SparseValues& t, int64_t position, int64_t k, int64_t n, float* out) {
  const SimdLevel l = level();
  if (t.dtype == DType::Float16) {
    if (l == SimdLevel::kAvx512 && spread_by_permute()) return permute512(t, position, k, n, out);
    if (l == SimdLevel::kAvx512 && has_vbmi2()) return expand512(t, position, k, n, out);
    if (l >= SimdLevel::kAvx2) return expand256(t, position, k, n, out);
    return -1;
  }
  if (t.dtype != DType::Float32) return -1;
  if (l == SimdLevel::kAvx512) return expand512_fp32(t, position, k, n, out);
  return -1;
}

#else  // no x86 versions in this build: the portable loops run

SimdLevel simd_level() { return SimdLevel::kPortable; }
bool nibbles_simd(const Run&, half*) { return false; }
bool nibbles_simd(const Run&, float*) { return false; }
bool bytes_simd(const Run&, half*) { return false; }
bool bytes_simd(const Run&, float*) { return false; }
int64_t expand_simd(const SparseValues&, int64_t, int64_t, int64_t, half*) { return -1; }
int64_t expand_simd(const SparseValues&, int64_t, int64_t, int64_t, float*) { return -1; }
void prefer_expand(bool) {}

#endif

}  // namespace coremlrt::ops::packed
