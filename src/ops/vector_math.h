#pragma once
// exp, sigmoid, tanh and gelu of eight floats at a time, without branches (GCC vector
// extensions, the Lanes of half_lanes.h), for loops that apply them to whole arrays: the gates
// of the recurrent layers (recurrent.cc), where the C library's scalar expf and tanhf took a
// fifth of an LSTM's time, and the activations, softmax and attention (activation.cc,
// attention.cc). Results are within 1 unit in the last place of the exact value (exp, tanh), 2
// (sigmoid, gelu's tanh and sigmoid forms, from their arguments as computed in float) or 6
// (gelu), as tests/cpp/ops/vector_math_test.cc measures over the float range.
#include <cstdint>

#include "ops/half_lanes.h"

// Every function here updates the Lanes it is given by reference. g++ reports -Wpsabi (32-byte
// vectors pass differently with and without AVX) for each function that takes or returns Lanes
// by value, even when it is always inlined, at the end of each file that includes it, where no
// scoped pragma reaches; with no Lanes crossing a call by value there is nothing to report.

// COREMLRT_LANES_VERSIONS(function definition): on x86-64 with GCC, the function twice, for
// any CPU and for x86-64-v3, where eight lanes are one AVX register rather than two SSE ones.
// The x86-64-v3 version is built without contracting a * b + c into fused multiply-adds (which
// the other cannot use), so that both give the same bits. COREMLRT_GEMM_PORTABLE_ONLY (the TSan
// build: CMakeLists.txt) leaves the plain one, as in ops/gemm.cc: TSan cannot run the resolver
// that picks a version at load.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(COREMLRT_GEMM_PORTABLE_ONLY)
#define COREMLRT_LANES_VERSIONS(...)            \
  __attribute__((target("default"))) __VA_ARGS__ \
  __attribute__((target("arch=x86-64-v3"), optimize("fp-contract=off"), flatten)) __VA_ARGS__
#else
#define COREMLRT_LANES_VERSIONS(...) __VA_ARGS__
#endif

