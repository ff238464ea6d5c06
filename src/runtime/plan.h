#pragma once
// A Plan is one function compiled at load: every value gets a slot, every operation a
// kernel chosen by op type and opset, constants (and ops computable from constants alone,
// such as constexpr_* decompression) are evaluated once, and each step lists the slots
// whose last use it is so their buffers can be reused. A Plan is immutable and shared by
// every execution context of its model.
#include <memory>
#include <string>
#include <vector>

#include "ir/program.h"
#include "ops/kernel.h"

namespace coremlrt::runtime {

struct BlockPlan;

struct PlannedStep {
  const ir::Operation* op = nullptr;
  std::unique_ptr<ops::Kernel> kernel;
  std::vector<int> input_slots;    // indexed by the input index the kernel was given
  std::vector<int> output_slots;   // in op output order
  std::vector<int> release_slots;  // values not read after this step
  std::vector<std::unique_ptr<BlockPlan>> blocks;  // nested blocks (cond, while_loop)
};

// A block compiled into steps. Nested blocks share their function's slot table: a value
// of an enclosing block is read through its slot, like any other.
struct BlockPlan {
  std::vector<int> input_slots;  // block inputs (while_loop loop variables)
  std::vector<PlannedStep> steps;
  std::vector<int> output_slots;
};

struct Plan {
  const ir::Function* function = nullptr;
  std::vector<std::string> slot_names;
  std::vector<ir::ValueType> slot_types;
  std::vector<Tensor> constants;  // per slot; undefined for values computed at run time
  std::vector<int> input_slots;   // function inputs, in declaration order
  BlockPlan body;                 // the function's block (its input_slots are unused)
  int folded_ops = 0;             // ops evaluated at load from constants

  size_t slot_count() const { return slot_names.size(); }
};

// Throws Error naming the op type, function and output of the first op that has no
// kernel in `registry`, or whose parameters its kernel rejects.
std::unique_ptr<Plan> build_plan(const ir::Function& function, const ops::KernelRegistry& registry);

}  // namespace coremlrt::runtime
