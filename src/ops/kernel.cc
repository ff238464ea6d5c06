#include "ops/kernel.h"

#include <iterator>

#include "ops/register.h"

namespace coremlrt::ops {

const ir::ValueType& KernelBuilder::output_type(int index) const {
  check(index >= 0 && index < static_cast<int>(op().outputs.size()), "has no output #", index);
  return op().outputs[index].type;
}

std::vector<DType> DTypeSet::list() const {
  static constexpr DType kDisplayOrder[] = {
      DType::Float16, DType::Float32, DType::Float64, DType::BFloat16, DType::Float8E4M3FN, DType::Float8E5M2,
      DType::Int4,    DType::Int8,    DType::Int16,   DType::Int32,    DType::Int64,        DType::UInt1,
      DType::UInt2,   DType::UInt3,   DType::UInt4,   DType::UInt6,    DType::UInt8,        DType::UInt16,
      DType::UInt32,  DType::UInt64,  DType::Bool,    DType::String};
  static_assert(std::size(kDisplayOrder) == static_cast<size_t>(DType::String) + 1, "a dtype is missing");
  std::vector<DType> out;
  if (any_) return out;
  for (DType dtype : kDisplayOrder)
    if (contains(dtype)) out.push_back(dtype);
  return out;
}

KernelRegistry::Entry& KernelRegistry::add(const std::string& op_type, DTypeSet dtypes, KernelFactory factory,
                                           int min_ios, int max_ios) {
  for (const Entry& e : entries_)
    if (e.op_type == op_type && e.min_ios <= max_ios && min_ios <= e.max_ios)
      fail("kernel for '", op_type, "' registered twice for overlapping opsets");
  if (!dtypes.is_any() && dtypes.list().empty()) fail("kernel for '", op_type, "' accepts no dtype");
  entries_.push_back({op_type, family_, min_ios, max_ios, dtypes, std::move(factory), OpTraits{}, {}, {}});
  return entries_.back();
}

const KernelRegistry::Entry* KernelRegistry::find_entry(const std::string& op_type, int ios_version) const {
  for (const Entry& e : entries_)
    if (e.op_type == op_type && e.min_ios <= ios_version && ios_version <= e.max_ios) return &e;
  return nullptr;
}

void KernelRegistry::add_family(const std::string& family, void (*add)(KernelRegistry&)) {
  family_ = family;
  add(*this);
  family_.clear();
}

const KernelFactory* KernelRegistry::find(const std::string& op_type, int ios_version) const {
  const Entry* entry = find_entry(op_type, ios_version);
  return entry ? &entry->factory : nullptr;
}

const KernelRegistry& KernelRegistry::cpu() {
  static const KernelRegistry registry = [] {
    KernelRegistry r;
    register_cpu_kernels(r);
    return r;
  }();
  return registry;
}

}  // namespace coremlrt::ops