namespace coremlrt::ops {

// e^x = p 2^n for x in [-105, 89]: x = n ln2 + r with |r| <= ln2 / 2, ln2 split in a part
// exact in float and a remainder; p = e^r by Cephes' degree-6 polynomial for expf.
[[gnu::always_inline]] inline void exp_reduce(const Lanes& x, Lanes& n, Lanes& p) {
  // Adding 1.5 * 2^23 leaves x / ln2 rounded to the nearest integer in the low mantissa bits.
  n = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  const Lanes r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  p = Lanes{} + 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
}

// x times 2^n for integral n in [-126, 127] (2^n written into the exponent bits).
[[gnu::always_inline]] inline void scale_by_power_of_two(Lanes& x, const SignedBits& n) {
  x *= __builtin_bit_cast(Lanes, (n + 127) << 23);
}

// e^x for x in [-87, 88]; smaller and larger x give e^-87 and e^88 (what sigmoid and tanh need:
// both saturate long before). NaN stays NaN.
[[gnu::always_inline]] inline void exp_lanes(Lanes& x) {
  const Lanes zero{};
  x = x < -87.0f ? zero - 87.0f : x;
  x = x > 88.0f ? zero + 88.0f : x;
  Lanes n, p;
  exp_reduce(x, n, p);
  x = p;
  scale_by_power_of_two(x, __builtin_convertvector(n, SignedBits));
}

// e^x over the whole float range, as the exp op needs it: past 88.72 the result overflows to
// inf, and below -87.33 it falls through the subnormal floats to 0 (2^n as two factors, each a
// normal float, so that the second product rounds once into the subnormal range). -inf gives 0,
// inf gives inf, NaN stays NaN.
[[gnu::always_inline]] inline void exp_op_lanes(Lanes& x) {
  const Lanes zero{};
  x = x < -105.0f ? zero - 105.0f : x;  // e^-105 rounds to 0
  x = x > 89.0f ? zero + 89.0f : x;     // e^89 overflows
  Lanes n, p;
  exp_reduce(x, n, p);
  x = p;
  const SignedBits whole = __builtin_convertvector(n, SignedBits);
  const SignedBits half = whole >> 1;
  scale_by_power_of_two(x, half);
  scale_by_power_of_two(x, whole - half);
}

// 1 / (1 + e^-x). Below -87.33 the result is under the smallest normal float and taken as 0
// (exp_lanes stops at e^88, which would hold it near 6e-39), so sigmoid(-inf) is 0.
[[gnu::always_inline]] inline void sigmoid_lanes(Lanes& x) {
  const SignedBits underflow = x < -87.33f;
  Lanes e = -x;
  exp_lanes(e);
  x = 1.0f / (1.0f + e);
  x = underflow ? Lanes{} : x;
}

// tanh: below |x| = 0.625 Cephes' odd polynomial for tanhf (1 - 2 / (e^2|x| + 1) would lose the
// low bits of small results to cancellation), above it that formula with the sign of x.
[[gnu::always_inline]] inline void tanh_lanes(Lanes& x) {
  const Lanes magnitude = x < 0.0f ? -x : x;
  const Lanes z = x * x;
  Lanes p = Lanes{} - 5.70498872745e-3f;
  p = p * z + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  Lanes near_zero = p * z * x + x;
  near_zero = x == 0.0f ? x : near_zero;  // -0 stays -0 (the sum above gives +0)
  Lanes e = 2.0f * magnitude;
  exp_lanes(e);
  const Lanes far_magnitude = 1.0f - 2.0f / (e + 1.0f);
  const Lanes far = x < 0.0f ? -far_magnitude : far_magnitude;
  x = magnitude < 0.625f ? near_zero : far;
}

// GELU (exact form): x P(N(0, 1) <= x) = x Phi(x), through the upper tail Q(t) = 1 - Phi(t) of
// t = |x|: Phi(x) is 1 - Q(t) for x >= 0 and Q(t) below, so small results for negative x keep
// their relative precision (0.5 x (1 + erf(x / sqrt 2)) in float loses them to cancellation).
// Q(t) = e^(-t^2 / 2) g(t), g smooth from 1/2 at 0 to about 0.4 / t: g is a degree-10
// polynomial in u = 1 / (1 + 0.4 t), fitted for this code by weighted least squares for relative error
// over t in [0, 14] (at most 3e-7 evaluated in float). t^2 is split into its float product and
// that product's rounding error (Dekker), which e^-x's argument needs for large t. Past t = 13
// Q is under the smallest normal float and taken as 0. NaN stays NaN; gelu(-inf) is NaN, as the
// erf form gives it.
[[gnu::always_inline]] inline void gelu_lanes(Lanes& x) {
  const Lanes t = x < 0.0f ? -x : x;
  const Lanes u = 1.0f / (1.0f + 0.4f * t);
  Lanes g = Lanes{} + 2.9122803e-02f;
  g = g * u - 1.5942073e-01f;
  g = g * u + 3.3965015e-01f;
  g = g * u - 3.1416020e-01f;
  g = g * u + 6.6397898e-02f;
  g = g * u + 4.1274447e-03f;
  g = g * u + 7.9344317e-02f;
  g = g * u + 1.3617221e-01f;
  g = g * u + 1.5914953e-01f;
  g = g * u + 1.5961820e-01f;
  g = g * u - 1.5950046e-06f;
  // t^2 = square + error exactly (t split into halves of 12 significant bits).
  const Lanes square = t * t;
  const Lanes split = t * 4097.0f;
  const Lanes high = split - (split - t);
  const Lanes low = t - high;
  const Lanes error = ((high * high - square) + 2.0f * high * low) + low * low;
  Lanes e = -0.5f * square;
  exp_lanes(e);
  Lanes q = e * (1.0f - 0.5f * error) * g;
  q = t > 13.0f ? Lanes{} : q;
  x = x * (x < 0.0f ? q : 1.0f - q);
}

// GELU's tanh form, x/2 (1 + tanh(u)) with u = sqrt(2/pi) (x + 0.044715 x^3), computed as
// x sigmoid(2u): 1 + tanh(u) is 2 sigmoid(2u), and that form keeps the relative precision of the
// small results of negative x, which 1 + tanh(u) in float cancels away. Where sigmoid(2u) is
// taken as 0 (x below about -10), so is the result, as the float tanh form gives it; gelu(-inf)
// is NaN (-inf times 0), as that form gives it too.
[[gnu::always_inline]] inline void gelu_tanh_lanes(Lanes& x) {
  Lanes s = 1.5957691216f * (x + 0.044715f * x * x * x);  // 2 sqrt(2/pi) (...)
  sigmoid_lanes(s);
  x = x * s;
}

// GELU's sigmoid form, x sigmoid(1.702 x).
[[gnu::always_inline]] inline void gelu_sigmoid_lanes(Lanes& x) {
  Lanes s = 1.702f * x;
  sigmoid_lanes(s);
  x = x * s;
}

// One row of a softmax in floats, out = e^(x - max(x)) / sum, with exp_lanes (activation.cc,
// whose softmax op computes its rows so); out may be x.
void softmax_floats(const float* x, float* out, int64_t n);

// f(Lanes&) applied in place to v[0, n), eight at a time (the tail through a padded block).
template <class F>
void map_lanes(float* v, int64_t n, F f) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Lanes x;
    __builtin_memcpy(&x, v + i, sizeof x);
    f(x);
    __builtin_memcpy(v + i, &x, sizeof x);
  }
  if (i == n) return;
  float block[kLanes] = {};
  __builtin_memcpy(block, v + i, static_cast<size_t>(n - i) * sizeof(float));
  Lanes x;
  __builtin_memcpy(&x, block, sizeof x);
  f(x);
  __builtin_memcpy(block, &x, sizeof x);
  __builtin_memcpy(v + i, block, static_cast<size_t>(n - i) * sizeof(float));
}

}  // namespace coremlrt::ops
