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
// The loops themselves are in packed_codes_avx512.cc and packed_codes_avx2.cc; this file picks
// one per call from the CPU's level (and limit_simd's).
#include "ops/packed_codes.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ops/packed_codes_x86.h"
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

SimdLevel level() {
  return static_cast<SimdLevel>(std::min(static_cast<int>(cpu_level()), level_limit.load(std::memory_order_relaxed)));
}

}  // namespace

SimdLevel simd_level() { return level(); }

template <class Out>
bool nibbles_simd(const Run& run, Out* out) {
  switch (level()) {
    case SimdLevel::kAvx512:
      // 4-bit codes rounded once to fp16 (int4/uint4 per block): each block's table from its
      // scale and offset, read in bulk, much faster than the arithmetic decode below
      // (docs/reports/performance.md, "Measurements behind code choices").
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
bool bytes_simd(const Run& run, Out* out) {
  switch (level()) {
    case SimdLevel::kAvx512: bytes512(run, out); return true;
    case SimdLevel::kAvx2: bytes256(run, out); return true;
    default: return false;
  }
}

template <class Out>
int64_t expand_simd(const SparseValues& t, int64_t position, int64_t k, int64_t n, Out* out) {
  const SimdLevel l = level();
  if (t.dtype == DType::Float16) {
    if (l == SimdLevel::kAvx512 && spread_by_permute()) return permute512(t, position, k, n, out);
    if (l == SimdLevel::kAvx512 && has_vbmi2()) return expand512(t, position, k, n, out);
    if (l >= SimdLevel::kAvx2) return expand256(t, position, k, n, out);
    return -1;
  }
  // fp32 codes into fp32 values only.
  if constexpr (std::is_same_v<Out, float>)
    if (t.dtype == DType::Float32 && l == SimdLevel::kAvx512) return expand512_fp32(t, position, k, n, out);
  return -1;
}

#else  // no x86 versions in this build: the portable loops run

SimdLevel simd_level() { return SimdLevel::kPortable; }
template <class Out>
bool nibbles_simd(const Run&, Out*) { return false; }
template <class Out>
bool bytes_simd(const Run&, Out*) { return false; }
template <class Out>
int64_t expand_simd(const SparseValues&, int64_t, int64_t, int64_t, Out*) { return -1; }
void prefer_expand(bool) {}

#endif

#define COREMLRT_DECODE_INTO(Out)                                  \
  template bool nibbles_simd(const Run&, Out*);                    \
  template bool bytes_simd(const Run&, Out*);                      \
  template int64_t expand_simd(const SparseValues&, int64_t, int64_t, int64_t, Out*);
COREMLRT_DECODE_INTO(half)
COREMLRT_DECODE_INTO(float)
#undef COREMLRT_DECODE_INTO

}  // namespace coremlrt::ops::packed
