#include "ops/op_cost.h"

#include <algorithm>

#include "ops/kernel.h"

namespace coremlrt::ops {

bool CostReader::flag(const std::string& param, bool fallback) const {
  const ir::ConstValue* v = constant(param);
  if (!v || !v->tensor.defined() || v->tensor.numel() != 1) return fallback;
  return *static_cast<const uint8_t*>(v->tensor.data) != 0;
}

double cost_extent(int64_t dim) { return dim < 0 ? kAssumedDynamicExtent : static_cast<double>(dim); }

double cost_numel(const ir::ValueType& type) {
  double n = 1;
  for (int64_t d : type.dims) n *= cost_extent(d);
  return n;
}

const OpCost& cost_of(const ir::Operation& op, int ios_version) {
  static const OpCost none;
  const KernelRegistry::Entry* entry = KernelRegistry::cpu().find_entry(op.type, ios_version);
  return entry ? entry->cost : none;
}

double op_macs(const CostReader& reader, int ios_version) {
  const OpCost& cost = cost_of(reader.op(), ios_version);
  return cost.macs ? cost.macs(reader) : 0;
}

int64_t op_matrix_rows(const CostReader& reader, int ios_version) {
  const OpCost& cost = cost_of(reader.op(), ios_version);
  return cost.matrix_rows ? cost.matrix_rows(reader) : -1;
}

double largest_operand(const CostReader& reader) {
  auto elements = [](const ir::ValueType* type) {
    return type && type->kind == ir::TypeKind::Tensor && type->rank >= 0 ? cost_numel(*type) : 1.0;
  };
  double largest = 0;
  for (const ir::NamedValue& out : reader.op().outputs) largest = std::max(largest, elements(&out.type));
  for (const auto& [param, bindings] : reader.op().inputs)
    for (size_t i = 0; i < bindings.size(); ++i) largest = std::max(largest, elements(reader.type(param, i)));
  return largest;
}

}  // namespace coremlrt::ops
