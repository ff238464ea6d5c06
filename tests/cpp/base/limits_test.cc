#include "coremlrt/limits.h"

#include <gtest/gtest.h>

#include <string>

#include "coremlrt/error.h"
#include "coremlrt/tensor.h"

namespace coremlrt {
namespace {

TEST(Limits, ElementCountOverflowIsAnError) {
  EXPECT_EQ(shape_numel({1 << 20, 1 << 20, 1 << 20}), int64_t{1} << 60);
  EXPECT_THROW(shape_numel({1 << 30, 1 << 30, 1 << 30}), Error);
  EXPECT_THROW(Tensor::empty(DType::Float32, {int64_t{1} << 62}), Error);  // bytes past size_t
}

TEST(Limits, TensorsAreChargedToTheActiveBudgetAndGiveItBack) {
  ResourceLimits limits;
  limits.memory = std::make_shared<MemoryBudget>(1000);
  {
    ResourceScope scope(&limits);
    Tensor a = Tensor::empty(DType::Float32, {100});
    EXPECT_EQ(limits.memory->used(), 400u);
    try {
      Tensor b = Tensor::empty(DType::Float32, {200});
      FAIL() << "allocated past the limit";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("needs 800 bytes for a tensor while 400 are in use; the model's memory "
                                           "limit is 1000 bytes"), std::string::npos) << e.what();
    }
    EXPECT_EQ(limits.memory->used(), 400u);
    Tensor c = Tensor::empty(DType::Float32, {150});
    EXPECT_EQ(limits.memory->used(), 1000u);
  }
  EXPECT_EQ(limits.memory->used(), 0u);
  EXPECT_EQ(active_limits(), nullptr);
  Tensor unlimited = Tensor::empty(DType::Float32, {1000});  // no scope: not charged
  EXPECT_EQ(limits.memory->used(), 0u);
}

TEST(Limits, DefaultMemoryLimitIsTheMachines) {
  EXPECT_GT(default_memory_limit_bytes(), size_t{1} << 28);
}

}  // namespace
}  // namespace coremlrt
