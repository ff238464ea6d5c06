#pragma once
// Running a Plan. Everything mutable for one prediction lives in an ExecutionContext: the
// slot table and a pool of buffers recycled between steps (liveness) and between calls.
// A context is used by one thread at a time; the Plan it runs is shared.
#include <cstddef>
#include <map>
#include <memory>
#include <vector>

#include "runtime/plan.h"

namespace coremlrt::runtime {

// Engine buffers that are free for reuse, by size.
class BufferPool {
 public:
  Tensor allocate(DType dtype, Shape shape);
  // Takes back `tensor`'s storage if the engine owns it and nothing else refers to it.
  void recycle(Tensor&& tensor);
  void clear();
  size_t pooled_bytes() const { return pooled_bytes_; }

 private:
  std::multimap<size_t, std::shared_ptr<Storage>> free_;
  size_t pooled_bytes_ = 0;
};

class ExecutionContext {
 public:
  explicit ExecutionContext(const Plan& plan)
      : plan_(plan), slots_(plan.slot_count()), kernel_states_(plan.kernel_state_count) {}

  struct Result {
    std::vector<Tensor> outputs;  // block outputs, in order
    std::vector<Tensor> states;   // final value of each state input, in input order
  };
  // Binds `inputs` (one per function input, in declaration order; a state input is bound
  // to the state's current value), runs every step and returns the outputs and the states'
  // final values. Returned tensors belong to the caller: none aliases an input, a constant
  // or this context's pool.
  Result run(std::vector<Tensor> inputs);

  const Plan& plan() const { return plan_; }
  BufferPool& pool() { return pool_; }
  std::vector<Tensor>& slots() { return slots_; }

 private:
  const Plan& plan_;
  std::vector<Tensor> slots_;
  BufferPool pool_;
  // Per-step kernel states (Plan::kernel_state_count); declared last so that they are
  // destroyed first, before the buffers they may still point into.
  std::vector<std::unique_ptr<ops::KernelState>> kernel_states_;
};

// Runs one step whose inputs are all constants of `plan` (constant folding at load).
std::vector<Tensor> run_step_once(const Plan& plan, const PlannedStep& step);

}  // namespace coremlrt::runtime
