#pragma once
// Eight-lane fp16 <-> fp32 conversion in plain vector code, for the GEMM (gemm.cc) and the
// bulk conversions of util.h. GCC does not vectorize conversions of _Float16 itself (a loop
// of static_cast<float>(half) converts one element at a time, through a library call where
// the target has no F16C instruction), so these work on the bit patterns with integer vector
// operations. Both are exact: the same results as static_cast, NaN payloads included.
// On x86-64, callers compiled for x86-64-v3 use the F16C instructions instead (one instruction
// per eight lanes); these are the portable versions every target can run.
#include <cstdint>

#include "coremlrt/dtype.h"

namespace coremlrt::ops {

// Eight float lanes, and the same vector read from memory aligned only as a float.
typedef float Lanes __attribute__((vector_size(32)));
typedef float LanesIn __attribute__((vector_size(32), aligned(4), may_alias));
typedef uint32_t Bits __attribute__((vector_size(32)));
typedef int32_t SignedBits __attribute__((vector_size(32)));
typedef uint16_t HalfBits __attribute__((vector_size(16)));
typedef uint16_t HalfBitsIn __attribute__((vector_size(16), aligned(2), may_alias));
constexpr int kLanes = 8;

// fp16 -> fp32: sign to bit 31, exponent and mantissa 13 bits up reads as a float exactly
// 2^112 too small, subnormals included; infinities and NaNs get the all-ones exponent instead,
// and NaNs the quiet bit (as the F16C instruction and the library conversion give them).
[[gnu::always_inline]] inline void widen_lanes_portable(const half* p, Lanes& out) {
  const Bits h = __builtin_convertvector(*reinterpret_cast<const HalfBitsIn*>(p), Bits);
  const Bits moved = ((h & 0x8000u) << 16) | ((h & 0x7fffu) << 13);
  const Lanes value = __builtin_bit_cast(Lanes, moved) * 0x1p112f;
  const Bits special = (h & 0x7c00u) == 0x7c00u;  // all ones where the exponent is all ones
  const Bits quiet = ((h & 0x3ffu) != 0u) & 0x00400000u;  // NaN: a non-zero mantissa
  out = __builtin_bit_cast(Lanes,
                           (__builtin_bit_cast(Bits, value) & ~special) | ((moved | 0x7f800000u | quiet) & special));
}

// fp32 -> fp16, rounding to nearest even as static_cast does:
//   - NaN keeps the top of its payload and is made quiet; magnitudes from 65520 on are infinite;
//   - below 2^-14 (fp16 subnormals): adding 0.5 lines the float's mantissa up with fp16's
//     subnormal spacing (2^-24), so the float addition itself rounds to nearest even and the
//     low bits are the fp16 pattern;
//   - normal numbers: the exponent is rebased (-112) and 0xfff plus the kept mantissa's lowest
//     bit added before dropping 13 bits rounds half to even.
[[gnu::always_inline]] inline void narrow_lanes_portable(const Lanes& value, half* p) {
  const Bits bits = __builtin_bit_cast(Bits, value);
  const Bits sign = (bits >> 16) & 0x8000u;
  const Bits magnitude = bits & 0x7fffffffu;
  const Lanes sub = __builtin_bit_cast(Lanes, magnitude) + 0.5f;
  const Bits subnormal = __builtin_bit_cast(Bits, sub) - 0x3f000000u;
  const Bits normal = (magnitude + 0xc8000fffu + ((magnitude >> 13) & 1u)) >> 13;
  const Bits nan = 0x7e00u | ((magnitude >> 13) & 0x3ffu);
  // Comparisons on values below 2^31 give the same result signed or unsigned.
  const SignedBits m = __builtin_bit_cast(SignedBits, magnitude);
  const Bits is_nan = __builtin_bit_cast(Bits, m > 0x7f800000);
  const Bits is_inf = __builtin_bit_cast(Bits, m >= 0x477ff000) & ~is_nan;
  const Bits is_sub = __builtin_bit_cast(Bits, m < 0x38800000);
  Bits result = (normal & ~is_sub) | (subnormal & is_sub);
  result = (result & ~is_inf) | (0x7c00u & is_inf);
  result = (result & ~is_nan) | (nan & is_nan);
  const HalfBits narrowed = __builtin_convertvector(result | sign, HalfBits);
  __builtin_memcpy(p, &narrowed, sizeof narrowed);
}

}  // namespace coremlrt::ops
