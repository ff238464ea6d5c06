#include "ops/util.h"

#include <gtest/gtest.h>

namespace coremlrt::ops {
namespace {

TEST(Broadcast, FollowsNumpyRules) {
  EXPECT_EQ(broadcast_shapes({2, 1, 4}, {3, 1}), (Shape{2, 3, 4}));
  EXPECT_EQ(broadcast_shapes({}, {5}), (Shape{5}));
  EXPECT_EQ(broadcast_shapes({0, 1}, {1, 3}), (Shape{0, 3}));
  EXPECT_THROW(broadcast_shapes({2, 3}, {4}), Error);
}

TEST(Broadcast, VisitsElementsWithStretchedStrides) {
  const Shape out{2, 3};
  auto sa = broadcast_strides({2, 1}, out);
  auto sb = broadcast_strides({3}, out);
  std::vector<std::pair<int64_t, int64_t>> seen;
  for_each_broadcast(out, sa, sb, [&](int64_t, int64_t a, int64_t b) { seen.emplace_back(a, b); });
  EXPECT_EQ(seen, (std::vector<std::pair<int64_t, int64_t>>{{0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {1, 2}}));
}

TEST(Axis, NormalizesNegativeAndRejectsOutOfRange) {
  EXPECT_EQ(normalize_axis(-1, 3), 2);
  EXPECT_EQ(normalize_axis(0, 3), 0);
  EXPECT_THROW(normalize_axis(3, 3), Error);
  EXPECT_THROW(normalize_axis(-4, 3), Error);
}

}  // namespace
}  // namespace coremlrt::ops
