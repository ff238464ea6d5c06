#include "ops/kernel.h"

#include <gtest/gtest.h>

namespace coremlrt::ops {
namespace {

std::unique_ptr<Kernel> no_kernel(KernelBuilder&) { return nullptr; }

TEST(DTypeSet, ListsMembersFloatsFirstThenIntegersThenBool) {
  const DTypeSet set{DType::Bool, DType::Int32, DType::Float32, DType::UInt8, DType::Float16};
  EXPECT_EQ(set.list(), (std::vector<DType>{DType::Float16, DType::Float32, DType::Int32, DType::UInt8, DType::Bool}));
  EXPECT_TRUE(set.contains(DType::Int32));
  EXPECT_FALSE(set.contains(DType::Int16));
  EXPECT_FALSE(set.is_any());
}

TEST(DTypeSet, AnyContainsEveryDtypeAndListsNone) {
  EXPECT_TRUE(kAnyDType.is_any());
  EXPECT_TRUE(kAnyDType.contains(DType::String));
  EXPECT_TRUE(kAnyDType.list().empty());
  EXPECT_TRUE((kFloat | kAnyDType).is_any());
  EXPECT_EQ((kFloat | kBool).list(), (std::vector<DType>{DType::Float16, DType::Float32, DType::Bool}));
}

TEST(KernelRegistry, KeepsOpsetRangeAndDtypesOfEachEntry) {
  KernelRegistry registry;
  registry.add("op", {DType::Float32}, no_kernel, 15, 16);
  registry.add("op", kFloat, no_kernel, 17);
  ASSERT_EQ(registry.entries().size(), 2u);
  EXPECT_EQ(registry.entries()[0].max_ios, 16);
  EXPECT_EQ(registry.entries()[0].dtypes.list(), (std::vector<DType>{DType::Float32}));
  EXPECT_EQ(registry.entries()[1].min_ios, 17);
  EXPECT_EQ(registry.entries()[1].dtypes.list(), kFloat.list());
  EXPECT_NE(registry.find("op", 16), nullptr);
  EXPECT_EQ(registry.find("op", 14), nullptr);
}

TEST(KernelRegistry, RejectsOverlappingOpsetsAndEmptyDtypeSets) {
  KernelRegistry registry;
  registry.add("op", kFloat, no_kernel, 15, 16);
  EXPECT_THROW(registry.add("op", kFloat, no_kernel, 16), Error);
  EXPECT_THROW(registry.add("other", DTypeSet{}, no_kernel), Error);
}

TEST(KernelRegistry, AddFamilyMarksTheEntriesItAdds) {
  KernelRegistry registry;
  registry.add_family("first", [](KernelRegistry& r) { r.add("a", kFloat, no_kernel); });
  registry.add("b", kFloat, no_kernel);
  ASSERT_EQ(registry.entries().size(), 2u);
  EXPECT_EQ(registry.entries()[0].family, "first");
  EXPECT_EQ(registry.entries()[1].family, "");
}

TEST(KernelRegistry, EveryCpuKernelBelongsToAFamily) {
  for (const auto& entry : KernelRegistry::cpu().entries()) EXPECT_FALSE(entry.family.empty()) << entry.op_type;
}

TEST(KernelRegistry, EveryCpuKernelDeclaresItsDtypes) {
  for (const auto& entry : KernelRegistry::cpu().entries())
    EXPECT_TRUE(entry.dtypes.is_any() || !entry.dtypes.list().empty()) << entry.op_type;
  EXPECT_GT(KernelRegistry::cpu().entries().size(), 100u);
}

}  // namespace
}  // namespace coremlrt::ops
