#pragma once
// What an op costs, declared with its registry entry (src/ops/kernel.h, KernelRegistry::Entry):
// the one table that a backend's cost rule (src/backends/openvino/cost_rule.cc) and the compute
// plan's estimates (coremlrt.compute_plan, through Model structure: src/runtime/model_structure.cc)
// both read, so that no layer above tests op names (docs/design/architecture.md, "Backends").
//
// Costs are computed from declared types at load, before any size is seen: a dim known only at
// prediction (a flexible input's height, say) counts as kAssumedDynamicExtent.
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ir/program.h"

namespace coremlrt::ops {

// The stand-in for a dim known only at prediction.
inline constexpr double kAssumedDynamicExtent = 16;

// An op's parameters as its cost reads them. Implemented over a plan's or a region's values
// (src/backends/backend.h) and over a program read without planning (src/runtime/model_structure.cc).
class CostReader {
 public:
  virtual ~CostReader() = default;
  virtual const ir::Operation& op() const = 0;
  // Declared type of value `index` bound to `param`; nullptr when the op has none (or the value's
  // type is not known).
  virtual const ir::ValueType* type(const std::string& param, size_t index = 0) const = 0;
  // The first value bound to `param` when it is known at load; nullptr otherwise.
  virtual const ir::ConstValue* constant(const std::string& param) const = 0;

  // A bool scalar parameter known at load (matmul's transpose_x); `fallback` otherwise.
  bool flag(const std::string& param, bool fallback = false) const;
};

// One dim, and the elements of a value of `type`, with unknown dims counted as kAssumedDynamicExtent.
double cost_extent(int64_t dim);
double cost_numel(const ir::ValueType& type);

struct OpCost {
  // Multiply-adds of one run (matrix products, convolutions, attention, recurrent layers); unset
  // for ops without such work (they cost about one operation per element they touch).
  std::function<double(const CostReader&)> macs;
  // Rows of the left operand of each product, for the matrix products (linear, matmul: a decode
  // step's products have at most a few rows); unset for every other op.
  std::function<int64_t(const CostReader&)> matrix_rows;
  // The parameters bound to the op's weights: the constants it multiplies by, which a backend
  // would hold copies of (linear's weight, matmul's y, a recurrent layer's weight_ih and weight_hh).
  std::vector<std::string> weights;
  // Our kernel runs the op about as fast as a backend when every weight is an fp32 constant, and
  // reads them where the weight file maps them where a backend would copy them (lstm:
  // src/ops/recurrent.cc). With backend="auto" backends leave such ops to it.
  bool ours_on_fp32_weights = false;
};

// The cost of the entry serving `op` in `ios_version`; an empty cost when no entry serves it.
const OpCost& cost_of(const ir::Operation& op, int ios_version);

// The op's multiply-adds (0 without a declared macs), and the rows of its matrix products (-1 when
// it is no matrix product).
double op_macs(const CostReader& reader, int ios_version);
int64_t op_matrix_rows(const CostReader& reader, int ios_version);

// The elements of the op's largest input or output (a value that is not a tensor of known rank
// counting as 1): the work of an op without multiply-adds.
double largest_operand(const CostReader& reader);

}  // namespace coremlrt::ops
