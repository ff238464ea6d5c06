// Bulk fp16 <-> fp32 conversion (ops/util.h, with the lanes of ops/half_lanes.h) against
// the compiler's own element conversion (static_cast, which this test file is compiled to do
// through the C library of the toolchain): every fp16 value, and fp32 values across the whole
// range, including the rounding ties, subnormals, overflow, infinities and NaNs.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/half_lanes.h"
#include "ops/util.h"

namespace coremlrt::ops {
namespace {

uint16_t bits_of(half h) {
  uint16_t b;
  std::memcpy(&b, &h, sizeof b);
  return b;
}
uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, sizeof b);
  return b;
}
half half_from(uint16_t b) {
  half h;
  std::memcpy(&h, &b, sizeof h);
  return h;
}
float float_from(uint32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}

std::vector<half> every_half() {
  std::vector<half> all(65536);
  for (uint32_t b = 0; b < 65536; ++b) all[b] = half_from(static_cast<uint16_t>(b));
  return all;
}

// Floats around every fp16 boundary that matters, then a sweep over all bit patterns.
std::vector<float> float_samples() {
  std::vector<float> out;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float exact = static_cast<float>(half_from(static_cast<uint16_t>(b)));
    const uint32_t fb = bits_of(exact);
    // The value itself, its neighbours, and the midpoints to the next fp16 value (ties).
    for (int64_t d = -2; d <= 2; ++d) out.push_back(float_from(static_cast<uint32_t>(fb + d)));
    out.push_back(float_from(fb + 0x1000u));  // halfway to the next fp16 mantissa step
    out.push_back(float_from(fb + 0x0fffu));
    out.push_back(float_from(fb + 0x1001u));
  }
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 65521) out.push_back(float_from(static_cast<uint32_t>(b)));
  for (float f : {65504.0f, 65519.99f, 65520.0f, 65536.0f, 1e30f, std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::denorm_min(), 5.9604645e-08f,
                  2.9802322e-08f, 2.9802326e-08f, 8.940697e-08f})
    for (float s : {1.0f, -1.0f}) out.push_back(f * s);
  return out;
}

TEST(HalfConversion, WideningMatchesStaticCastForEveryHalf) {
  const std::vector<half> all = every_half();
  std::vector<float> bulk(all.size());
  half_to_float(all.data(), bulk.data(), static_cast<int64_t>(all.size()));
  for (size_t i = 0; i < all.size(); ++i) {
    const float expected = static_cast<float>(all[i]);
    ASSERT_EQ(bits_of(bulk[i]), bits_of(expected)) << "fp16 bits " << std::hex << i;
    Lanes lanes;
    if (i % kLanes == 0) {
      widen_lanes_portable(all.data() + i, lanes);
      for (int l = 0; l < kLanes; ++l)
        ASSERT_EQ(bits_of(lanes[l]), bits_of(static_cast<float>(all[i + l]))) << "portable, fp16 bits " << std::hex << i + l;
    }
  }
}

TEST(HalfConversion, NarrowingMatchesStaticCast) {
  const std::vector<float> samples = float_samples();
  std::vector<half> bulk(samples.size());
  float_to_half(samples.data(), bulk.data(), static_cast<int64_t>(samples.size()));
  std::vector<half> portable(samples.size() + kLanes);
  std::vector<float> padded(samples);
  padded.resize(samples.size() + kLanes, 0.0f);
  for (size_t i = 0; i < samples.size(); i += kLanes) {
    Lanes lanes;
    std::memcpy(&lanes, padded.data() + i, sizeof lanes);
    narrow_lanes_portable(lanes, portable.data() + i);
  }
  for (size_t i = 0; i < samples.size(); ++i) {
    const half expected = static_cast<half>(samples[i]);
    ASSERT_EQ(bits_of(bulk[i]), bits_of(expected)) << "float bits " << std::hex << bits_of(samples[i]);
    ASSERT_EQ(bits_of(portable[i]), bits_of(expected)) << "portable, float bits " << std::hex << bits_of(samples[i]);
  }
}

TEST(HalfConversion, ShortAndUnalignedRuns) {
  const std::vector<float> values = {0.1f, -2.5f, 65504.0f, 1e-6f, 3.0f, -0.0f, 7.25f, 1e5f, 0.333f, -9.0f, 11.0f};
  for (size_t offset = 0; offset < 3; ++offset)
    for (size_t n = 0; n + offset <= values.size(); ++n) {
      std::vector<half> h(n + 1, half_from(0x7bff));
      float_to_half(values.data() + offset, h.data(), static_cast<int64_t>(n));
      EXPECT_EQ(bits_of(h[n]), 0x7bff) << "wrote past the end";
      std::vector<float> back(n + 1, 42.0f);
      half_to_float(h.data(), back.data(), static_cast<int64_t>(n));
      EXPECT_EQ(back[n], 42.0f) << "wrote past the end";
      for (size_t i = 0; i < n; ++i) EXPECT_EQ(back[i], static_cast<float>(static_cast<half>(values[offset + i])));
    }
}

}  // namespace
}  // namespace coremlrt::ops
