#pragma once
// A Plan is one function compiled at load: every value gets a slot, every operation a
// kernel chosen by op type and opset, constants (and ops computable from constants alone)
// are evaluated once, except compressed weights, which stay packed where every reader can
// read them so (docs/design/compressed-weights.md), and each step lists the slots whose last
// use it is so their buffers can be reused. After folding, the top-level steps are
// partitioned among execution backends (src/runtime/partition.h): a run of ops a backend
// takes becomes one step. A Plan is immutable and shared by every execution context of its
// model.
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "backends/backend.h"
#include "ir/program.h"
#include "ops/kernel.h"

namespace coremlrt::runtime {

struct BlockPlan;

// A step that runs one op of the program on its registry kernel (src/ops/kernel.h).
struct OpStep {
  const ir::Operation* op = nullptr;
  ops::OpTraits traits;  // of the op's registry entry
};

// A step that runs a run of consecutive ops on a backend's compiled kernel
// (src/runtime/partition.h). The ops' own steps stay in the step's nested block 0, which the
// kernel runs on our kernels when the inputs do not have the shapes it was compiled for.
struct RegionStep {
  std::vector<const ir::Operation*> ops;  // in program order
  std::string label;                      // names the backend, region and ops in errors and reports
};

// One step of a block: an op step or a backend region step, which the planner and the
// partitioner tell apart by type (as_op, as_region), never by a missing op.
struct PlannedStep {
  std::variant<OpStep, RegionStep> kind;
  int kernel_state = -1;  // index of the kernel's per-context state (KernelContext::kernel_state)
  std::unique_ptr<ops::Kernel> kernel;
  std::vector<int> input_slots;    // indexed by the input index the kernel was given
  std::vector<int> output_slots;   // in op output order
  std::vector<int> release_slots;  // values not read after this step
  std::vector<std::unique_ptr<BlockPlan>> blocks;  // nested blocks (cond, while_loop; a region's own steps)

  const OpStep* as_op() const { return std::get_if<OpStep>(&kind); }
  const RegionStep* as_region() const { return std::get_if<RegionStep>(&kind); }
  // The op step, and its op, for passes that run before partitioning, when every step is an
  // op step; throws Error for a region step.
  const OpStep& op_step() const;
  const ir::Operation& op() const { return *op_step().op; }
  // "op 'x' (add) producing 'y'", or the region's label.
  std::string describe() const;
};

// A block compiled into steps. Nested blocks share their function's slot table: a value
// of an enclosing block is read through its slot, like any other.
struct BlockPlan {
  std::vector<int> input_slots;  // block inputs (while_loop loop variables)
  std::vector<PlannedStep> steps;
  std::vector<int> output_slots;
};

// Where one op of the function runs, and why (coremlrt info --plan).
struct Placement {
  const ir::Operation* op = nullptr;
  std::string op_type;
  std::string op_name;
  std::string output;   // the op's first output
  // "reference", a backend's name, "folded" (computed at load) or "packed" (a constexpr_* op whose
  // result the kernels reading it decode as they run: docs/design/compressed-weights.md)
  std::string backend;
  std::string reason;   // why it is not on a backend that was asked for; empty otherwise
  int region = -1;      // index of its backend region; -1 on our kernels
};

struct Plan {
  const ir::Function* function = nullptr;
  std::vector<std::string> slot_names;
  std::vector<ir::ValueType> slot_types;
  std::vector<Tensor> constants;  // per slot; undefined for values computed at run time
  // Per slot: the compressed weight when the value is known at load but kept packed (its
  // `constants` entry is then undefined); null otherwise. Only kernels built to read it do.
  std::vector<std::shared_ptr<const ir::PackedTensor>> packed;
  std::vector<int> input_slots;   // function inputs, in declaration order
  BlockPlan body;                 // the function's block (its input_slots are unused)
  int folded_ops = 0;             // ops evaluated at load from constants
  int packed_ops = 0;             // constexpr_* ops whose results stay packed
  int kernel_state_count = 0;     // per-context kernel states (backend regions' run state)
  std::vector<Placement> placements;  // every non-const op of the function's block, in order

  size_t slot_count() const { return slot_names.size(); }
  // Whether the slot's value is known at load (a constant, dense or packed).
  bool known_at_load(int slot) const { return constants[slot].defined() || packed[slot] != nullptr; }
};

struct PlanOptions {
  // From LoadOptions::packed_weights: kept packed where every reader of a weight can read it so.
  bool packed_weights = true;
};

// Appends every slot `step` reads to `out`: its inputs, and those of its nested blocks' steps
// and their outputs (the partitioner and the state-update matcher both count reads this way).
void collect_reads(const PlannedStep& step, std::vector<int>& out);

// Throws Error naming the op type, function and output of the first op that has no
// kernel in `registry`, or whose parameters its kernel rejects. `backends` (priority order)
// may take regions of the top-level block; everything else runs on `registry`'s kernels.
std::unique_ptr<Plan> build_plan(const ir::Function& function, const ops::KernelRegistry& registry,
                                 const std::vector<std::shared_ptr<const backends::Backend>>& backends = {},
                                 const PlanOptions& options = {});

}  // namespace coremlrt::runtime
