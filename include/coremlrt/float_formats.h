#pragma once
// Decoding of the narrow float formats that weight files may hold
// (docs/design/coreml-format.md, "Weight blobs"), and bulk fp16 conversion.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "coremlrt/dtype.h"

namespace coremlrt {

// Bulk fp16 <-> fp32 conversion, using the CPU's conversion instructions where it has them
// (chosen at run time; src/ops/util.cc). Kernels convert fp16 operands in blocks with these
// rather than element by element; the Python binding widens fp16 outputs with half_to_float.
void half_to_float(const half* src, float* dst, int64_t count);
void float_to_half(const float* src, half* dst, int64_t count);

// bfloat16: the upper half of an IEEE float32.
inline float bfloat16_to_float(uint16_t bits) {
  uint32_t word = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &word, sizeof(value));
  return value;
}

// float8 e4m3fn: sign 1, exponent 4 (bias 7), mantissa 3; no infinities; S.1111.111 is NaN.
inline float float8_e4m3fn_to_float(uint8_t bits) {
  const int sign = bits >> 7, exponent = (bits >> 3) & 0xF, mantissa = bits & 0x7;
  float magnitude;
  if (exponent == 0xF && mantissa == 0x7) return std::numeric_limits<float>::quiet_NaN();
  if (exponent == 0) magnitude = std::ldexp(static_cast<float>(mantissa), -9);  // subnormal: m/8 * 2^-6
  else magnitude = std::ldexp(1.0f + mantissa / 8.0f, exponent - 7);
  return sign ? -magnitude : magnitude;
}

// float8 e5m2: sign 1, exponent 5 (bias 15), mantissa 2; IEEE-like infinities and NaNs.
inline float float8_e5m2_to_float(uint8_t bits) {
  const int sign = bits >> 7, exponent = (bits >> 2) & 0x1F, mantissa = bits & 0x3;
  float magnitude;
  if (exponent == 0x1F) {
    magnitude = mantissa ? std::numeric_limits<float>::quiet_NaN() : std::numeric_limits<float>::infinity();
  } else if (exponent == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), -16);  // subnormal: m/4 * 2^-14
  } else {
    magnitude = std::ldexp(1.0f + mantissa / 4.0f, exponent - 15);
  }
  return sign ? -magnitude : magnitude;
}

}  // namespace coremlrt
