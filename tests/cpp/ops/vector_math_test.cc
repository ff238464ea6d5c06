// exp, sigmoid, tanh and gelu of ops/vector_math.h against the same functions computed in double by
// the C library and rounded to float: every 257th float bit pattern between -100 and 100 (about
// 8.7 million values, subnormals and zeros included), plus the special values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/vector_math.h"

namespace coremlrt::ops {
namespace {

int32_t ordered_bits(float f) {
  int32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b < 0 ? std::numeric_limits<int32_t>::min() - b : b;  // monotonic in f, -0 == +0
}

int64_t ulps_apart(float a, float b) {
  return std::llabs(static_cast<int64_t>(ordered_bits(a)) - static_cast<int64_t>(ordered_bits(b)));
}

// Float values spread over [low, high]: every 257th bit pattern of each sign.
std::vector<float> sample(float low, float high) {
  std::vector<float> out;
  const float limit = std::max(-low, high);
  uint32_t top;
  std::memcpy(&top, &limit, sizeof top);
  for (uint32_t bits = 0; bits <= top; bits += 257) {
    float f;
    std::memcpy(&f, &bits, sizeof f);
    if (f <= high) out.push_back(f);
    if (-f >= low) out.push_back(-f);
  }
  return out;
}

// The largest distance in ulps between f over lanes and reference(x) rounded to float.
int64_t worst_ulps(const std::vector<float>& xs, void (*f)(Lanes&), double (*reference)(double), float* worst_x) {
  std::vector<float> ys = xs;
  map_lanes(ys.data(), static_cast<int64_t>(ys.size()), f);
  int64_t worst = 0;
  for (size_t i = 0; i < xs.size(); ++i) {
    const int64_t d = ulps_apart(ys[i], static_cast<float>(reference(xs[i])));
    if (d > worst) {
      worst = d;
      *worst_x = xs[i];
    }
  }
  return worst;
}

double exact_exp(double x) { return std::exp(x); }
double exact_sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }
double exact_tanh(double x) { return std::tanh(x); }

void exp_of(Lanes& x) { exp_lanes(x); }
void sigmoid_of(Lanes& x) { sigmoid_lanes(x); }
void tanh_of(Lanes& x) { tanh_lanes(x); }
void gelu_of(Lanes& x) { gelu_lanes(x); }
double exact_gelu(double x) { return 0.5 * x * std::erfc(-x / std::sqrt(2.0)); }

TEST(VectorMath, ExpWithinOneUlpOnItsRange) {
  // [-87, 88]: the range where exp_lanes is exp (e^-87 is still a normal float).
  float at = 0;
  const int64_t worst = worst_ulps(sample(-87.0f, 88.0f), exp_of, exact_exp, &at);
  EXPECT_LE(worst, 1) << "at x = " << at;
}

void exp_op_of(Lanes& x) { exp_op_lanes(x); }

TEST(VectorMath, ExpOpOverTheWholeFloatRange) {
  // Within 1 ulp of e^x rounded to float wherever that is finite, the subnormal results below
  // -87.33 included (1 ulp there is the smallest subnormal); inf from 88.73 up.
  float at = 0;
  const int64_t worst = worst_ulps(sample(-110.0f, 88.72f), exp_op_of, exact_exp, &at);
  EXPECT_LE(worst, 1) << "at x = " << at;
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {88.73f, 89.0f, 100.0f, 1e30f, inf, -inf, -1e30f, -105.0f,
                          std::numeric_limits<float>::quiet_NaN(), 0.0f, -0.0f, 88.72f};
  map_lanes(v.data(), static_cast<int64_t>(v.size()), exp_op_of);
  for (int i = 0; i < 5; ++i) EXPECT_EQ(v[i], inf) << i;
  for (int i = 5; i < 8; ++i) EXPECT_EQ(v[i], 0.0f) << i;
  EXPECT_TRUE(std::isnan(v[8]));
  EXPECT_EQ(v[9], 1.0f);
  EXPECT_EQ(v[10], 1.0f);
  EXPECT_TRUE(std::isfinite(v[11]));  // the largest x whose e^x is finite is about 88.7228
  EXPECT_LE(ulps_apart(v[11], static_cast<float>(std::exp(static_cast<double>(88.72f)))), 1);
}

TEST(VectorMath, SigmoidWithinTwoUlps) {
  // Down to -87, where sigmoid is e^x to float precision; below -87.33 the result is under the
  // smallest normal float and taken as 0.
  float at = 0;
  const int64_t worst = worst_ulps(sample(-87.0f, 100.0f), sigmoid_of, exact_sigmoid, &at);
  EXPECT_LE(worst, 2) << "at x = " << at;
  std::vector<float> tail = {-87.34f, -88.0f, -100.0f, -1e30f, -std::numeric_limits<float>::infinity()};
  map_lanes(tail.data(), static_cast<int64_t>(tail.size()), sigmoid_of);
  for (float y : tail) EXPECT_EQ(y, 0.0f);
}

// The approximations' sigmoid arguments as the lanes compute them in float (their rounding,
// which e^-v magnifies, belongs to the formula evaluated in float, as PyTorch evaluates it),
// then the rest exactly.
double exact_gelu_tanh(double x) {
  const float f = static_cast<float>(x);
  const float twice_u = 1.5957691216f * (f + 0.044715f * f * f * f);
  return x / (1.0 + std::exp(-static_cast<double>(twice_u)));
}
double exact_gelu_sigmoid(double x) { return x / (1.0 + std::exp(-static_cast<double>(1.702f * static_cast<float>(x)))); }
void gelu_tanh_of(Lanes& x) { gelu_tanh_lanes(x); }
void gelu_sigmoid_of(Lanes& x) { gelu_sigmoid_lanes(x); }

TEST(VectorMath, GeluApproximationsWithinFewUlps) {
  // The tanh form down to x = -9.5 (its sigmoid's argument, -2u, is then about 76; the
  // result, about -2e-32, still a normal float), the sigmoid form down to -50 (about -1e-35).
  // Below, the sigmoid is taken as 0 and the result with it, as the float tanh form gives it.
  float at = 0;
  int64_t worst = worst_ulps(sample(-9.5f, 100.0f), gelu_tanh_of, exact_gelu_tanh, &at);
  EXPECT_LE(worst, 2) << "tanh form, at x = " << at;
  worst = worst_ulps(sample(-50.0f, 100.0f), gelu_sigmoid_of, exact_gelu_sigmoid, &at);
  EXPECT_LE(worst, 2) << "sigmoid form, at x = " << at;
  const float inf = std::numeric_limits<float>::infinity();
  for (void (*gelu)(Lanes&) : {gelu_tanh_of, gelu_sigmoid_of}) {
    std::vector<float> v = {inf, -inf, std::numeric_limits<float>::quiet_NaN(), 0.0f, 1e30f, -60.0f, -1e30f};
    map_lanes(v.data(), static_cast<int64_t>(v.size()), gelu);
    EXPECT_EQ(v[0], inf);
    EXPECT_TRUE(std::isnan(v[1]));  // -inf times 0, as x/2 (1 + tanh(u)) gives it
    EXPECT_TRUE(std::isnan(v[2]));
    EXPECT_EQ(v[3], 0.0f);
    EXPECT_EQ(v[4], 1e30f);
    EXPECT_EQ(v[5], 0.0f);
    EXPECT_EQ(v[6], 0.0f);
  }
}

TEST(VectorMath, TanhWithinOneUlp) {
  float at = 0;
  const int64_t worst = worst_ulps(sample(-100.0f, 100.0f), tanh_of, exact_tanh, &at);
  EXPECT_LE(worst, 1) << "at x = " << at;
}

TEST(VectorMath, GeluWithinFewUlps) {
  // Down to -12.5, where x Phi(x) (about -5e-35) is still a normal float; below -13 the tail is
  // taken as 0, an absolute difference below 1e-36.
  float at = 0;
  const int64_t worst = worst_ulps(sample(-12.5f, 100.0f), gelu_of, exact_gelu, &at);
  EXPECT_LE(worst, 6) << "at x = " << at;  // 6 measured, near 0, where g's fit error shows
  std::vector<float> tail = {-13.0f, -13.5f, -20.0f, -1e30f};
  map_lanes(tail.data(), static_cast<int64_t>(tail.size()), gelu_of);
  for (float y : tail) EXPECT_LE(std::abs(y), 1e-36f);
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {inf, -inf, std::numeric_limits<float>::quiet_NaN(), 0.0f, 1e30f};
  map_lanes(v.data(), static_cast<int64_t>(v.size()), gelu_of);
  EXPECT_EQ(v[0], inf);
  EXPECT_TRUE(std::isnan(v[1]));  // as 0.5 x (1 + erf(x / sqrt 2)) gives it
  EXPECT_TRUE(std::isnan(v[2]));
  EXPECT_EQ(v[3], 0.0f);
  EXPECT_EQ(v[4], 1e30f);
}

TEST(VectorMath, SpecialValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  std::vector<float> v = {inf, -inf, nan, 0.0f, -0.0f, 1e30f, -1e30f, 20.0f, -20.0f};
  std::vector<float> t = v, s = v;
  map_lanes(t.data(), static_cast<int64_t>(t.size()), tanh_of);
  map_lanes(s.data(), static_cast<int64_t>(s.size()), sigmoid_of);
  EXPECT_EQ(t[0], 1.0f);
  EXPECT_EQ(t[1], -1.0f);
  EXPECT_TRUE(std::isnan(t[2]));
  EXPECT_EQ(t[3], 0.0f);
  EXPECT_TRUE(std::signbit(t[4]));
  EXPECT_EQ(t[5], 1.0f);
  EXPECT_EQ(t[6], -1.0f);
  EXPECT_EQ(t[7], 1.0f);
  EXPECT_EQ(t[8], -1.0f);
  EXPECT_EQ(s[0], 1.0f);
  EXPECT_EQ(s[1], 0.0f);
  EXPECT_TRUE(std::isnan(s[2]));
  EXPECT_EQ(s[3], 0.5f);
  EXPECT_EQ(s[4], 0.5f);
  EXPECT_EQ(s[5], 1.0f);
}

TEST(VectorMath, MapLanesCoversTails) {
  // Lengths that are not multiples of eight: every element mapped once, nothing past the end.
  for (int n = 0; n <= 19; ++n) {
    std::vector<float> v(static_cast<size_t>(n) + 1, 1.0f);
    v[static_cast<size_t>(n)] = 42.0f;  // a guard past the mapped range
    map_lanes(v.data(), n, [](Lanes& x) { x += 1.0f; });
    for (int i = 0; i < n; ++i) EXPECT_EQ(v[static_cast<size_t>(i)], 2.0f);
    EXPECT_EQ(v[static_cast<size_t>(n)], 42.0f);
  }
}

}  // namespace
}  // namespace coremlrt::ops
