#pragma once
// The seam between the runtime and execution backends (docs/design/architecture.md, "Backends").
//
// At load, after constant folding, the runtime shows each backend the function's top-level
// ops (a FunctionView); the backend says, op by op, whether it can run it and why not
// (propose). The runtime decides (src/runtime/partition.cc): in backend priority order, each
// maximal run of consecutive ops that a backend claimed and nobody took earlier becomes a
// Region; a region the backend does not find worth its per-call cost is dropped. Each kept
// region is compiled once into one ops::Kernel, which becomes one step of the plan and is
// shared by every execution context; whatever per-run state the backend needs (an infer
// request, say) it keeps in KernelContext::kernel_state(), which belongs to one execution
// context. Every op nobody claims runs on our own kernels (src/ops/), the semantic reference.
//
// Ownership: a FunctionView and a Region borrow the function, its ops and the plan's constants
// for the duration of propose() / compile() only; a compiled kernel that needs a constant later
// must keep its Tensor (which shares the storage). Tensors a compiled kernel reads through its
// KernelContext are borrowed for that call only (docs/design/architecture.md, law 4).
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ir/program.h"
#include "ops/kernel.h"
#include "ops/op_cost.h"

namespace coremlrt::backends {

// Resolves the values an op reads: their types and, for values known at load, their contents.
class ValueInfo {
 public:
  virtual ~ValueInfo() = default;
  // The declared type of a named value visible at the top level of the function.
  virtual const ir::ValueType& type(const std::string& name) const = 0;
  // The value's contents when it is known at load (a const op or a folded op); else nullptr.
  virtual const ir::ConstValue* constant(const std::string& name) const = 0;

  // The same questions for one binding of an op's parameter (named or inline).
  const ir::ValueType& type(const ir::Binding& binding) const {
    return binding.value ? binding.value->type : type(binding.name);
  }
  const ir::ConstValue* constant(const ir::Binding& binding) const {
    return binding.value ? binding.value.get() : constant(binding.name);
  }
};

// An op's parameters over `values`, as the cost its registry entry declares reads them
// (src/ops/op_cost.h): what a backend's cost rule asks of an op.
class OpCostReader final : public ops::CostReader {
 public:
  OpCostReader(const ir::Operation& op, const ValueInfo& values) : op_(op), values_(values) {}
  const ir::Operation& op() const override { return op_; }
  const ir::ValueType* type(const std::string& param, size_t index = 0) const override {
    const ir::Binding* b = binding(param, index);
    return b ? &values_.type(*b) : nullptr;
  }
  const ir::ConstValue* constant(const std::string& param) const override {
    const ir::Binding* b = binding(param, 0);
    return b ? values_.constant(*b) : nullptr;
  }

 private:
  const ir::Binding* binding(const std::string& param, size_t index) const {
    auto it = op_.inputs.find(param);
    return it == op_.inputs.end() || index >= it->second.size() ? nullptr : &it->second[index];
  }
  const ir::Operation& op_;
  const ValueInfo& values_;
};

// What propose() sees: the ops of the function's block that run at predict time (const ops
// and ops folded at load are not in it), in plan order.
struct FunctionView {
  const ir::Function& function;
  std::vector<const ir::Operation*> ops;
  const ValueInfo& values;
};

// A backend's answer for one op, one region or one of their parameters: made only by claim()
// or refuse(why), so neither an empty string nor `return {}` can stand for an answer.
struct Verdict {
  bool claimed;
  std::string reason;  // why not, when not claimed ("no lowering for op type 'cond'")

  static Verdict claim() { return Verdict(true, {}); }
  static Verdict refuse(std::string why) { return Verdict(false, std::move(why)); }

 private:
  Verdict(bool claimed, std::string reason) : claimed(claimed), reason(std::move(reason)) {}
};

// A run of consecutive ops that one backend takes. `inputs` are the values the region reads
// that are computed outside it at run time (function inputs, outputs of earlier steps), in the
// order of the compiled kernel's inputs 0..n-1; `outputs` are the values produced inside it
// that anything after it reads (later ops, nested blocks, the function's outputs), in the order
// of the kernel's outputs 0..m-1. Values known at load are read through `values`.
struct Region {
  const ir::Function& function;
  std::vector<const ir::Operation*> ops;
  std::vector<ir::NamedValue> inputs;
  std::vector<ir::NamedValue> outputs;
  const ValueInfo& values;
};

// How a backend may compute. Model::load derives it from LoadOptions (include/coremlrt/model.h,
// which says what each option means) in one function, backend_options_for in
// src/runtime/model_load.cc; the fields copied from an option name it.
struct BackendOptions {
  bool low_precision = false;       // from LoadOptions::low_precision
  int threads = 0;                  // from LoadOptions::threads
  int concurrent_predictions = 1;   // from LoadOptions::concurrent_predictions
  std::string cache_dir;            // from LoadOptions::cache_dir
  // Claim every region the backend can run, however small (backend="openvino"); otherwise the
  // backend's cost rule drops regions too cheap to pay its per-call overhead (backend="auto").
  bool force = false;
  // From LoadOptions::weight_copies_limit_bytes, its default resolved: bytes of copies of weights
  // the backend may hold over all regions of one load (not applied with `force`).
  uint64_t weight_copies_limit = uint64_t{64} << 20;
  // The function reads weights that other functions of the same package read too (a language
  // model's prefill and decode). A backend that copies weights would copy them once per function
  // instance, where our kernels read the one mapping every instance shares; and a backend taking
  // only the regions around them would add its runtime's memory for little (each compiled region
  // holds threads and buffers of its own). Every region of such a function stays on our kernels,
  // with `force` too; Model::load leaves it false when the caller set weight_copies_limit_bytes.
  // docs/design/compressed-weights.md, "Weights live once".
  bool shares_weights = false;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const std::string& name() const = 0;
  // One verdict per op of `view`, in the same order. Must not throw for ops it cannot run.
  virtual std::vector<Verdict> propose(const FunctionView& view) const = 0;
  // The cost rule: whether running `region` here pays for the backend's per-call overhead (and
  // fits its memory rule). Claimed: run it here; refused: it stays on our kernels, for the reason.
  virtual Verdict worth_running(const Region& region) const = 0;
  // Lowers and compiles `region` into one kernel (see the ownership rules above). Throws
  // Error when it cannot; the runtime then keeps our kernels for the region and reports why.
  // The plan keeps the region's ops on our kernels as the step's nested block 0: a kernel whose
  // inputs do not have the shapes it was compiled for (a model whose declared shapes are wrong:
  // docs/design/declared-shapes.md) runs them instead, with KernelContext::run_block(0, {}), whose
  // results are the region's outputs in order.
  virtual std::unique_ptr<ops::Kernel> compile(const Region& region) const = 0;
  // The packed constants (src/ir/packed.h) that compiling `region` decodes into a dense copy,
  // each with a note for `coremlrt info --plan` (docs/design/architecture.md, law 7: a second,
  // expanded copy is reported): what reads it decoded and where the copy lives.
  virtual std::vector<std::pair<const ir::ConstValue*, std::string>> decoded_constants(const Region&) const {
    return {};
  }
};

// The backends this build has, in priority order, for a `choice` of "auto", "reference" or a
// backend's name; "reference" (our kernels alone) gives none. Throws Error for an unknown
// name or a backend this build was made without, listing the available ones.
std::vector<std::shared_ptr<const Backend>> select_backends(const std::string& choice, const BackendOptions& options);

// Names accepted by select_backends in this build, "auto" and "reference" first.
std::vector<std::string> available_backends();

}  // namespace coremlrt::backends
